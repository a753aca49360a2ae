// The load path's one-pass gather and transform (issue 15):
// FeatureTransform::gather_apply must give exactly apply(gather(...)), the
// values bit for bit and the same counts of imputed and unseen cells,
// across its blocks of rows and for rows in any order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/preprocess.h"
#include "test_util.h"

namespace anneal {
namespace {

const float kNaN = std::nanf("");

using test::column;

// 1000 rows (several of gather_apply's 256-row blocks, the last one partial)
// of: numeric x (every 17th missing), categorical shop a..d (code 9, outside
// the dictionary, every 31st row; missing every 43rd), the label, numeric y.
Table mixed() {
  Table t;
  ColumnSchema shop = column("shop", ColumnType::kCategorical);
  shop.categories = {"a", "b", "c", "d"};
  t.columns = {column("x"), shop, column("label"), column("y")};
  t.label_column = 2;
  t.sample_shape = {3};
  t.rows = 1000;
  for (std::size_t r = 0; r < t.rows; ++r) {
    t.features.push_back(r % 17 == 0 ? kNaN : static_cast<float>(r) * 0.37f - 50.0f);
    t.features.push_back(r % 43 == 0 ? kNaN : r % 31 == 0 ? 9.0f : static_cast<float>(r % 4));
    t.features.push_back(static_cast<float>((r * 7919) % 1000) / 3.0f);
    t.labels.push_back(static_cast<float>(r % 2));
  }
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DataPath, GatherApplyIsApplyOfGather) {
  Table t = mixed();
  std::vector<std::uint32_t> fit_rows;
  for (std::uint32_t r = 0; r < 800; ++r) fit_rows.push_back(r);
  FeatureTransform f = FeatureTransform::fit(t, fit_rows);
  ASSERT_GT(f.output_width(), f.input_width());  // the one-hot column expands

  // A shuffled-looking subset in no particular order, as a validation split gives.
  std::vector<std::uint32_t> rows;
  for (std::uint32_t i = 0; i < 700; ++i) rows.push_back((i * 389 + 11) % 1000);

  TransformCounts want_counts, got_counts;
  const std::vector<float> want = f.apply(f.gather(t, rows), want_counts);
  const std::vector<float> got = f.gather_apply(t, rows, got_counts);
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_GT(want_counts.missing, 0u);
  EXPECT_GT(want_counts.unseen, 0u);
  EXPECT_EQ(got_counts.missing, want_counts.missing);
  EXPECT_EQ(got_counts.unseen, want_counts.unseen);

  // Every row, and counts added to what the caller already holds.
  TransformCounts all_want{5, 7}, all_got{5, 7};
  EXPECT_TRUE(same_bits(f.gather_apply(t, all_got), f.apply(f.gather(t), all_want)));
  EXPECT_EQ(all_got.missing, all_want.missing);
  EXPECT_EQ(all_got.unseen, all_want.unseen);
}

// In place: the numeric columns x and y only (output 2 wide, the table's
// rows 3), ascending rows with gaps, so each output row is written over
// input rows not yet read only if the order of the work is wrong.
TEST(DataPath, InPlaceIsGatherApplyAndTakesTheBuffer) {
  const Table t = mixed();
  FeatureOptions numeric;
  numeric.features = std::vector<std::string>{"y", "x"};  // not the table's order
  std::vector<std::uint32_t> fit_rows;
  for (std::uint32_t r = 0; r < 1000; r += 3) fit_rows.push_back(r);
  FeatureTransform f = FeatureTransform::fit(t, fit_rows, numeric);
  ASSERT_EQ(f.output_width(), 2);

  std::vector<std::uint32_t> rows;  // every row but each 7th: 858 rows, several blocks
  for (std::uint32_t r = 0; r < 1000; ++r)
    if (r % 7 != 3) rows.push_back(r);
  TransformCounts want_counts, got_counts;
  const std::vector<float> want = f.gather_apply(t, rows, want_counts);
  Table consumed = t;
  const float* buffer = consumed.features.data();
  const std::vector<float> got = f.gather_apply_in_place(consumed, rows, got_counts);
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_EQ(got.data(), buffer) << "built in the table's own buffer";
  EXPECT_GT(want_counts.missing, 0u);
  EXPECT_EQ(got_counts.missing, want_counts.missing);
  EXPECT_TRUE(consumed.features.empty());
  EXPECT_EQ(consumed.labels, t.labels);

  // Rows out of order, or an output wider than the rows (one-hot): the
  // plain path, the same values, the buffer still taken.
  std::vector<std::uint32_t> descending(rows.rbegin(), rows.rend());
  TransformCounts c1, c2;
  Table copy = t;
  EXPECT_TRUE(same_bits(f.gather_apply_in_place(copy, descending, c1), f.gather_apply(t, descending, c2)));
  EXPECT_TRUE(copy.features.empty());
  FeatureTransform wide = FeatureTransform::fit(t, fit_rows);
  ASSERT_GT(wide.output_width(), 3);
  Table copy2 = t;
  EXPECT_TRUE(same_bits(wide.gather_apply_in_place(copy2, rows, c1), wide.gather_apply(t, rows, c2)));
  EXPECT_EQ(c1.unseen, c2.unseen);
  EXPECT_TRUE(copy2.features.empty());
}

TEST(DataPath, GatherApplyOfNoRowsIsEmpty) {
  Table t = mixed();
  FeatureTransform f = FeatureTransform::fit(t, std::vector<std::uint32_t>{0, 1, 2, 3});
  TransformCounts counts;
  EXPECT_TRUE(f.gather_apply(t, std::vector<std::uint32_t>{}, counts).empty());
  EXPECT_EQ(counts.missing, 0u);
}

TEST(DataPath, GatherApplyNamesAColumnTheTableLacks) {
  Table t = mixed();
  FeatureTransform f = FeatureTransform::fit(t, std::vector<std::uint32_t>{0, 1, 2, 3});
  Table other = t;
  other.columns[3] = column("z");
  TransformCounts counts;
  try {
    f.gather_apply(other, std::vector<std::uint32_t>{0, 1}, counts);
    FAIL() << "expected an error for the missing column";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no column 'y'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anneal
