// Calibrated class probabilities: temperature scaling of a classifier's
// probabilities, fitted on validation rows, and the expected calibration
// error that measures how far a model's confidence is from its accuracy
// (docs/TRAINING.md, "Calibration"). Defined in src/runs/calibration.cc;
// public for the libraries built on src/runs and the tests. Pure functions
// of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/loss.h"

namespace anneal::runs {

// What a run does to its classifier's probabilities (config `calibrate`):
// auto (temperature for a network classifier with validation rows, else
// none), none, or temperature.
enum class CalibrateMode : std::uint8_t { kAuto, kNone, kTemperature };
// "auto" | "none" | "temperature"; kUsage otherwise.
CalibrateMode parse_calibrate_mode(std::string_view name);
const char* calibrate_mode_name(CalibrateMode mode);

// The temperatures a fit may choose and a model header may hold: a fit
// that wants a value outside (all-correct separable rows want T -> 0) stops
// at the bound, and a header outside is corrupt.
inline constexpr double kMinTemperature = 0.01;
inline constexpr double kMaxTemperature = 100.0;

// Whether `loss`'s predictions are class probabilities temperature scaling
// applies to: softmax_ce (rows x K) and bce (rows x 1, P(class 1)).
bool calibratable(LossKind loss);

// Rescales raw predictions (as a model's predictor gives them, read as
// `loss`, which must be calibratable: softmax_ce rows x `classes`, bce rows
// x 1) in place by `temperature` T: each
// row's class probabilities p (bce: 1 - P(1) and P(1), the former rounded
// to float as class_probabilities() does) become softmax(log(max(p, m)) / T)
// with m the least normal float, worked in double and rounded to float; bce
// keeps P(1). For probabilities that are a softmax of logits z this is
// softmax(z / T) (a sigmoid of logit / T for bce) up to the floor m, so
// the predicted class (the arg max) never changes. T = 1 leaves the bits
// as they are. A row holding a NaN stays as it is. kBadData when the
// predictions are not whole rows or T is not a finite number > 0.
void apply_temperature(LossKind loss, std::int64_t classes, double temperature, std::span<float> predictions);

struct TemperatureFit {
  double temperature = 1;   // in [kMinTemperature, kMaxTemperature]
  double nll_before = 0;    // mean negative log-likelihood at T = 1
  double nll_after = 0;     // ... at `temperature`
  int iterations = 0;
};
// The T that minimizes the mean negative log-likelihood of `labels` (class
// indices) under apply_temperature(loss, classes, T, predictions), over
// [kMinTemperature, kMaxTemperature]: the likelihood is convex in 1/T, so a
// safeguarded Newton iteration on 1/T (bisection in log 1/T when a step
// leaves the bracket) finds it, in double and deterministically (the rows
// summed in order). kBadData for no rows, sizes that disagree, a label that
// is not a class index, a prediction that is not finite, or a loss that is
// not calibratable.
TemperatureFit fit_temperature(LossKind loss, std::int64_t classes, std::span<const float> predictions,
                               std::span<const float> labels);

// The rows of one confidence bin of a reliability diagram.
struct ReliabilityBin {
  double lower = 0, upper = 0;  // the bin's confidence range: [lower, upper), the last [lower, 1]
  std::uint64_t rows = 0;
  double confidence = 0;        // mean top-class probability of its rows (0 without rows)
  double accuracy = 0;          // share of its rows whose top class is the true class
};
inline constexpr int kCalibrationBins = 15;
// The reliability diagram of `probabilities` (rows x classes, as
// class_probabilities() gives them) against `labels`: each row's
// confidence is its top-class probability (the arg max, the first on ties)
// and it is right when that class is its label; the rows fall in `bins`
// equal-width bins of [0, 1]. kBadData for sizes that disagree or bins < 1.
std::vector<ReliabilityBin> reliability_bins(std::span<const float> probabilities, std::span<const float> labels,
                                             std::int64_t classes, int bins = kCalibrationBins);
// The expected calibration error of those bins: sum over bins of
// rows/total * |accuracy - confidence|, in [0, 1]; 0 without rows.
double expected_calibration_error(const std::vector<ReliabilityBin>& bins);
// [{"lower", "upper", "rows", "confidence", "accuracy"}, ...]: what a run's
// summary keeps for its report's reliability diagram.
nlohmann::json reliability_json(const std::vector<ReliabilityBin>& bins);

}  // namespace anneal::runs
