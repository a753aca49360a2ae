#include "anneal/scoring.h"

#include "anneal/model_metrics.h"

namespace anneal::runs {
using nlohmann::json;

std::vector<float> class_probabilities(LossKind loss, std::span<const float> predictions) {
  if (loss != LossKind::kBinaryCrossEntropy) return {predictions.begin(), predictions.end()};
  std::vector<float> out(predictions.size() * 2);
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    out[2 * i] = 1.0f - predictions[i];
    out[2 * i + 1] = predictions[i];
  }
  return out;
}

json score_per_class(LossKind loss, const LabelEncoding& labels, std::span<const float> predictions,
                     std::span<const float> encoded_labels, std::optional<double> threshold) {
  if (!labels.classification()) return json::object();
  ClassificationMetrics m =
      classification_metrics(class_probabilities(loss, predictions), encoded_labels, labels.classes(), threshold);
  return m.per_class_json(labels.class_names());
}

json score_confusion(LossKind loss, const LabelEncoding& labels, std::span<const float> predictions,
                     std::span<const float> encoded_labels, std::optional<double> threshold) {
  if (!labels.classification()) return nullptr;
  ClassificationMetrics m =
      classification_metrics(class_probabilities(loss, predictions), encoded_labels, labels.classes(), threshold);
  return {{"classes", labels.class_names()}, {"matrix", m.confusion}};
}

json score(const std::string& prefix, LossKind loss, const LabelEncoding& labels,
           std::span<const float> predictions, std::span<const float> encoded_labels, std::optional<double> threshold) {
  json out = json::object();
  if (labels.classification()) {
    std::vector<float> probs = class_probabilities(loss, predictions);
    ClassificationMetrics m = classification_metrics(probs, encoded_labels, labels.classes(), threshold);
    out[prefix + "_accuracy"] = m.accuracy;
    out[prefix + "_macro_f1"] = m.macro_f1;
    out[prefix + "_balanced_accuracy"] = m.balanced_accuracy;
    if (m.roc_auc) out[prefix + "_roc_auc"] = *m.roc_auc;
    out[prefix + "_ece"] = m.ece;
  } else {
    std::vector<double> p(predictions.size()), t(encoded_labels.size());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = labels.decode_value(predictions[i]);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = labels.decode_value(encoded_labels[i]);
    RegressionMetrics m = regression_metrics(p, t);
    out[prefix + "_rmse"] = m.rmse;
    out[prefix + "_mae"] = m.mae;
    out[prefix + "_r2"] = m.r2;
  }
  return out;
}

}  // namespace anneal::runs
