#include "anneal/loss.h"

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
