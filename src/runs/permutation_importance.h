// Permutation importance: how much a model's score drops when one source
// column's values are shuffled among the rows it is scored on (Breiman
// 2001; scikit-learn's permutation_importance). Internal to src/runs/.
//
// A source column is what the user sees: a categorical column's one-hot
// slots and a date's calendar features move together, as one column, since
// the row permutation is applied to every input the column became. The
// score is accuracy for classifiers and R² for regression (what `eval`
// reports first), so a drop reads in the units a user knows.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "anneal/preprocess.h"
#include "anneal/runs.h"

namespace anneal::runs {

// Up to `capacity` rows of a stream, each row of the stream equally likely
// to be kept (reservoir sampling, Vitter's algorithm R), chosen by `seed`
// alone: the same rows in the same stream give the same sample. Memory:
// capacity rows of `width` floats and their labels.
class RowSample {
 public:
  RowSample(std::uint64_t capacity, std::size_t width, std::uint64_t seed);
  // Offers rows x width features and their labels, in stream order.
  void offer(std::span<const float> x, std::span<const float> y);
  std::uint64_t rows() const { return static_cast<std::uint64_t>(y_.size()); }
  const std::vector<float>& x() const { return x_; }
  const std::vector<float>& y() const { return y_; }

 private:
  std::uint64_t capacity_;
  std::size_t width_;
  std::mt19937_64 rng_;  // the standard fixes its output sequence: portable
  std::uint64_t seen_ = 0;
  std::vector<float> x_, y_;
};

// The score permutation importance compares: accuracy (classification: the
// arg-max of class_probabilities(head, predictions) against `y`), else R²
// of the decoded values.
double importance_score(const LabelEncoding& labels, LossKind head, std::span<const float> predictions,
                        std::span<const float> y);

// Each of `features`' columns' importance over the rows `x` (rows x
// features.output_width()) with labels `y`, in column order: the baseline
// score minus the score with the column shuffled, mean and spread over
// `options.repeats` shuffles. `predict` maps rows of inputs to the model's
// predictions. Deterministic for a given options.seed, unless
// options.seconds cuts the repeats (ImportanceOptions); `*repeats` (when
// given) is set to the repeats that ran, and with none the result is
// empty. Throws what `predict` throws.
std::vector<ColumnImportance> permutation_importance(
    const FeatureTransform& features, const LabelEncoding& labels, LossKind head, const std::vector<float>& x,
    const std::vector<float>& y, const std::function<std::vector<float>(const std::vector<float>&)>& predict,
    const ImportanceOptions& options, double* baseline = nullptr, int* repeats = nullptr);

// The largest drop first, ties in the order given (column order).
void sort_by_drop(std::vector<ColumnImportance>& importance);
// [{"column", "drop", "spread"}], the largest drop first.
nlohmann::json importance_json(std::vector<ColumnImportance> importance);

}  // namespace anneal::runs
