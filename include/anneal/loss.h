// Losses: what the network's output is scored against.
//
// The loss math itself runs in a backend LossOp (backend.h); this header
// names the kinds and what each expects of the network and the labels.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace anneal {

enum class LossKind : std::uint8_t {
  kSoftmaxCrossEntropy,  // "softmax_ce": outputs K logits, label = class index 0..K-1
  kBinaryCrossEntropy,   // "bce": outputs 1 logit, label 0 or 1 (sigmoid fused in)
  kMeanSquaredError,     // "mse": outputs 1 value, label = target value
  kMeanAbsoluteError,    // "mae": outputs 1 value, label = target value
};

// Parses "softmax_ce" | "bce" | "mse" | "mae". Throws anneal::Error kUsage
// naming the closest known loss otherwise.
LossKind parse_loss_kind(std::string_view name);
const char* loss_name(LossKind kind);

// True for the losses whose labels are classes (accuracy is meaningful).
bool is_classification(LossKind kind);

// Width of the network's last layer that the loss expects: `classes` for
// softmax_ce, 1 otherwise.
std::int64_t loss_output_width(LossKind kind, std::int64_t classes);

// Checks per-class loss weights for a loss with `outputs` outputs: empty
// (unweighted), or one finite weight > 0 per class (softmax_ce: outputs,
// bce: 2). Throws kUsage naming what is wrong, e.g. weights for mse.
void check_class_weights(LossKind kind, std::int64_t outputs, std::span<const float> class_weights);

// Totals a LossOp adds up over one or more batches.
struct LossTotals {
  double loss_sum = 0;      // sum over samples of the per-sample loss
  std::int64_t correct = 0; // classification: samples whose prediction was right
  std::int64_t count = 0;   // samples scored

  LossTotals& operator+=(const LossTotals& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    return *this;
  }
  double mean_loss() const { return count > 0 ? loss_sum / double(count) : 0.0; }
  double accuracy() const { return count > 0 ? double(correct) / double(count) : 0.0; }
};

}  // namespace anneal
