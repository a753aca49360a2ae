// Temperature calibration and the expected calibration error
// (anneal/calibration.h): the fit finds the temperature the labels were
// drawn with, stops at its bounds on separable rows, refuses bad input;
// applying a temperature is softmax(z / T) and keeps the arg max; ECE is
// the documented 15-bin sum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "anneal/calibration.h"
#include "anneal/error.h"
#include "anneal/model_metrics.h"

namespace anneal::runs {
namespace {

std::vector<double> softmax(const std::vector<double>& z, double t) {
  double top = z[0];
  for (double v : z) top = std::max(top, v);
  std::vector<double> e(z.size());
  double sum = 0;
  for (std::size_t i = 0; i < z.size(); ++i) sum += (e[i] = std::exp((z[i] - top) / t));
  for (double& v : e) v /= sum;
  return e;
}

// `rows` rows of `k` logits drawn N(0, 3²) whose labels are drawn from
// softmax(z / truth): a model that reports softmax(z) is overconfident by
// the factor `truth`. Returns the probabilities softmax(z) and the labels.
void overconfident(std::size_t rows, std::size_t k, double truth, std::vector<float>& p, std::vector<float>& y) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> logit(0, 3);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> z(k);
    for (double& v : z) v = logit(rng);
    const std::vector<double> draw = softmax(z, truth), reported = softmax(z, 1);
    double at = u(rng), sum = 0;
    std::size_t label = k - 1;
    for (std::size_t c = 0; c < k; ++c)
      if (at < (sum += draw[c])) {
        label = c;
        break;
      }
    y.push_back(static_cast<float>(label));
    for (double v : reported) p.push_back(static_cast<float>(v));
  }
}

TEST(Calibration, FitFindsTheTemperatureTheLabelsWereDrawnWith) {
  std::vector<float> p, y;
  overconfident(20000, 4, 2.0, p, y);
  const TemperatureFit fit = fit_temperature(LossKind::kSoftmaxCrossEntropy, 4, p, y);
  // 20000 rows: the maximum-likelihood T is within a few percent of 2.
  EXPECT_NEAR(fit.temperature, 2.0, 0.1);
  EXPECT_LT(fit.nll_after, fit.nll_before);
  EXPECT_GT(fit.iterations, 0);
  // The same input, the same bits.
  EXPECT_EQ(fit_temperature(LossKind::kSoftmaxCrossEntropy, 4, p, y).temperature, fit.temperature);
  // ECE falls once the temperature is applied, and the arg max stays.
  std::vector<float> calibrated = p;
  apply_temperature(LossKind::kSoftmaxCrossEntropy, 4, fit.temperature, calibrated);
  const double before = expected_calibration_error(reliability_bins(p, y, 4));
  const double after = expected_calibration_error(reliability_bins(calibrated, y, 4));
  EXPECT_GT(before, 0.1);
  EXPECT_LT(after, 0.02);
  for (std::size_t r = 0; r < y.size(); ++r) {
    const auto argmax = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + 4 * r, v.begin() + 4 * r + 4) - v.begin();
    };
    ASSERT_EQ(argmax(p), argmax(calibrated)) << "row " << r;
  }
}

TEST(Calibration, BinaryFitOnP1IsTheSigmoidOfLogitOverT) {
  // bce predictions: P(1) only; labels drawn from sigmoid(z / 3).
  std::mt19937_64 rng(7);
  std::normal_distribution<double> logit(0, 4);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> p1, y;
  for (int r = 0; r < 20000; ++r) {
    const double z = logit(rng);
    y.push_back(u(rng) < 1 / (1 + std::exp(-z / 3)) ? 1.0f : 0.0f);
    p1.push_back(static_cast<float>(1 / (1 + std::exp(-z))));
  }
  const TemperatureFit fit = fit_temperature(LossKind::kBinaryCrossEntropy, 2, p1, y);
  EXPECT_NEAR(fit.temperature, 3.0, 0.2);
  std::vector<float> q = {0.9f, 0.5f, 0.2f};
  apply_temperature(LossKind::kBinaryCrossEntropy, 2, 2.0, q);
  for (std::size_t i = 0; i < q.size(); ++i) {
    const double p = std::vector<double>{0.9, 0.5, 0.2}[i];
    const double z = std::log(p / (1 - p));
    EXPECT_NEAR(q[i], 1 / (1 + std::exp(-z / 2)), 1e-6) << i;
  }
}

TEST(Calibration, ApplyIsSoftmaxOfLogitsOverTAndOneKeepsTheBits) {
  const std::vector<double> z = {2.0, -1.0, 0.5};
  const std::vector<double> p = softmax(z, 1), want = softmax(z, 1.7);
  std::vector<float> q(p.begin(), p.end());
  apply_temperature(LossKind::kSoftmaxCrossEntropy, 3, 1.7, q);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(q[i], want[i], 1e-6) << i;
  std::vector<float> same(p.begin(), p.end());
  const std::vector<float> original = same;
  apply_temperature(LossKind::kSoftmaxCrossEntropy, 3, 1.0, same);
  EXPECT_EQ(same, original);
  // A probability rounded to 0 is floored, not -inf: the row stays a distribution.
  std::vector<float> saturated = {1.0f, 0.0f};
  apply_temperature(LossKind::kSoftmaxCrossEntropy, 2, 4.0, saturated);
  EXPECT_TRUE(std::isfinite(saturated[1]));
  EXPECT_NEAR(saturated[0] + saturated[1], 1.0, 1e-6);
  EXPECT_GT(saturated[0], saturated[1]);
}

TEST(Calibration, SeparableRowsStopAtTheBound) {
  // Every row right and confident: the likelihood only grows as T shrinks.
  const std::vector<float> p = {0.9f, 0.1f, 0.2f, 0.8f, 0.7f, 0.3f};
  const std::vector<float> y = {0, 1, 0};
  const TemperatureFit fit = fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, p, y);
  EXPECT_TRUE(std::isfinite(fit.temperature));
  EXPECT_EQ(fit.temperature, kMinTemperature);
  EXPECT_LE(fit.nll_after, fit.nll_before);
  // Every row wrong: the other bound.
  const std::vector<float> wrong = {1, 0, 1};
  EXPECT_EQ(fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, p, wrong).temperature, kMaxTemperature);
}

TEST(Calibration, BadInputIsRefused) {
  const std::vector<float> p = {0.9f, 0.1f, 0.2f, 0.8f};
  auto bad_data = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind() == ErrorKind::kBadData;
    }
    return false;
  };
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, {}, std::vector<float>{}); }));
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, p, std::vector<float>{0}); }));
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, p, std::vector<float>{0, 2}); }));
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, p, std::vector<float>{0, 0.5f}); }));
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 3, p, std::vector<float>{0}); }));
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kMeanSquaredError, 1, p, std::vector<float>{0, 0, 0, 0}); }));
  const std::vector<float> nan = {NAN, 0.5f, 0.2f, 0.8f};
  EXPECT_TRUE(bad_data([&] { fit_temperature(LossKind::kSoftmaxCrossEntropy, 2, nan, std::vector<float>{0, 1}); }));
  std::vector<float> q = p;
  EXPECT_TRUE(bad_data([&] { apply_temperature(LossKind::kSoftmaxCrossEntropy, 2, 0.0, q); }));
  EXPECT_TRUE(bad_data([&] { apply_temperature(LossKind::kSoftmaxCrossEntropy, 2, -1.0, q); }));
  EXPECT_TRUE(bad_data([&] { apply_temperature(LossKind::kSoftmaxCrossEntropy, 2, NAN, q); }));
  EXPECT_TRUE(bad_data([&] { apply_temperature(LossKind::kSoftmaxCrossEntropy, 3, 2.0, q); }));
  EXPECT_EQ(q, p);
  EXPECT_EQ(parse_calibrate_mode("temperature"), CalibrateMode::kTemperature);
  for (CalibrateMode m : {CalibrateMode::kAuto, CalibrateMode::kNone, CalibrateMode::kTemperature})
    EXPECT_EQ(parse_calibrate_mode(calibrate_mode_name(m)), m);
  EXPECT_THROW(parse_calibrate_mode("platt"), Error);
}

TEST(Calibration, ExpectedCalibrationErrorIsTheBinnedGap) {
  // Four rows: two at confidence 0.95 (one right), two at 0.6 (both right).
  const std::vector<float> p = {0.95f, 0.05f, 0.05f, 0.95f, 0.6f, 0.4f, 0.4f, 0.6f};
  const std::vector<float> y = {0, 0, 0, 1};
  const std::vector<ReliabilityBin> bins = reliability_bins(p, y, 2);
  ASSERT_EQ(bins.size(), 15u);
  EXPECT_EQ(bins[14].rows, 2u);  // 0.95 * 15 = 14.25
  EXPECT_NEAR(bins[14].accuracy, 0.5, 1e-12);
  EXPECT_EQ(bins[9].rows, 2u);  // 0.6 * 15 = 9
  EXPECT_NEAR(bins[9].accuracy, 1.0, 1e-12);
  EXPECT_NEAR(expected_calibration_error(bins), 0.5 * 0.45 + 0.5 * 0.4, 1e-6);
  EXPECT_NEAR(classification_metrics(p, y, 2).ece, 0.5 * 0.45 + 0.5 * 0.4, 1e-6);
  // A confidence of exactly 1 is in the last bin.
  EXPECT_EQ(reliability_bins(std::vector<float>{1.0f, 0.0f}, std::vector<float>{0}, 2)[14].rows, 1u);
  EXPECT_EQ(expected_calibration_error(reliability_bins({}, {}, 2)), 0.0);
  EXPECT_THROW(reliability_bins(p, y, 3), Error);
}

}  // namespace
}  // namespace anneal::runs
