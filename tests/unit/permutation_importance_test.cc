// Permutation importance (src/runs/permutation_importance.h): the row
// sample is a deterministic uniform reservoir; a column the model ignores
// drops by exactly 0, the one it uses by a lot; a column that became
// several inputs (a date's calendar features) is shuffled as one block.
#include "runs/permutation_importance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "test_util.h"

namespace anneal {
namespace {

using test::column;

TEST(RowSample, KeepsEveryRowUntilFullThenAFixedSeedsChoice) {
  runs::RowSample all(10, 2, 1);
  all.offer(std::vector<float>{1, 1, 2, 2, 3, 3}, std::vector<float>{10, 20, 30});
  EXPECT_EQ(all.rows(), 3u);
  EXPECT_EQ(all.x(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(all.y(), (std::vector<float>{10, 20, 30}));

  // 1000 rows in pieces of 7, row i = (i, -i), label i: 50 kept, each a
  // whole row of the stream, the same 50 for the same seed.
  auto sample = [](std::uint64_t seed) {
    runs::RowSample s(50, 2, seed);
    for (int start = 0; start < 1000; start += 7) {
      std::vector<float> x, y;
      for (int i = start; i < std::min(start + 7, 1000); ++i) {
        x.insert(x.end(), {float(i), float(-i)});
        y.push_back(float(i));
      }
      s.offer(x, y);
    }
    return s;
  };
  const runs::RowSample a = sample(5), b = sample(5), c = sample(6);
  ASSERT_EQ(a.rows(), 50u);
  EXPECT_EQ(a.x(), b.x());
  EXPECT_EQ(a.y(), b.y());
  EXPECT_NE(a.y(), c.y());
  std::set<float> distinct(a.y().begin(), a.y().end());
  EXPECT_EQ(distinct.size(), 50u);
  for (std::size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(a.x()[2 * i], a.y()[i]);
    EXPECT_EQ(a.x()[2 * i + 1], -a.y()[i]);
  }
  // Not just the first rows: the stream's later rows are as likely.
  EXPECT_GT(*distinct.rbegin(), 500.0f);
}

// Columns a (numeric), when (a datetime: 10 inputs), b (numeric); the label
// is a (regression). 200 rows.
struct Fixture {
  Table table;
  FeatureTransform features;
  LabelEncoding labels;
  std::vector<float> x, y;
};

Fixture make_fixture() {
  Fixture f;
  Table& t = f.table;
  ColumnSchema when = column("when", ColumnType::kDatetime);
  when.has_time = true;
  when.datetime_format = "YYYY-MM-DD HH:MM";
  t.columns = {column("a"), when, column("b"), column("label")};
  t.label_column = 3;
  t.sample_shape = {3};
  t.rows = 200;
  for (int i = 0; i < 200; ++i) {
    const float a = std::sin(0.37f * float(i)), b = std::cos(1.3f * float(i));
    t.features.insert(t.features.end(), {a, 19000.0f + 3.7f * float(i), b});
    t.labels.push_back(a);
  }
  std::vector<std::uint32_t> rows(200);
  for (std::uint32_t i = 0; i < 200; ++i) rows[i] = i;
  f.features = FeatureTransform::fit(t, rows);
  f.labels = LabelEncoding::fit(LossKind::kMeanSquaredError, t, t);
  TransformCounts counts;
  f.x = f.features.apply(t.features, counts);
  f.y = f.labels.encode_all(t.labels, "test");
  return f;
}

TEST(PermutationImportance, AnIgnoredColumnDropsByZeroAndTheUsedOneByMuch) {
  Fixture f = make_fixture();
  ASSERT_EQ(f.features.output_width(), 12);  // a, when's 10, b
  const std::size_t width = 12;
  // The model: the label's encoding of input 0 (a, standardized), so the
  // baseline R² is 1; it reads nothing else.
  auto predict = [&](const std::vector<float>& x) {
    std::vector<float> p(x.size() / width);
    for (std::size_t i = 0; i < p.size(); ++i)
      p[i] = f.y[0] + (x[i * width] - f.x[0]) * ((f.y[1] - f.y[0]) / (f.x[width] - f.x[0]));
    return p;
  };
  ImportanceOptions options;
  options.repeats = 4;
  options.seed = 9;
  double baseline = 0;
  const auto importance = runs::permutation_importance(f.features, f.labels, LossKind::kMeanSquaredError, f.x, f.y,
                                                       predict, options, &baseline);
  EXPECT_NEAR(baseline, 1.0, 1e-4);
  ASSERT_EQ(importance.size(), 3u);
  EXPECT_EQ(importance[0].column, "a");
  EXPECT_GT(importance[0].drop, 1.0);  // shuffled a against the label: R² near -1
  EXPECT_GT(importance[0].spread, 0.0);
  EXPECT_EQ(importance[1].column, "when");
  EXPECT_EQ(importance[1].drop, 0.0);
  EXPECT_EQ(importance[1].spread, 0.0);
  EXPECT_EQ(importance[2].column, "b");
  EXPECT_EQ(importance[2].drop, 0.0);
  // Deterministic for a seed.
  const auto again = runs::permutation_importance(f.features, f.labels, LossKind::kMeanSquaredError, f.x, f.y,
                                                  predict, options, nullptr);
  EXPECT_EQ(again[0].drop, importance[0].drop);
  EXPECT_EQ(again[0].spread, importance[0].spread);
  // Largest drop first.
  std::vector<ColumnImportance> sorted = importance;
  std::swap(sorted[0], sorted[2]);
  runs::sort_by_drop(sorted);
  EXPECT_EQ(sorted[0].column, "a");
  EXPECT_EQ(runs::importance_json(importance)[0]["column"], "a");
}

TEST(PermutationImportance, AColumnsInputsMoveTogether) {
  Fixture f = make_fixture();
  const std::size_t width = 12, n = 200;
  // Every row the model sees holds, in inputs 1..10, the date block of one
  // original row whole (and the other inputs are either its own or, for
  // the shuffled column, another row's).
  std::size_t calls = 0;
  auto predict = [&](const std::vector<float>& x) {
    ++calls;
    for (std::size_t i = 0; i < n; ++i) {
      bool found = false;
      for (std::size_t j = 0; j < n && !found; ++j)
        found = std::equal(x.begin() + long(i * width + 1), x.begin() + long(i * width + 11),
                           f.x.begin() + long(j * width + 1));
      EXPECT_TRUE(found) << "row " << i << " mixes date inputs of several rows";
    }
    return std::vector<float>(n, 0.0f);
  };
  ImportanceOptions options;
  options.repeats = 2;
  runs::permutation_importance(f.features, f.labels, LossKind::kMeanSquaredError, f.x, f.y, predict, options);
  EXPECT_EQ(calls, 1u + 3 * 2);  // the baseline, then 2 shuffles of each of 3 columns
}

// Under a time budget: all the repeats when the time left holds them, none
// (an empty result) when none is left; the repeats that ran are reported.
TEST(PermutationImportance, ATimeBudgetCutsTheRepeats) {
  Fixture f = make_fixture();
  std::size_t calls = 0;
  auto predict = [&](const std::vector<float>& x) {
    ++calls;
    return std::vector<float>(x.size() / 12, 0.0f);
  };
  ImportanceOptions options;
  options.repeats = 3;
  options.seconds = 1e9;
  int repeats = -1;
  double baseline = -1;
  EXPECT_EQ(runs::permutation_importance(f.features, f.labels, LossKind::kMeanSquaredError, f.x, f.y, predict, options,
                                         &baseline, &repeats)
                .size(),
            3u);
  EXPECT_EQ(repeats, 3);
  EXPECT_EQ(calls, 1u + 3 * 3);
  calls = 0;
  options.seconds = 0;
  EXPECT_TRUE(runs::permutation_importance(f.features, f.labels, LossKind::kMeanSquaredError, f.x, f.y, predict,
                                           options, &baseline, &repeats)
                  .empty());
  EXPECT_EQ(repeats, 0);
  EXPECT_EQ(calls, 1u) << "only the baseline: its score is still reported";
  EXPECT_NE(baseline, -1);
}

}  // namespace
}  // namespace anneal
