// The fp32 dense layer of an inference-only network (Backend::inference_dense
// without int8): pruned models' mostly-zero weights (kCsrZeroFraction) run
// through a CSR kernel, other weights through the dense product
// (RowInvariantProduct).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

// Compressed sparse rows of a (rows, cols) matrix: the nonzeros of row r are
// values[row_ptr[r] .. row_ptr[r+1]) at columns col[...].
struct CsrMatrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int64_t> row_ptr;
  std::vector<std::int32_t> col;
  std::vector<float> values;

  static CsrMatrix from_dense(const float* w, std::int64_t rows, std::int64_t cols) {
    CsrMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.row_ptr.reserve(std::size_t(rows + 1));
    m.row_ptr.push_back(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c)
        if (const float v = w[r * cols + c]; v != 0.0f) {
          m.col.push_back(std::int32_t(c));
          m.values.push_back(v);
        }
      m.row_ptr.push_back(std::int64_t(m.values.size()));
    }
    return m;
  }
};

// The CSR kernels compute every output as one chain of fused multiply-adds
// over its row's nonzeros in order, from the bias: acc = fma(w_j, x[col_j],
// acc), then relu as (acc > 0 ? acc : 0). Whole blocks of kCsrBlock samples
// run it in vector lanes (one sample per lane) over x transposed; the
// samples past the last whole block run it one sample at a time straight
// from x. Both are the same arithmetic, so a sample's outputs are the same
// bits whichever way it ran, in whatever batch; and a lone sample costs one
// sample's work, not a padded block's.
constexpr std::int64_t kCsrBlock = 64;  // samples per block: 4 AVX-512 registers

inline float relu_of(float v) { return v > 0.0f ? v : 0.0f; }

// acc[0..64) = fma(values[j], xt[col[j]·ld + t], acc[t]) for j in order:
// one output neuron over a block of 64 samples.
__attribute__((target("avx512f"))) void csr_block_avx512(const std::int32_t* col, const float* values,
                                                         std::int64_t nnz, const float* xt, std::int64_t ld,
                                                         float* acc) {
  __m512 a0 = _mm512_loadu_ps(acc), a1 = _mm512_loadu_ps(acc + 16), a2 = _mm512_loadu_ps(acc + 32),
         a3 = _mm512_loadu_ps(acc + 48);
  for (std::int64_t j = 0; j < nnz; ++j) {
    const __m512 w = _mm512_set1_ps(values[j]);
    const float* x = xt + std::int64_t(col[j]) * ld;
    a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x), a0);
    a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + 16), a1);
    a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + 32), a2);
    a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + 48), a3);
  }
  _mm512_storeu_ps(acc, a0);
  _mm512_storeu_ps(acc + 16, a1);
  _mm512_storeu_ps(acc + 32, a2);
  _mm512_storeu_ps(acc + 48, a3);
}

__attribute__((target("avx2,fma"))) void csr_block_avx2(const std::int32_t* col, const float* values,
                                                        std::int64_t nnz, const float* xt, std::int64_t ld,
                                                        float* acc) {
  __m256 a[8];
  for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(acc + 8 * v);
  for (std::int64_t j = 0; j < nnz; ++j) {
    const __m256 w = _mm256_set1_ps(values[j]);
    const float* x = xt + std::int64_t(col[j]) * ld;
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) a[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + 8 * v), a[v]);
  }
  for (int v = 0; v < 8; ++v) _mm256_storeu_ps(acc + 8 * v, a[v]);
}

void csr_block_scalar(const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt,
                      std::int64_t ld, float* acc) {
  for (std::int64_t j = 0; j < nnz; ++j) {
    const float* x = xt + std::int64_t(col[j]) * ld;
    for (std::int64_t t = 0; t < kCsrBlock; ++t) acc[t] = std::fma(values[j], x[t], acc[t]);
  }
}

// One sample's outputs y[0..out) from its row x, the same chains. Eight
// outputs advance together, a nonzero of each in turn, so eight chains are
// in flight instead of one (each chain still takes its nonzeros in order);
// each finishes its own tail alone. Always inlined: into the FMA build its
// std::fma is the fma instruction, into the scalar one a libm call.
__attribute__((always_inline)) inline void csr_sample(const std::int64_t* row_ptr, const std::int32_t* col,
                                                      const float* values, std::int64_t out, const float* bias,
                                                      bool relu, const float* x, float* y) {
  constexpr int kWays = 8;
  std::int64_t o = 0;
  for (; o + kWays <= out; o += kWays) {
    float acc[kWays];
    std::int64_t at[kWays], end[kWays], common = row_ptr[o + 1] - row_ptr[o];
    for (int i = 0; i < kWays; ++i) {
      acc[i] = bias[o + i];
      at[i] = row_ptr[o + i];
      end[i] = row_ptr[o + i + 1];
      common = end[i] - at[i] < common ? end[i] - at[i] : common;
    }
    for (std::int64_t k = 0; k < common; ++k)
#pragma GCC unroll 8
      for (int i = 0; i < kWays; ++i) acc[i] = std::fma(values[at[i] + k], x[col[at[i] + k]], acc[i]);
    for (int i = 0; i < kWays; ++i) {
      for (std::int64_t j = at[i] + common; j < end[i]; ++j) acc[i] = std::fma(values[j], x[col[j]], acc[i]);
      y[o + i] = relu ? relu_of(acc[i]) : acc[i];
    }
  }
  for (; o < out; ++o) {
    float acc = bias[o];
    for (std::int64_t j = row_ptr[o]; j < row_ptr[o + 1]; ++j) acc = std::fma(values[j], x[col[j]], acc);
    y[o] = relu ? relu_of(acc) : acc;
  }
}

__attribute__((target("avx2,fma"))) void csr_sample_fma(const std::int64_t* row_ptr, const std::int32_t* col,
                                                        const float* values, std::int64_t out, const float* bias,
                                                        bool relu, const float* x, float* y) {
  csr_sample(row_ptr, col, values, out, bias, relu, x, y);
}

void csr_sample_scalar(const std::int64_t* row_ptr, const std::int32_t* col, const float* values,
                       std::int64_t out, const float* bias, bool relu, const float* x, float* y) {
  csr_sample(row_ptr, col, values, out, bias, relu, x, y);
}

// y (n, O) = act(x (n, I) · Wᵀ + b) with W in CSR (O rows, I columns); act is
// relu when `relu`, else identity. `scratch` is reused between calls.
void sparse_dense_forward(const CsrMatrix& w, const float* bias, bool relu, const float* x,
                          std::int64_t n, float* y, std::vector<float>& scratch) {
  const std::int64_t in = w.cols, out = w.rows;
  const KernelIsa isa = kernel_isa();
  const bool team = omp_get_max_threads() > 1;
  // xt (I, whole): the whole blocks' samples transposed, so each nonzero
  // w[o, i] multiplies one contiguous run of samples.
  const std::int64_t blocks = n / kCsrBlock, whole = blocks * kCsrBlock;
  if (blocks > 0) {
    scratch.resize(std::size_t(in * whole));
    float* xt = scratch.data();
#pragma omp parallel for schedule(static) if (team)
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t s = 0; s < whole; ++s) xt[i * whole + s] = x[s * in + i];
    auto* block = isa == KernelIsa::kAvx512 ? csr_block_avx512
                  : isa == KernelIsa::kAvx2 ? csr_block_avx2
                                            : csr_block_scalar;
#pragma omp parallel for schedule(static) collapse(2) if (team)
    for (std::int64_t b = 0; b < blocks; ++b)
      for (std::int64_t o = 0; o < out; ++o) {
        alignas(64) float acc[kCsrBlock];
        std::fill_n(acc, kCsrBlock, bias[o]);
        const std::int64_t begin = w.row_ptr[std::size_t(o)], end = w.row_ptr[std::size_t(o) + 1];
        block(w.col.data() + begin, w.values.data() + begin, end - begin, xt + b * kCsrBlock, whole, acc);
        for (std::int64_t t = 0; t < kCsrBlock; ++t)
          y[(b * kCsrBlock + t) * out + o] = relu ? relu_of(acc[t]) : acc[t];
      }
  }
  auto* sample = isa == KernelIsa::kScalar ? csr_sample_scalar : csr_sample_fma;
#pragma omp parallel for schedule(static) if (team && n - whole > 1)
  for (std::int64_t s = whole; s < n; ++s)
    sample(w.row_ptr.data(), w.col.data(), w.values.data(), out, bias, relu, x + s * in, y + s * out);
}

class CpuSparseDenseOp final : public InferenceOp {
 public:
  CpuSparseDenseOp(CpuContext& ctx, InferenceDenseSpec spec)
      : ctx_(ctx), spec_(std::move(spec)), in_(spec_.in.product()), dense_(ctx, spec_.out, spec_.fused, DType::kF32) {
    const std::int64_t o = spec_.out;
    if (std::int64_t(spec_.weights.weight.size()) != o * in_ || std::int64_t(spec_.weights.bias.size()) != o)
      throw corrupt("inference: dense " + spec_.in.str() + " -> " + std::to_string(o) +
                    ": weights have the wrong size");
    // CSR only pays off on mostly-zero weights, and fuses only relu.
    zero_fraction_ = zero_fraction(spec_.weights.weight);
    candidate_ = zero_fraction_ >= 0.5 &&
                 (spec_.fused == Activation::kNone || spec_.fused == Activation::kRelu) &&
                 spec_.sparse != SparseKernel::kDense;
    if (candidate_) csr_ = CsrMatrix::from_dense(spec_.weights.weight.data(), o, in_);
    dense_.set_weights(spec_.weights.weight.data(), spec_.weights.bias.data(), in_);
  }

  // x (N, I...) f32, any layout -> y (N, O) plain f32. One kernel for every
  // batch size (chosen at the first forward), so a sample's output is the
  // same bits in any batch: both kernels compute each sample on its own.
  void forward(const Tensor& x, Tensor& y) override {
    if (x.dims().without_batch() != spec_.in || x.dtype() != DType::kF32)
      throw failure("inference dense: input " + x.dims().str() + " does not match f32 " + spec_.in.str());
    if (kernel_.empty()) choose_kernel();
    if (!use_csr_) {
      dense_.forward(x, y);
      return;
    }
    const std::int64_t n = x.batch();
    // Plain (N, C, H, W) row-major is plain (N, C·H·W): the kernel reads
    // either as the (N, I) matrix.
    const auto* src = static_cast<const float*>(
        conform(ctx_, reorders_, x, plain_md(x.dims(), DType::kF32), converted_x_));
    shape_output(ctx_, y, Dims{n, spec_.out}, make_layout(plain_md(Dims{n, spec_.out}, DType::kF32)));
    ctx_.stream.wait();  // the input must be complete before the host kernel reads it
    sparse_dense_forward(csr_, spec_.weights.bias.data(), spec_.fused == Activation::kRelu, src, n,
                         static_cast<float*>(y.data()), csr_scratch_);
  }

  std::string kernel() const override { return kernel_; }

 private:
  // By the weights alone (SparseKernel::kAuto): the same kernel, and so
  // the same bits, in every process and for every batch size.
  void choose_kernel() {
    use_csr_ = candidate_ && (spec_.sparse == SparseKernel::kSparse ||
                              (spec_.sparse == SparseKernel::kAuto && zero_fraction_ >= kCsrZeroFraction));
    kernel_ = use_csr_ ? "sparse csr" : "fp32 inner product";
  }

  CpuContext& ctx_;
  InferenceDenseSpec spec_;
  std::int64_t in_;
  double zero_fraction_ = 0;  // of the weights
  bool candidate_ = false;    // may run CSR
  bool use_csr_ = false;
  CsrMatrix csr_;
  std::vector<float> csr_scratch_;
  InvariantDense dense_;
  Reorders reorders_;
  ScratchBuffer converted_x_;
  std::string kernel_;  // empty until the first forward chooses
};

}  // namespace

std::unique_ptr<InferenceOp> make_sparse_dense_op(CpuContext& ctx, InferenceDenseSpec spec) {
  return std::make_unique<CpuSparseDenseOp>(ctx, std::move(spec));
}

}  // namespace anneal::cpu
