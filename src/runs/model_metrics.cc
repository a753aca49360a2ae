#include "anneal/model_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "anneal/calibration.h"
#include "anneal/error.h"

namespace anneal {

ClassificationMetrics classification_metrics(std::span<const float> probabilities,
                                             std::span<const float> labels, std::int64_t classes,
                                             std::optional<double> threshold) {
  if (classes < 1 || probabilities.size() != labels.size() * static_cast<std::size_t>(classes))
    throw data_error("metrics: " + std::to_string(probabilities.size()) + " predictions for " +
                     std::to_string(labels.size()) + " rows of " + std::to_string(classes) + " classes");
  const auto k = static_cast<std::size_t>(classes);
  ClassificationMetrics m;
  m.rows = labels.size();
  m.confusion.assign(k, std::vector<std::uint64_t>(k, 0));
  std::uint64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* p = probabilities.data() + i * k;
    auto predicted = k == 2 && threshold ? static_cast<std::size_t>(p[1] > *threshold)
                                         : static_cast<std::size_t>(std::max_element(p, p + k) - p);
    auto truth = static_cast<std::size_t>(labels[i]);
    if (labels[i] < 0 || truth >= k) throw data_error("metrics: row " + std::to_string(i + 1) + " has label outside 0.." + std::to_string(k - 1));
    ++m.confusion[truth][predicted];
    correct += truth == predicted;
  }
  m.accuracy = m.rows ? static_cast<double>(correct) / static_cast<double>(m.rows) : 0.0;
  double sum_p = 0, sum_r = 0, sum_f = 0, sum_supported_recall = 0;
  std::size_t present = 0, supported = 0;
  m.support.assign(k, 0);
  m.precision.assign(k, 0.0);
  m.recall.assign(k, 0.0);
  for (std::size_t c = 0; c < k; ++c) {
    std::uint64_t tp = m.confusion[c][c], actual = 0, predicted = 0;
    for (std::size_t j = 0; j < k; ++j) {
      actual += m.confusion[c][j];
      predicted += m.confusion[j][c];
    }
    double precision = predicted ? static_cast<double>(tp) / static_cast<double>(predicted) : 0.0;
    double recall = actual ? static_cast<double>(tp) / static_cast<double>(actual) : 0.0;
    m.support[c] = actual;
    m.precision[c] = precision;
    m.recall[c] = recall;
    if (actual > 0) {
      ++supported;
      sum_supported_recall += recall;
    }
    if (actual == 0 && predicted == 0) continue;
    ++present;
    sum_p += precision;
    sum_r += recall;
    sum_f += precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
  }
  if (supported) m.balanced_accuracy = sum_supported_recall / static_cast<double>(supported);
  if (present) {
    m.macro_precision = sum_p / static_cast<double>(present);
    m.macro_recall = sum_r / static_cast<double>(present);
    m.macro_f1 = sum_f / static_cast<double>(present);
  }
  if (k == 2) {
    // Mann-Whitney U over the ranks of P(class 1); tied scores share their rank.
    std::vector<std::size_t> order(labels.size());
    std::iota(order.begin(), order.end(), 0);
    auto score = [&](std::size_t i) { return probabilities[i * 2 + 1]; };
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return score(a) < score(b); });
    double rank_sum = 0;
    std::uint64_t positives = 0;
    for (std::size_t i = 0; i < order.size();) {
      std::size_t j = i;
      while (j < order.size() && score(order[j]) == score(order[i])) ++j;
      double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
      for (std::size_t t = i; t < j; ++t)
        if (labels[order[t]] == 1.0f) {
          rank_sum += rank;
          ++positives;
        }
      i = j;
    }
    std::uint64_t negatives = labels.size() - positives;
    if (positives && negatives) {
      double p = static_cast<double>(positives), n = static_cast<double>(negatives);
      m.roc_auc = (rank_sum - p * (p + 1) / 2) / (p * n);
    }
  }
  m.ece = runs::expected_calibration_error(runs::reliability_bins(probabilities, labels, classes));
  return m;
}

ThresholdMetric parse_threshold_metric(std::string_view name) {
  if (name == "auto") return ThresholdMetric::kAuto;
  if (name == "accuracy") return ThresholdMetric::kAccuracy;
  if (name == "balanced_accuracy") return ThresholdMetric::kBalancedAccuracy;
  if (name == "f1") return ThresholdMetric::kF1;
  if (name == "none") return ThresholdMetric::kNone;
  throw usage_error("'" + std::string(name) + "': expected auto, accuracy, balanced_accuracy, f1 or none");
}

const char* threshold_metric_name(ThresholdMetric metric) {
  switch (metric) {
    case ThresholdMetric::kAuto: return "auto";
    case ThresholdMetric::kAccuracy: return "accuracy";
    case ThresholdMetric::kBalancedAccuracy: return "balanced_accuracy";
    case ThresholdMetric::kF1: return "f1";
    case ThresholdMetric::kNone: return "none";
  }
  return "none";
}

ThresholdChoice choose_threshold(std::span<const float> p1, std::span<const float> labels, ThresholdMetric metric) {
  if (p1.size() != labels.size())
    throw data_error("threshold: " + std::to_string(p1.size()) + " predictions for " + std::to_string(labels.size()) +
                     " rows");
  if (metric == ThresholdMetric::kAuto || metric == ThresholdMetric::kNone)
    throw std::invalid_argument("choose_threshold: resolve auto and none first");
  std::uint64_t positives = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f)
      throw data_error("threshold: row " + std::to_string(i + 1) + " has a label other than 0 and 1");
    positives += labels[i] == 1.0f;
  }
  const std::uint64_t negatives = labels.size() - positives;
  // The metric with `tp` of the positives and `fp` of the negatives above the threshold.
  auto value = [&](std::uint64_t tp, std::uint64_t fp) {
    const double n = static_cast<double>(labels.size());
    const double tn = static_cast<double>(negatives - fp), fn = static_cast<double>(positives - tp);
    switch (metric) {
      case ThresholdMetric::kAccuracy: return n > 0 ? (static_cast<double>(tp) + tn) / n : 0.0;
      case ThresholdMetric::kBalancedAccuracy: {
        double sum = 0;
        int present = 0;
        if (positives) sum += static_cast<double>(tp) / static_cast<double>(positives), ++present;
        if (negatives) sum += tn / static_cast<double>(negatives), ++present;
        return present ? sum / present : 0.0;
      }
      case ThresholdMetric::kF1: {
        const double d = 2 * static_cast<double>(tp) + static_cast<double>(fp) + fn;
        return d > 0 ? 2 * static_cast<double>(tp) / d : 0.0;
      }
      default: return 0.0;
    }
  };
  auto at = [&](double t) {
    std::uint64_t tp = 0, fp = 0;
    for (std::size_t i = 0; i < p1.size(); ++i)
      if (static_cast<double>(p1[i]) > t) (labels[i] == 1.0f ? tp : fp) += 1;
    return value(tp, fp);
  };
  ThresholdChoice best;
  best.score_at_half = best.score = at(0.5);
  if (p1.empty()) return best;
  // Sweep the distinct values from the highest down: after a value's rows,
  // every row at or above it is predicted 1.
  std::vector<std::size_t> order(p1.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p1[a] > p1[b]; });
  std::uint64_t tp = 0, fp = 0;
  for (std::size_t i = 0; i < order.size();) {
    const float v = p1[order[i]];
    std::size_t j = i;
    for (; j < order.size() && p1[order[j]] == v; ++j) (labels[order[j]] == 1.0f ? tp : fp) += 1;
    // Rows >= v are 1, the rest 0: a threshold between v and the next lower value.
    const double below = j < order.size() ? static_cast<double>(p1[order[j]]) : -1.0;
    // A float, so a float32 comparison (the ONNX export's) decides every
    // row as this double one does: below it and not below v.
    auto t = static_cast<float>((static_cast<double>(v) + below) / 2);
    if (t >= v) t = std::nextafter(v, -2.0f);
    const double score = value(tp, fp);
    if (score > best.score || (score == best.score && std::abs(t - 0.5) < std::abs(best.threshold - 0.5))) {
      best.score = score;
      best.threshold = t;
    }
    i = j;
  }
  // A gain within the noise of these rows is no reason to leave 0.5.
  if (best.score - best.score_at_half <= 1 / std::sqrt(static_cast<double>(p1.size()))) {
    best.threshold = 0.5;
    best.score = best.score_at_half;
  }
  return best;
}

nlohmann::json ClassificationMetrics::to_json() const {
  nlohmann::json j = {{"rows", rows},
                      {"accuracy", accuracy},
                      {"macro_precision", macro_precision},
                      {"macro_recall", macro_recall},
                      {"macro_f1", macro_f1},
                      {"balanced_accuracy", balanced_accuracy},
                      {"confusion", confusion}};
  if (roc_auc) j["roc_auc"] = *roc_auc;
  j["ece"] = ece;
  return j;
}

nlohmann::json ClassificationMetrics::per_class_json(const std::vector<std::string>& class_names) const {
  if (class_names.size() != support.size())
    throw data_error("metrics: " + std::to_string(class_names.size()) + " class names for " +
                     std::to_string(support.size()) + " classes");
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t c = 0; c < support.size(); ++c)
    out[class_names[c]] = {{"recall", recall[c]}, {"precision", precision[c]}, {"support", support[c]}};
  return out;
}

RegressionMetrics regression_metrics(std::span<const double> predictions, std::span<const double> targets) {
  if (predictions.size() != targets.size())
    throw data_error("metrics: " + std::to_string(predictions.size()) + " predictions for " +
                     std::to_string(targets.size()) + " targets");
  RegressionMetrics m;
  m.rows = targets.size();
  if (m.rows == 0) return m;
  double n = static_cast<double>(m.rows);
  double mean = std::accumulate(targets.begin(), targets.end(), 0.0) / n;
  double ss_res = 0, ss_tot = 0, abs_sum = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    double e = predictions[i] - targets[i];
    ss_res += e * e;
    abs_sum += std::abs(e);
    ss_tot += (targets[i] - mean) * (targets[i] - mean);
  }
  m.rmse = std::sqrt(ss_res / n);
  m.mae = abs_sum / n;
  m.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 0.0;
  return m;
}

nlohmann::json RegressionMetrics::to_json() const {
  return {{"rows", rows}, {"rmse", rmse}, {"mae", mae}, {"r2", r2}};
}

}  // namespace anneal
