// The CUDA backend's inference-only ops (see cuda_ops.h): the fp32 dense,
// convolution and pooling ops run forward on uploaded weights; int8 is the
// CPU backend's.
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

// ---- Inference-only ops ---------------------------------------------------------------------

[[noreturn]] void refuse_int8() {
  throw usage_error("int8 models run on the CPU backend; use device cpu");
}

// Uploads a layer's host weights into the parameters `shape` shaped, after
// checking their sizes.
template <typename Op>
void upload_weights(CudaContext& ctx, Op& op, const InferenceWeights& w, Tensor& weights, Tensor& bias) {
  op.shape_parameters(weights, bias);
  if (w.weight.size() != std::size_t(weights.elements()) || w.bias.size() != std::size_t(bias.elements()))
    throw corrupt("a layer's weights (" + std::to_string(w.weight.size()) + " values, bias " +
                  std::to_string(w.bias.size()) + ") do not match its shape " + weights.dims().str());
  check(cudaMemcpyAsync(weights.data(), w.weight.data(), weights.bytes(), cudaMemcpyHostToDevice, ctx.stream),
        "uploading weights");
  check(cudaMemcpyAsync(bias.data(), w.bias.data(), bias.bytes(), cudaMemcpyHostToDevice, ctx.stream),
        "uploading a bias");
}

class CudaInferenceDenseOp final : public InferenceOp {
 public:
  CudaInferenceDenseOp(CudaContext& ctx, const InferenceDenseSpec& spec)
      : dense_(make_dense_op(ctx, DenseSpec{spec.in, spec.out, DType::kF32, spec.fused, 128})) {
    upload_weights(ctx, *dense_, spec.weights, weights_, bias_);
  }
  void forward(const Tensor& x, Tensor& y) override {
    dense_->forward(x, weights_, bias_, y);
    ran_ = true;
  }
  std::string kernel() const override { return ran_ ? "fp32 inner product (cublasLt)" : ""; }

 private:
  std::unique_ptr<DenseOp> dense_;
  Tensor weights_, bias_;
  bool ran_ = false;
};

class CudaInferenceConvOp final : public InferenceConvOp {
 public:
  CudaInferenceConvOp(CudaContext& ctx, const InferenceConvSpec& spec)
      : conv_(make_conv_op(ctx, ConvSpec{spec.in, spec.out_channels, spec.kernel, spec.stride, spec.pad, DType::kF32,
                                         spec.fused, 128})) {
    upload_weights(ctx, *conv_, spec.weights, weights_, bias_);
  }
  void forward(const Tensor& x, Tensor& y) override {
    conv_->forward(x, weights_, bias_, y);
    ran_ = true;
  }
  std::string kernel() const override { return ran_ ? "fp32 convolution (cudnn)" : ""; }
  bool runs_pool() const override { return false; }

 private:
  std::unique_ptr<ConvOp> conv_;
  Tensor weights_, bias_;
  bool ran_ = false;
};

class CudaInferencePoolOp final : public InferenceOp {
 public:
  CudaInferencePoolOp(CudaContext& ctx, const InferencePoolSpec& spec)
      : pool_(make_pool_op(ctx, PoolSpec{spec.in, spec.kernel, spec.stride, spec.max, DType::kF32})) {}
  void forward(const Tensor& x, Tensor& y) override {
    if (x.dtype() != DType::kF32) refuse_int8();
    pool_->forward(x, y);
    ran_ = true;
  }
  std::string kernel() const override { return ran_ ? "fp32 pooling (cudnn)" : ""; }

 private:
  std::unique_ptr<PoolOp> pool_;
  bool ran_ = false;
};

}  // namespace

std::unique_ptr<InferenceOp> make_inference_dense_op(CudaContext& ctx, InferenceDenseSpec spec) {
  if (spec.int8) refuse_int8();
  return std::make_unique<CudaInferenceDenseOp>(ctx, spec);
}
std::unique_ptr<InferenceConvOp> make_inference_conv_op(CudaContext& ctx, InferenceConvSpec spec) {
  if (spec.int8) refuse_int8();
  return std::make_unique<CudaInferenceConvOp>(ctx, spec);
}
std::unique_ptr<InferenceOp> make_inference_pool_op(CudaContext& ctx, const InferencePoolSpec& spec) {
  return std::make_unique<CudaInferencePoolOp>(ctx, spec);
}

}  // namespace anneal::cuda
