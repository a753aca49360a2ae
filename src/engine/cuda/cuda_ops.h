// The CUDA backend's op factories (cuda_ops.cc): the Backend's layer, loss
// and inference ops over a CudaContext. Contracts in anneal/backend.h.
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
std::unique_ptr<NormOp> make_norm_op(CudaContext& ctx, const NormSpec& spec, bool layer_norm);
std::unique_ptr<LossOp> make_loss_op(CudaContext& ctx, LossKind kind, std::int64_t outputs,
                                     std::span<const float> class_weights);
std::unique_ptr<InferenceOp> make_inference_dense_op(CudaContext& ctx, InferenceDenseSpec spec);
std::unique_ptr<InferenceConvOp> make_inference_conv_op(CudaContext& ctx, InferenceConvSpec spec);
std::unique_ptr<InferenceOp> make_inference_pool_op(CudaContext& ctx, const InferencePoolSpec& spec);

}  // namespace anneal::cuda
