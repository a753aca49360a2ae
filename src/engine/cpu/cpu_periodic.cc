// The periodic embedding of numeric features (PeriodicOp, anneal/backend.h)
// on the CPU: plain loops, no oneDNN primitive computes sines. Activations
// are fp32 or bf16 (the arithmetic is fp32 either way); frequencies and
// their gradient fp32.
//
// Threads: rows are shared out schedule(static) and each output element is
// computed by one thread from its own inputs; the frequency gradient's sums
// over the batch run in row order inside one thread per feature. So every
// result is the same bits for any thread count, and a row's forward is the
// same bits in any batch.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

// Small batches are not worth waking the OpenMP team for.
constexpr std::int64_t kParallelThreshold = 1 << 14;

class CpuPeriodicOp final : public PeriodicOp {
 public:
  CpuPeriodicOp(CpuContext& ctx, const PeriodicSpec& spec)
      : ctx_(ctx), f_(spec.features), k_(spec.frequencies),
        params_md_(plain_md(Dims{spec.features, spec.frequencies}, DType::kF32)),
        w_(std::size_t(spec.features * spec.frequencies)) {
    if (f_ < 1 || k_ < 1) throw usage_error("periodic: needs at least one feature and one frequency");
  }

  void shape_parameters(Tensor& frequencies) override {
    frequencies.reshape(Dims{f_, k_}, DType::kF32, make_layout(params_md_), *ctx_.allocator);
  }

  // x (N, F) -> y (N, F·2K): y[n][f·2K + j] = sin(w·x), y[n][f·2K + K + j] = cos(w·x)
  void forward(const Tensor& x, const Tensor& frequencies, Tensor& y) override {
    const std::int64_t n = rows_of(x);
    const void* xp = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), converted_x_);
    angular_frequencies(frequencies);
    shape_output(ctx_, y, Dims{n, f_ * 2 * k_}, cached_plain_layout(y_layout_, Dims{n, f_ * 2 * k_}, x.dtype()));
    const std::int64_t f = f_, k = k_;
    const float* w = w_.data();
    with_storage(x.dtype(), "periodic", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      T* out = static_cast<T*>(y.data());
#pragma omp parallel for schedule(static) if (n * f * k >= kParallelThreshold)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < f; ++i) {
          const float v = load(in, r * f + i);
          const std::int64_t base = (r * f + i) * 2 * k;
          for (std::int64_t j = 0; j < k; ++j) {
            const float theta = w[i * k + j] * v;
            store(out, base + j, std::sin(theta));
            store(out, base + k + j, std::cos(theta));
          }
        }
    });
  }

  // d = g_s·cos θ − g_c·sin θ;  dx (N, F) = Σ_j w[f][j]·d, in x's layout
  void backward_data(const Tensor& x, const Tensor& dy, const Tensor& frequencies, Tensor& dx) override {
    const std::int64_t n = rows_of(x);
    const MemDesc x_plain = plain_md(x.dims(), x.dtype());
    const void* xp = conform(ctx_, reorders_, x, x_plain, converted_x_);
    const void* gp = conform(ctx_, reorders_, dy, plain_md(Dims{n, f_ * 2 * k_}, x.dtype()), converted_dy_);
    angular_frequencies(frequencies);
    shape_output(ctx_, dx, x.dims(), std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout()));
    // dx mirrors x: written plain, then reordered when x was not plain.
    const bool direct = md_of(x) == x_plain;
    void* dxp = direct ? dx.data() : plain_dx_.ensure(x_plain.get_size(), *ctx_.allocator);
    const std::int64_t f = f_, k = k_;
    const float* w = w_.data();
    with_storage(x.dtype(), "periodic", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      const T* g = static_cast<const T*>(gp);
      T* out = static_cast<T*>(dxp);
#pragma omp parallel for schedule(static) if (n * f * k >= kParallelThreshold)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t i = 0; i < f; ++i) {
          const float v = load(in, r * f + i);
          const std::int64_t base = (r * f + i) * 2 * k;
          float sum = 0;
          for (std::int64_t j = 0; j < k; ++j) {
            const float theta = w[i * k + j] * v;
            const float d = load(g, base + j) * std::cos(theta) - load(g, base + k + j) * std::sin(theta);
            sum += w[i * k + j] * d;
          }
          store(out, r * f + i, sum);
        }
    });
    if (!direct) reorders_.run(ctx_, x_plain, dxp, md_of(x), dx.data());
  }

  // dc (F, K) (+)= 2π·Σ_n x[n][f]·d[n][f][j], the sum over n in row order (in double)
  void backward_weights(const Tensor& x, const Tensor& dy, const Tensor& frequencies, Tensor& dfrequencies,
                        bool accumulate) override {
    const std::int64_t n = rows_of(x);
    const void* xp = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), converted_x_);
    const void* gp = conform(ctx_, reorders_, dy, plain_md(Dims{n, f_ * 2 * k_}, x.dtype()), converted_dy_);
    angular_frequencies(frequencies);
    if (dfrequencies.dims() != Dims{f_, k_} || dfrequencies.dtype() != DType::kF32 || md_of(dfrequencies) != params_md_)
      throw failure("periodic: the frequency gradient is not shaped as the frequencies");
    float* dc = static_cast<float*>(dfrequencies.data());
    const std::int64_t f = f_, k = k_;
    const float* w = w_.data();
    with_storage(x.dtype(), "periodic", [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(xp);
      const T* g = static_cast<const T*>(gp);
#pragma omp parallel for schedule(static) if (n * f * k >= kParallelThreshold)
      for (std::int64_t i = 0; i < f; ++i) {
        // K running sums per feature, on the stack for the common K (a
        // thread's own vector past that).
        double small[64];
        std::vector<double> large;
        double* acc = small;
        if (k > 64) {
          large.assign(std::size_t(k), 0.0);
          acc = large.data();
        } else {
          for (std::int64_t j = 0; j < k; ++j) acc[j] = 0;
        }
        for (std::int64_t r = 0; r < n; ++r) {
          const float v = load(in, r * f + i);
          const std::int64_t base = (r * f + i) * 2 * k;
          for (std::int64_t j = 0; j < k; ++j) {
            const float theta = w[i * k + j] * v;
            const float d = load(g, base + j) * std::cos(theta) - load(g, base + k + j) * std::sin(theta);
            acc[j] += double(v) * double(d);
          }
        }
        for (std::int64_t j = 0; j < k; ++j) {
          const float value = float(6.283185307179586 * acc[j]);
          dc[i * k + j] = accumulate ? dc[i * k + j] + value : value;
        }
      }
    });
  }

 private:
  std::int64_t rows_of(const Tensor& x) const {
    if (x.dims().rank() != 2 || x.dims()[1] != f_)
      throw failure("periodic: input " + x.dims().str() + " does not match (N, " + std::to_string(f_) + ")");
    return x.dims()[0];
  }

  // w = 2π·c, rounded to fp32 (periodic_angular_frequency), into w_.
  void angular_frequencies(const Tensor& frequencies) {
    if (frequencies.dims() != Dims{f_, k_} || frequencies.dtype() != DType::kF32 ||
        md_of(frequencies) != params_md_)
      throw failure("periodic: the frequencies are not shaped by shape_parameters");
    const float* c = static_cast<const float*>(frequencies.data());
    for (std::size_t i = 0; i < w_.size(); ++i) w_[i] = periodic_angular_frequency(c[i]);
  }

  CpuContext& ctx_;
  std::int64_t f_, k_;
  MemDesc params_md_;
  std::vector<float> w_;  // 2π·c, recomputed each call (F·K values)
  std::shared_ptr<const CpuLayout> y_layout_;
  Reorders reorders_;
  ScratchBuffer converted_x_, converted_dy_, plain_dx_;
};

}  // namespace

std::unique_ptr<PeriodicOp> make_periodic_op(CpuContext& ctx, const PeriodicSpec& spec) {
  return std::make_unique<CpuPeriodicOp>(ctx, spec);
}

}  // namespace anneal::cpu
