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
std::unique_ptr<LossOp> make_loss_op(CpuContext& ctx, LossKind kind, std::int64_t outputs);

}  // namespace anneal::cpu
