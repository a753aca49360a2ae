// Non-finite numbers in every importer (issue 12): inf, -inf, nan spelled
// other than the missing tokens, and values beyond float32 are bad input
// with FILE:LINE:COLUMN, or missing with NonFinite::kMissing; either way no
// column statistic is left infinite (which once bricked the catalog).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/formats.h"

namespace anneal {
namespace {

ParseOptions options_for(std::string name, NonFinite nonfinite = NonFinite::kError) {
  ParseOptions options;
  options.display_name = std::move(name);
  options.nonfinite = nonfinite;
  return options;
}

// The one-line kBadData message of `parse` (fails the test otherwise).
template <typename Parse>
std::string bad_data(Parse&& parse) {
  try {
    parse();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadData) << error.what();
    std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "expected kBadData";
  return "";
}

void expect_finite_statistics(const Table& table) {
  for (const ColumnSchema& column : table.columns)
    for (double statistic : {column.min, column.max, column.mean, column.std})
      EXPECT_TRUE(std::isfinite(statistic)) << column.name;
}

TEST(NonFinite, CsvAndTsvCellsAreBadInputWithTheirPosition) {
  struct Case {
    std::string cell, found;
  };
  for (const Case& c : std::vector<Case>{{"inf", "'inf'"},
                                         {"-inf", "'-inf'"},
                                         {"Infinity", "'Infinity'"},
                                         {"1e39", "'1e39'"},
                                         {"-1e39", "'-1e39'"},
                                         {"1e400", "'1e400'"},
                                         {"-nan", "'-nan'"},
                                         {"nan(1)", "'nan(1)'"}}) {
    std::string csv = "a,b,label\n1,2,0\n3," + c.cell + ",1\n";
    EXPECT_EQ(bad_data([&] { parse_delimited(csv, ',', options_for("t.csv")); }),
              "t.csv:3:3: expected a finite number, found " + c.found +
                  " in column 'b' (such values can be read as missing)")
        << c.cell;
    std::string tsv = "a\tb\tlabel\n1\t2\t0\n3\t" + c.cell + "\t1\n";
    EXPECT_NE(bad_data([&] { parse_delimited(tsv, '\t', options_for("t.tsv")); })
                  .find("t.tsv:3:3: expected a finite number, found " + c.found),
              std::string::npos)
        << c.cell;
  }
}

TEST(NonFinite, QuotedCellPointsInsideTheQuotes) {
  EXPECT_NE(bad_data([&] { parse_delimited("a,b,label\n1,2,0\n3,\"inf\",1\n", ',', options_for("t.csv")); })
                .find("t.csv:3:4: expected a finite number, found 'inf' in column 'b'"),
            std::string::npos);
}

TEST(NonFinite, BadInBlocksPastTheFirstAndInTheLabel) {
  // Far into the file (another parse block), the position is still exact.
  std::string csv = "a,label\n";
  for (int i = 0; i < 200000; ++i) csv += "1.5,0\n";
  csv += "-inf,1\n";
  EXPECT_EQ(bad_data([&] { parse_delimited(csv, ',', options_for("big.csv")); }),
            "big.csv:200002:1: expected a finite number, found '-inf' in column 'a' (such values can be read as "
            "missing)");
  // A label cannot be missing, so --nonfinite missing does not help there.
  EXPECT_EQ(bad_data([&] { parse_delimited("a,label\n1,inf\n", ',', options_for("t.csv", NonFinite::kMissing)); }),
            "t.csv:2:3: expected a finite number, found 'inf' in column 'label' (the label)");
}

TEST(NonFinite, MissingOptionReadsThemAsMissing) {
  Table table = parse_delimited("a,b,label\n1,inf,0\n-1e39,2,1\n-nan,4,0\nNaN,NA,1\n", ',',
                                options_for("t.csv", NonFinite::kMissing));
  ASSERT_EQ(table.rows, 4u);
  EXPECT_TRUE(std::isnan(table.features[1]));
  EXPECT_TRUE(std::isnan(table.features[2]));
  EXPECT_TRUE(std::isnan(table.features[4]));
  EXPECT_EQ(table.columns[0].missing, 3u);  // -1e39, -nan, NaN
  EXPECT_EQ(table.columns[1].missing, 2u);  // inf, NA
  EXPECT_EQ(table.columns[0].min, 1);
  EXPECT_EQ(table.columns[1].max, 4);
  expect_finite_statistics(table);
}

TEST(NonFinite, DocumentedMissingTokensStayMissing) {
  Table table = parse_delimited("a,label\nnan,0\nNaN,1\nNA,0\n,1\n2,0\n", ',', options_for("t.csv"));
  EXPECT_EQ(table.columns[0].missing, 4u);
  expect_finite_statistics(table);
}

TEST(NonFinite, LibsvmValuesAndLabels) {
  EXPECT_EQ(bad_data([&] { parse_libsvm("1 1:1\n0 1:2 3:inf\n", options_for("d.svm")); }),
            "d.svm:2:9: expected a finite number, found 'inf' (such values can be read as missing)");
  EXPECT_NE(bad_data([&] { parse_libsvm("1 2:1e39\n", options_for("d.svm")); }).find("d.svm:1:5: expected a finite number, found '1e39'"),
            std::string::npos);
  EXPECT_EQ(bad_data([&] { parse_libsvm("1 1:1\n-inf 1:2\n", options_for("d.svm", NonFinite::kMissing)); }),
            "d.svm:2:1: expected a finite number as the label, found '-inf'");
  Table table = parse_libsvm("1 1:1 2:inf\n0 1:-1e39 2:3\n1 2:nan\n", options_for("d.svm", NonFinite::kMissing));
  EXPECT_EQ(table.columns[0].missing, 1u);
  EXPECT_EQ(table.columns[1].missing, 2u);
  EXPECT_TRUE(std::isnan(table.features[1]));
  expect_finite_statistics(table);
}

std::string idx_header(unsigned char type, std::vector<std::uint32_t> dims) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(d >> shift);
  return out;
}
template <typename T>
std::string big_endian(T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  std::reverse(bytes, bytes + sizeof(T));
  return std::string(bytes, sizeof(T));
}

TEST(NonFinite, IdxFloatImages) {
  const std::string labels = idx_header(0x08, {2}) + std::string("\x01\x00", 2);
  std::string f32 = idx_header(0x0D, {2, 2}) + big_endian(1.0f) + big_endian(2.0f) + big_endian(INFINITY) +
                    big_endian(4.0f);
  EXPECT_EQ(bad_data([&] { parse_idx(f32, labels, options_for("i.idx"), "l.idx"); }),
            "i.idx: expected a finite number, found inf at element 2, byte 20 (such values can be read as "
            "missing)");
  std::string f64 = idx_header(0x0E, {2, 2}) + big_endian(1.0) + big_endian(1e300) + big_endian(static_cast<double>(NAN)) +
                    big_endian(4.0);
  EXPECT_NE(bad_data([&] { parse_idx(f64, labels, options_for("i.idx"), "l.idx"); })
                .find("i.idx: expected a finite number, found inf (beyond float32's range) at element 1, byte 20"),
            std::string::npos);
  Table table = parse_idx(f64, labels, options_for("i.idx", NonFinite::kMissing), "l.idx");
  EXPECT_EQ(table.columns[0].missing, 2u);
  EXPECT_EQ(table.columns[0].max, 4);
  expect_finite_statistics(table);
  std::string f32_labels = idx_header(0x0D, {2}) + big_endian(1.0f) + big_endian(-INFINITY);
  std::string images = idx_header(0x08, {2, 1}) + std::string("\x01\x02", 2);
  EXPECT_NE(bad_data([&] { parse_idx(images, f32_labels, options_for("i.idx", NonFinite::kMissing), "l.idx"); })
                .find("l.idx: expected a finite number, found -inf at element 1, byte 12 (a label must be finite)"),
            std::string::npos);
}

// A catalog row written before the fix holds null statistics (JSON has no
// inf); reading it must not throw, or 'data list' fails for every dataset.
TEST(NonFinite, SchemaWithNullStatisticsIsReadable) {
  auto row = nlohmann::json::parse(
      R"([{"name":"a","type":"numeric","missing":0,"count":2,"min":1.0,"max":null,"mean":null,"std":null}])");
  std::vector<ColumnSchema> columns = columns_from_json(row);
  ASSERT_EQ(columns.size(), 1u);
  EXPECT_EQ(columns[0].min, 1.0);
  EXPECT_TRUE(std::isnan(columns[0].max));
  // And what the writer makes of a non-finite statistic reads back.
  columns[0].mean = INFINITY;
  EXPECT_NO_THROW(columns_from_json(nlohmann::json::parse(columns_to_json(columns).dump())));
}

}  // namespace
}  // namespace anneal
