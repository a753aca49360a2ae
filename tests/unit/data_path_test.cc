// The per-batch transform (issue 15): FeatureTransform::apply_stored, one
// stored row at a time, must give exactly apply(gather(...)) of the whole
// table, the values bit for bit and the same counts of imputed and unseen
// cells, for rows in any order; and a fit over a row scan is the fit over
// the table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/preprocess.h"
#include "test_util.h"

namespace anneal {
namespace {

const float kNaN = std::nanf("");

using test::column;

// 1000 rows of: numeric x (every 17th missing), categorical shop a..d (code 9, outside
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

// apply_stored over `rows` of `t`, row by row, as a StoredSource reads a batch.
std::vector<float> apply_stored_rows(const FeatureTransform& f, const Table& t, const std::vector<std::uint32_t>& rows,
                                     TransformCounts& counts) {
  const std::vector<std::size_t> offsets = f.stored_offsets(t.columns, t.label_column);
  const auto width = static_cast<std::size_t>(t.sample_width()), out_w = static_cast<std::size_t>(f.output_width());
  std::vector<float> out(rows.size() * out_w, 0.0f);
  for (std::size_t i = 0; i < rows.size(); ++i)
    f.apply_stored(t.features.data() + rows[i] * width, offsets, out.data() + i * out_w, counts);
  return out;
}

TEST(DataPath, ApplyStoredIsApplyOfGather) {
  Table t = mixed();
  std::vector<std::uint32_t> fit_rows;
  for (std::uint32_t r = 0; r < 800; ++r) fit_rows.push_back(r);
  FeatureTransform f = FeatureTransform::fit(t, fit_rows);
  ASSERT_GT(f.output_width(), f.input_width());  // the one-hot column expands

  // A shuffled-looking subset in no particular order, as a batch gives.
  std::vector<std::uint32_t> rows;
  for (std::uint32_t i = 0; i < 700; ++i) rows.push_back((i * 389 + 11) % 1000);

  TransformCounts want_counts, got_counts;
  const std::vector<float> want = f.apply(f.gather(t, rows), want_counts);
  const std::vector<float> got = apply_stored_rows(f, t, rows, got_counts);
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_GT(want_counts.missing, 0u);
  EXPECT_GT(want_counts.unseen, 0u);
  EXPECT_EQ(got_counts.missing, want_counts.missing);
  EXPECT_EQ(got_counts.unseen, want_counts.unseen);

  // Columns chosen out of the table's order read from their stored places.
  FeatureOptions numeric;
  numeric.features = std::vector<std::string>{"y", "x"};
  FeatureTransform picked = FeatureTransform::fit(t, fit_rows, numeric);
  TransformCounts c1, c2;
  EXPECT_TRUE(same_bits(apply_stored_rows(picked, t, rows, c1), picked.apply(picked.gather(t, rows), c2)));
  EXPECT_EQ(c1.missing, c2.missing);
}

TEST(DataPath, FitOverARowScanIsTheFitOverTheTable) {
  Table t = mixed();
  std::vector<std::uint32_t> rows;
  for (std::uint32_t r = 0; r < 1000; r += 3) rows.push_back(r);
  const FeatureTransform want = FeatureTransform::fit(t, rows);
  Table schema = t;
  schema.features.clear();  // the scan's fit reads no feature buffer
  const auto width = static_cast<std::size_t>(t.sample_width());
  int scans = 0;
  const FeatureTransform got = FeatureTransform::fit(schema, rows.size(), [&](const std::function<void(const float*)>& visit) {
    ++scans;
    for (std::uint32_t r : rows) visit(t.features.data() + r * width);
  });
  EXPECT_EQ(got.to_json(), want.to_json());
  EXPECT_EQ(scans, 2) << "means, then spreads";
}

TEST(DataPath, StoredOffsetsNameAColumnTheTableLacks) {
  Table t = mixed();
  FeatureTransform f = FeatureTransform::fit(t, std::vector<std::uint32_t>{0, 1, 2, 3});
  Table other = t;
  other.columns[3] = column("z");
  try {
    f.stored_offsets(other.columns, other.label_column);
    FAIL() << "expected an error for the missing column";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no column 'y'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anneal
