// LIBSVM parsing: densifying, train/test widths, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"

namespace anneal {
namespace {

ParseOptions named(std::string name) {
  ParseOptions options;
  options.display_name = std::move(name);
  return options;
}

std::string libsvm_error(std::string_view text, const ParseOptions& options = named("d.svm")) {
  try {
    parse_libsvm(text, options);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadData);
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
    return error.what();
  }
  ADD_FAILURE() << "expected an error parsing: " << text;
  return "";
}

TEST(Libsvm, Densifies) {
  Table table = parse_libsvm("# a comment\n+1 1:0.5 3:2   # trailing comment\n\n-1 2:-1\r\n0\n2.5 4:1e2\n", named("d.svm"));
  ASSERT_EQ(table.rows, 4u);
  EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({4}));
  ASSERT_EQ(table.columns.size(), 5u);
  EXPECT_EQ(table.columns[0].name, "f1");
  EXPECT_EQ(table.columns[3].name, "f4");
  EXPECT_EQ(table.columns[4].name, "label");
  EXPECT_EQ(table.label_column, 4u);
  EXPECT_EQ(table.features, std::vector<float>({0.5f, 0, 2, 0,  //
                                                0, -1, 0, 0,    //
                                                0, 0, 0, 0,     //
                                                0, 0, 0, 100}));
  EXPECT_EQ(table.labels, std::vector<float>({1, -1, 0, 2.5f}));
  // Absent entries are zeros and count as values.
  EXPECT_EQ(table.columns[0].count, 4u);
  EXPECT_EQ(table.columns[0].missing, 0u);
  EXPECT_DOUBLE_EQ(table.columns[0].mean, 0.125);
  EXPECT_EQ(table.columns[3].max, 100);
  EXPECT_DOUBLE_EQ(table.columns[4].mean, 0.625);
}

TEST(Libsvm, TestPartTakesTheTrainWidth) {
  ParseOptions options = named("test.svm");
  options.libsvm_features = 6;
  Table test = parse_libsvm("1 2:1\n0 6:3\n", options);
  EXPECT_EQ(test.sample_shape, std::vector<std::int64_t>({6}));
  EXPECT_EQ(test.features[11], 3);
  std::string message = libsvm_error("1 2:1\n0 7:3\n", options);
  EXPECT_EQ(message, "test.svm:2:3: expected an index of at most 6 (the train part's feature count), found 7");
}

TEST(Libsvm, Errors) {
  struct Case {
    std::string text, message;
  };
  for (const Case& c : std::vector<Case>{
           {"1 1:1\nx 2:1\n", "d.svm:2:1: expected a numeric label at the start of the line, found 'x'"},
           {"1 1:1\n1 2=1\n", "d.svm:2:3: expected INDEX:VALUE with a positive integer INDEX, found '2=1'"},
           {"1 1:1\n1 -2:1\n", "d.svm:2:3: expected INDEX:VALUE with a positive integer INDEX, found '-2:1'"},
           {"1 0:1\n", "d.svm:1:3: expected an index of at least 1 (indices are 1-based), found 0"},
           {"1 3:1 2:1\n", "d.svm:1:7: expected an index above 3 (indices must ascend), found 2"},
           {"1 3:1 3:1\n", "d.svm:1:7: expected an index above 3 (indices must ascend), found 3"},
           {"1 3:abc\n", "d.svm:1:5: expected a number after '3:', found 'abc'"},
           {"1 3:\n", "d.svm:1:5: expected a number after '3:', found ''"},
           {"1 99999999999999999999:1\n", "d.svm:1:3: expected INDEX:VALUE with a positive integer INDEX, found '99999999999999999999:1'"},
           {"nan 1:1\n", "d.svm:1:1: expected a finite number as the label, found 'nan'"},
           {"", "d.svm:1:1: expected a line \"LABEL INDEX:VALUE ...\", found end of input"},
           {"# only comments\n\n", "d.svm:3:1: expected a line \"LABEL INDEX:VALUE ...\", found end of input"},
           {"1\n0\n", "d.svm: expected at least one INDEX:VALUE feature, found none"},
           {std::string("1 1:1\n1 2:\0\n", 12), "d.svm:2:5: expected UTF-8 text, found a NUL byte (0x00); is this a binary file?"},
       }) {
    EXPECT_EQ(libsvm_error(c.text), c.message);
  }
  // An absurd index in a tiny file must not try to allocate the dense table:
  // by default the column limit refuses it, naming its flag...
  EXPECT_EQ(libsvm_error("1 1000000:1\n"),
            "d.svm:1:3: expected an index of at most 16384, found 1000000 (the column limit can be raised)");
  // ...and with the limit raised, the cell limit still does.
  ParseOptions wide;
  wide.max_columns = kCeilingMaxColumns;
  std::string rows = "1 1000000:1\n";
  for (int i = 0; i < 20; ++i) rows += "1 1:1\n";
  EXPECT_NE(libsvm_error(rows, wide).find("cells once densified"), std::string::npos);
  // So is a small file of rows that each reach the widest allowed index.
  std::string tall;
  for (int i = 0; i < 16384; ++i) tall += "1 16384:1\n";
  EXPECT_NE(libsvm_error(tall).find("expected at most 16777216 cells once densified, found 16384 rows x 16384 features"),
            std::string::npos);
}

TEST(Libsvm, LargeInputSpansBlocks) {
  std::mt19937 rng(5);
  std::string text;
  std::vector<float> expected_labels;
  for (int r = 0; r < 150000; ++r) {
    int label = static_cast<int>(rng() % 2);
    expected_labels.push_back(static_cast<float>(label));
    text += std::to_string(label);
    for (int f = 1; f <= 20; ++f)
      if (rng() % 3 == 0) {
        text += ' ';
        text += std::to_string(f);
        text += ':';
        text += std::to_string(rng() % 1000 / 10.0);
      }
    text += '\n';
  }
  Table table = parse_libsvm(text, named("big.svm"));
  EXPECT_EQ(table.rows, 150000u);
  EXPECT_EQ(table.labels, expected_labels);
  EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({20}));
  // Statistics come from the sparse entries; they must match the dense data.
  for (std::size_t f = 0; f < 20; ++f) {
    double sum = 0, squares = 0;
    float min = table.features[f], max = table.features[f];
    for (std::uint64_t r = 0; r < table.rows; ++r) {
      float v = table.features[r * 20 + f];
      sum += v;
      min = std::min(min, v);
      max = std::max(max, v);
    }
    double mean = sum / static_cast<double>(table.rows);
    for (std::uint64_t r = 0; r < table.rows; ++r) squares += std::pow(table.features[r * 20 + f] - mean, 2);
    const ColumnSchema& column = table.columns[f];
    EXPECT_EQ(column.count, table.rows);
    EXPECT_EQ(column.min, min);
    EXPECT_EQ(column.max, max);
    EXPECT_NEAR(column.mean, mean, 1e-9);
    EXPECT_NEAR(column.std, std::sqrt(squares / static_cast<double>(table.rows)), 1e-9);
  }
}

TEST(Libsvm, NegativeValuesMissingValuesAndPlusSigns) {
  Table table = parse_libsvm("1 1:-2 2:nan 3:+4\n-1 2:5\n", named("d.svm"));
  EXPECT_EQ(table.columns[0].min, -2);  // the absent cell is 0
  EXPECT_EQ(table.columns[0].max, 0);
  EXPECT_EQ(table.columns[1].missing, 1u);
  EXPECT_EQ(table.columns[1].count, 1u);
  EXPECT_EQ(table.columns[1].mean, 5);
  EXPECT_EQ(table.features[2], 4);
}

// Random damage must give a Table or a one-line kBadData error, never a
// crash (this also runs under ASan/UBSan).
TEST(Libsvm, SurvivesRandomDamage) {
  const std::string original = "# header\n+1 1:0.5 3:2e1 # note\n-1 2:-1\r\n0 7:1\n";
  const std::string inserts[] = {":", " ", "\n", "#", std::string(1, '\0'), "\xFF", "9", "-", "0:", "99999999999:"};
  std::mt19937 rng(77);
  for (int round = 0; round < 3000; ++round) {
    std::string text = original;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 4); ++e) {
      std::size_t at = rng() % (text.size() + 1);
      if (rng() % 2) text.insert(at, inserts[rng() % std::size(inserts)]);
      else if (at < text.size()) text.erase(at, 1 + rng() % 3);
    }
    ParseOptions options = named("fuzz.svm");
    if (round % 3 == 0) options.libsvm_features = 5;
    try {
      Table table = parse_libsvm(text, options);
      EXPECT_EQ(table.features.size(), table.rows * static_cast<std::uint64_t>(table.sample_width()));
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kBadData);
      EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace anneal
