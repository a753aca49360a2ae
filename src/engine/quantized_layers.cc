// The layers of inference-only networks: int8-quantized and pruned models
// (NetworkOptions::inference). Forward only; each runs one Backend inference
// op, which owns the layer's weights. Shapes in comments as in layers.cc;
// an int8 activation holds q with real value ≈ q · scale, the scale fixed
// per layer when the network is built (see Backend's inference section).
#include <string>
#include <vector>

#include "anneal/error.h"
#include "engine/layers_internal.h"

namespace anneal::engine {
namespace {

double zero_fraction(const std::vector<float>& values) {
  if (values.empty()) return 0;
  std::size_t zeros = 0;
  for (float v : values) zeros += v == 0.0f;
  return double(zeros) / double(values.size());
}

// What every inference-only layer shares: no training.
class InferenceLayer : public Layer {
 public:
  const Tensor& backward(const Tensor&, const PassContext&, bool) override {
    throw failure("layer " + describe() + " is inference-only: it has no backward pass");
  }
};

std::string with_activation(std::string text, Activation fused) {
  if (fused != Activation::kNone) text += std::string(" ") + activation_name(fused);
  return text;
}

// ---- dense ------------------------------------------------------------------

class InferenceDenseLayer final : public InferenceLayer {
 public:
  InferenceDenseLayer(const LayerContext& ctx, InferenceDenseSpec spec)
      : fused_(spec.fused), sparsity_(zero_fraction(spec.weights.weight)) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{spec.out};
    op_ = ctx.backend.inference_dense(std::move(spec));
  }

  std::string describe() const override {
    return with_activation("dense(" + std::to_string(output_shape_[0]) + ")", fused_);
  }

  // x (N, I...) -> y (N, O):  y = act(x·Wᵀ + b)
  //   int8: x f32 (quantized to s8 on the way in) or s8/u8; y s8/u8 at the
  //   next layer's scale, or f32 for the last layer
  //   fp32: W mostly zero (kCsrZeroFraction) runs as CSR
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    op_->forward(x, y_);
    return y_;
  }

  LayerKernel kernel() const override { return {describe(), op_->kernel(), sparsity_}; }

 private:
  Activation fused_;
  double sparsity_;
  std::unique_ptr<InferenceOp> op_;
  Tensor y_;
};

// ---- conv -------------------------------------------------------------------

class InferenceConvLayer final : public InferenceLayer {
 public:
  InferenceConvLayer(const LayerContext& ctx, InferenceConvSpec spec, bool* runs_pool)
      : fused_(spec.fused), kernel_(spec.kernel), stride_(spec.stride), pad_(spec.pad),
        sparsity_(zero_fraction(spec.weights.weight)) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{spec.out_channels, (ctx.input[1] + 2 * pad_ - kernel_) / stride_ + 1,
                         (ctx.input[2] + 2 * pad_ - kernel_) / stride_ + 1};
    op_ = ctx.backend.inference_conv(std::move(spec));
    *runs_pool = op_->runs_pool();
  }

  std::string describe() const override {
    std::string s = "conv(" + std::to_string(output_shape_[0]) + "," + std::to_string(kernel_);
    if (stride_ != 1) s += ",stride=" + std::to_string(stride_);
    if (pad_ != 0) s += ",pad=" + std::to_string(pad_);
    return with_activation(s + ")", fused_);
  }

  // x (N, C, H, W) -> y (N, O, Ho, Wo):  y = act(W ⋆ x + b)
  //   (when the op runs the pooling after it: y (N, O, Ho/p, Wo/p) pooled)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    op_->forward(x, y_);
    return y_;
  }

  LayerKernel kernel() const override { return {describe(), op_->kernel(), sparsity_}; }

 private:
  Activation fused_;
  std::int64_t kernel_, stride_, pad_;
  double sparsity_;
  std::unique_ptr<InferenceConvOp> op_;
  Tensor y_;
};

// ---- maxpool / avgpool ------------------------------------------------------

std::string pool_text(bool max, std::int64_t kernel, std::int64_t stride) {
  std::string s = std::string(max ? "maxpool(" : "avgpool(") + std::to_string(kernel);
  if (stride != kernel) s += ",stride=" + std::to_string(stride);
  return s + ")";
}

class InferencePoolLayer final : public InferenceLayer {
 public:
  InferencePoolLayer(const LayerContext& ctx, bool max, std::int64_t kernel, std::int64_t stride, bool fused)
      : text_(pool_text(max, kernel, stride)) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input[0], (ctx.input[1] - kernel) / stride + 1, (ctx.input[2] - kernel) / stride + 1};
    if (!fused) op_ = ctx.backend.inference_pool(InferencePoolSpec{ctx.input, kernel, stride, max});
  }

  std::string describe() const override { return text_; }

  // x (N, C, H, W) -> y (N, C, Ho, Wo), x's dtype and scale: max or mean over
  // each K×K window. Fused: the conv before already pooled, x is y.
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    if (!op_) return x;
    op_->forward(x, y_);
    return y_;
  }

  LayerKernel kernel() const override {
    return {describe(), op_ ? op_->kernel() : "run by the conv before it", 0};
  }

 private:
  std::string text_;
  std::unique_ptr<InferenceOp> op_;  // null when fused into the conv
  Tensor y_;
};

// ---- relu / gelu / tanh / sigmoid -------------------------------------------

class InferenceActivationLayer final : public InferenceLayer {
 public:
  InferenceActivationLayer(const LayerContext& ctx, Activation kind, float input_scale)
      : backend_(ctx.backend), kind_(kind), input_scale_(input_scale) {
    input_shape_ = output_shape_ = ctx.input;
    op_ = backend_.eltwise(EltwiseSpec{kind, DType::kF32});
  }

  std::string describe() const override { return activation_name(kind_); }

  // real (N, ...) = x · input_scale, plain f32 (x itself when it already is)
  // y = f(real), elementwise
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    backend_.dequantize(x, x.dtype() == DType::kF32 ? 1.0f : input_scale_, real_);
    op_->forward(real_, y_);
    return y_;
  }

  LayerKernel kernel() const override { return {describe(), "fp32 eltwise", 0}; }

 private:
  Backend& backend_;
  Activation kind_;
  float input_scale_;
  std::unique_ptr<EltwiseOp> op_;
  Tensor real_, y_;
};

// ---- flatten before an int8 dense ---------------------------------------------

class DeferredFlattenLayer final : public InferenceLayer {
 public:
  explicit DeferredFlattenLayer(const LayerContext& ctx) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input.product()};
  }

  std::string describe() const override { return "flatten"; }

  // x (N, C, H, W) handed on: the int8 dense after it flattens it in C, H, W
  // order itself (for an image stored (N, H, W, C): by permuting its weights once)
  const Tensor& forward(const Tensor& x, const PassContext&) override { return x; }

  LayerKernel kernel() const override { return {describe(), "none (the int8 dense reads the image)", 0}; }
};

}  // namespace

std::unique_ptr<Layer> make_inference_dense_layer(const LayerContext& ctx, InferenceDenseSpec spec) {
  return std::make_unique<InferenceDenseLayer>(ctx, std::move(spec));
}
std::unique_ptr<Layer> make_inference_conv_layer(const LayerContext& ctx, InferenceConvSpec spec,
                                                 bool* runs_pool) {
  return std::make_unique<InferenceConvLayer>(ctx, std::move(spec), runs_pool);
}
std::unique_ptr<Layer> make_inference_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                                 std::int64_t stride) {
  return std::make_unique<InferencePoolLayer>(ctx, max, kernel, stride, false);
}
std::unique_ptr<Layer> make_fused_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                             std::int64_t stride) {
  return std::make_unique<InferencePoolLayer>(ctx, max, kernel, stride, true);
}
std::unique_ptr<Layer> make_inference_activation_layer(const LayerContext& ctx, Activation kind,
                                                       float input_scale) {
  return std::make_unique<InferenceActivationLayer>(ctx, kind, input_scale);
}
std::unique_ptr<Layer> make_deferred_flatten_layer(const LayerContext& ctx) {
  return std::make_unique<DeferredFlattenLayer>(ctx);
}

}  // namespace anneal::engine
