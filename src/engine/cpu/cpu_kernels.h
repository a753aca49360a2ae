// Hand-written kernels for the CPU backend (the optimizers' elementwise
// updates, the int8 im2col gather), compiled twice (AVX-512
// and baseline x86-64) and picked at run time, since the project builds
// without -march: AVX-512 where the CPU has it and oneDNN uses it (not under
// ONEDNN_MAX_CPU_ISA=AVX2). Each processes one contiguous range; callers split work
// across threads in fixed chunks, so results never depend on thread count.
#pragma once

#include <cstdint>

#include "engine/adam_scalars.h"

namespace anneal::cpu {

// Whether anneal's own kernels use AVX-512 here: the CPU has it and
// oneDNN's effective ISA includes it (kernel_isa() in cpu_gemm.h), so that
// ONEDNN_MAX_CPU_ISA=AVX2 runs every kernel as an AVX2-only CPU does (its
// results, e.g. the AVX-512 Adam rounds differently, can be reproduced and
// tested on a machine with AVX-512).
bool kernels_use_avx512();

struct AdamKernelArgs : engine::AdamScalars {
  float grad_scale;
};

void adam_kernel(float* w, const float* g, float* m, float* v, std::int64_t n,
                 const AdamKernelArgs& a);

struct SgdKernelArgs {
  float lr, momentum, weight_decay, grad_scale;
  bool nesterov;
};

void sgd_kernel(float* w, const float* g, float* velocity, std::int64_t n,
                const SgdKernelArgs& a);

// dst[i] = (4 bytes at src + offsets[i]) XOR flip, for i in [0, n): dst gets
// 4·n bytes. Offsets are in bytes and may be unaligned; every read must lie
// in readable memory.
void gather_dwords(const std::uint8_t* src, const std::int32_t* offsets, std::int64_t n,
                   std::uint32_t flip, std::uint8_t* dst);

}  // namespace anneal::cpu
