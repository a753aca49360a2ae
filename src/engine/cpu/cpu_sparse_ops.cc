// The fp32 dense layer of an inference-only network (Backend::inference_dense
// without int8): pruned models' mostly-zero weights run through a CSR kernel
// when it measures faster than the dense product (RowInvariantProduct);
// other weights always run dense.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

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

constexpr std::int64_t kCsrBlock = 64;  // samples per accumulator row: 4 AVX-512 registers

// acc[0..64) += Σ_j values[j] · xt[col[j]·ld .. +64): one output neuron over a
// block of 64 samples. Cloned for AVX-512 and AVX2 (the project builds
// without -march), picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default")))
void csr_row_block(const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt,
                   std::int64_t ld, float* acc) {
  for (std::int64_t j = 0; j < nnz; ++j) {
    const float w = values[j];
    const float* x = xt + std::int64_t(col[j]) * ld;
    for (std::int64_t t = 0; t < kCsrBlock; ++t) acc[t] += w * x[t];
  }
}

// y (n, O) = act(x (n, I) · Wᵀ + b) with W in CSR (O rows, I columns); act is
// relu when `relu`, else identity. `scratch` is reused between calls.
void sparse_dense_forward(const CsrMatrix& w, const float* bias, bool relu, const float* x,
                          std::int64_t n, float* y, std::vector<float>& scratch) {
  // xt (I, Np): x transposed and zero-padded to whole blocks, so each
  // nonzero w[o, i] adds w times one contiguous row of samples.
  const std::int64_t in = w.cols, out = w.rows;
  const std::int64_t np = (n + kCsrBlock - 1) / kCsrBlock * kCsrBlock;
  scratch.assign(std::size_t(in * np), 0.0f);
  float* xt = scratch.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t s = 0; s < n; ++s) xt[i * np + s] = x[s * in + i];
  const std::int64_t blocks = np / kCsrBlock;
#pragma omp parallel for schedule(static) collapse(2)
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t o = 0; o < out; ++o) {
      alignas(64) float acc[kCsrBlock];
      std::fill_n(acc, kCsrBlock, bias ? bias[o] : 0.0f);
      const std::int64_t begin = w.row_ptr[std::size_t(o)], end = w.row_ptr[std::size_t(o) + 1];
      csr_row_block(w.col.data() + begin, w.values.data() + begin, end - begin, xt + b * kCsrBlock, np, acc);
      const std::int64_t rows = std::min(kCsrBlock, n - b * kCsrBlock);
      for (std::int64_t t = 0; t < rows; ++t)
        y[(b * kCsrBlock + t) * out + o] = relu ? std::max(acc[t], 0.0f) : acc[t];
    }
}

// The median of 5 timed runs of f, after one untimed.
double median_seconds(const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[2];
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
    candidate_ = zero_fraction(spec_.weights.weight) >= 0.5 &&
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
  // kMeasure times both kernels once, on kMeasureRows zero rows of its own
  // (no denormals or NaNs; the real input may not exist yet), whatever
  // the first batch's size: a choice per batch size would give a sample
  // other bits in a batch of another size.
  static constexpr std::int64_t kMeasureRows = 256;

  void choose_kernel() {
    use_csr_ = candidate_ && spec_.sparse == SparseKernel::kSparse;
    kernel_ = "fp32 inner product";
    if (candidate_ && spec_.sparse == SparseKernel::kMeasure) {
      const std::int64_t n = kMeasureRows, o = spec_.out;
      std::vector<float> px(std::size_t(n * in_), 0.0f), py(std::size_t(n * o));
      Tensor x, y;
      x.reshape(Dims{n, in_}, DType::kF32, make_layout(plain_md(Dims{n, in_}, DType::kF32)), *ctx_.allocator);
      std::fill_n(static_cast<float*>(x.data()), n * in_, 0.0f);
      const double dense_s = median_seconds([&] {
        dense_.forward(x, y);
        ctx_.stream.wait();
      });
      const double csr_s = median_seconds([&] {
        sparse_dense_forward(csr_, spec_.weights.bias.data(), spec_.fused == Activation::kRelu, px.data(), n,
                             py.data(), csr_scratch_);
      });
      use_csr_ = csr_s < dense_s;
      if (!use_csr_) kernel_ = "fp32 inner product (measured faster than csr)";
    }
    if (use_csr_) kernel_ = "sparse csr";
  }

  CpuContext& ctx_;
  InferenceDenseSpec spec_;
  std::int64_t in_;
  bool candidate_ = false;  // may run CSR
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
