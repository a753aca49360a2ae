// A binary classifier's decision threshold (anneal/model_metrics.h):
// chosen for the metric asked, 0.5 kept unless another is strictly better,
// and applied by classification_metrics.
#include <gtest/gtest.h>

#include "anneal/error.h"
#include "anneal/model_metrics.h"

namespace anneal {
namespace {

// Eight negatives and two positives whose P(1) is below 0.5 but above
// every negative's: at 0.5 nothing is called positive.
const std::vector<float> kP1 = {0.05f, 0.1f, 0.1f, 0.15f, 0.2f, 0.22f, 0.25f, 0.3f, 0.35f, 0.4f};
const std::vector<float> kY = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1};

TEST(DecisionThreshold, SeparatesTheRareClassForBalancedAccuracy) {
  const ThresholdChoice c = choose_threshold(kP1, kY, ThresholdMetric::kBalancedAccuracy);
  EXPECT_DOUBLE_EQ(c.score_at_half, 0.5);
  EXPECT_DOUBLE_EQ(c.score, 1.0);
  EXPECT_GT(c.threshold, 0.3);
  EXPECT_LT(c.threshold, 0.35);
  EXPECT_EQ(static_cast<double>(static_cast<float>(c.threshold)), c.threshold) << "a float value";
  // classification_metrics applies it: every row right.
  std::vector<float> probs;
  for (float p : kP1) probs.insert(probs.end(), {1 - p, p});
  EXPECT_DOUBLE_EQ(classification_metrics(probs, kY, 2, c.threshold).balanced_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(classification_metrics(probs, kY, 2).balanced_accuracy, 0.5) << "no threshold: the arg max";
  EXPECT_DOUBLE_EQ(classification_metrics(probs, kY, 2, 0.5).accuracy, 0.8);
}

TEST(DecisionThreshold, KeepsHalfUnlessStrictlyBetterAndChecksItsInput) {
  // Already separated at 0.5: nothing better to find.
  const std::vector<float> p = {0.1f, 0.2f, 0.7f, 0.9f};
  const std::vector<float> y = {0, 0, 1, 1};
  for (ThresholdMetric m : {ThresholdMetric::kAccuracy, ThresholdMetric::kBalancedAccuracy, ThresholdMetric::kF1}) {
    const ThresholdChoice c = choose_threshold(p, y, m);
    EXPECT_EQ(c.threshold, 0.5) << threshold_metric_name(m);
    EXPECT_DOUBLE_EQ(c.score, 1.0);
  }
  // Accuracy on the imbalanced rows: calling both positives gains two rows
  // of ten, 0.2, within 1/sqrt(10) of chance: 0.5 stays. Twenty copies of
  // the rows make the same gain real.
  const ThresholdChoice few = choose_threshold(kP1, kY, ThresholdMetric::kAccuracy);
  EXPECT_EQ(few.threshold, 0.5);
  EXPECT_DOUBLE_EQ(few.score, 0.8);
  std::vector<float> many_p, many_y;
  for (int copy = 0; copy < 20; ++copy) {
    many_p.insert(many_p.end(), kP1.begin(), kP1.end());
    many_y.insert(many_y.end(), kY.begin(), kY.end());
  }
  const ThresholdChoice many = choose_threshold(many_p, many_y, ThresholdMetric::kAccuracy);
  EXPECT_DOUBLE_EQ(many.score, 1.0);
  EXPECT_LT(many.threshold, 0.35);
  EXPECT_EQ(choose_threshold({}, {}, ThresholdMetric::kAccuracy).threshold, 0.5);
  EXPECT_THROW(choose_threshold(p, std::vector<float>{0, 1}, ThresholdMetric::kAccuracy), Error);
  EXPECT_THROW(choose_threshold(p, std::vector<float>{0, 2, 1, 1}, ThresholdMetric::kAccuracy), Error);
  EXPECT_EQ(parse_threshold_metric("balanced_accuracy"), ThresholdMetric::kBalancedAccuracy);
  EXPECT_THROW(parse_threshold_metric("recall"), Error);
  for (ThresholdMetric m : {ThresholdMetric::kAuto, ThresholdMetric::kAccuracy, ThresholdMetric::kBalancedAccuracy,
                            ThresholdMetric::kF1, ThresholdMetric::kNone})
    EXPECT_EQ(parse_threshold_metric(threshold_metric_name(m)), m);
}

}  // namespace
}  // namespace anneal
