// Losses on the CPU: softmax cross-entropy takes its log-softmax from a
// oneDNN softmax primitive; the per-sample scoring and the gradient are O(N·K)
// loops over the (small) network output.
#include <cmath>

#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using tag = memory::format_tag;

class CpuLossOp final : public LossOp {
 public:
  CpuLossOp(CpuContext& ctx, LossKind kind, std::int64_t outputs, std::span<const float> class_weights)
      : ctx_(ctx), kind_(kind), outputs_(outputs), weights_(class_weights.begin(), class_weights.end()) {}

  void forward_backward(const Tensor& pred, const Tensor& labels, Tensor* dpred, float grad_scale,
                        const Tensor* loss_scale) override {
    // The state lives in host memory on this backend.
    if (loss_scale != nullptr) grad_scale *= *static_cast<const float*>(loss_scale->data());
    Plan& plan = plan_for(pred);
    const std::int64_t n = pred.batch();
    const std::int64_t k = outputs_;
    if (labels.elements() != n || !labels.layout()->is_plain() || labels.dtype() != DType::kF32)
      throw failure("loss: labels must be N plain floats");
    const float* y = static_cast<const float*>(labels.data());
    const float* p = scores(plan, pred);
    float* g = nullptr;
    if (dpred != nullptr) {
      shape_output(ctx_, *dpred, pred.dims(), plan.pred_layout);
      g = plan.pred_is_plain_f32 ? static_cast<float*>(dpred->data())
                                 : static_cast<float*>(grad_.ensure(plan.plain_md.get_size(),
                                                                    *ctx_.allocator));
    }
    LossTotals totals;
    totals.count = n;
    switch (kind_) {
      case LossKind::kSoftmaxCrossEntropy:
        // p holds log-softmax: loss = −log p[y]; ∂/∂z = softmax(z) − onehot(y).
        for (std::int64_t i = 0; i < n; ++i) {
          const float* row = p + i * k;
          const auto label = static_cast<std::int64_t>(y[i]);
          if (label < 0 || label >= k)
            throw data_error("label " + std::to_string(y[i]) + " is not a class index 0.." +
                             std::to_string(k - 1));
          std::int64_t best = 0;
          for (std::int64_t j = 1; j < k; ++j)
            if (row[j] > row[best]) best = j;
          totals.correct += best == label;
          const float w = weight(label);
          totals.loss_sum -= double(w) * double(row[label]);
          if (g != nullptr)
            for (std::int64_t j = 0; j < k; ++j)
              g[i * k + j] = (std::exp(row[j]) - (j == label ? 1.0f : 0.0f)) * w * grad_scale;
        }
        break;
      case LossKind::kBinaryCrossEntropy:
        // With logits z: loss = max(z,0) − z·y + log(1 + e^−|z|); ∂/∂z = σ(z) − y.
        for (std::int64_t i = 0; i < n; ++i) {
          const float z = p[i];
          const float w = weight(y[i] > 0.5f ? 1 : 0);
          totals.loss_sum += double(w) * double(std::max(z, 0.0f) - z * y[i] + std::log1p(std::exp(-std::fabs(z))));
          totals.correct += (z > 0.0f) == (y[i] > 0.5f);
          if (g != nullptr) g[i] = (1.0f / (1.0f + std::exp(-z)) - y[i]) * w * grad_scale;
        }
        break;
      case LossKind::kMeanSquaredError:
        for (std::int64_t i = 0; i < n; ++i) {
          const float d = p[i] - y[i];
          totals.loss_sum += double(d) * double(d);
          if (g != nullptr) g[i] = 2.0f * d * grad_scale;
        }
        break;
      case LossKind::kMeanAbsoluteError:
        for (std::int64_t i = 0; i < n; ++i) {
          const float d = p[i] - y[i];
          totals.loss_sum += std::fabs(double(d));
          if (g != nullptr) g[i] = (d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f) * grad_scale;
        }
        break;
    }
    if (g != nullptr && !plan.pred_is_plain_f32)
      reorders_.run(ctx_, plan.plain_md, g, plan.pred_md, dpred->data());
    running_ += totals;
  }

  // The running totals live in host memory, this backend's device memory.
  LossTotals totals() override { return running_; }
  void set_totals(const LossTotals& totals) override { running_ = totals; }

  void predict(const Tensor& pred, float* out) override {
    Plan& plan = plan_for(pred);
    const float* p = scores(plan, pred);
    const std::int64_t count = pred.batch() * outputs_;
    for (std::int64_t i = 0; i < count; ++i) {
      switch (kind_) {
        case LossKind::kSoftmaxCrossEntropy: out[i] = std::exp(p[i]); break;
        case LossKind::kBinaryCrossEntropy: out[i] = 1.0f / (1.0f + std::exp(-p[i])); break;
        default: out[i] = p[i]; break;
      }
    }
  }

 private:
  struct Plan {
    MemDesc x_md;  // the prediction's descriptor (the cache key)
    MemDesc pred_md, plain_md;
    bool pred_is_plain_f32 = false;
    std::shared_ptr<const CpuLayout> pred_layout;
    Exec log_softmax;
  };

  Plan& plan_for(const Tensor& pred) {
    const MemDesc& md = md_of(pred);
    if (Plan* p = find_plan(plans_, md)) return *p;
    if (pred.dims().rank() != 2 || pred.dims()[1] != outputs_)
      throw failure("loss: prediction " + pred.dims().str() + " is not {N, " +
                    std::to_string(outputs_) + "}");
    auto plan = std::make_unique<Plan>();
    plan->x_md = md;
    plan->pred_md = md;
    plan->plain_md = plain_md(pred.dims(), DType::kF32);
    plan->pred_is_plain_f32 = md == plan->plain_md;
    plan->pred_layout = std::dynamic_pointer_cast<const CpuLayout>(pred.shared_layout());
    if (kind_ == LossKind::kSoftmaxCrossEntropy) {
      try {
        dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::softmax_log, md, plan->plain_md, 1);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::softmax_v2_forward::primitive_desc pd(d, attr, ctx_.engine);
        plan->log_softmax = Exec(dnnl::softmax_v2_forward(pd), pd, ctx_,
                                 {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, plan->plain_md}});
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "log-softmax " + md_string(md));
      }
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  // The prediction as plain fp32 (log-probabilities for softmax_ce).
  const float* scores(Plan& plan, const Tensor& pred) {
    if (kind_ == LossKind::kSoftmaxCrossEntropy) {
      void* out = scores_.ensure(plan.plain_md.get_size(), *ctx_.allocator);
      plan.log_softmax.set(DNNL_ARG_SRC, pred.data());
      plan.log_softmax.set(DNNL_ARG_DST, out);
      plan.log_softmax.run(ctx_);
      return static_cast<const float*>(out);
    }
    return static_cast<const float*>(conform(ctx_, reorders_, pred, plan.plain_md, scores_));
  }

  float weight(std::int64_t label) const {
    return weights_.empty() ? 1.0f : weights_[static_cast<std::size_t>(label)];
  }

  CpuContext& ctx_;
  LossKind kind_;
  std::int64_t outputs_;
  std::vector<float> weights_;  // per class; empty: all 1
  std::vector<std::unique_ptr<Plan>> plans_;
  Reorders reorders_;
  ScratchBuffer scores_, grad_;
  LossTotals running_;
};

}  // namespace

std::unique_ptr<LossOp> make_loss_op(CpuContext& ctx, LossKind kind, std::int64_t outputs,
                                     std::span<const float> class_weights) {
  check_class_weights(kind, outputs, class_weights);
  return std::make_unique<CpuLossOp>(ctx, kind, outputs, class_weights);
}

}  // namespace anneal::cpu
