// Preprocessing, metrics and the linear model on small hand-made data whose
// right answers are known.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "anneal/error.h"
#include "anneal/linear.h"
#include "anneal/model_metrics.h"
#include "anneal/preprocess.h"
#include "test_util.h"

namespace anneal {
namespace {

const float kNaN = std::nanf("");

using test::column;

// Columns: x (numeric), color (categorical: red, green, blue), label.
Table small_table() {
  Table t;
  ColumnSchema x = column("x");
  ColumnSchema color = column("color", ColumnType::kCategorical);
  color.categories = {"red", "green", "blue"};
  ColumnSchema label = column("label");
  t.columns = {x, color, label};
  t.label_column = 2;
  t.sample_shape = {2};
  t.features = {1, 0, 3, 1, kNaN, 2, 5, kNaN};
  t.labels = {10, 20, 10, 30};
  t.rows = 4;
  return t;
}

TEST(RunsPreprocess, StandardizesOneHotEncodesAndImputes) {
  Table t = small_table();
  std::vector<std::uint32_t> rows = {0, 1, 3};  // fitted on these rows only
  FeatureOptions every_level;
  every_level.category_min_count = 1;  // each level seen once is its own slot
  FeatureTransform f = FeatureTransform::fit(t, rows, every_level);
  EXPECT_EQ(f.input_width(), 2);
  // x, then red and green: blue is in no training row and gets no slot.
  EXPECT_EQ(f.output_width(), 3);
  EXPECT_EQ(f.output_shape(), (std::vector<std::int64_t>{3}));
  // x over rows 0, 1, 3: 1, 3, 5 -> mean 3, population sd sqrt(8/3).
  EXPECT_DOUBLE_EQ(f.columns()[0].mean, 3.0);
  EXPECT_DOUBLE_EQ(f.columns()[0].scale, std::sqrt(8.0 / 3.0));
  TransformCounts counts;
  std::vector<float> out = f.apply(std::vector<float>{5, 1, kNaN, kNaN, 3, 7, 3, 2}, counts);
  const float z = static_cast<float>(2 / std::sqrt(8.0 / 3.0));
  std::vector<float> want = {z, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(out.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(out[i], want[i]) << i;
  EXPECT_EQ(counts.missing, 2u);  // a NaN number and a NaN category
  EXPECT_EQ(counts.unseen, 2u);   // code 7 is past the dictionary; blue (2) was in no training row
  FeatureTransform back = FeatureTransform::from_json(f.to_json());
  TransformCounts again;
  EXPECT_EQ(back.apply(std::vector<float>{5, 1, kNaN, kNaN, 3, 7, 3, 2}, again), out);
}

TEST(RunsPreprocess, ImageColumnsKeepTheirShape) {
  Table t;
  ColumnSchema image = column("image");
  image.shape = {1, 2, 2};
  t.columns = {image, column("label")};
  t.label_column = 1;
  t.sample_shape = {1, 2, 2};
  t.features = {0, 0, 2, 2, 4, 4, 6, 6};
  t.labels = {0, 1};
  t.rows = 2;
  std::vector<std::uint32_t> rows = {0, 1};
  FeatureTransform f = FeatureTransform::fit(t, rows);
  EXPECT_EQ(f.output_shape(), (std::vector<std::int64_t>{1, 2, 2}));
  EXPECT_DOUBLE_EQ(f.columns()[0].mean, 3.0);  // one mean for the whole image column
}

TEST(RunsPreprocess, IntegerLabelsBecomeSortedClasses) {
  Table t = small_table();
  Table test = t;
  test.labels = {40};
  LabelEncoding e = LabelEncoding::fit(LossKind::kSoftmaxCrossEntropy, t, test);
  EXPECT_EQ(e.classes(), 4);
  EXPECT_EQ(e.class_names(), (std::vector<std::string>{"10", "20", "30", "40"}));
  EXPECT_EQ(e.encode(30, "row"), 2.0f);
  EXPECT_THROW(e.encode(25, "row"), Error);
  EXPECT_EQ(LabelEncoding::infer_loss(t), LossKind::kSoftmaxCrossEntropy);
  LabelEncoding back = LabelEncoding::from_json(e.to_json());
  EXPECT_EQ(back.encode(40, "row"), 3.0f);
  EXPECT_THROW(LabelEncoding::fit(LossKind::kBinaryCrossEntropy, t, test), Error);
  LabelEncoding r = LabelEncoding::fit(LossKind::kMeanSquaredError, t, test);
  EXPECT_FALSE(r.classification());
  EXPECT_NEAR(r.decode_value(r.encode(30, "row")), 30.0, 1e-5);
  t.labels[0] = 10.5f;
  EXPECT_EQ(LabelEncoding::infer_loss(t), LossKind::kMeanSquaredError);
  EXPECT_THROW(LabelEncoding::fit(LossKind::kSoftmaxCrossEntropy, t, test), Error);
}

TEST(RunsPreprocess, ValidationSplitIsStratifiedAndDeterministic) {
  std::vector<float> groups;
  for (int i = 0; i < 1000; ++i) groups.push_back(static_cast<float>(i % 4));
  std::vector<std::uint32_t> train, val, train2, val2;
  validation_split(groups, true, 0.1, 7, train, val);
  validation_split(groups, true, 0.1, 7, train2, val2);
  EXPECT_EQ(val, val2);
  EXPECT_EQ(val.size(), 100u);
  EXPECT_EQ(train.size() + val.size(), 1000u);
  int per_class[4] = {};
  for (auto r : val) ++per_class[r % 4];
  for (int c : per_class) EXPECT_EQ(c, 25);
  validation_split(groups, true, 0.1, 8, train2, val2);
  EXPECT_NE(val, val2);  // the seed moves the split
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end()));
}

TEST(RunsMetrics, ClassificationByHand) {
  // 3 classes; predictions as one-hot rows.
  std::vector<float> labels = {0, 0, 1, 1, 2, 2};
  std::vector<int> predicted = {0, 1, 1, 1, 2, 0};
  std::vector<float> probs;
  for (int p : predicted)
    for (int k = 0; k < 3; ++k) probs.push_back(k == p ? 0.9f : 0.05f);
  ClassificationMetrics m = classification_metrics(probs, labels, 3);
  EXPECT_DOUBLE_EQ(m.accuracy, 4.0 / 6.0);
  EXPECT_EQ(m.confusion[0][1], 1u);
  EXPECT_EQ(m.confusion[2][0], 1u);
  // precision: 1/2, 2/3, 1; recall: 1/2, 1, 1/2.
  EXPECT_NEAR(m.macro_precision, (0.5 + 2.0 / 3 + 1) / 3, 1e-12);
  EXPECT_NEAR(m.macro_recall, (0.5 + 1 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(m.macro_f1, (0.5 + 0.8 + 2.0 / 3) / 3, 1e-12);
  EXPECT_FALSE(m.roc_auc);
}

TEST(RunsMetrics, RocAucCountsTiesAsHalf) {
  std::vector<float> labels = {0, 0, 1, 1};
  std::vector<float> p1 = {0.1f, 0.4f, 0.35f, 0.8f};
  std::vector<float> probs;
  for (float p : p1) {
    probs.push_back(1 - p);
    probs.push_back(p);
  }
  EXPECT_DOUBLE_EQ(*classification_metrics(probs, labels, 2).roc_auc, 0.75);
  std::vector<float> tied(8, 0.5f);
  EXPECT_DOUBLE_EQ(*classification_metrics(tied, labels, 2).roc_auc, 0.5);
}

TEST(RunsMetrics, Regression) {
  std::vector<double> pred = {1, 2, 3, 5}, truth = {1, 2, 3, 4};
  RegressionMetrics m = regression_metrics(pred, truth);
  EXPECT_DOUBLE_EQ(m.rmse, 0.5);
  EXPECT_DOUBLE_EQ(m.mae, 0.25);
  EXPECT_DOUBLE_EQ(m.r2, 1 - 1.0 / 5.0);
  EXPECT_THROW(regression_metrics(pred, std::vector<double>{1}), Error);
}

TEST(RunsLinear, RidgeMatchesTheNormalEquations) {
  // y = 2 x0 - 3 x1 + 1 exactly; with l2 = 0 ridge recovers it.
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  std::vector<float> x, y;
  for (int i = 0; i < 50; ++i) {
    float a = n(rng), b = n(rng);
    x.insert(x.end(), {a, b});
    y.push_back(2 * a - 3 * b + 1);
  }
  LinearModel m = fit_ridge(x, y, 2, 0.0);
  EXPECT_NEAR(m.weights[0], 2, 1e-5);
  EXPECT_NEAR(m.weights[1], -3, 1e-5);
  EXPECT_NEAR(m.weights[2], 1, 1e-5);
  // A penalty shrinks the slopes, not the intercept's role.
  LinearModel shrunk = fit_ridge(x, y, 2, 50.0);
  EXPECT_LT(std::abs(shrunk.weights[0]), 2.0);
  EXPECT_EQ(LinearModel::from_json(m.to_json()).weights, m.weights);
}

TEST(RunsLinear, LogisticSeparatesThreeBlobs) {
  std::mt19937 rng(2);
  std::normal_distribution<float> n(0, 0.5f);
  const float centres[3][2] = {{0, 0}, {4, 0}, {0, 4}};
  std::vector<float> x, y;
  for (int i = 0; i < 300; ++i) {
    int c = i % 3;
    x.insert(x.end(), {centres[c][0] + n(rng), centres[c][1] + n(rng)});
    y.push_back(static_cast<float>(c));
  }
  LinearModel m = fit_logistic(x, y, 2, 3, 1.0);
  ClassificationMetrics metrics = classification_metrics(m.predict(x), y, 3);
  EXPECT_GT(metrics.accuracy, 0.97);
  EXPECT_LT(m.iterations, 50);
  std::vector<float> probs = m.predict(std::vector<float>{4, 0});
  EXPECT_GT(probs[1], 0.9f);
  EXPECT_NEAR(probs[0] + probs[1] + probs[2], 1.0f, 1e-5f);
  // Binary: one logistic output, two probability columns.
  std::vector<float> yb;
  for (float v : y) yb.push_back(v == 1 ? 1.0f : 0.0f);
  LinearModel b = fit_logistic(x, yb, 2, 2, 1.0);
  EXPECT_EQ(b.weights.size(), 3u);
  EXPECT_GT(classification_metrics(b.predict(x), yb, 2).accuracy, 0.97);
}

}  // namespace
}  // namespace anneal
