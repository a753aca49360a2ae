// The fp32 dense layer of an inference-only network (Backend::inference_dense
// without int8): pruned models' mostly-zero weights run through a CSR kernel
// when it measures faster than oneDNN's dense inner product at that batch
// size; other weights always run dense.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using tag = memory::format_tag;
using dt = memory::data_type;

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
// block of 64 samples. Compiled for AVX-512, AVX2 and baseline x86-64 (the
// project builds without -march), picked once at run time as the other
// hand-written kernels are (cpu_kernels.h: ONEDNN_MAX_CPU_ISA lowers it).
// Each acc[t] is its own sum in the same order, but AVX-512 implies FMA,
// which the compiler contracts w * x + acc into: its last bits differ from
// the AVX2 and baseline versions', which agree.
#define ANNEAL_CSR_ROW_BLOCK_LOOP                                          \
  for (std::int64_t j = 0; j < nnz; ++j) {                                 \
    const float w = values[j];                                             \
    const float* x = xt + std::int64_t(col[j]) * ld;                       \
    for (std::int64_t t = 0; t < kCsrBlock; ++t) acc[t] += w * x[t];       \
  }

__attribute__((target("avx512f"))) void csr_row_block_avx512(
    const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt, std::int64_t ld, float* acc) {
  ANNEAL_CSR_ROW_BLOCK_LOOP
}
__attribute__((target("avx2"))) void csr_row_block_avx2(
    const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt, std::int64_t ld, float* acc) {
  ANNEAL_CSR_ROW_BLOCK_LOOP
}
void csr_row_block_generic(const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt,
                           std::int64_t ld, float* acc) {
  ANNEAL_CSR_ROW_BLOCK_LOOP
}
#undef ANNEAL_CSR_ROW_BLOCK_LOOP

void csr_row_block(const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt,
                   std::int64_t ld, float* acc) {
  using Kernel = void (*)(const std::int32_t*, const float*, std::int64_t, const float*, std::int64_t, float*);
  static const Kernel kernel = kernels_use_avx512() ? csr_row_block_avx512
                               : kernels_use_avx2() ? csr_row_block_avx2
                                                    : csr_row_block_generic;
  kernel(col, values, nnz, xt, ld, acc);
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
      : ctx_(ctx), spec_(std::move(spec)), in_(spec_.in.product()) {
    const std::int64_t o = spec_.out;
    if (std::int64_t(spec_.weights.weight.size()) != o * in_ || std::int64_t(spec_.weights.bias.size()) != o)
      throw corrupt("inference: dense " + spec_.in.str() + " -> " + std::to_string(o) +
                    ": weights have the wrong size");
    // CSR only pays off on mostly-zero weights, and fuses only relu.
    candidate_ = zero_fraction(spec_.weights.weight) >= 0.5 &&
                 (spec_.fused == Activation::kNone || spec_.fused == Activation::kRelu) &&
                 spec_.sparse != SparseKernel::kDense;
    if (candidate_) csr_ = CsrMatrix::from_dense(spec_.weights.weight.data(), o, in_);
  }

  // x (N, I...) f32, any layout -> y (N, O) plain f32
  void forward(const Tensor& x, Tensor& y) override {
    const std::int64_t n = x.batch();
    Plan& plan = plan_for(n);
    // Plain (N, C, H, W) row-major is plain (N, C·H·W): the kernels read
    // either as the (N, I) matrix.
    const auto* src = static_cast<const float*>(
        conform(ctx_, reorders_, x, plain_md(x.dims(), DType::kF32), converted_x_));
    shape_output(ctx_, y, Dims{n, spec_.out}, plan.y_layout);
    if (plan.use_csr) {
      ctx_.stream.wait();  // the input must be complete before the host kernel reads it
      sparse_dense_forward(csr_, spec_.weights.bias.data(), spec_.fused == Activation::kRelu, src, n,
                           static_cast<float*>(y.data()), csr_scratch_);
    } else {
      run_dense(plan, src, static_cast<float*>(y.data()));
    }
    kernel_ = plan.kernel;
  }

  std::string kernel() const override { return kernel_; }

 private:
  struct Plan {
    std::int64_t n = 0;
    bool use_csr = false;
    const char* kernel = "";
    std::shared_ptr<const CpuLayout> y_layout;
    Exec dense;                // oneDNN's inner product (unused when use_csr)
    ScratchBuffer weights;     // W in the layout `dense` reads
  };

  void run_dense(Plan& plan, const float* x, float* y) {
    plan.dense.set(DNNL_ARG_SRC, x);
    plan.dense.set(DNNL_ARG_WEIGHTS, plan.weights.data());
    plan.dense.set(DNNL_ARG_BIAS, spec_.weights.bias.data());
    plan.dense.set(DNNL_ARG_DST, y);
    plan.dense.run(ctx_);
  }

  Plan& plan_for(std::int64_t n) {
    for (auto& p : plans_)
      if (p->n == n) return *p;
    auto plan = std::make_unique<Plan>();
    plan->n = n;
    const std::int64_t o = spec_.out;
    const MemDesc x_md({n, in_}, dt::f32, tag::ab), y_md({n, o}, dt::f32, tag::ab);
    plan->y_layout = make_layout(y_md);
    try {
      const MemDesc bias_md({o}, dt::f32, tag::a);
      dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, x_md,
                                          MemDesc({o, in_}, dt::f32, tag::any), bias_md, y_md);
      const dnnl::primitive_attr attr = fused_attr(spec_.fused);
      dnnl::inner_product_forward::primitive_desc pd(d, attr, ctx_.engine);
      plan->dense = Exec(dnnl::inner_product_forward(pd), pd, ctx_,
                         {{DNNL_ARG_SRC, x_md},
                          {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                          {DNNL_ARG_BIAS, bias_md},
                          {DNNL_ARG_DST, y_md}});
      void* w = plan->weights.ensure(pd.weights_desc().get_size(), *ctx_.allocator);
      reorder_now(ctx_, MemDesc({o, in_}, dt::f32, tag::ab), spec_.weights.weight.data(), pd.weights_desc(), w);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "inference dense " + spec_.in.str() + " -> " + std::to_string(o));
    }
    plan->kernel = "fp32 inner product";
    if (candidate_ && spec_.sparse == SparseKernel::kSparse) {
      plan->use_csr = true;
    } else if (candidate_) {
      // Time both at this batch size on a zeroed input of their own (no
      // denormals or NaNs; the real input may not exist yet).
      ScratchBuffer probe_x, probe_y;
      auto* px = static_cast<float*>(probe_x.ensure(std::size_t(n * in_) * sizeof(float), *ctx_.allocator));
      auto* py = static_cast<float*>(probe_y.ensure(std::size_t(n * o) * sizeof(float), *ctx_.allocator));
      std::memset(px, 0, std::size_t(n * in_) * sizeof(float));
      const double dense_s = median_seconds([&] {
        run_dense(*plan, px, py);
        ctx_.stream.wait();
      });
      const double csr_s = median_seconds([&] {
        sparse_dense_forward(csr_, spec_.weights.bias.data(), spec_.fused == Activation::kRelu, px, n, py,
                             csr_scratch_);
      });
      plan->use_csr = csr_s < dense_s;
      if (!plan->use_csr) plan->kernel = "fp32 inner product (measured faster than csr)";
    }
    if (plan->use_csr) plan->kernel = "sparse csr";
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  CpuContext& ctx_;
  InferenceDenseSpec spec_;
  std::int64_t in_;
  bool candidate_ = false;  // may run CSR
  CsrMatrix csr_;
  std::vector<float> csr_scratch_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Reorders reorders_;
  ScratchBuffer converted_x_;
  std::string kernel_;
};

}  // namespace

std::unique_ptr<InferenceOp> make_sparse_dense_op(CpuContext& ctx, InferenceDenseSpec spec) {
  return std::make_unique<CpuSparseDenseOp>(ctx, std::move(spec));
}

}  // namespace anneal::cpu
