// Date and date-time columns in CSV/TSV: the recognized forms, zones, leap
// days, impossible dates, ambiguous forms with and without a date format,
// missing values, the train part as reference, and parallel determinism.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "formats/datetime.h"

namespace anneal {
namespace {

// Days since 1970-01-01 of a wall-clock time (the expected cell values;
// the day numbers are from Python's datetime.date subtraction).
double at(double day, int hour = 0, int minute = 0, double second = 0) {
  return day + (hour * 3600.0 + minute * 60.0 + second) / 86400.0;
}
constexpr double k2024_03_01 = 19783;
constexpr double k2024_02_29 = 19782;
constexpr double k2000_02_29 = 11016;

Table parse_csv(std::string_view text, ParseOptions options = {}) {
  if (options.display_name.empty()) options.display_name = "t.csv";
  return parse_delimited(text, ',', options);
}

ParseOptions with_dates(std::vector<std::string> formats) {
  ParseOptions options;
  for (const auto& f : formats) options.date_formats.push_back(parse_date_format_option(f));
  return options;
}

// The one-line error of kind `kind` parsing `text` (fails the test otherwise).
std::string parse_error(std::string_view text, ParseOptions options = {}, ErrorKind kind = ErrorKind::kBadData) {
  try {
    parse_csv(text, options);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    return message;
  }
  ADD_FAILURE() << "expected an error parsing: " << text;
  return "";
}

// A one-feature CSV "d,y" with these values of d, label "a" each.
std::string column_of(const std::vector<std::string>& values) {
  std::string out = "d,y\n";
  for (const auto& v : values) out += v + ",a\n";
  return out;
}

TEST(DatetimeColumns, EveryRecognizedFormIsReadWithItsFormat) {
  struct Case {
    const char* value;
    const char* format;
    bool has_time;
    double days;
  };
  const Case cases[] = {
      {"2024-03-01", "YYYY-MM-DD", false, k2024_03_01},
      {"2024-03-01T09:30", "YYYY-MM-DDTHH:MM", true, at(k2024_03_01, 9, 30)},
      {"2024-03-01T09:30:15", "YYYY-MM-DDTHH:MM:SS", true, at(k2024_03_01, 9, 30, 15)},
      {"2024-03-01T09:30:15.250", "YYYY-MM-DDTHH:MM:SS.fff", true, at(k2024_03_01, 9, 30, 15.25)},
      {"2024-03-01T09:30Z", "YYYY-MM-DDTHH:MMZ", true, at(k2024_03_01, 9, 30)},
      {"2024-03-01T09:30:15+01:00", "YYYY-MM-DDTHH:MM:SSZ", true, at(k2024_03_01, 9, 30, 15)},
      {"2024-03-01T09:30:15.5-0500", "YYYY-MM-DDTHH:MM:SS.fffZ", true, at(k2024_03_01, 9, 30, 15.5)},
      {"2024-03-01 09:30", "YYYY-MM-DD HH:MM", true, at(k2024_03_01, 9, 30)},
      {"2024-03-01 09:30:15", "YYYY-MM-DD HH:MM:SS", true, at(k2024_03_01, 9, 30, 15)},
      {"2024-03-01 09:30:15.125", "YYYY-MM-DD HH:MM:SS.fff", true, at(k2024_03_01, 9, 30, 15.125)},
      {"2024-03-01 09:30+05:30", "YYYY-MM-DD HH:MMZ", true, at(k2024_03_01, 9, 30)},
      {"2024-03-01 09:30:15Z", "YYYY-MM-DD HH:MM:SSZ", true, at(k2024_03_01, 9, 30, 15)},
      {"2024-03-01 09:30:15.1+0100", "YYYY-MM-DD HH:MM:SS.fffZ", true, at(k2024_03_01, 9, 30, 15.1)},
      {"2024/03/01", "YYYY/MM/DD", false, k2024_03_01},
      {"2024/03/01 09:30", "YYYY/MM/DD HH:MM", true, at(k2024_03_01, 9, 30)},
      {"2024/03/01 09:30:15", "YYYY/MM/DD HH:MM:SS", true, at(k2024_03_01, 9, 30, 15)},
      {"01.03.2024", "DD.MM.YYYY", false, k2024_03_01},
      {"01.03.2024 09:30", "DD.MM.YYYY HH:MM", true, at(k2024_03_01, 9, 30)},
      {"01.03.2024 09:30:15", "DD.MM.YYYY HH:MM:SS", true, at(k2024_03_01, 9, 30, 15)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value);
    Table t = parse_csv(column_of({c.value, c.value}));
    ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
    EXPECT_EQ(t.columns[0].datetime_format, c.format);
    EXPECT_EQ(t.columns[0].has_time, c.has_time);
    EXPECT_EQ(t.features[0], static_cast<float>(c.days));
    EXPECT_DOUBLE_EQ(t.columns[0].min, c.days);  // exact, not the float cell
    EXPECT_DOUBLE_EQ(t.columns[0].max, c.days);
  }
}

TEST(DatetimeColumns, ZoneOffsetsAreKeptInTheSourceNotApplied) {
  Table t = parse_csv(column_of({"2024-03-01T23:30:00Z", "2024-03-01T23:30:00+01:00", "2024-03-01T23:30:00-0800",
                                 "2024-03-01T23:30:00+05"}));
  ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(t.features[static_cast<std::size_t>(r)], static_cast<float>(at(k2024_03_01, 23, 30)));
  // One format per column: a value without a zone (after the first 1000
  // rows, which decide the type) is not written in it.
  std::vector<std::string> values(1000, "2024-03-01T23:30:00Z");
  values.push_back("2024-03-01T23:30:00");
  EXPECT_EQ(parse_error(column_of(values)),
            "t.csv:1002:1: expected a date-time like 2024-03-01T09:30:00Z (column 'd', format "
            "YYYY-MM-DDTHH:MM:SSZ), found '2024-03-01T23:30:00'; declare column 'd' categorical to read it as text");
}

TEST(DatetimeColumns, LeapDaysAndImpossibleDates) {
  Table t = parse_csv(column_of({"2024-02-29", "2000-02-29"}));
  EXPECT_EQ(t.features[0], static_cast<float>(k2024_02_29));
  EXPECT_EQ(t.features[1], static_cast<float>(k2000_02_29));
  EXPECT_EQ(parse_error(column_of({"2024-02-28", "2023-02-29"})),
            "t.csv:3:1: expected a date like 2024-03-01 (column 'd', format YYYY-MM-DD), found '2023-02-29' (no "
            "such date or time); declare column 'd' categorical to read it as text");
  EXPECT_EQ(parse_error(column_of({"1900-02-29"})),
            "t.csv:2:1: expected a date like 2024-03-01 (column 'd', format YYYY-MM-DD), found '1900-02-29' (no "
            "such date or time); declare column 'd' categorical to read it as text");
  EXPECT_EQ(parse_error(column_of({"2023-02-30 10:00"})),
            "t.csv:2:1: expected a date-time like 2024-03-01 09:30 (column 'd', format YYYY-MM-DD HH:MM), found "
            "'2023-02-30 10:00' (no such date or time); declare column 'd' categorical to read it as text");
  for (const char* bad : {"2024-03-01 25:00", "2024-03-01 10:60", "2024-13-01 10:00", "2024-00-10 10:00",
                          "2024-04-31 10:00", "2024-03-00 10:00"})
    EXPECT_NE(parse_error(column_of({"2024-03-01 10:00", bad})).find("(no such date or time)"), std::string::npos)
        << bad;
  EXPECT_NE(parse_error(column_of({"2024-03-01T10:00:00+25:00"})).find("(no such date or time)"), std::string::npos);
}

TEST(DatetimeColumns, ALaterValueInAnotherShapeIsAnErrorNamingColumnAndFormat) {
  std::vector<std::string> values(1000, "2023-01-02 11:32");
  values.push_back("next tuesday");
  std::string text = "x,order_date,y\n";
  for (const auto& v : values) text += "1," + v + ",a\n";
  EXPECT_EQ(parse_error(text),
            "t.csv:1002:3: expected a date-time like 2024-03-01 09:30 (column 'order_date', format YYYY-MM-DD "
            "HH:MM), found 'next tuesday'; declare column 'order_date' categorical to read it as text");
}

TEST(DatetimeColumns, MixedShapesInTheFirstRowsStayCategorical) {
  Table t = parse_csv(column_of({"2024-03-01", "2024-03-01 10:00"}));
  EXPECT_EQ(t.columns[0].type, ColumnType::kCategorical);
  t = parse_csv(column_of({"2024-03-01", "unknown"}));
  EXPECT_EQ(t.columns[0].type, ColumnType::kCategorical);
  t = parse_csv(column_of({"\"2024-03-01\"", "\"2024-03-02\""}));  // quoting alone changes nothing
  EXPECT_EQ(t.columns[0].type, ColumnType::kDatetime);
  t = parse_csv(column_of({"\"2024-03-01\"\"\""}));  // a doubled quote is text
  EXPECT_EQ(t.columns[0].type, ColumnType::kCategorical);
}

TEST(DatetimeColumns, PlainNumbersNeverBecomeDates) {
  Table t = parse_csv(column_of({"20240301", "20240302"}));
  EXPECT_EQ(t.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(t.features[0], 20240301.0f);
  // Even with a date format that would read them.
  t = parse_csv(column_of({"20240301", "20240302"}), with_dates({"YYYYMMDD"}));
  EXPECT_EQ(t.columns[0].type, ColumnType::kNumeric);
  // Unless that column is named.
  t = parse_csv(column_of({"20240301", "20240302"}), with_dates({"d=YYYYMMDD"}));
  EXPECT_EQ(t.columns[0].type, ColumnType::kDatetime);
  EXPECT_EQ(t.features[0], static_cast<float>(k2024_03_01));
}

TEST(DatetimeColumns, TheLabelIsNeverADateAndCategoricalKeepsTheOldReading) {
  Table t = parse_csv("x,when\n1,2024-03-01\n2,2024-03-02\n");
  EXPECT_EQ(t.columns[1].type, ColumnType::kCategorical);
  t = parse_csv("x,when\n1,01/03/2024\n2,02/03/2024\n", with_dates({"DD/MM/YYYY"}));
  EXPECT_EQ(t.columns[1].type, ColumnType::kCategorical);
  ParseOptions categorical;
  categorical.categorical = {"d"};
  t = parse_csv(column_of({"2024-03-01", "2024-03-02"}), categorical);
  EXPECT_EQ(t.columns[0].type, ColumnType::kCategorical);
  EXPECT_EQ(t.columns[0].categories, (std::vector<std::string>{"2024-03-01", "2024-03-02"}));
}

TEST(DatetimeColumns, MissingValuesAreNaNAndCounted) {
  Table t = parse_csv(column_of({"", "2024-03-01", "NA", "2024-03-03", "nan"}));
  ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
  EXPECT_TRUE(std::isnan(t.features[0]));
  EXPECT_TRUE(std::isnan(t.features[2]));
  EXPECT_TRUE(std::isnan(t.features[4]));
  EXPECT_EQ(t.columns[0].missing, 3u);
  EXPECT_EQ(t.columns[0].count, 2u);
  EXPECT_EQ(t.columns[0].min, k2024_03_01);
  EXPECT_EQ(t.columns[0].max, k2024_03_01 + 2);
  EXPECT_EQ(t.columns[0].mean, k2024_03_01 + 1);
  EXPECT_EQ(t.columns[0].std, 1);
  // All missing: numeric, as before.
  EXPECT_EQ(parse_csv(column_of({"", "NA"})).columns[0].type, ColumnType::kNumeric);
}

TEST(DatetimeColumns, AmbiguousFormsNeedADateFormatAndGetAHint) {
  const std::string text = column_of({"01/02/2024", "03/04/2024 "});
  std::vector<DateFormatHint> hints;
  ParseOptions options;
  options.date_format_hints = &hints;
  Table t = parse_csv(text, options);
  EXPECT_EQ(t.columns[0].type, ColumnType::kCategorical);
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].column, "d");
  EXPECT_EQ(hints[0].formats, (std::vector<std::string>{"DD/MM/YYYY", "MM/DD/YYYY"}));

  // A day past 12 says which order it is: the hint names only that one.
  hints.clear();
  parse_csv(column_of({"01-02-2024 10:00", "25-12-2024 11:00"}), options);
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].formats, (std::vector<std::string>{"DD-MM-YYYY HH:MM"}));
  // Text that is no date gets no hint.
  hints.clear();
  parse_csv(column_of({"01/02/2024", "soon"}), options);
  EXPECT_TRUE(hints.empty());

  // A bare format applies to the columns all of whose values it reads.
  t = parse_csv(text, with_dates({"DD/MM/YYYY"}));
  ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
  EXPECT_EQ(t.columns[0].datetime_format, "DD/MM/YYYY");
  EXPECT_EQ(t.features[0], static_cast<float>(19754));  // 2024-02-01
  EXPECT_EQ(t.features[1], static_cast<float>(19816));  // 2024-04-03
  // COLUMN=FORMAT reads that column so.
  t = parse_csv(text, with_dates({"d=MM/DD/YYYY"}));
  ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
  EXPECT_EQ(t.features[0], static_cast<float>(19724));  // 2024-01-02
  EXPECT_EQ(t.features[1], static_cast<float>(19786));  // 2024-03-04
  // Single digits where a separator follows (as US spreadsheets write).
  t = parse_csv(column_of({"3/1/2024 9:05"}), with_dates({"d=MM/DD/YYYY HH:MM"}));
  EXPECT_EQ(t.features[0], static_cast<float>(at(k2024_03_01, 9, 5)));
}

TEST(DatetimeColumns, AGivenFormatThatDoesNotFitIsAnErrorNamingIt) {
  EXPECT_EQ(parse_error(column_of({"01/02/2024", "2024-03-01"}), with_dates({"d=DD/MM/YYYY"})),
            "t.csv:3:1: expected a date like 01/03/2024 (column 'd', format DD/MM/YYYY), found '2024-03-01'; "
            "check the date format given as d=DD/MM/YYYY");
  EXPECT_EQ(parse_error(column_of({"13/25/2024"}), with_dates({"d=DD/MM/YYYY"})),
            "t.csv:2:1: expected a date like 01/03/2024 (column 'd', format DD/MM/YYYY), found '13/25/2024' (no such "
            "date or time); check the date format given as d=DD/MM/YYYY");
  // A bare format that does not read every value of the first rows does not apply.
  EXPECT_EQ(parse_csv(column_of({"01/02/2024", "x"}), with_dates({"DD/MM/YYYY"})).columns[0].type,
            ColumnType::kCategorical);
}

TEST(DatetimeColumns, DateFormatOptionsAreCheckedAsUsage) {
  auto usage = [](const std::string& text) {
    try {
      parse_date_format_option(text);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kUsage);
      EXPECT_EQ(error.subject(), Subject::kDateFormat);
      return std::string(error.what());
    }
    ADD_FAILURE() << "accepted " << text;
    return std::string();
  };
  EXPECT_EQ(usage("DD/MM/YY"),
            "the date format DD/MM/YY: expected YYYY, MM, DD, HH, MM (minutes), SS, f (fractions of a second), Z (a "
            "zone) and the separators space - / . : , _ T, found 'Y'");
  EXPECT_EQ(usage("d=MM/YYYY"), "the date format d=MM/YYYY: expected a year (YYYY), a month (MM) and a day (DD)");
  EXPECT_EQ(usage("YYYY-MM-DD HH"), "the date format YYYY-MM-DD HH: expected minutes (MM) right after the hour (HH), as in HH:MM");
  EXPECT_EQ(usage("YYYY-MM-DD-DD"), "the date format YYYY-MM-DD-DD: expected each field once, found DD twice");
  EXPECT_EQ(usage("YYYY-MM-DDZ HH:MM"), "the date format YYYY-MM-DDZ HH:MM: expected the zone (Z) last, found ' HH:MM' after it");
  EXPECT_EQ(usage("=DD/MM/YYYY"), "the date format =DD/MM/YYYY: expected FORMAT or COLUMN=FORMAT, found no column before '='");
  EXPECT_NE(usage("").find("expected a year"), std::string::npos);
  // The column is everything before the last '='.
  DateFormatOption option = parse_date_format_option("a=b=MM/DD/YYYY HH:MM:SS.ffffffZ");
  EXPECT_EQ(option.column, "a=b");
  EXPECT_EQ(option.format, "MM/DD/YYYY HH:MM:SS.ffffffZ");
  EXPECT_EQ(date_format_option_text(option), "a=b=MM/DD/YYYY HH:MM:SS.ffffffZ");

  const std::string text = "order_date,y\n01/02/2024,a\n";
  EXPECT_EQ(parse_error(text, with_dates({"orderdate=DD/MM/YYYY"}), ErrorKind::kUsage),
            "the date format orderdate=DD/MM/YYYY: no column 'orderdate' in t.csv; did you mean 'order_date'? "
            "(columns: order_date, y)");
  EXPECT_EQ(parse_error(text, with_dates({"y=DD/MM/YYYY"}), ErrorKind::kUsage),
            "the date format y=DD/MM/YYYY: 'y' is the label column, which is never read as dates");
  ParseOptions both = with_dates({"order_date=DD/MM/YYYY"});
  both.categorical = {"order_date"};
  EXPECT_EQ(parse_error(text, both, ErrorKind::kUsage),
            "the date format order_date=DD/MM/YYYY: column 'order_date' is also declared categorical");
}

TEST(DatetimeColumns, TheTestPartIsReadInTheTrainPartsFormat) {
  Table train = parse_csv(column_of({"01/02/2024", "02/02/2024"}), with_dates({"d=DD/MM/YYYY"}));
  ParseOptions options;
  options.reference = &train.columns;
  // The test part's own first rows would say nothing (or another form).
  Table test = parse_csv(column_of({"13/02/2024", "", "01/03/2024"}), options);
  ASSERT_EQ(test.columns[0].type, ColumnType::kDatetime);
  EXPECT_EQ(test.columns[0].datetime_format, "DD/MM/YYYY");
  EXPECT_EQ(test.features[0], static_cast<float>(19766));  // 2024-02-13
  EXPECT_TRUE(std::isnan(test.features[1]));
  EXPECT_EQ(test.features[2], static_cast<float>(k2024_03_01));
  EXPECT_EQ(parse_error(column_of({"2024-03-01"}), options),
            "t.csv:2:1: expected a date like 01/03/2024 (column 'd', format DD/MM/YYYY as in the train part), found "
            "'2024-03-01'");
  // Date formats given for the test part change nothing.
  options.date_formats = {parse_date_format_option("d=MM/DD/YYYY")};
  EXPECT_EQ(parse_csv(column_of({"13/02/2024"}), options).features[0], static_cast<float>(19766));

  // A model's formats (predict input): errors name the model, not a flag.
  ParseOptions predict;
  predict.date_formats = {{"d", "DD/MM/YYYY", true}};
  EXPECT_EQ(parse_error(column_of({"2024-03-01"}), predict),
            "t.csv:2:1: expected a date like 01/03/2024 (column 'd', format DD/MM/YYYY as the model was trained), "
            "found '2024-03-01'");
}

TEST(DatetimeColumns, TsvAndSchemaJsonRoundTrip) {
  ParseOptions options;
  options.display_name = "t.tsv";
  Table t = parse_delimited("when\tx\ty\n2024-03-01 09:30:15\t1\ta\n2024-03-02 10:00:00\t2\tb\n", '\t', options);
  ASSERT_EQ(t.columns[0].type, ColumnType::kDatetime);
  nlohmann::json json = columns_to_json(t.columns);
  EXPECT_EQ(json[0]["type"], "datetime");
  EXPECT_EQ(json[0]["datetime_format"], "YYYY-MM-DD HH:MM:SS");
  EXPECT_EQ(json[0]["has_time"], true);
  EXPECT_FALSE(json[1].contains("datetime_format"));
  std::vector<ColumnSchema> back = columns_from_json(json);
  EXPECT_EQ(back[0].type, ColumnType::kDatetime);
  EXPECT_EQ(back[0].datetime_format, "YYYY-MM-DD HH:MM:SS");
  EXPECT_TRUE(back[0].has_time);
  EXPECT_EQ(back[0].min, t.columns[0].min);
  EXPECT_EQ(datetime_text(back[0].min, back[0]), "2024-03-01 09:30:15");
  EXPECT_EQ(datetime_text(back[0].max, back[0]), "2024-03-02 10:00:00");
  json[0]["type"] = "timestamp";
  EXPECT_THROW(columns_from_json(json), Error);
}

TEST(DatetimeColumns, DatetimeTextRoundsToTheColumnsUnit) {
  ColumnSchema date;
  date.type = ColumnType::kDatetime;
  date.datetime_format = "DD.MM.YYYY";
  EXPECT_EQ(datetime_text(k2024_02_29, date), "2024-02-29");
  EXPECT_EQ(datetime_text(-1, date), "1969-12-31");
  EXPECT_EQ(datetime_text(-25508, date), "1900-03-01");
  EXPECT_EQ(datetime_text(std::nan(""), date), "");
  EXPECT_EQ(datetime_text(1e300, date), "");
  ColumnSchema minutes = date;
  minutes.datetime_format = "DD.MM.YYYY HH:MM";
  minutes.has_time = true;
  EXPECT_EQ(datetime_text(at(k2024_02_29, 23, 59, 40), minutes), "2024-03-01 00:00");
  // The float32 cell of 11:32 on 2023-01-02 is within a minute or two; its
  // text rounds to the nearest minute.
  EXPECT_EQ(datetime_text(static_cast<float>(at(19359, 11, 32)), minutes), "2023-01-02 11:32");
}

// Large enough for several parse blocks; the parse does not depend on the
// thread count, errors included.
TEST(DatetimeColumns, ParallelParseMatchesOneThread) {
  std::string text = "id,when,y\n";
  for (int i = 0; i < 80000; ++i) {
    char row[96];
    std::snprintf(row, sizeof row, "%d,20%02d-%02d-%02dT%02d:%02d:%02d.%03d+01:00,%c\n", i, 10 + i % 15, 1 + i % 12,
                  1 + i % 28, i % 24, i % 60, (i * 7) % 60, i % 1000, 'a' + i % 3);
    text += row;
  }
  ASSERT_GT(text.size(), std::size_t{2} << 20);  // three parse blocks or more
  Table one, many;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    one = parse_csv(text);
  }
  many = parse_csv(text);
  ASSERT_EQ(many.columns[1].type, ColumnType::kDatetime);
  EXPECT_EQ(one.features, many.features);
  EXPECT_EQ(one.columns[1].min, many.columns[1].min);
  EXPECT_EQ(one.columns[1].max, many.columns[1].max);
  EXPECT_EQ(one.columns[1].mean, many.columns[1].mean);
  EXPECT_EQ(datetime_text(many.columns[1].min, many.columns[1]), "2010-01-01 00:00:00");

  const std::string bad = text + "80000,2024-02-30T00:00:00.000+01:00,a\n";
  std::string one_error;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    one_error = parse_error(bad);
  }
  EXPECT_EQ(parse_error(bad), one_error);
  EXPECT_EQ(one_error.substr(0, 12), "t.csv:80002:");
}

}  // namespace
}  // namespace anneal
