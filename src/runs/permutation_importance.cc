#include "runs/permutation_importance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "anneal/model_metrics.h"
#include "anneal/scoring.h"

namespace anneal::runs {

RowSample::RowSample(std::uint64_t capacity, std::size_t width, std::uint64_t seed)
    : capacity_(capacity), width_(width), rng_(seed) {}

void RowSample::offer(std::span<const float> x, std::span<const float> y) {
  for (std::size_t i = 0; i < y.size(); ++i, ++seen_) {
    const float* row = x.data() + i * width_;
    if (seen_ < capacity_) {
      x_.insert(x_.end(), row, row + width_);
      y_.push_back(y[i]);
      continue;
    }
    // Row seen_ (0-based) replaces a kept one with probability capacity/(seen_+1).
    const std::uint64_t slot = rng_() % (seen_ + 1);
    if (slot < capacity_) {
      std::copy(row, row + width_, x_.begin() + static_cast<std::ptrdiff_t>(slot * width_));
      y_[slot] = y[i];
    }
  }
}

double importance_score(const LabelEncoding& labels, LossKind head, std::span<const float> predictions,
                        std::span<const float> y) {
  if (y.empty()) return 0;
  if (labels.classification()) {
    const std::vector<float> p = class_probabilities(head, predictions);
    const std::size_t k = p.size() / y.size();
    std::uint64_t right = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float* row = p.data() + i * k;
      if (static_cast<float>(std::max_element(row, row + k) - row) == y[i]) ++right;
    }
    return static_cast<double>(right) / static_cast<double>(y.size());
  }
  std::vector<double> predicted(y.size()), target(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    predicted[i] = labels.decode_value(predictions[i]);
    target[i] = labels.decode_value(y[i]);
  }
  return regression_metrics(predicted, target).r2;
}

std::vector<ColumnImportance> permutation_importance(
    const FeatureTransform& features, const LabelEncoding& labels, LossKind head, const std::vector<float>& x,
    const std::vector<float>& y, const std::function<std::vector<float>(const std::vector<float>&)>& predict,
    const ImportanceOptions& options, double* baseline, int* repeats) {
  const std::size_t n = y.size();
  const auto width = static_cast<std::size_t>(features.output_width());
  const auto start = std::chrono::steady_clock::now();
  const double base = importance_score(labels, head, predict(x), y);
  if (baseline) *baseline = base;
  int rounds = options.repeats;
  if (options.seconds) {
    // Each column and repeat predicts the rows once more, as the baseline did.
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double per_repeat = once * static_cast<double>(features.columns().size());
    const double fit = *options.seconds <= 0 ? 0 : per_repeat > 0 ? std::floor(*options.seconds / per_repeat) : rounds;
    rounds = static_cast<int>(std::clamp(fit, 0.0, static_cast<double>(rounds)));
  }
  if (repeats) *repeats = rounds;
  if (rounds == 0) return {};
  std::mt19937_64 rng(options.seed);
  std::vector<ColumnImportance> out;
  std::vector<float> shuffled;
  std::vector<std::size_t> order(n);
  std::size_t first = 0;  // the column's first input
  for (const ColumnTransform& column : features.columns()) {
    const auto span = static_cast<std::size_t>(column.output_width());
    std::vector<double> drops;
    for (int r = 0; r < rounds; ++r) {
      // Fisher-Yates with the portable engine (std::shuffle's use of it
      // differs between standard libraries).
      std::iota(order.begin(), order.end(), std::size_t{0});
      for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
      shuffled = x;
      for (std::size_t i = 0; i < n; ++i)
        std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(order[i] * width + first), span,
                    shuffled.begin() + static_cast<std::ptrdiff_t>(i * width + first));
      drops.push_back(base - importance_score(labels, head, predict(shuffled), y));
    }
    ColumnImportance c;
    c.column = column.column;
    const double count = static_cast<double>(drops.size());
    c.drop = drops.empty() ? 0 : std::accumulate(drops.begin(), drops.end(), 0.0) / count;
    double square = 0;
    for (double d : drops) square += (d - c.drop) * (d - c.drop);
    c.spread = drops.size() > 1 ? std::sqrt(square / (count - 1)) : 0;
    out.push_back(std::move(c));
    first += span;
  }
  return out;
}

void sort_by_drop(std::vector<ColumnImportance>& importance) {
  std::stable_sort(importance.begin(), importance.end(),
                   [](const ColumnImportance& a, const ColumnImportance& b) { return a.drop > b.drop; });
}

nlohmann::json importance_json(std::vector<ColumnImportance> importance) {
  sort_by_drop(importance);
  nlohmann::json out = nlohmann::json::array();
  for (const ColumnImportance& c : importance)
    out.push_back({{"column", c.column}, {"drop", c.drop}, {"spread", c.spread}});
  return out;
}

}  // namespace anneal::runs
