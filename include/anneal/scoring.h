// Scoring a model's raw predictions against encoded labels, the same way
// for training, eval and derived models: metric names and class
// probabilities. Defined in src/runs/; public for the libraries built on it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/loss.h"
#include "anneal/preprocess.h"

namespace anneal::runs {

// Scores predictions (rows x outputs of a model with this loss) against
// encoded labels as "<prefix>_accuracy", "<prefix>_macro_f1",
// "<prefix>_balanced_accuracy" (mean per-class recall), "<prefix>_ece"
// (expected calibration error, ClassificationMetrics::ece), ... or
// "<prefix>_rmse", "<prefix>_mae", "<prefix>_r2" in the target's units.
// `threshold`: a binary model's decision threshold (classification_metrics),
// none for the arg max; the same for the two functions below.
nlohmann::json score(const std::string& prefix, LossKind loss, const LabelEncoding& labels,
                     std::span<const float> predictions, std::span<const float> encoded_labels,
                     std::optional<double> threshold = std::nullopt);

// Classification only: the per-class recall, precision and support of the
// same predictions, {"CLASS": {"recall", "precision", "support"}} keyed by
// the encoding's class names; an empty object for regression.
nlohmann::json score_per_class(LossKind loss, const LabelEncoding& labels, std::span<const float> predictions,
                               std::span<const float> encoded_labels, std::optional<double> threshold = std::nullopt);

// Classification only: the confusion matrix of the same predictions,
// {"classes": [NAME, ...], "matrix": [[count, ...], ...]} with one row per
// true class and one column per predicted class (the arg max); null for
// regression. Kept in a run's summary for its report (run_report.h).
nlohmann::json score_confusion(LossKind loss, const LabelEncoding& labels, std::span<const float> predictions,
                               std::span<const float> encoded_labels, std::optional<double> threshold = std::nullopt);

// rows x classes probabilities from a model's raw predictions (bce: P(1)).
std::vector<float> class_probabilities(LossKind loss, std::span<const float> predictions);

}  // namespace anneal::runs
