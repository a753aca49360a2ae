// CSV / TSV parsing: schema, values, quoting, errors, parallel determinism.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "test_util.h"

namespace anneal {
namespace {

using namespace std::string_literals;

// ParseOptions for one test, without designated initializers (which
// -Wmissing-field-initializers flags).
ParseOptions named(std::string display_name) {
  ParseOptions options;
  options.display_name = std::move(display_name);
  return options;
}
ParseOptions with_label(std::string label) {
  ParseOptions options;
  options.label = std::move(label);
  return options;
}
ParseOptions with_categorical(std::vector<std::string> categorical) {
  ParseOptions options;
  options.categorical = std::move(categorical);
  return options;
}
ParseOptions without_header() {
  ParseOptions options;
  options.header = false;
  return options;
}

Table parse_csv(std::string_view text, ParseOptions options = {}) {
  if (options.display_name.empty()) options.display_name = "t.csv";
  return parse_delimited(text, ',', options);
}

// The kBadData message parsing `text` produces (fails the test otherwise).
std::string csv_error(std::string_view text, ParseOptions options = {}) {
  try {
    parse_csv(text, options);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadData) << error.what();
    std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    return message;
  }
  ADD_FAILURE() << "expected an error parsing: " << text;
  return "";
}

TEST(Delimited, IrisSchemaAndValues) {
  std::string text = test::read_file(test::data_file("iris.csv"));
  Table table = parse_csv(text, named("iris.csv"));
  ASSERT_EQ(table.rows, 150u);
  ASSERT_EQ(table.columns.size(), 5u);
  EXPECT_EQ(table.label_column, 4u);
  EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({4}));
  ASSERT_EQ(table.features.size(), 150u * 4);
  ASSERT_EQ(table.labels.size(), 150u);
  EXPECT_EQ(table.columns[0].name, "sepal_length_(cm)");
  EXPECT_EQ(table.columns[0].type, ColumnType::kNumeric);
  EXPECT_TRUE(table.columns[0].shape.empty());
  const ColumnSchema& species = table.columns[4];
  EXPECT_EQ(species.type, ColumnType::kCategorical);
  EXPECT_EQ(species.categories, std::vector<std::string>({"setosa", "versicolor", "virginica"}));
  // First row: 5.1,3.5,1.4,0.2,setosa; last row is virginica.
  EXPECT_FLOAT_EQ(table.features[0], 5.1f);
  EXPECT_FLOAT_EQ(table.features[3], 0.2f);
  EXPECT_EQ(table.labels[0], 0.0f);
  EXPECT_EQ(table.labels[149], 2.0f);
  // Well-known iris statistics (population std).
  EXPECT_EQ(table.columns[0].count, 150u);
  EXPECT_EQ(table.columns[0].missing, 0u);
  EXPECT_NEAR(table.columns[0].mean, 5.8433, 1e-4);
  EXPECT_NEAR(table.columns[0].std, 0.8253, 1e-4);
  EXPECT_FLOAT_EQ(table.columns[0].min, 4.3f);
  EXPECT_FLOAT_EQ(table.columns[0].max, 7.9f);
  EXPECT_NEAR(species.mean, 1.0, 1e-9);  // codes 0, 1, 2 fifty times each
}

TEST(Delimited, BundledDatasets) {
  struct Expected {
    const char* file;
    std::uint64_t rows;
    std::int64_t features;
    ColumnType label_type;
  };
  for (const Expected& e : {Expected{"wine.csv", 178, 13, ColumnType::kCategorical},
                            Expected{"digits.csv", 1797, 64, ColumnType::kNumeric},
                            Expected{"breast_cancer.csv", 569, 30, ColumnType::kCategorical}}) {
    SCOPED_TRACE(e.file);
    Table table = parse_csv(test::read_file(test::data_file(e.file)), named(e.file));
    EXPECT_EQ(table.rows, e.rows);
    EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({e.features}));
    EXPECT_EQ(table.features.size(), e.rows * static_cast<std::uint64_t>(e.features));
    EXPECT_EQ(table.columns[table.label_column].type, e.label_type);
    for (std::size_t c = 0; c < table.columns.size(); ++c)
      if (c != table.label_column) {
        EXPECT_EQ(table.columns[c].type, ColumnType::kNumeric) << table.columns[c].name;
      }
  }
  Table digits = parse_csv(test::read_file(test::data_file("digits.csv")));
  EXPECT_EQ(digits.columns.back().min, 0);
  EXPECT_EQ(digits.columns.back().max, 9);
}

TEST(Delimited, TsvMatchesCsv) {
  std::string csv = test::read_file(test::data_file("iris.csv"));
  std::string tsv = csv;
  for (char& c : tsv)
    if (c == ',') c = '\t';
  Table from_csv = parse_csv(csv);
  Table from_tsv = parse_delimited(tsv, '\t', named("iris.tsv"));
  EXPECT_EQ(from_csv.features, from_tsv.features);
  EXPECT_EQ(from_csv.labels, from_tsv.labels);
  EXPECT_EQ(from_csv.columns[4].categories, from_tsv.columns[4].categories);
}

TEST(Delimited, TsvKeepsSpacesInsideFieldsAndCommasAsText) {
  Table table = parse_delimited("a\tb\tlabel\n1,5\t2\tx y\n3,5\t4\tz\n", '\t', named("t.tsv"));
  EXPECT_EQ(table.columns[0].type, ColumnType::kCategorical);
  EXPECT_EQ(table.columns[0].categories, std::vector<std::string>({"1,5", "3,5"}));
  EXPECT_EQ(table.columns[2].categories, std::vector<std::string>({"x y", "z"}));
}

TEST(Delimited, NoHeaderNamesColumnsFromOne) {
  Table table = parse_csv("1,2,a\n3,4,b\n", without_header());
  ASSERT_EQ(table.columns.size(), 3u);
  EXPECT_EQ(table.columns[0].name, "col1");
  EXPECT_EQ(table.columns[2].name, "col3");
  EXPECT_EQ(table.rows, 2u);
  EXPECT_EQ(table.features, std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(table.labels, std::vector<float>({0, 1}));
}

TEST(Delimited, QuotingCrlfAndBom) {
  std::string text =
      "\xEF\xBB\xBF" "x,\"note, with comma\",label\r\n"
      "1,\"line one\nline two\",\"say \"\"hi\"\"\"\r\n"
      "  2 , plain ,  \"padded\"  \r\n"
      "3,\"\",\"say \"\"hi\"\"\"\r\n";
  Table table = parse_csv(text);
  ASSERT_EQ(table.rows, 3u);
  EXPECT_EQ(table.columns[0].name, "x");
  EXPECT_EQ(table.columns[1].name, "note, with comma");
  EXPECT_EQ(table.columns[1].categories, std::vector<std::string>({"line one\nline two", "plain"}));
  EXPECT_EQ(table.columns[2].categories, std::vector<std::string>({"say \"hi\"", "padded"}));
  EXPECT_EQ(table.labels, std::vector<float>({0, 1, 0}));
  EXPECT_EQ(table.features[0], 1);
  EXPECT_EQ(table.features[2], 2);
  EXPECT_TRUE(std::isnan(table.features[5]));  // "" is missing
  EXPECT_EQ(table.columns[1].missing, 1u);
}

TEST(Delimited, MissingValues) {
  Table table = parse_csv("a,b,label\n1,x,0\n,NA,1\nna,n/a,0\nNaN,N/A,1\nnan,,0\n  NA  ,y,1\n");
  EXPECT_EQ(table.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(table.columns[0].missing, 5u);
  EXPECT_EQ(table.columns[0].count, 1u);
  EXPECT_EQ(table.columns[1].type, ColumnType::kCategorical);
  EXPECT_EQ(table.columns[1].categories, std::vector<std::string>({"x", "y"}));
  EXPECT_EQ(table.columns[1].missing, 4u);
  EXPECT_EQ(table.features[0], 1);
  EXPECT_TRUE(std::isnan(table.features[2]));
  EXPECT_TRUE(std::isnan(table.features[3]));
}

TEST(Delimited, NumberSpellings) {
  // inf and -Infinity are numbers too, but not finite ones: see
  // formats_nonfinite_test.cc.
  Table table = parse_csv("v,label\n+1.5,0\n -2e3 ,0\n.25,0\n7.,0\n1E-2,0\n1e-50,0\n\"3\",0\n");
  ASSERT_EQ(table.columns[0].type, ColumnType::kNumeric);
  std::vector<float> expected = {1.5f, -2000, 0.25f, 7, 0.01f, 0, 3};
  EXPECT_EQ(table.features, expected);
}

TEST(Delimited, EmptyLinesAreSkipped) {
  Table table = parse_csv("\n\na,label\n\n1,2\r\n\r\n3,4\n\n");
  EXPECT_EQ(table.rows, 2u);
  EXPECT_EQ(table.features, std::vector<float>({1, 3}));
}

TEST(Delimited, LastRecordWithoutNewline) {
  Table table = parse_csv("a,label\n1,2\n3,4");
  EXPECT_EQ(table.labels, std::vector<float>({2, 4}));
}

TEST(Delimited, LabelByNameOrIndexIsExcludedFromFeatures) {
  std::string text = "a,target,b\n1,10,2\n3,30,4\n";
  for (std::string label : {"target", "1"}) {
    Table table = parse_csv(text, with_label(label));
    EXPECT_EQ(table.label_column, 1u);
    EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({2}));
    EXPECT_EQ(table.features, std::vector<float>({1, 2, 3, 4}));
    EXPECT_EQ(table.labels, std::vector<float>({10, 30}));
    EXPECT_EQ(table.columns[1].mean, 20);
  }
}

TEST(Delimited, LabelNameWinsOverIndex) {
  Table table = parse_csv("0,1,2\n5,6,7\n", with_label("0"));
  EXPECT_EQ(table.label_column, 0u);
}

TEST(Delimited, ForcedCategoricalByNameOrIndex) {
  std::string text = "zip,size,label\n10115,3,0\n80331,4,1\n10115,5,0\n";
  Table by_name = parse_csv(text, with_categorical({"zip"}));
  Table by_index = parse_csv(text, with_categorical({"0"}));
  for (const Table* table : {&by_name, &by_index}) {
    EXPECT_EQ(table->columns[0].type, ColumnType::kCategorical);
    EXPECT_EQ(table->columns[0].categories, std::vector<std::string>({"10115", "80331"}));
    EXPECT_EQ(table->features, std::vector<float>({0, 3, 1, 4, 0, 5}));
  }
  EXPECT_NE(csv_error(text, with_categorical({"nope"})).find("the categorical column: no column 'nope' in t.csv"),
            std::string::npos);
}

TEST(Delimited, ReferenceExtendsDictionariesAndKeepsTypes) {
  Table train = parse_csv("color,size,label\nred,1,yes\nblue,2,no\n");
  ParseOptions options = named("test.csv");
  options.reference = &train.columns;
  Table test = parse_csv("color,size,label\ngreen,3,no\nred,4,maybe\n", options);
  EXPECT_EQ(test.columns[0].categories, std::vector<std::string>({"red", "blue", "green"}));
  EXPECT_EQ(test.columns[2].categories, std::vector<std::string>({"yes", "no", "maybe"}));
  EXPECT_EQ(test.features, std::vector<float>({2, 3, 0, 4}));
  EXPECT_EQ(test.labels, std::vector<float>({1, 2}));

  // A column all numbers in the test part stays categorical when train says so.
  Table numeric_looking = parse_csv("color,size,label\n7,3,no\n", options);
  EXPECT_EQ(numeric_looking.columns[0].type, ColumnType::kCategorical);
  EXPECT_EQ(numeric_looking.columns[0].categories.back(), "7");

  std::string bad = csv_error("color,size,label\nred,big,no\n", options);
  EXPECT_EQ(bad.substr(0, 13), "test.csv:2:5:") << bad;
  EXPECT_NE(bad.find("column 'size'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("train part"), std::string::npos) << bad;

  std::string renamed = csv_error("color,weight,label\nred,1,no\n", options);
  EXPECT_EQ(renamed.substr(0, 13), "test.csv:1:7:") << renamed;
  EXPECT_NE(renamed.find("'size'"), std::string::npos) << renamed;
  EXPECT_NE(csv_error("color,size\nred,1\n", options).find("expected 3 columns"), std::string::npos);
}

TEST(Delimited, TypesAreInferredFromTheFirst1000Rows) {
  std::string text = "v,label\n";
  for (int i = 0; i < 1000; ++i) text += std::to_string(i) + ",0\n";
  Table numeric = parse_csv(text);
  EXPECT_EQ(numeric.columns[0].type, ColumnType::kNumeric);
  std::string error = csv_error(text + "oops,0\n");
  EXPECT_EQ(error.substr(0, 12), "t.csv:1002:1") << error;
  EXPECT_NE(error.find("expected a number in column 'v'"), std::string::npos) << error;
  EXPECT_NE(error.find("inferred numeric"), std::string::npos) << error;
  EXPECT_NE(error.find("declare column 'v' categorical"), std::string::npos) << error;
  EXPECT_NE(error.find("found 'oops'"), std::string::npos) << error;
  // The same value within the first 1000 rows makes the column categorical.
  Table categorical = parse_csv("v,label\noops,0\n" + text.substr(8));
  EXPECT_EQ(categorical.columns[0].type, ColumnType::kCategorical);
}

TEST(Delimited, AllMissingColumnIsNumeric) {
  Table table = parse_csv("a,b,label\n,1,0\nNA,2,1\n");
  EXPECT_EQ(table.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(table.columns[0].count, 0u);
  EXPECT_EQ(table.columns[0].missing, 2u);
  EXPECT_EQ(table.columns[0].mean, 0);
}

TEST(Delimited, ErrorMessagesPointAtTheProblem) {
  struct Case {
    std::string text;
    std::string prefix;  // NAME:LINE:COLUMN
    std::string says;
  };
  const std::vector<Case> cases = {
      {"a,b,c\n1,2,3\n4,5\n", "t.csv:3:4:", "expected 3 fields, found 2"},
      {"a,b,c\n1,2,3\n4,5,6,7,8\n", "t.csv:3:7:", "expected 3 fields, found 5"},
      {"a,b,c\n1,\"x\ny,3\n4,5,6\n", "t.csv:2:3:", "expected a closing quote"},
      {"a,b,c\n1,x\"y,3\n", "t.csv:2:4:", "found '\"' inside an unquoted field"},
      {"a,b,c\n1,\"x\"y,3\n", "t.csv:2:6:", "expected ',' or end of line after the closing quote, found 'y'"},
      {"", "t.csv:1:1:", "expected a header row, found end of input"},
      {"\n\r\n", "t.csv:3:1:", "expected a header row, found end of input"},
      {"a,b,c\n", "t.csv:2:1:", "expected a data row after the header, found end of input"},
      {"a,b,c\n1,2,3\n4,\0,6\n"s, "t.csv:3:3:", "NUL byte"},
      {"a,b,c\n1,caf\xE9,3\n", "t.csv:2:6:", "found byte 0xE9"},
      {"a,b,c\n1,2,\xC0\x80\n", "t.csv:2:5:", "found byte 0xC0"},
      {"a,b,c\n1,2,\n", "t.csv:2:5:", "expected a value in the label column 'c', found an empty field"},
      {"a,b,c\n1,2,NA\n", "t.csv:2:5:", "found 'NA'"},
      {"a,b,c\n1,2,nan\n", "t.csv:2:5:", "found 'nan'"},
      {"a,b,a\n1,2,3\n", "t.csv:1:5:", "expected unique column names"},
      {"only\n1\n", "t.csv:1:1:", "expected at least 2 columns"},
      // The first error wins, whichever step finds it.
      {"a,b,c\n1,2\n\"open,2,3\n", "t.csv:2:4:", "expected 3 fields, found 2"},
      {"a,b,c\nx,2,3\n1,2,3\n4,x\"y,6\n", "t.csv:4:4:", "inside an unquoted field"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::string message = csv_error(c.text);
    EXPECT_EQ(message.substr(0, c.prefix.size()), c.prefix) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

TEST(Delimited, NonNumberInABlockWithQuotes) {
  std::string text = "a,b,c\n";
  for (int i = 0; i < 1000; ++i) text += "\"1\",2,3\n";
  std::string message = csv_error(text + "\"1\",x,3\n");
  EXPECT_EQ(message.substr(0, 13), "t.csv:1002:5:") << message;
  EXPECT_NE(message.find("expected a number in column 'b'"), std::string::npos) << message;
}

TEST(Delimited, LineNumbersCountNewlinesInsideQuotes) {
  std::string message = csv_error("a,b,c\n1,\"multi\nline\nvalue\",3\n4,5\n");
  EXPECT_EQ(message.substr(0, 10), "t.csv:5:4:") << message;
}

TEST(Delimited, MissingLabelColumnListsTheColumns) {
  EXPECT_EQ(csv_error("a,b,c\n1,2,3\n", with_label("foo")),
            "the label column: no column 'foo' in t.csv (columns: a, b, c)");
  EXPECT_NE(csv_error("a,b,c\n1,2,3\n", with_label("3")).find("no column '3'"), std::string::npos);
}

// Rows long enough that the text spans many parse blocks, with quoted
// newlines and categorical values first seen deep inside the file.
std::string large_csv(std::size_t rows) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> value(-100, 100);
  std::string text = "x,y,note,label\n";
  char number[64];
  for (std::size_t r = 0; r < rows; ++r) {
    std::snprintf(number, sizeof number, "%.6f,%.3e,", value(rng), value(rng));
    text += number;
    if (r % 97 == 0) text += "\"multi\nline " + std::to_string(r % 5) + "\"";
    else {
      // Appended in two steps: GCC 12 mistakes "n" + std::string for an
      // overlapping copy (-Wrestrict).
      text += 'n';
      text += std::to_string(r * 7919 % (r / 1000 + 3));
    }
    text += r % 2 ? ",a\n" : ",b\r\n";
  }
  return text;
}

TEST(Delimited, LargeInputIsTheSameWithOneOrManyThreads) {
  std::string text = large_csv(200000);  // ~7 MB: several blocks
  Table parallel = parse_csv(text);
  Table serial = [&] {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    return parse_csv(text);
  }();
  ASSERT_EQ(parallel.rows, 200000u);
  EXPECT_EQ(parallel.features, serial.features);
  EXPECT_EQ(parallel.labels, serial.labels);
  ASSERT_EQ(parallel.columns.size(), serial.columns.size());
  for (std::size_t c = 0; c < parallel.columns.size(); ++c) {
    EXPECT_EQ(parallel.columns[c].categories, serial.columns[c].categories);
    EXPECT_EQ(parallel.columns[c].mean, serial.columns[c].mean);
    EXPECT_EQ(parallel.columns[c].std, serial.columns[c].std);
  }
  // Spot checks against the generator.
  EXPECT_EQ(parallel.columns[2].type, ColumnType::kCategorical);
  EXPECT_EQ(parallel.columns[2].categories[0], "multi\nline 0");
  EXPECT_EQ(parallel.columns[3].categories, std::vector<std::string>({"b", "a"}));
  EXPECT_EQ(parallel.labels[199998], 0);  // even rows end in "b", seen first
  EXPECT_EQ(parallel.labels[199999], 1);
  // Codes follow first appearance in the file.
  const auto& notes = parallel.columns[2].categories;
  float next_code = 0;
  for (std::uint64_t r = 0; r < parallel.rows; ++r) {
    float code = parallel.features[r * 3 + 2];
    ASSERT_LE(code, next_code);
    if (code == next_code) ++next_code;
  }
  EXPECT_EQ(next_code, static_cast<float>(notes.size()));
}

TEST(Delimited, LargeQuoteFreeInputWithBlankLines) {
  std::mt19937 rng(9);
  std::string text = "a,b,label\r\n";
  std::vector<float> expected;
  for (int r = 0; r < 300000; ++r) {
    int a = static_cast<int>(rng() % 1000);
    expected.push_back(static_cast<float>(a));
    text += std::to_string(a) + "," + std::to_string(r) + (r % 3 ? ",x\n" : ",y\r\n");
    if (rng() % 50 == 0) text += rng() % 2 ? "\n" : "\r\n";
  }
  Table table = parse_csv(text);
  ASSERT_EQ(table.rows, expected.size());
  for (std::size_t r = 0; r < expected.size(); ++r) {
    ASSERT_EQ(table.features[2 * r], expected[r]) << r;
    ASSERT_EQ(table.features[2 * r + 1], static_cast<float>(r)) << r;
  }
  EXPECT_EQ(table.columns[2].categories, std::vector<std::string>({"y", "x"}));
}

// Offsets where records start (after a '\n' outside quotes).
std::vector<std::size_t> record_starts(const std::string& text) {
  std::vector<std::size_t> starts;
  bool in_quote = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') in_quote = !in_quote;
    if (text[i] == '\n' && !in_quote && i + 1 < text.size()) starts.push_back(i + 1);
  }
  return starts;
}

std::string line_of(const std::string& text, std::size_t offset) {
  return std::to_string(1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

TEST(Delimited, ErrorsDeepInLargeInputReportTheFirstOne) {
  std::string text = large_csv(200000);
  std::vector<std::size_t> starts = record_starts(text);
  std::size_t first = starts[150000], second = starts[190000];
  text.insert(second, "1,2,3,4,5,");  // too many fields, twice
  text.insert(first, "1,2,3,4,5,");
  std::string message = csv_error(text);
  std::string expected = "t.csv:" + line_of(text, first) + ":";
  EXPECT_EQ(message.substr(0, expected.size()), expected) << message;
  EXPECT_NE(message.find("expected 4 fields, found 9"), std::string::npos) << message;
}

TEST(Delimited, UnterminatedQuoteInLargeInputPointsAtTheQuote) {
  std::string text = large_csv(100000);
  // Row 99950 comes after the last quoted field, so nothing closes this quote.
  std::size_t quote = record_starts(text)[99950];
  text.insert(quote, "\"");
  std::string message = csv_error(text);
  EXPECT_EQ(message.substr(0, message.find(": ")), "t.csv:" + line_of(text, quote) + ":1") << message;
  EXPECT_NE(message.find("closing quote"), std::string::npos) << message;
}

// Random damage to a valid file must give a Table or a one-line kBadData
// error: never a crash or another exception (run under ASan/UBSan too).
TEST(Delimited, SurvivesRandomDamage) {
  const std::string original = "id,name,score,label\n1,\"Ann, A.\",3.5,yes\n2,Bob,NA,no\r\n3,\"x\"\"y\",-1e3,yes\n";
  const std::string inserts[] = {"\"", ",", "\n", "\r", std::string(1, '\0'), "\xC3", "\xFF", " ", "NA", "1e"};
  std::mt19937 rng(2024);
  for (int round = 0; round < 3000; ++round) {
    std::string text = original;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      std::size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0: text.insert(at, inserts[rng() % std::size(inserts)]); break;
        case 1: if (at < text.size()) text.erase(at, 1 + rng() % 3); break;
        default: text = text.substr(0, at); break;
      }
    }
    ParseOptions options = named("fuzz.csv");
    options.header = round % 5 != 0;
    try {
      Table table = parse_delimited(text, round % 7 ? ',' : '\t', options);
      EXPECT_EQ(table.features.size(), table.rows * static_cast<std::uint64_t>(table.sample_width()));
      EXPECT_EQ(table.labels.size(), table.rows);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kBadData);
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).rfind("fuzz.csv", 0), 0u) << error.what();
    }
  }
}

// A header of very many columns is refused before anything per column is
// allocated (300,000 empty names once took 527 MB), naming the limit's flag.
TEST(Delimited, ColumnLimit) {
  std::string header(300000, ',');
  EXPECT_EQ(csv_error(header + "\n"),
            "t.csv:1:16385: expected at most 16384 columns, found 300001 (the column limit can be raised)");
  ParseOptions options;
  options.max_columns = 3;
  EXPECT_EQ(csv_error("a,b,c,d\n1,2,3,4\n", options),
            "t.csv:1:7: expected at most 3 columns, found 4 (the column limit can be raised)");
  options.header = false;
  EXPECT_EQ(csv_error("1,2,3,4\n", options),
            "t.csv:1:7: expected at most 3 columns, found 4 (the column limit can be raised)");
  options.header = true;
  EXPECT_EQ(parse_csv("a,b,c\n1,2,3\n", options).columns.size(), 3u);
  // A data row that runs on is reported as too many fields, without
  // collecting them: inference and the record count stop at the limit.
  std::string long_row = "a,b\n\"1\",2" + std::string(200000, ',') + "\n";
  EXPECT_EQ(csv_error(long_row), "t.csv:2:7: expected 2 fields, found 200002");
}

TEST(Delimited, ColumnNameLengthLimit) {
  std::string name(kMaxColumnNameBytes + 1, 'n');
  EXPECT_EQ(csv_error("a," + name + "\n1,2\n"),
            "t.csv:1:3: expected a column name of at most 1024 bytes, found one of 1025");
}

// typed_columns (predict): only the named columns are typed; the others
// are text whatever they hold, so a late odd value cannot fail the parse.
TEST(Delimited, TypedColumnsReadEveryOtherColumnAsText) {
  std::string csv = "x,when,code,y\n";
  for (int i = 0; i < 1100; ++i) csv += std::to_string(i) + ".5,2023-11-01," + std::to_string(i) + ",1\n";
  csv += "3.5,yesterday,x,0\n";
  ParseOptions options;
  options.display_name = "new.csv";
  options.typed_columns = std::vector<std::string>{"x", "absent"};
  Table t = parse_delimited(csv, ',', options);
  ASSERT_EQ(t.columns.size(), 4u);
  EXPECT_EQ(t.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(t.columns[1].type, ColumnType::kCategorical);
  EXPECT_EQ(t.columns[2].type, ColumnType::kCategorical);
  EXPECT_EQ(t.columns[3].type, ColumnType::kNumeric);  // the label is typed as ever
  EXPECT_EQ(t.rows, 1101u);
  // Without it the same file is bad input at the late value.
  options.typed_columns.reset();
  EXPECT_THROW(parse_delimited(csv, ',', options), Error);
  // A typed column still refuses a value it cannot read.
  options.typed_columns = std::vector<std::string>{"code"};
  try {
    parse_delimited(csv, ',', options);
    FAIL() << "a typed numeric column took 'x'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("new.csv:1102:"), std::string::npos) << e.what();
  }
}

// Input without a label column (predict's rows): every column is a feature,
// with the types, values, dictionaries and errors a labelled parse gives.
ParseOptions unlabelled() {
  ParseOptions options;
  options.labelled = false;
  return options;
}

TEST(Delimited, UnlabelledInputHasOnlyFeatures) {
  // BOM, CRLF, a quoted newline, doubled quotes, a quoted comma, blanks.
  const std::string rows =
      "1,\"line one\nline two\",\"say \"\"hi\"\"\"\r\n"
      "  2 , plain ,  \"padded\"  \r\n"
      "\r\n"
      "3,\"\",\"a, b\"\r\n";
  Table table = parse_csv("\xEF\xBB\xBF" "x,note,quote\r\n" + rows, unlabelled());
  ASSERT_EQ(table.columns.size(), 3u);
  EXPECT_EQ(table.label_column, 3u) << "no column is the label";
  EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({3}));
  ASSERT_EQ(table.rows, 3u);
  EXPECT_TRUE(table.labels.empty());
  EXPECT_EQ(table.columns[0].name, "x");
  EXPECT_EQ(table.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(table.columns[1].categories, std::vector<std::string>({"line one\nline two", "plain"}));
  EXPECT_EQ(table.columns[2].categories, std::vector<std::string>({"say \"hi\"", "padded", "a, b"}));
  ASSERT_EQ(table.features.size(), 9u);
  EXPECT_EQ(table.features[0], 1);
  EXPECT_EQ(table.features[3], 2);
  EXPECT_EQ(table.features[8], 2);
  EXPECT_TRUE(std::isnan(table.features[7]));  // "" is missing
  EXPECT_EQ(table.columns[1].missing, 1u);
  EXPECT_EQ(table.columns[0].count, 3u);
  EXPECT_DOUBLE_EQ(table.columns[0].mean, 2.0);

  // The same rows with a label column appended: the same features.
  Table labelled = parse_csv("\xEF\xBB\xBF" "x,note,quote,y\r\n"
                             "1,\"line one\nline two\",\"say \"\"hi\"\"\",0\r\n"
                             "  2 , plain ,  \"padded\"  ,1\r\n"
                             "\r\n"
                             "3,\"\",\"a, b\",0\r\n");
  ASSERT_EQ(labelled.features.size(), table.features.size());
  for (std::size_t i = 0; i < table.features.size(); ++i) {
    if (std::isnan(labelled.features[i])) {
      EXPECT_TRUE(std::isnan(table.features[i])) << i;
    } else {
      EXPECT_EQ(labelled.features[i], table.features[i]) << i;
    }
  }
  // One column is input enough without a label.
  Table single = parse_csv("x\n1\n2\n", unlabelled());
  EXPECT_EQ(single.rows, 2u);
  EXPECT_EQ(single.features, std::vector<float>({1, 2}));
}

TEST(Delimited, UnlabelledErrorsPointAtTheProblem) {
  struct Case {
    std::string text;
    std::string prefix;  // NAME:LINE:COLUMN
    std::string says;
  };
  ParseOptions options = unlabelled();
  options.typed_columns = std::vector<std::string>{"a", "b"};  // c is text, as predict reads it
  // Types come from the first 1000 rows: a bad number after them.
  std::string typed_rows;
  for (int i = 0; i < 1000; ++i) typed_rows += "1,2,3\n";
  std::string typed_rows_crlf;
  for (int i = 0; i < 1000; ++i) typed_rows_crlf += "1,2,3\r\n";
  const std::vector<Case> cases = {
      // The field counts are the file's own: no label column is counted.
      {"a,b,c\n1,2,3\n4,5\n", "t.csv:3:4:", "expected 3 fields, found 2"},
      {"a,b,c\n1,2,3\r\n4,5\r\n", "t.csv:3:4:", "expected 3 fields, found 2"},
      {"a,b,c\n1,2,3\n4,5,6,7,8\n", "t.csv:3:7:", "expected 3 fields, found 5"},
      {"a,b,c\n" + typed_rows + "4,x,6\n", "t.csv:1002:3:", "expected a number in column 'b'"},
      {"\xEF\xBB\xBF" "a,b,c\r\n" + typed_rows_crlf + "4,x,6\r\n", "t.csv:1002:3:", "expected a number in column 'b'"},
      {"a,b,c\n1,2,\"multi\nline\"\n" + typed_rows + "4,x,6\n", "t.csv:1004:3:", "expected a number in column 'b'"},
      {"a,b,c\n1,2,\"open\n4,5,6\n", "t.csv:2:5:", "expected a closing quote"},
      {"a,b,c\n1,2,x\"y\n", "t.csv:2:6:", "inside an unquoted field"},
      {"a,b,c\n1,2,inf\n", "", "no error: c is text"},
      {"a,b,c\n1,inf,3\n", "t.csv:2:3:", "expected a finite number, found 'inf'"},
      {"a,b,c\n", "t.csv:2:1:", "expected a data row after the header, found end of input"},
      {"a,b,c", "t.csv:1:6:", "expected a data row after the header, found end of input"},
      {"", "t.csv:1:1:", "expected a header row, found end of input"},
      {"a,b,c\n1,caf\xE9,3\n", "t.csv:2:6:", "found byte 0xE9"},
      {"a,b,a\n1,2,3\n", "t.csv:1:5:", "expected unique column names"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    if (c.prefix.empty()) {
      EXPECT_NO_THROW(parse_csv(c.text, options));
      continue;
    }
    std::string message = csv_error(c.text, options);
    EXPECT_EQ(message.substr(0, c.prefix.size()), c.prefix) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
  // The column limit counts the file's columns.
  options.max_columns = 3;
  EXPECT_NO_THROW(parse_csv("a,b,c\n1,2,3\n", options));
  EXPECT_NE(csv_error("a,b,c,d\n1,2,3,4\n", options).find("expected at most 3 columns, found 4"), std::string::npos);
}

TEST(Delimited, UnlabelledLargeInputErrorLateReportsItsLine) {
  // Many parse blocks; the bad cell is in the last one.
  std::string text = "a,b,c\n";
  for (int i = 0; i < 300000; ++i) text += std::to_string(i) + ",\"q," + std::to_string(i % 7) + "\",7\n";
  text += "1,x,zz\n";
  ASSERT_GT(text.size(), std::size_t{3} << 20);
  ParseOptions options = unlabelled();
  options.typed_columns = std::vector<std::string>{"a", "c"};
  Table good = parse_csv(std::string_view(text).substr(0, text.size() - 7), options);
  EXPECT_EQ(good.rows, 300000u);
  EXPECT_EQ(good.columns[1].categories.size(), 7u);
  EXPECT_EQ(csv_error(text, options).rfind("t.csv:300002:5: expected a number in column 'c'", 0), 0u);
}

// read_columns (predict): the columns not named are read past: their
// fields are still checked, but they hold no values and no dictionary.
TEST(Delimited, ReadColumnsSkipEveryOtherColumn) {
  std::string csv = "id,x,when,y\n";
  for (int i = 0; i < 1100; ++i) csv += "id-" + std::to_string(i) + "," + std::to_string(i) + ".5,2023-11-01,1\n";
  csv += "\"odd, id\",3.5,yesterday,0\n";
  ParseOptions options = unlabelled();
  options.display_name = "new.csv";
  options.typed_columns = std::vector<std::string>{"x", "y"};
  options.read_columns = std::vector<std::string>{"x", "y", "absent"};
  Table t = parse_delimited(csv, ',', options);
  ASSERT_EQ(t.columns.size(), 4u);
  EXPECT_EQ(t.rows, 1101u);
  EXPECT_EQ(t.columns[1].type, ColumnType::kNumeric);
  EXPECT_EQ(t.columns[3].type, ColumnType::kNumeric);
  for (std::size_t c : {std::size_t{0}, std::size_t{2}}) {
    EXPECT_EQ(t.columns[c].type, ColumnType::kCategorical) << c;
    EXPECT_TRUE(t.columns[c].categories.empty()) << "no dictionary for column " << c;
    EXPECT_EQ(t.columns[c].missing, 1101u) << c;
  }
  EXPECT_TRUE(std::isnan(t.features[0]));
  EXPECT_EQ(t.features[1], 0.5f);
  EXPECT_EQ(t.features[1100 * 4 + 1], 3.5f);
  // A date format (as trained) for a column read past is not applied.
  options.date_formats = {{"when", "YYYY-MM-DD", true}};
  EXPECT_EQ(parse_delimited(csv, ',', options).rows, 1101u);
  // Its fields are fields still: a broken quote or a ragged row is an error.
  options.date_formats.clear();
  EXPECT_NE(csv_error(csv + "\"open,1,2,3\n", options).find("new.csv:1103:1: expected a closing quote"),
            std::string::npos);
  EXPECT_NE(csv_error(csv + "x,1,2\n", options).find("new.csv:1103:6: expected 4 fields, found 3"),
            std::string::npos);
}

}  // namespace
}  // namespace anneal
