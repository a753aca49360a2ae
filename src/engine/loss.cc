#include "anneal/loss.h"

#include <cmath>
#include <string>

#include "anneal/spelling.h"

namespace anneal {

LossKind parse_loss_kind(std::string_view name) {
  if (name == "softmax_ce") return LossKind::kSoftmaxCrossEntropy;
  if (name == "bce") return LossKind::kBinaryCrossEntropy;
  if (name == "mse") return LossKind::kMeanSquaredError;
  if (name == "mae") return LossKind::kMeanAbsoluteError;
  throw unknown_name_error("loss", name, {"softmax_ce", "bce", "mse", "mae"});
}

const char* loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kSoftmaxCrossEntropy: return "softmax_ce";
    case LossKind::kBinaryCrossEntropy: return "bce";
    case LossKind::kMeanSquaredError: return "mse";
    case LossKind::kMeanAbsoluteError: return "mae";
  }
  return "?";
}

bool is_classification(LossKind kind) {
  return kind == LossKind::kSoftmaxCrossEntropy || kind == LossKind::kBinaryCrossEntropy;
}

std::int64_t loss_output_width(LossKind kind, std::int64_t classes) {
  return kind == LossKind::kSoftmaxCrossEntropy ? classes : 1;
}

}  // namespace anneal

namespace anneal {

void check_class_weights(LossKind kind, std::int64_t outputs, std::span<const float> class_weights) {
  if (class_weights.empty()) return;
  if (!is_classification(kind))
    throw usage_error(std::string("class weights: loss ") + loss_name(kind) + " has no classes");
  const std::int64_t classes = kind == LossKind::kBinaryCrossEntropy ? 2 : outputs;
  if (static_cast<std::int64_t>(class_weights.size()) != classes)
    throw usage_error("class weights: " + std::to_string(class_weights.size()) + " weights for " +
                      std::to_string(classes) + " classes");
  for (std::size_t c = 0; c < class_weights.size(); ++c)
    if (!std::isfinite(class_weights[c]) || class_weights[c] <= 0)
      throw usage_error("class weights: class " + std::to_string(c) + " has weight " +
                        std::to_string(class_weights[c]) + ", expected a number > 0");
}

}  // namespace anneal
