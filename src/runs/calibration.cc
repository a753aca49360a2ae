#include "anneal/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "anneal/error.h"

namespace anneal::runs {
namespace {

// The least probability whose log the scores take: log(0) is -inf, and a
// normal float (not a denormal, which ONNX Runtime may flush to zero) keeps
// the ONNX graph's Max(p, m) the same number as here.
constexpr float kFloor = std::numeric_limits<float>::min();

// The classes of rows of predictions (`classes` per softmax_ce row) read as `loss`; kBadData
// naming `what` when the loss is not calibratable or the predictions are
// not whole rows.
std::size_t row_classes(LossKind loss, std::int64_t classes, std::size_t size, const char* what) {
  if (!calibratable(loss))
    throw data_error(std::string(what) + ": " + loss_name(loss) + " predictions are not class probabilities");
  const std::int64_t width = loss == LossKind::kBinaryCrossEntropy ? 1 : classes;
  if (width < 1 || (loss == LossKind::kSoftmaxCrossEntropy && width < 2) ||
      size % static_cast<std::size_t>(width) != 0)
    throw data_error(std::string(what) + ": " + std::to_string(size) + " predictions are not whole rows of " +
                     std::to_string(width));
  return loss == LossKind::kBinaryCrossEntropy ? 2 : static_cast<std::size_t>(classes);
}

// Row r's class scores log(max(p, kFloor)) into `scores` (k of them): the
// class probabilities of `loss` (bce: 1 - P(1) rounded to float, as
// class_probabilities() has it, then P(1)). False when a probability is NaN.
bool row_scores(LossKind loss, std::span<const float> predictions, std::size_t r, std::size_t k, double* scores) {
  for (std::size_t c = 0; c < k; ++c) {
    const float p = loss == LossKind::kBinaryCrossEntropy ? (c == 0 ? 1.0f - predictions[r] : predictions[r])
                                                          : predictions[r * k + c];
    if (std::isnan(p)) return false;
    scores[c] = std::log(static_cast<double>(std::max(p, kFloor)));
  }
  return true;
}

// Sums over the rows' scores `s` (rows x k) at inverse temperature `beta`:
// the mean negative log-likelihood, its first and second derivatives in
// beta (the second is the mean variance of the scores under the rescaled
// probabilities, >= 0: the likelihood is convex in beta).
struct NllAt {
  double nll = 0, d1 = 0, d2 = 0;
};
NllAt nll_at(const std::vector<double>& s, const std::vector<std::size_t>& y, std::size_t k, double beta) {
  NllAt out;
  const std::size_t rows = y.size();
  for (std::size_t r = 0; r < rows; ++r) {
    const double* row = s.data() + r * k;
    double top = row[0];
    for (std::size_t c = 1; c < k; ++c) top = std::max(top, row[c]);
    double z = 0, m1 = 0, m2 = 0;
    for (std::size_t c = 0; c < k; ++c) {
      const double e = std::exp(beta * (row[c] - top));
      z += e;
      m1 += e * row[c];
      m2 += e * row[c] * row[c];
    }
    m1 /= z;
    m2 /= z;
    out.nll += beta * top + std::log(z) - beta * row[y[r]];
    out.d1 += m1 - row[y[r]];
    out.d2 += std::max(0.0, m2 - m1 * m1);
  }
  const double n = static_cast<double>(rows);
  out.nll /= n;
  out.d1 /= n;
  out.d2 /= n;
  return out;
}

}  // namespace

CalibrateMode parse_calibrate_mode(std::string_view name) {
  if (name == "auto") return CalibrateMode::kAuto;
  if (name == "none") return CalibrateMode::kNone;
  if (name == "temperature") return CalibrateMode::kTemperature;
  throw usage_error("'" + std::string(name) + "': expected auto, none or temperature");
}

const char* calibrate_mode_name(CalibrateMode mode) {
  switch (mode) {
    case CalibrateMode::kAuto: return "auto";
    case CalibrateMode::kNone: return "none";
    case CalibrateMode::kTemperature: return "temperature";
  }
  return "auto";
}

bool calibratable(LossKind loss) {
  return loss == LossKind::kSoftmaxCrossEntropy || loss == LossKind::kBinaryCrossEntropy;
}

void apply_temperature(LossKind loss, std::int64_t classes, double temperature, std::span<float> predictions) {
  if (temperature == 1.0) return;  // an uncalibrated model keeps its bits
  if (!(temperature > 0) || !std::isfinite(temperature))
    throw data_error("temperature " + std::to_string(temperature) + " is not a finite number > 0");
  const std::size_t k = row_classes(loss, classes, predictions.size(), "temperature");
  const bool bce = loss == LossKind::kBinaryCrossEntropy;
  const std::size_t rows = bce ? predictions.size() : predictions.size() / k;
  std::vector<double> s(k);
  for (std::size_t r = 0; r < rows; ++r) {
    if (!row_scores(loss, predictions, r, k, s.data())) continue;
    double top = s[0];
    for (std::size_t c = 1; c < k; ++c) top = std::max(top, s[c]);
    double z = 0;
    for (std::size_t c = 0; c < k; ++c) z += (s[c] = std::exp((s[c] - top) / temperature));
    if (bce) {
      predictions[r] = static_cast<float>(s[1] / z);
    } else {
      for (std::size_t c = 0; c < k; ++c) predictions[r * k + c] = static_cast<float>(s[c] / z);
    }
  }
}

TemperatureFit fit_temperature(LossKind loss, std::int64_t classes, std::span<const float> predictions,
                               std::span<const float> labels) {
  const std::size_t k = row_classes(loss, classes, predictions.size(), "temperature fit");
  const std::size_t rows = loss == LossKind::kBinaryCrossEntropy ? predictions.size() : predictions.size() / k;
  if (rows == 0) throw data_error("temperature fit: no rows");
  if (rows != labels.size())
    throw data_error("temperature fit: " + std::to_string(rows) + " predictions for " + std::to_string(labels.size()) +
                     " labels");
  std::vector<double> s(rows * k);
  std::vector<std::size_t> y(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const float label = labels[r];
    if (!(label >= 0) || label >= static_cast<float>(k) || label != std::floor(label))
      throw data_error("temperature fit: label " + std::to_string(label) + " of row " + std::to_string(r + 1) +
                       " is not a class index below " + std::to_string(k));
    y[r] = static_cast<std::size_t>(label);
    for (std::size_t c = 0; c < k; ++c) {
      const float p = loss == LossKind::kBinaryCrossEntropy ? predictions[r] : predictions[r * k + c];
      if (!std::isfinite(p))
        throw data_error("temperature fit: the prediction of row " + std::to_string(r + 1) + " is not finite");
    }
    row_scores(loss, predictions, r, k, s.data() + r * k);
  }
  TemperatureFit fit;
  fit.nll_before = nll_at(s, y, k, 1.0).nll;
  // Minimize over beta = 1/T in [1/kMax, 1/kMin]: the derivative is
  // increasing, so its sign at the ends says whether the minimum is at a
  // bound; inside, Newton steps that stay in the bracket [lo, hi] where the
  // derivative changes sign, else the bracket's geometric midpoint.
  double lo = 1.0 / kMaxTemperature, hi = 1.0 / kMinTemperature;
  double beta = 1.0;
  if (nll_at(s, y, k, lo).d1 >= 0) {
    beta = lo;
  } else if (nll_at(s, y, k, hi).d1 <= 0) {
    beta = hi;
  } else {
    for (fit.iterations = 1; fit.iterations <= 200; ++fit.iterations) {
      const NllAt at = nll_at(s, y, k, beta);
      if (at.d1 == 0) break;
      (at.d1 > 0 ? hi : lo) = beta;
      double next = at.d2 > 0 ? beta - at.d1 / at.d2 : 0;
      if (!(next > lo && next < hi)) next = std::sqrt(lo * hi);
      const bool done = std::abs(next - beta) <= 1e-12 * beta || hi - lo <= 1e-12 * beta;
      beta = next;
      if (done) break;
    }
  }
  fit.temperature = std::clamp(1.0 / beta, kMinTemperature, kMaxTemperature);
  fit.nll_after = nll_at(s, y, k, 1.0 / fit.temperature).nll;
  return fit;
}

std::vector<ReliabilityBin> reliability_bins(std::span<const float> probabilities, std::span<const float> labels,
                                             std::int64_t classes, int bins) {
  if (bins < 1) throw data_error("reliability: " + std::to_string(bins) + " bins");
  if (classes < 1 || probabilities.size() != labels.size() * static_cast<std::size_t>(classes))
    throw data_error("reliability: " + std::to_string(probabilities.size()) + " probabilities for " +
                     std::to_string(labels.size()) + " rows of " + std::to_string(classes) + " classes");
  std::vector<ReliabilityBin> out(static_cast<std::size_t>(bins));
  std::vector<double> confidence(out.size(), 0), right(out.size(), 0);
  const auto k = static_cast<std::size_t>(classes);
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const float* p = probabilities.data() + r * k;
    std::size_t best = 0;
    for (std::size_t c = 1; c < k; ++c)
      if (p[c] > p[best]) best = c;
    const double conf = std::clamp(static_cast<double>(p[best]), 0.0, 1.0);
    if (std::isnan(p[best])) continue;  // no confidence to place
    const auto b = std::min(static_cast<std::size_t>(conf * bins), out.size() - 1);
    out[b].rows += 1;
    confidence[b] += conf;
    right[b] += static_cast<float>(best) == labels[r] ? 1.0 : 0.0;
  }
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b].lower = static_cast<double>(b) / bins;
    out[b].upper = static_cast<double>(b + 1) / bins;
    if (out[b].rows) {
      out[b].confidence = confidence[b] / static_cast<double>(out[b].rows);
      out[b].accuracy = right[b] / static_cast<double>(out[b].rows);
    }
  }
  return out;
}

double expected_calibration_error(const std::vector<ReliabilityBin>& bins) {
  std::uint64_t total = 0;
  for (const ReliabilityBin& b : bins) total += b.rows;
  if (total == 0) return 0;
  double ece = 0;
  for (const ReliabilityBin& b : bins)
    ece += static_cast<double>(b.rows) / static_cast<double>(total) * std::abs(b.accuracy - b.confidence);
  return ece;
}

nlohmann::json reliability_json(const std::vector<ReliabilityBin>& bins) {
  nlohmann::json out = nlohmann::json::array();
  for (const ReliabilityBin& b : bins)
    out.push_back({{"lower", b.lower},
                   {"upper", b.upper},
                   {"rows", b.rows},
                   {"confidence", b.confidence},
                   {"accuracy", b.accuracy}});
  return out;
}

}  // namespace anneal::runs
