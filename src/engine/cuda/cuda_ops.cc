// The CUDA backend's pooling (cuDNN), eltwise and normalization ops (the
// backend's own kernels, cuda_kernels.cu); see cuda_ops.h.
#include "engine/cuda/cuda_ops.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "engine/cuda/cuda_kernels.h"

namespace anneal::cuda {
namespace {

using kernels::activations;

// ---- Pooling ----------------------------------------------------------------------

class CudaPoolOp final : public PoolOp {
 public:
  CudaPoolOp(CudaContext& ctx, const PoolSpec& spec) : ctx_(ctx), spec_(spec), kept_(*ctx.allocator) {
    const auto [c, h, w] = image_dims(spec.in, "pool");
    c_ = c, h_ = h, w_ = w;
    const int k = kernel_count(spec.kernel, "pool window"), s = kernel_count(spec.stride, "pool stride");
    if (k < 1 || s < 1 || k > h || k > w)
      throw usage_error("pool: a " + std::to_string(k) + "x" + std::to_string(k) + " window does not fit a " +
                        std::to_string(h) + "x" + std::to_string(w) + " image");
    ho_ = (h - k) / s + 1;
    wo_ = (w - k) / s + 1;
    check(cudnnCreatePoolingDescriptor(&pool_), "pooling descriptor");
    // Average pooling has no padding here, so "including padding" divides
    // by K·K, the same as the CPU backend.
    check(cudnnSetPooling2dDescriptor(pool_,
                                      spec.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                               : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                      CUDNN_NOT_PROPAGATE_NAN, k, k, 0, 0, s, s),
          "pooling shape");
  }
  ~CudaPoolOp() override { cudnnDestroyPoolingDescriptor(pool_); }
  CudaPoolOp(const CudaPoolOp&) = delete;
  CudaPoolOp& operator=(const CudaPoolOp&) = delete;

  void forward(const Tensor& x, Tensor& y) override {
    if (x.dims().rank() != 4 || x.dims().without_batch() != spec_.in)
      throw failure("pool: input " + x.dims().str() + " does not match " + spec_.in.str());
    const int n = kernel_count(x.batch(), "pool batch");
    set_batch(n, x.dtype());
    shape_plain(y, Dims{n, c_, ho_, wo_}, x.dtype(), *ctx_.allocator);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnPoolingForward(ctx_.dnn, pool_, &one, x_.get(), x.data(), &zero, y_.get(), y.data()),
          "pooling forward");
    // cuDNN's backward reads the forward output; keep a copy, since the
    // caller may reuse y before backward runs.
    check(cudaMemcpyAsync(kept_.ensure(y.bytes()), y.data(), y.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream),
          "keeping the pooling output");
  }

  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    const int n = kernel_count(x.batch(), "pool batch");
    if (n != batch_ || x.dtype() != dtype_ || dy.dtype() != dtype_ || kept_.data() == nullptr)
      throw failure("pool: backward without a forward of this batch and dtype");
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnPoolingBackward(ctx_.dnn, pool_, &one, y_.get(), kept_.data(), y_.get(), dy.data(), x_.get(),
                               x.data(), &zero, x_.get(), dx.data()),
          "pooling backward");
  }

 private:
  void set_batch(int n, DType dtype) {
    if (n == batch_ && dtype == dtype_) return;
    x_.set(n, c_, h_, w_, dtype);
    y_.set(n, c_, ho_, wo_, dtype);
    batch_ = n;
    dtype_ = dtype;
  }

  CudaContext& ctx_;
  PoolSpec spec_;
  int c_ = 0, h_ = 0, w_ = 0, ho_ = 0, wo_ = 0, batch_ = -1;
  DType dtype_ = DType::kF32;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  TensorDesc x_, y_;
  DeviceBuffer kept_;
};

// ---- Eltwise --------------------------------------------------------------------------

class CudaEltwiseOp final : public EltwiseOp {
 public:
  CudaEltwiseOp(CudaContext& ctx, const EltwiseSpec& spec) : ctx_(ctx), spec_(spec) {}

  void forward(const Tensor& x, Tensor& y) override {
    shape_plain(y, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::activation_forward(spec_.kind, activations(x), activations(y), kernel_count(x.elements(), "activation"),
                                ctx_.stream);
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    same_dtype(x, dy);
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::activation_backward(spec_.kind, activations(x), activations(dy), activations(dx),
                                 kernel_count(x.elements(), "activation"), ctx_.stream);
  }
  void backward_from_output(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    if (spec_.kind == Activation::kGelu)
      throw usage_error("gelu's derivative is not a function of its output; differentiate it from its input");
    same_dtype(y, dy);
    shape_plain(dx, y.dims(), y.dtype(), *ctx_.allocator);
    kernels::activation_backward_from_output(spec_.kind, activations(y), activations(dy), activations(dx),
                                             kernel_count(y.elements(), "activation"), ctx_.stream);
  }
  static void same_dtype(const Tensor& a, const Tensor& gradient) {
    if (a.dtype() != gradient.dtype())
      throw failure(std::string("activation: a ") + dtype_name(gradient.dtype()) + " gradient of a " +
                    dtype_name(a.dtype()) + " tensor");
  }

 private:
  CudaContext& ctx_;
  EltwiseSpec spec_;
};

// ---- Normalization ----------------------------------------------------------------------

class CudaNormOp final : public NormOp {
 public:
  CudaNormOp(CudaContext& ctx, const NormSpec& spec, bool layer_norm)
      : ctx_(ctx), spec_(spec), layer_norm_(layer_norm), mean_(*ctx.allocator), variance_(*ctx.allocator) {
    if (layer_norm && spec.in.rank() != 1)
      throw usage_error("layer norm: expects flat (F) input, not " + spec.in.str());
    if (spec.in.rank() != 1 && spec.in.rank() != 3)
      throw usage_error("batch norm: expects (F) or (C, H, W) input, not " + spec.in.str());
  }

  void shape_parameters(Tensor& scale, Tensor& shift) override {
    shape_plain(scale, Dims{spec_.in[0]}, DType::kF32, *ctx_.allocator);
    shape_plain(shift, Dims{spec_.in[0]}, DType::kF32, *ctx_.allocator);
  }

  void forward_training(const Tensor& x, const Tensor& scale, const Tensor& shift, Tensor& y, Tensor& mean,
                        Tensor& variance) override {
    const kernels::NormShape s = shape_of(x);
    shape_plain(y, x.dims(), x.dtype(), *ctx_.allocator);
    shape_plain(mean, Dims{s.g}, DType::kF32, *ctx_.allocator);
    shape_plain(variance, Dims{s.g}, DType::kF32, *ctx_.allocator);
    kernels::norm_forward_training(s, activations(x), f32(scale, "norm scale"), f32(shift, "norm shift"),
                                   activations(y), f32(mean, "norm mean"), f32(variance, "norm variance"),
                                   ctx_.stream);
  }

  void forward_inference(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& mean,
                         const Tensor& variance, Tensor& y) override {
    const kernels::NormShape s = shape_of(x);
    shape_plain(y, x.dims(), x.dtype(), *ctx_.allocator);
    if (layer_norm_) {
      // Each sample's own statistics, into scratch.
      const std::size_t bytes = sizeof(float) * std::size_t(std::max(s.g, 1));
      kernels::norm_forward_training(s, activations(x), f32(scale, "norm scale"), f32(shift, "norm shift"),
                                     activations(y), static_cast<float*>(mean_.ensure(bytes)),
                                     static_cast<float*>(variance_.ensure(bytes)), ctx_.stream);
      return;
    }
    kernels::norm_forward_inference(s, activations(x), f32(scale, "norm scale"), f32(shift, "norm shift"),
                                    f32(mean, "norm mean"), f32(variance, "norm variance"), activations(y),
                                    ctx_.stream);
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& /*shift*/,
                const Tensor& mean, const Tensor& variance, Tensor& dx, Tensor& dscale, Tensor& dshift,
                bool accumulate) override {
    const kernels::NormShape s = shape_of(x);
    if (dy.dtype() != x.dtype()) throw failure("norm: the gradient's dtype is not the input's");
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    shape_parameters(dscale, dshift);
    kernels::norm_backward(s, activations(x), activations(dy), f32(scale, "norm scale"), f32(mean, "norm mean"),
                           f32(variance, "norm variance"), activations(dx), f32(dscale, "norm scale gradient"),
                           f32(dshift, "norm shift gradient"), accumulate, ctx_.stream);
  }

 private:
  kernels::NormShape shape_of(const Tensor& x) const {
    if (x.dims().rank() < 1 || x.dims().without_batch() != spec_.in)
      throw failure("norm: input " + x.dims().str() + " does not match " + spec_.in.str());
    kernels::NormShape s;
    s.epsilon = spec_.epsilon;
    const int n = kernel_count(x.batch(), "norm batch");
    const int f = kernel_count(spec_.in[0], "norm features");
    if (layer_norm_) {
      s.a = 1, s.g = n, s.b = f, s.params_per_group = false;
    } else {
      s.a = n, s.g = f;
      s.b = spec_.in.rank() == 3 ? kernel_count(spec_.in[1] * spec_.in[2], "norm image") : 1;
      s.params_per_group = true;
    }
    kernel_count(std::int64_t(s.a) * s.g * s.b, "norm input");
    return s;
  }

  CudaContext& ctx_;
  NormSpec spec_;
  bool layer_norm_;
  DeviceBuffer mean_, variance_;  // layer norm's inference statistics
};

// ---- Periodic embedding ------------------------------------------------------------------

class CudaPeriodicOp final : public PeriodicOp {
 public:
  CudaPeriodicOp(CudaContext& ctx, const PeriodicSpec& spec) : ctx_(ctx), spec_(spec) {
    if (spec.features < 1 || spec.frequencies < 1)
      throw usage_error("periodic: needs at least one feature and one frequency");
    f_ = kernel_count(spec.features, "periodic features");
    k_ = kernel_count(spec.frequencies, "periodic frequencies");
    kernel_count(spec.features * spec.frequencies, "periodic frequencies");
  }

  void shape_parameters(Tensor& frequencies) override {
    shape_plain(frequencies, Dims{spec_.features, spec_.frequencies}, DType::kF32, *ctx_.allocator);
  }

  // x (N, F) -> y (N, F·2K): y[n][f·2K + j] = sin(w·x), y[n][f·2K + K + j] = cos(w·x)
  void forward(const Tensor& x, const Tensor& frequencies, Tensor& y) override {
    const int n = rows_of(x);
    shape_plain(y, Dims{n, spec_.features * 2 * spec_.frequencies}, x.dtype(), *ctx_.allocator);
    kernels::periodic_forward(activations(x), frequencies_of(frequencies), activations(y), n, f_, k_,
                              ctx_.stream);
  }

  // dx (N, F) = Σ_j w·(g_s·cos θ − g_c·sin θ)
  void backward_data(const Tensor& x, const Tensor& dy, const Tensor& frequencies, Tensor& dx) override {
    const int n = rows_of(x);
    check_gradient(x, dy, n);
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::periodic_backward_data(activations(x), activations(dy), frequencies_of(frequencies),
                                    activations(dx), n, f_, k_, ctx_.stream);
  }

  // dc (F, K) (+)= 2π·Σ_n x·(g_s·cos θ − g_c·sin θ)
  void backward_weights(const Tensor& x, const Tensor& dy, const Tensor& frequencies, Tensor& dfrequencies,
                        bool accumulate) override {
    const int n = rows_of(x);
    check_gradient(x, dy, n);
    if (dfrequencies.dims() != Dims{spec_.features, spec_.frequencies})
      throw failure("periodic: the frequency gradient is not shaped as the frequencies");
    float* dc = f32(dfrequencies, frequency_dims(), "periodic frequency gradient");
    kernels::periodic_backward_weights(activations(x), activations(dy), frequencies_of(frequencies), dc, n, f_, k_,
                                       accumulate, ctx_.stream);
  }

 private:
  int rows_of(const Tensor& x) const {
    if (x.dims().rank() != 2 || x.dims()[1] != spec_.features)
      throw failure("periodic: input " + x.dims().str() + " does not match (N, " + std::to_string(spec_.features) +
                    ")");
    const int n = kernel_count(x.batch(), "periodic batch");
    kernel_count(x.batch() * spec_.features * spec_.frequencies, "periodic input");
    return n;
  }
  void check_gradient(const Tensor& x, const Tensor& dy, int n) const {
    if (dy.dtype() != x.dtype() || dy.dims() != Dims{n, spec_.features * 2 * spec_.frequencies})
      throw failure("periodic: the gradient " + dy.dims().str() + " is not shaped as the output");
  }

  Dims frequency_dims() const { return Dims{spec_.features, spec_.frequencies}; }
  const float* frequencies_of(const Tensor& t) const { return f32(t, frequency_dims(), "periodic frequencies"); }

  CudaContext& ctx_;
  PeriodicSpec spec_;
  int f_ = 0, k_ = 0;
};

// ---- Piecewise-linear encoding ------------------------------------------------------------

class CudaPiecewiseLinearOp final : public PiecewiseLinearOp {
 public:
  CudaPiecewiseLinearOp(CudaContext& ctx, const PiecewiseLinearSpec& spec) : ctx_(ctx), spec_(spec) {
    if (spec.features < 1 || spec.bins < 1) throw usage_error("ple: needs at least one feature and one bin");
    f_ = kernel_count(spec.features, "ple features");
    t_ = kernel_count(spec.bins, "ple bins");
    kernel_count(spec.features * (spec.bins + 1), "ple edges");
  }

  void shape_edges(Tensor& edges) override {
    shape_plain(edges, Dims{spec_.features, spec_.bins + 1}, DType::kF32, *ctx_.allocator);
  }

  // x (N, F) -> y (N, F·T): y[n][f·T + t] = clamp((x − b[f][t])·(1/w), lo, hi)
  void forward(const Tensor& x, const Tensor& edges, Tensor& y) override {
    const int n = rows_of(x);
    shape_plain(y, Dims{n, spec_.features * spec_.bins}, x.dtype(), *ctx_.allocator);
    kernels::ple_forward(activations(x), edges_of(edges), activations(y), n, f_, t_, ctx_.stream);
  }

  // dx (N, F) = Σ_t dy·∂y/∂x
  void backward_data(const Tensor& x, const Tensor& dy, const Tensor& edges, Tensor& dx) override {
    const int n = rows_of(x);
    if (dy.dtype() != x.dtype() || dy.dims() != Dims{n, spec_.features * spec_.bins})
      throw failure("ple: the gradient " + dy.dims().str() + " is not shaped as the output");
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::ple_backward_data(activations(x), activations(dy), edges_of(edges), activations(dx), n, f_,
                               t_, ctx_.stream);
  }

 private:
  int rows_of(const Tensor& x) const {
    if (x.dims().rank() != 2 || x.dims()[1] != spec_.features)
      throw failure("ple: input " + x.dims().str() + " does not match (N, " + std::to_string(spec_.features) + ")");
    const int n = kernel_count(x.batch(), "ple batch");
    kernel_count(x.batch() * spec_.features * spec_.bins, "ple output");
    return n;
  }

  const float* edges_of(const Tensor& t) const {
    return f32(t, Dims{spec_.features, spec_.bins + 1}, "ple edges");
  }

  CudaContext& ctx_;
  PiecewiseLinearSpec spec_;
  int f_ = 0, t_ = 0;
};

// ---- Ensemble members ------------------------------------------------------------------

class CudaEnsembleOp final : public EnsembleOp {
 public:
  CudaEnsembleOp(CudaContext& ctx, const EnsembleSpec& spec) : ctx_(ctx), spec_(spec) {
    if (spec.features < 1 || spec.members < 1) throw usage_error("ensemble: needs at least one feature and one member");
    f_ = kernel_count(spec.features, "ensemble features");
    k_ = kernel_count(spec.members, "ensemble members");
    kernel_count(spec.features * spec.members, "ensemble scales");
  }

  void shape_parameters(Tensor& scales) override {
    shape_plain(scales, Dims{spec_.members, spec_.features}, DType::kF32, *ctx_.allocator);
  }

  // x (N, F) -> y (N·k, F): y[n·k + i][f] = x[n][f]·r[i][f]
  void forward(const Tensor& x, const Tensor& scales, Tensor& y) override {
    const int n = rows_of(x);
    shape_plain(y, Dims{std::int64_t(n) * spec_.members, spec_.features}, x.dtype(), *ctx_.allocator);
    kernels::ensemble_forward(activations(x), scales_of(scales), activations(y), n, f_, k_,
                              ctx_.stream);
  }

  // dx (N, F) = Σ_i dy[n·k + i][f]·r[i][f]
  void backward_data(const Tensor& dy, const Tensor& scales, const Tensor& x, Tensor& dx) override {
    const int n = rows_of(x);
    check_gradient(x, dy, n);
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::ensemble_backward_data(activations(dy), scales_of(scales), activations(dx), n, f_, k_,
                                    ctx_.stream);
  }

  // dr (k, F) (+)= Σ_n dy[n·k + i][f]·x[n][f]
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dscales, bool accumulate) override {
    const int n = rows_of(x);
    check_gradient(x, dy, n);
    if (dscales.dims() != Dims{spec_.members, spec_.features})
      throw failure("ensemble: the scale gradient is not shaped as the scales");
    float* dr = f32(dscales, scale_dims(), "ensemble scale gradient");
    kernels::ensemble_backward_weights(activations(x), activations(dy), dr, n, f_, k_, accumulate, ctx_.stream);
  }

 private:
  int rows_of(const Tensor& x) const {
    if (x.dims().rank() != 2 || x.dims()[1] != spec_.features)
      throw failure("ensemble: input " + x.dims().str() + " does not match (N, " + std::to_string(spec_.features) +
                    ")");
    const int n = kernel_count(x.batch(), "ensemble batch");
    kernel_count(x.batch() * spec_.members * spec_.features, "ensemble output");
    return n;
  }
  void check_gradient(const Tensor& x, const Tensor& dy, int n) const {
    if (dy.dtype() != x.dtype() || dy.dims() != Dims{std::int64_t(n) * spec_.members, spec_.features})
      throw failure("ensemble: the gradient " + dy.dims().str() + " is not shaped as the output");
  }

  Dims scale_dims() const { return Dims{spec_.members, spec_.features}; }
  const float* scales_of(const Tensor& t) const { return f32(t, scale_dims(), "ensemble scales"); }

  CudaContext& ctx_;
  EnsembleSpec spec_;
  int f_ = 0, k_ = 0;
};

class CudaMemberDenseOp final : public MemberDenseOp {
 public:
  CudaMemberDenseOp(CudaContext& ctx, const MemberDenseSpec& spec) : ctx_(ctx), spec_(spec) {
    if (spec.members < 1 || spec.in < 1 || spec.out < 1)
      throw usage_error("member dense: needs members, inputs and outputs");
    k_ = kernel_count(spec.members, "member dense members");
    in_ = kernel_count(spec.in, "member dense inputs");
    out_ = kernel_count(spec.out, "member dense outputs");
    kernel_count(spec.members * spec.out * spec.in, "member dense weights");
  }

  void shape_parameters(Tensor& weight, Tensor& bias) override {
    shape_plain(weight, Dims{spec_.members, spec_.out, spec_.in}, DType::kF32, *ctx_.allocator);
    shape_plain(bias, Dims{spec_.members, spec_.out}, DType::kF32, *ctx_.allocator);
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) override {
    const int rows = rows_of(x, spec_.in, "input");
    shape_plain(y, Dims{rows, spec_.out}, x.dtype(), *ctx_.allocator);
    kernels::member_dense_forward(activations(x), weights_of(weight), f32(bias, bias_dims(), "member dense biases"),
                                  activations(y), rows, in_, out_, k_, ctx_.stream);
  }

  void backward_data(const Tensor& dy, const Tensor& weight, const Tensor& x, Tensor& dx) override {
    const int rows = rows_of(x, spec_.in, "input");
    if (rows_of(dy, spec_.out, "gradient") != rows || dy.dtype() != x.dtype())
      throw failure("member dense: the gradient " + dy.dims().str() + " is not shaped as the output");
    shape_plain(dx, x.dims(), x.dtype(), *ctx_.allocator);
    kernels::member_dense_backward_data(activations(dy), weights_of(weight), activations(dx), rows, in_, out_, k_,
                                        ctx_.stream);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    const int rows = rows_of(x, spec_.in, "input");
    if (rows_of(dy, spec_.out, "gradient") != rows || dy.dtype() != x.dtype())
      throw failure("member dense: the gradient " + dy.dims().str() + " is not shaped as the output");
    float* dw = f32(dweight, weight_dims(), "member dense weight gradient");
    float* db = f32(dbias, bias_dims(), "member dense bias gradient");
    kernels::member_dense_backward_weights(activations(x), activations(dy), dw, db, rows, in_, out_, k_, accumulate,
                                           ctx_.stream);
  }

 private:
  int rows_of(const Tensor& t, std::int64_t width, const char* what) const {
    if (t.dims().rank() != 2 || t.dims()[1] != width || t.batch() % spec_.members != 0)
      throw failure(std::string("member dense: ") + what + " " + t.dims().str() + " is not (N·" +
                    std::to_string(spec_.members) + ", " + std::to_string(width) + ")");
    kernel_count(t.batch() * width, "member dense rows");
    return kernel_count(t.batch(), "member dense rows");
  }

  Dims weight_dims() const { return Dims{spec_.members, spec_.out, spec_.in}; }
  Dims bias_dims() const { return Dims{spec_.members, spec_.out}; }
  const float* weights_of(const Tensor& t) const { return f32(t, weight_dims(), "member dense weights"); }

  CudaContext& ctx_;
  MemberDenseSpec spec_;
  int k_ = 0, in_ = 0, out_ = 0;
};

}  // namespace

std::unique_ptr<EltwiseOp> make_eltwise_op(CudaContext& ctx, const EltwiseSpec& spec) {
  return std::make_unique<CudaEltwiseOp>(ctx, spec);
}
std::unique_ptr<PoolOp> make_pool_op(CudaContext& ctx, const PoolSpec& spec) {
  return std::make_unique<CudaPoolOp>(ctx, spec);
}
std::unique_ptr<NormOp> make_batch_norm_op(CudaContext& ctx, const NormSpec& spec) {
  return std::make_unique<CudaNormOp>(ctx, spec, false);
}
std::unique_ptr<NormOp> make_layer_norm_op(CudaContext& ctx, const NormSpec& spec) {
  return std::make_unique<CudaNormOp>(ctx, spec, true);
}

std::unique_ptr<PeriodicOp> make_periodic_op(CudaContext& ctx, const PeriodicSpec& spec) {
  return std::make_unique<CudaPeriodicOp>(ctx, spec);
}

std::unique_ptr<PiecewiseLinearOp> make_piecewise_linear_op(CudaContext& ctx, const PiecewiseLinearSpec& spec) {
  return std::make_unique<CudaPiecewiseLinearOp>(ctx, spec);
}

std::unique_ptr<EnsembleOp> make_ensemble_op(CudaContext& ctx, const EnsembleSpec& spec) {
  return std::make_unique<CudaEnsembleOp>(ctx, spec);
}

std::unique_ptr<MemberDenseOp> make_member_dense_op(CudaContext& ctx, const MemberDenseSpec& spec) {
  return std::make_unique<CudaMemberDenseOp>(ctx, spec);
}

}  // namespace anneal::cuda
