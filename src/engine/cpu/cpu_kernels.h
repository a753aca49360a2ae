// Hand-written kernels for the CPU backend (the optimizers' elementwise
// updates, the int8 im2col gather), compiled for AVX-512, for baseline
// x86-64 and, for Adam, for AVX2, and picked at run time, since the project
// builds without -march: the widest the CPU has and oneDNN uses
// (kernel_isa(); AVX2 under ONEDNN_MAX_CPU_ISA=AVX2). Each processes one contiguous range; callers split work
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

// Picks the kernel by kernel_isa(): AVX-512 (rsqrt/rcp refined by Newton
// steps, about 1 ulp: its own bits), AVX2 (the scalar loop's bits exactly,
// eight lanes at a time) or the scalar loop.
void adam_kernel(float* w, const float* g, float* m, float* v, std::int64_t n,
                 const AdamKernelArgs& a);
// The scalar loop itself, whatever the CPU: what the AVX2 kernel must equal
// bit for bit (engine_kernels_test).
void adam_kernel_scalar(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamKernelArgs& a);

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
