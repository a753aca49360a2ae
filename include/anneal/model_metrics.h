// Model scoring metrics: how well predictions match labels (accuracy, F1,
// ROC AUC, RMSE, ...), as eval, training and the gates report them. Not the
// Prometheus metrics of the store (prometheus_metrics() in jobs.h). Pure
// functions of their inputs; thread-safe; throw anneal::Error kBadData when
// sizes disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace anneal {

struct ClassificationMetrics {
  std::uint64_t rows = 0;
  double accuracy = 0;
  // Macro averages over the classes: a class with no true and no predicted
  // rows is left out of the average; 0/0 precision or recall counts as 0.
  double macro_precision = 0, macro_recall = 0, macro_f1 = 0;
  // The mean recall over the classes that have rows (support > 0): what
  // accuracy would be on a balanced set, so a 95/5 split cannot score 0.95
  // by always answering the majority class.
  double balanced_accuracy = 0;
  // Per class (index = class): rows whose true class it is, and its
  // precision and recall (0 when undefined, 0/0).
  std::vector<std::uint64_t> support;
  std::vector<double> precision, recall;
  std::vector<std::vector<std::uint64_t>> confusion;  // [true][predicted]
  std::optional<double> roc_auc;                      // two classes only
  // The expected calibration error of the probabilities: 15 equal-width
  // bins of each row's top-class probability (the arg max, whatever the
  // threshold), averaging |accuracy - confidence| weighted by rows
  // (anneal/calibration.h). JSON "ece".
  double ece = 0;
  nlohmann::json to_json() const;
  // {"CLASS": {"recall": r, "precision": p, "support": n}, ...} keyed by
  // `class_names` (one per class).
  nlohmann::json per_class_json(const std::vector<std::string>& class_names) const;
};

// `probabilities` is rows x classes (each row a distribution), `labels` the
// true class indices. The predicted class is the arg max (the first on
// ties). ROC AUC (binary) ranks rows by P(class 1), ties counted as half.
// With `threshold` (two classes only; ignored otherwise) the predicted
// class is 1 when P(class 1) > threshold, else 0: a binary model's decision
// threshold (0.5 gives the arg max).
ClassificationMetrics classification_metrics(std::span<const float> probabilities,
                                             std::span<const float> labels, std::int64_t classes,
                                             std::optional<double> threshold = std::nullopt);

// What a binary classifier's decision threshold is chosen for
// (threshold_metric): auto (balanced accuracy when the majority class
// holds more than 80% of the training rows, else accuracy), accuracy,
// balanced accuracy, F1 of class 1, or none (no threshold: the arg max).
enum class ThresholdMetric : std::uint8_t { kAuto, kAccuracy, kBalancedAccuracy, kF1, kNone };
// "auto" | "accuracy" | "balanced_accuracy" | "f1" | "none"; kUsage otherwise.
ThresholdMetric parse_threshold_metric(std::string_view name);
const char* threshold_metric_name(ThresholdMetric metric);

struct ThresholdChoice {
  double threshold = 0.5;
  double score = 0;          // the metric at `threshold`
  double score_at_half = 0;  // the metric at 0.5 (the arg max)
};
// The threshold t that maximizes `metric` (not kAuto or kNone) when class 1
// is predicted for P(class 1) > t, over the rows' P(class 1) `p1` and
// labels (0 or 1). The candidates are 0.5 and the midpoints between
// successive distinct values of p1 (and one below the least), each a float
// value strictly below the higher of its two values (so a float32
// comparison decides as this one does); among
// equally good ones the one nearest 0.5 wins. 0.5 is kept unless the best
// beats it by more than 1/sqrt(rows) (about two standard errors of a
// proportion on those rows), so a few validation rows do not move it by
// chance. kBadData for sizes that disagree or a label
// other than 0 and 1; no rows: 0.5.
ThresholdChoice choose_threshold(std::span<const float> p1, std::span<const float> labels, ThresholdMetric metric);

struct RegressionMetrics {
  std::uint64_t rows = 0;
  double rmse = 0, mae = 0;
  double r2 = 0;  // 1 - SS_res / SS_tot; 0 when the target is constant
  nlohmann::json to_json() const;
};
RegressionMetrics regression_metrics(std::span<const double> predictions, std::span<const double> targets);

}  // namespace anneal
