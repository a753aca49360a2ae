// The row-invariant matrix product behind the CPU backend's inference dense
// layers: y = x · Wᵀ + b (then relu, optionally) where each output element is
// one chain of fused multiply-adds over k = 0, 1, ..., I−1 in that order,
// starting from 0, with the bias added after the chain. A row's outputs
// therefore depend on that row's values alone: not on the other rows of the
// batch, on where the row sits in it, on the thread count, or on the vector
// width (an FMA rounds once, whichever lane or scalar unit computes it), so
// AVX-512, AVX2 and the scalar fallback give the same bits. oneDNN's inner
// product gives no such guarantee: its gemm picks blocking, kernels and
// weight layouts by the batch size (see docs/ENGINE.md, "Determinism").
//
// Speed: the weights are packed once into panels of 16 output columns, and
// register tiles of rows × panels (AVX-512: 12 × 2, AVX2: 6 × 1; fewer rows
// get more panels so a lone row still keeps a dozen FMA chains in flight)
// stream x's rows and the panels with no further copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cpu/cpu_common.h"

namespace anneal::cpu {

// The instruction set anneal's own inference kernels (this product, the
// CSR kernel of pruned layers) run: the widest the CPU has that oneDNN may
// also use, so ONEDNN_MAX_CPU_ISA=AVX2 runs and tests the AVX2 ones. They
// give the same bits on each (their arithmetic is FMA chains in a fixed
// order, which no vector width changes).
enum class KernelIsa { kAvx512, kAvx2, kScalar };
KernelIsa kernel_isa();
const char* kernel_isa_name(KernelIsa isa);  // "avx512", "avx2", "scalar"

class RowInvariantProduct {
 public:
  // W (out × in) row-major and b (out), fp32; copied and packed.
  void set_weights(const float* weights, const float* bias, std::int64_t out, std::int64_t in,
                   MemoryAllocator& allocator);
  bool empty() const { return out_ == 0; }
  // y (rows × out, row-major) = x · Wᵀ + b, then max(·, 0) when `relu`.
  // x: `rows` rows of `in` floats, `ldx` floats apart. Runs on the calling
  // thread's OpenMP team when the product is large enough to pay for it.
  void run(const float* x, std::int64_t ldx, std::int64_t rows, bool relu, float* y) const;

 private:
  std::int64_t out_ = 0, in_ = 0, panels_ = 0;
  ScratchBuffer packed_;  // panels_ × in_ × 16 floats: panel p, row k = W[16p .. 16p+15][k]
  ScratchBuffer bias_;    // panels_ × 16 floats, zero past out_
};

// A dense layer's inference forward on RowInvariantProduct, for any input:
// y (N, O) plain, of dtype `compute`, = act(x · Wᵀ + b) with x (N, I...) f32
// or bf16 in any layout (read in row-major C, H, W order). Under bf16
// compute the weights and an f32 x are rounded to bf16 first, as the
// trainable op's bf16 working copies are, and the products, exact in fp32,
// are summed in fp32, the activation applied, then y rounded to bf16. relu
// runs in the product's last step; tanh and sigmoid are oneDNN's eltwise
// on the fp32 result, element by element (each element's bits are its own
// value's: the kernel computes every element, tails included, alike).
class InvariantDense {
 public:
  InvariantDense(CpuContext& ctx, std::int64_t out, Activation fused, DType compute);
  // W (O, I) plain fp32 on the host, b (O); copied.
  void set_weights(const float* weights, const float* bias, std::int64_t in);
  bool has_weights() const { return !product_.empty(); }
  void forward(const Tensor& x, Tensor& y);

 private:
  struct ActivationPlan {
    std::int64_t elements = 0;
    Exec exec;
  };
  CpuContext& ctx_;
  std::int64_t out_, in_ = 0;
  Activation fused_;
  DType compute_;
  RowInvariantProduct product_;
  std::vector<std::unique_ptr<ActivationPlan>> activations_;  // tanh/sigmoid, by element count
  Reorders reorders_;
  ScratchBuffer rows_, result_;
  std::int64_t layout_rows_ = -1;  // y's layout, kept for the latest batch size
  std::shared_ptr<const CpuLayout> layout_;
};

}  // namespace anneal::cpu
