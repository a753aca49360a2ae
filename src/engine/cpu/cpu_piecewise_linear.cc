// The piecewise-linear encoding of numeric features (PiecewiseLinearOp,
// anneal/backend.h) on the CPU: plain loops over each feature's bins, the
// arithmetic of anneal/piecewise_linear.h. Activations are fp32 or bf16
// (the arithmetic is fp32 either way); the edges fp32.
//
// Threads: rows are shared out schedule(static) and each output element is
// computed by one thread from its own inputs, so every result is the same
// bits for any thread count, and a row's forward is the same bits in any
// batch.
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/cpu_ops.h"
#include "anneal/piecewise_linear.h"

namespace anneal::cpu {
namespace {


// Small batches are not worth waking the OpenMP team for.
constexpr std::int64_t kPleParallelThreshold = 1 << 14;

class CpuPiecewiseLinearOp final : public PiecewiseLinearOp {
 public:
  CpuPiecewiseLinearOp(CpuContext& ctx, const PiecewiseLinearSpec& spec)
      : ctx_(ctx), f_(spec.features), t_(spec.bins),
        edges_md_(plain_md(Dims{spec.features, spec.bins + 1}, DType::kF32)),
        bins_(std::size_t(spec.features * spec.bins)) {
    if (f_ < 1 || t_ < 1) throw usage_error("ple: needs at least one feature and one bin");
  }

  void shape_edges(Tensor& edges) override {
    edges.reshape(Dims{f_, t_ + 1}, DType::kF32, make_layout(edges_md_), *ctx_.allocator);
  }

  // x (N, F) -> y (N, F·T): y[n][f·T + t] = clamp((x − b[f][t])·(1/w), lo, hi)
  void forward(const Tensor& x, const Tensor& edges, Tensor& y) override {
    const std::int64_t n = rows_of(x);
    const void* xp = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), converted_x_);
    read_bins(edges);
    shape_output(ctx_, y, Dims{n, f_ * t_}, cached_plain_layout(y_layout_, Dims{n, f_ * t_}, x.dtype()));
    const std::int64_t f = f_, t = t_;
    const PiecewiseBin* bins = bins_.data();
    with_storage(x.dtype(), "ple", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      T* out = static_cast<T*>(y.data());
#pragma omp parallel for schedule(static) if (n * f * t >= kPleParallelThreshold)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < f; ++i) {
          const float v = load(in, r * f + i);
          const std::int64_t base = (r * f + i) * t;
          for (std::int64_t j = 0; j < t; ++j) store(out, base + j, piecewise_value(bins[i * t + j], v));
        }
    });
  }

  // dx (N, F) = Σ_t dy[n][f·T + t]·∂y/∂x, the t in order, in x's layout
  void backward_data(const Tensor& x, const Tensor& dy, const Tensor& edges, Tensor& dx) override {
    const std::int64_t n = rows_of(x);
    const MemDesc x_plain = plain_md(x.dims(), x.dtype());
    const void* xp = conform(ctx_, reorders_, x, x_plain, converted_x_);
    const void* gp = conform(ctx_, reorders_, dy, plain_md(Dims{n, f_ * t_}, x.dtype()), converted_dy_);
    read_bins(edges);
    shape_output(ctx_, dx, x.dims(), std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout()));
    // dx mirrors x: written plain, then reordered when x was not plain.
    const bool direct = md_of(x) == x_plain;
    void* dxp = direct ? dx.data() : plain_dx_.ensure(x_plain.get_size(), *ctx_.allocator);
    const std::int64_t f = f_, t = t_;
    const PiecewiseBin* bins = bins_.data();
    with_storage(x.dtype(), "ple", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      const T* g = static_cast<const T*>(gp);
      T* out = static_cast<T*>(dxp);
#pragma omp parallel for schedule(static) if (n * f * t >= kPleParallelThreshold)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < f; ++i) {
          const float v = load(in, r * f + i);
          const std::int64_t base = (r * f + i) * t;
          float sum = 0;
          for (std::int64_t j = 0; j < t; ++j) sum += load(g, base + j) * piecewise_slope(bins[i * t + j], v);
          store(out, r * f + i, sum);
        }
    });
    if (!direct) reorders_.run(ctx_, x_plain, dxp, md_of(x), dx.data());
  }

 private:
  std::int64_t rows_of(const Tensor& x) const {
    if (x.dims().rank() != 2 || x.dims()[1] != f_)
      throw failure("ple: input " + x.dims().str() + " does not match (N, " + std::to_string(f_) + ")");
    return x.dims()[0];
  }

  // Each bin's lower edge, inverse width and open ends, from the edges (F·T
  // bins, recomputed each call: the edges may have been loaded since).
  void read_bins(const Tensor& edges) {
    if (edges.dims() != Dims{f_, t_ + 1} || edges.dtype() != DType::kF32 || md_of(edges) != edges_md_)
      throw failure("ple: the edges are not shaped by shape_edges");
    const float* b = static_cast<const float*>(edges.data());
    for (std::int64_t i = 0; i < f_; ++i)
      for (std::int64_t j = 0; j < t_; ++j)
        bins_[std::size_t(i * t_ + j)] = piecewise_bin(b + i * (t_ + 1), int(j), int(t_));
  }

  CpuContext& ctx_;
  std::int64_t f_, t_;
  MemDesc edges_md_;
  std::vector<PiecewiseBin> bins_;
  std::shared_ptr<const CpuLayout> y_layout_;
  Reorders reorders_;
  ScratchBuffer converted_x_, converted_dy_, plain_dx_;
};

}  // namespace

std::unique_ptr<PiecewiseLinearOp> make_piecewise_linear_op(CpuContext& ctx, const PiecewiseLinearSpec& spec) {
  return std::make_unique<CpuPiecewiseLinearOp>(ctx, spec);
}

}  // namespace anneal::cpu
