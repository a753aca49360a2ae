// Factories for the oneDNN-backed ops of the CPU backend. Every op keeps a
// reference to the CpuContext, which must outlive it (the CpuBackend owns
// the context and outlives the network that owns the ops).
#pragma once

#include <memory>

#include "anneal/backend.h"
#include "engine/cpu/cpu_common.h"

namespace anneal::cpu {

std::unique_ptr<EltwiseOp> make_eltwise_op(CpuContext& ctx, const EltwiseSpec& spec);
std::unique_ptr<DenseOp> make_dense_op(CpuContext& ctx, const DenseSpec& spec);
std::unique_ptr<ConvOp> make_conv_op(CpuContext& ctx, const ConvSpec& spec);
std::unique_ptr<PoolOp> make_pool_op(CpuContext& ctx, const PoolSpec& spec);
std::unique_ptr<NormOp> make_batch_norm_op(CpuContext& ctx, const NormSpec& spec);
std::unique_ptr<NormOp> make_layer_norm_op(CpuContext& ctx, const NormSpec& spec);
// Plain loops, not oneDNN (cpu_periodic.cc).
std::unique_ptr<PeriodicOp> make_periodic_op(CpuContext& ctx, const PeriodicSpec& spec);
// Plain loops too (cpu_piecewise_linear.cc).
std::unique_ptr<PiecewiseLinearOp> make_piecewise_linear_op(CpuContext& ctx, const PiecewiseLinearSpec& spec);
// The ensemble (cpu_ensemble.cc): the members' input scaling, their own
// output layers, and their mean (Backend::member_mean), which keeps its
// conversion buffers between calls.
std::unique_ptr<EnsembleOp> make_ensemble_op(CpuContext& ctx, const EnsembleSpec& spec);
std::unique_ptr<MemberDenseOp> make_member_dense_op(CpuContext& ctx, const MemberDenseSpec& spec);
class MemberMean {
 public:
  void run(CpuContext& ctx, const Tensor& z, std::int64_t members, Tensor& y);

 private:
  std::shared_ptr<const CpuLayout> layout_;
  Reorders reorders_;
  ScratchBuffer converted_;
};
std::unique_ptr<LossOp> make_loss_op(CpuContext& ctx, LossKind kind, std::int64_t outputs,
                                     std::span<const float> class_weights);

// Inference-only ops (cpu_inference_ops.cc dispatches int8 specs to
// cpu_int8_ops.cc and fp32 dense ones to cpu_sparse_ops.cc).
std::unique_ptr<InferenceOp> make_inference_dense_op(CpuContext& ctx, InferenceDenseSpec spec);
std::unique_ptr<InferenceConvOp> make_inference_conv_op(CpuContext& ctx, InferenceConvSpec spec);
std::unique_ptr<InferenceOp> make_inference_pool_op(CpuContext& ctx, const InferencePoolSpec& spec);
std::unique_ptr<InferenceOp> make_int8_dense_op(CpuContext& ctx, const InferenceDenseSpec& spec);
std::unique_ptr<InferenceConvOp> make_int8_conv_op(CpuContext& ctx, const InferenceConvSpec& spec);
std::unique_ptr<InferenceOp> make_sparse_dense_op(CpuContext& ctx, InferenceDenseSpec spec);

}  // namespace anneal::cpu
