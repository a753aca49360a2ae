// The CUDA backend's op factories: the Backend's layer, loss and inference
// ops over a CudaContext, laid out as the CPU backend's (src/engine/cpu/)
// with the same factory names. Contracts in anneal/backend.h. Every tensor
// is plain row-major (NCHW for images), which is what cuBLASLt and cuDNN
// take, so no op reorders anything.
//
//   dense    cuBLASLt matrix products accumulating in fp32 (CUBLAS_COMPUTE_32F:
//            no TF32 unless allowed), bias and activation in one kernel
//            after the product                         (cuda_weighted_ops.cc)
//   conv     cuDNN's convolution forward/backward, FMA math only (no TF32),
//            deterministic algorithms when the context asks for them; in
//            deterministic contexts the weight gradient is a cuBLASLt
//            product over the lowered (im2col) input instead
//                                                      (cuda_weighted_ops.cc)
//   pool     cuDNN pooling (max: its deterministic mode)        (cuda_ops.cc)
//   norm, eltwise, periodic, ple, ensemble   the backend's own kernels (cuda_kernels.cu)
//                                                               (cuda_ops.cc)
//   loss     the backend's own kernels                          (cuda_loss.cc)
//   inference-only dense, conv, pool: the ops above, forward on uploaded
//            weights                                   (cuda_inference_ops.cc)
//
// Under bf16 (fp16) compute, activations and their gradients are bf16
// (fp16); weights stay fp32 masters, and each op keeps a 16-bit working
// copy, refreshed when the master's version changes; weight gradients come
// out fp32.
#pragma once

#include <memory>
#include <span>

#include "anneal/backend.h"
#include "engine/cuda/cuda_common.h"

namespace anneal::cuda {

std::unique_ptr<EltwiseOp> make_eltwise_op(CudaContext& ctx, const EltwiseSpec& spec);
std::unique_ptr<DenseOp> make_dense_op(CudaContext& ctx, const DenseSpec& spec);
std::unique_ptr<ConvOp> make_conv_op(CudaContext& ctx, const ConvSpec& spec);
std::unique_ptr<PoolOp> make_pool_op(CudaContext& ctx, const PoolSpec& spec);
std::unique_ptr<NormOp> make_batch_norm_op(CudaContext& ctx, const NormSpec& spec);
std::unique_ptr<NormOp> make_layer_norm_op(CudaContext& ctx, const NormSpec& spec);
std::unique_ptr<PeriodicOp> make_periodic_op(CudaContext& ctx, const PeriodicSpec& spec);
std::unique_ptr<PiecewiseLinearOp> make_piecewise_linear_op(CudaContext& ctx, const PiecewiseLinearSpec& spec);
std::unique_ptr<EnsembleOp> make_ensemble_op(CudaContext& ctx, const EnsembleSpec& spec);
std::unique_ptr<MemberDenseOp> make_member_dense_op(CudaContext& ctx, const MemberDenseSpec& spec);
std::unique_ptr<LossOp> make_loss_op(CudaContext& ctx, LossKind kind, std::int64_t outputs,
                                     std::span<const float> class_weights);
std::unique_ptr<InferenceOp> make_inference_dense_op(CudaContext& ctx, InferenceDenseSpec spec);
std::unique_ptr<InferenceConvOp> make_inference_conv_op(CudaContext& ctx, InferenceConvSpec spec);
std::unique_ptr<InferenceOp> make_inference_pool_op(CudaContext& ctx, const InferencePoolSpec& spec);

}  // namespace anneal::cuda
