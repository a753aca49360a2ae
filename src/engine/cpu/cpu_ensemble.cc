// The ensemble members' input scaling (EnsembleOp, anneal/backend.h) and
// their mean (Backend::member_mean) on the CPU: plain loops, one multiply
// or one short sum per element. Activations are fp32 or bf16 (the
// arithmetic is fp32 either way); the scales and their gradient fp32.
//
// Threads: rows are shared out schedule(static) and each output element is
// computed by one thread from its own inputs, its sums in a fixed order; the
// scale gradient's sums over the batch run in row order inside one thread
// per feature. So every result is the same bits for any thread count, and a
// sample's forward and mean are the same bits in any batch.
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

// Small batches are not worth waking the OpenMP team for.
constexpr std::int64_t kEnsembleParallelThreshold = 1 << 14;

class CpuEnsembleOp final : public EnsembleOp {
 public:
  CpuEnsembleOp(CpuContext& ctx, const EnsembleSpec& spec)
      : ctx_(ctx), f_(spec.features), k_(spec.members),
        params_md_(plain_md(Dims{spec.members, spec.features}, DType::kF32)) {
    if (f_ < 1 || k_ < 1) throw usage_error("ensemble: needs at least one feature and one member");
  }

  void shape_parameters(Tensor& scales) override {
    scales.reshape(Dims{k_, f_}, DType::kF32, make_layout(params_md_), *ctx_.allocator);
  }

  // x (N, F) -> y (N·k, F): y[n·k + i][f] = x[n][f]·r[i][f]
  void forward(const Tensor& x, const Tensor& scales, Tensor& y) override {
    const std::int64_t n = rows_of(x, "input");
    const void* xp = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), converted_x_);
    const float* r = scales_of(scales);
    const Dims out{n * k_, f_};
    shape_output(ctx_, y, out, cached_plain_layout(y_layout_, out, x.dtype()));
    const std::int64_t f = f_, k = k_;
    with_storage(x.dtype(), "ensemble", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      T* o = static_cast<T*>(y.data());
#pragma omp parallel for schedule(static) if (n * k * f >= kEnsembleParallelThreshold)
      for (std::int64_t s = 0; s < n; ++s)
        for (std::int64_t i = 0; i < k; ++i)
          for (std::int64_t j = 0; j < f; ++j) store(o, (s * k + i) * f + j, load(in, s * f + j) * r[i * f + j]);
    });
  }

  // dx (N, F) = Σ_i dy[n·k + i][f]·r[i][f], in x's layout
  void backward_data(const Tensor& dy, const Tensor& scales, const Tensor& x, Tensor& dx) override {
    const std::int64_t n = rows_of(x, "input");
    const MemDesc x_plain = plain_md(x.dims(), x.dtype());
    const void* gp = conform(ctx_, reorders_, dy, plain_md(Dims{n * k_, f_}, x.dtype()), converted_dy_);
    const float* r = scales_of(scales);
    shape_output(ctx_, dx, x.dims(), std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout()));
    // dx mirrors x: written plain, then reordered when x was not plain.
    const bool direct = md_of(x) == x_plain;
    void* dxp = direct ? dx.data() : plain_dx_.ensure(x_plain.get_size(), *ctx_.allocator);
    const std::int64_t f = f_, k = k_;
    with_storage(x.dtype(), "ensemble", [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(gp);
      T* o = static_cast<T*>(dxp);
#pragma omp parallel for schedule(static) if (n * k * f >= kEnsembleParallelThreshold)
      for (std::int64_t s = 0; s < n; ++s)
        for (std::int64_t j = 0; j < f; ++j) {
          float sum = 0;
          for (std::int64_t i = 0; i < k; ++i) sum += load(g, (s * k + i) * f + j) * r[i * f + j];
          store(o, s * f + j, sum);
        }
    });
    if (!direct) reorders_.run(ctx_, x_plain, dxp, md_of(x), dx.data());
  }

  // dr (k, F) (+)= Σ_n dy[n·k + i][f]·x[n][f], the sum over n in row order (in double)
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dscales, bool accumulate) override {
    const std::int64_t n = rows_of(x, "input");
    const void* xp = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), converted_x_);
    const void* gp = conform(ctx_, reorders_, dy, plain_md(Dims{n * k_, f_}, x.dtype()), converted_dy_);
    if (dscales.dims() != Dims{k_, f_} || dscales.dtype() != DType::kF32 || md_of(dscales) != params_md_)
      throw failure("ensemble: the scale gradient is not shaped as the scales");
    float* dr = static_cast<float*>(dscales.data());
    const std::int64_t f = f_, k = k_;
    with_storage(x.dtype(), "ensemble", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      const T* g = static_cast<const T*>(gp);
#pragma omp parallel for schedule(static) if (n * k * f >= kEnsembleParallelThreshold)
      for (std::int64_t c = 0; c < k * f; ++c) {
        const std::int64_t i = c / f, j = c % f;
        double acc = 0;
        for (std::int64_t s = 0; s < n; ++s) acc += double(load(g, (s * k + i) * f + j)) * double(load(in, s * f + j));
        dr[c] = accumulate ? dr[c] + float(acc) : float(acc);
      }
    });
  }

 private:
  std::int64_t rows_of(const Tensor& x, const char* what) const {
    if (x.dims().rank() != 2 || x.dims()[1] != f_)
      throw failure(std::string("ensemble: ") + what + " " + x.dims().str() + " does not match (N, " +
                    std::to_string(f_) + ")");
    return x.dims()[0];
  }
  const float* scales_of(const Tensor& scales) const {
    if (scales.dims() != Dims{k_, f_} || scales.dtype() != DType::kF32 || md_of(scales) != params_md_)
      throw failure("ensemble: the scales are not shaped by shape_parameters");
    return static_cast<const float*>(scales.data());
  }

  CpuContext& ctx_;
  std::int64_t f_, k_;
  MemDesc params_md_;
  std::shared_ptr<const CpuLayout> y_layout_;
  Reorders reorders_;
  ScratchBuffer converted_x_, converted_dy_, plain_dx_;
};

}  // namespace

std::unique_ptr<EnsembleOp> make_ensemble_op(CpuContext& ctx, const EnsembleSpec& spec) {
  return std::make_unique<CpuEnsembleOp>(ctx, spec);
}

void MemberMean::run(CpuContext& ctx, const Tensor& z, std::int64_t members, Tensor& y) {
  if (z.dims().rank() != 2 || members < 1 || z.dims()[0] % members != 0)
    throw usage_error("member_mean: " + z.dims().str() + " is not (N·" + std::to_string(members) + ", K)");
  const std::int64_t rows = z.dims()[0], width = z.dims()[1], n = rows / members, k = members;
  const void* zp = conform(ctx, reorders_, z, plain_md(z.dims(), z.dtype()), converted_);
  const Dims out{n, width};
  shape_output(ctx, y, out, cached_plain_layout(layout_, out, z.dtype()));
  with_storage(z.dtype(), "member_mean", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(zp);
    T* o = static_cast<T*>(y.data());
#pragma omp parallel for schedule(static) if (rows * width >= kEnsembleParallelThreshold)
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t j = 0; j < width; ++j) {
        float sum = 0;
        for (std::int64_t i = 0; i < k; ++i) sum += load(in, (s * k + i) * width + j);
        store(o, s * width + j, sum / float(k));
      }
  });
}

}  // namespace anneal::cpu
