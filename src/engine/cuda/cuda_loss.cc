// The CUDA backend's losses, on its own kernels (cuda_kernels.cu); see
// cuda_ops.h.
#include "engine/cuda/cuda_ops.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "engine/cuda/cuda_kernels.h"

namespace anneal::cuda {
namespace {

using kernels::activations;

// ---- Losses --------------------------------------------------------------------------------

class CudaLossOp final : public LossOp {
 public:
  CudaLossOp(CudaContext& ctx, LossKind kind, std::int64_t outputs, std::span<const float> class_weights)
      : ctx_(ctx), kind_(kind), outputs_(kernel_count(outputs, "loss outputs")), weights_(*ctx.allocator),
        sample_loss_(*ctx.allocator), sample_correct_(*ctx.allocator), totals_(*ctx.allocator),
        predicted_(*ctx.allocator) {
    if (!class_weights.empty()) {
      void* w = weights_.ensure(class_weights.size_bytes());
      check(cudaMemcpyAsync(w, class_weights.data(), class_weights.size_bytes(), cudaMemcpyHostToDevice,
                            ctx.stream),
            "uploading class weights");
    }
    totals_.ensure(sizeof(kernels::DeviceTotals));
    set_totals(LossTotals{});
  }

  void forward_backward(const Tensor& pred, const Tensor& labels, Tensor* dpred, float grad_scale,
                        const Tensor* loss_scale) override {
    const int n = check_pred(pred);
    if (labels.elements() != n || labels.dtype() != DType::kF32)
      throw failure("loss: labels must be N plain floats");
    kernels::Activations g{nullptr, pred.dtype()};
    if (dpred != nullptr) {
      shape_plain(*dpred, pred.dims(), pred.dtype(), *ctx_.allocator);
      g = activations(*dpred);
    }
    const auto count = static_cast<std::size_t>(std::max(n, 1));
    kernels::loss_forward_backward(
        kind_, activations(pred), f32(labels, "loss labels"),
        static_cast<const float*>(weights_.data()), n, outputs_, g, grad_scale,
        loss_scale ? f32(*loss_scale, "loss scale") : nullptr, static_cast<double*>(sample_loss_.ensure(count * sizeof(double))),
        static_cast<int*>(sample_correct_.ensure(count * sizeof(int))),
        static_cast<kernels::DeviceTotals*>(totals_.data()), ctx_.stream);
  }

  LossTotals totals() override {
    kernels::DeviceTotals t{};
    check(cudaMemcpyAsync(&t, totals_.data(), sizeof t, cudaMemcpyDeviceToHost, ctx_.stream), "reading loss totals");
    check(cudaStreamSynchronize(ctx_.stream), "reading loss totals");
    if (t.bad_labels > 0)
      throw data_error(std::to_string(t.bad_labels) + " label(s) are not a class index 0.." +
                       std::to_string(outputs_ - 1));
    LossTotals out;
    out.loss_sum = t.loss_sum;
    out.correct = t.correct;
    out.count = t.count;
    return out;
  }

  void set_totals(const LossTotals& totals) override {
    const kernels::DeviceTotals t{totals.loss_sum, totals.correct, totals.count, 0};
    // A pageable source: the copy has read it when the call returns.
    check(cudaMemcpyAsync(totals_.data(), &t, sizeof t, cudaMemcpyHostToDevice, ctx_.stream), "setting loss totals");
    check(cudaStreamSynchronize(ctx_.stream), "setting loss totals");
  }

  void predict(const Tensor& pred, float* out) override {
    const int n = check_pred(pred);
    const std::size_t bytes = sizeof(float) * std::size_t(n) * std::size_t(outputs_);
    if (bytes == 0) return;
    auto* device = static_cast<float*>(predicted_.ensure(bytes));
    kernels::loss_predict(kind_, activations(pred), device, n, outputs_, ctx_.stream);
    check(cudaMemcpyAsync(out, device, bytes, cudaMemcpyDeviceToHost, ctx_.stream), "reading predictions");
    check(cudaStreamSynchronize(ctx_.stream), "reading predictions");
  }

 private:
  int check_pred(const Tensor& pred) const {
    if (pred.dims().rank() != 2 || pred.dims()[1] != outputs_)
      throw failure("loss: prediction " + pred.dims().str() + " is not {N, " + std::to_string(outputs_) + "}");
    return kernel_count(pred.batch(), "loss batch");
  }

  CudaContext& ctx_;
  LossKind kind_;
  int outputs_;
  DeviceBuffer weights_, sample_loss_, sample_correct_, totals_, predicted_;
};

}  // namespace

std::unique_ptr<LossOp> make_loss_op(CudaContext& ctx, LossKind kind, std::int64_t outputs,
                                     std::span<const float> class_weights) {
  check_class_weights(kind, outputs, class_weights);
  return std::make_unique<CudaLossOp>(ctx, kind, outputs, class_weights);
}

}  // namespace anneal::cuda
