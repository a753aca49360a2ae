// The layers. Each forward is followed by its backward; the comments give
// the math and the shapes (N batch, C channels, H/W height/width, F or I/O
// features). The arithmetic itself runs in Backend ops.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "engine/layers_internal.h"
#include "engine/random.h"

namespace anneal::engine {
namespace {

std::string fmt_number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// Shapes a parameter (value + grad) and fills its value from `init`.
template <typename Init>
void init_parameter(Backend& backend, Parameter& p, Init init) {
  backend.shape_like(p.grad, p.value, DType::kF32);
  backend.fill_zero(p.grad);
  std::vector<float> host(static_cast<std::size_t>(p.value.elements()));
  for (float& v : host) v = init();
  backend.copy_from_host(host.data(), p.value);
}

// PyTorch's default for dense and conv: weights and bias ~ U(−1/√fan_in, 1/√fan_in).
void init_uniform_fan_in(Backend& backend, Parameter& weight, Parameter& bias,
                         std::int64_t fan_in, std::uint64_t seed) {
  SplitMix64 rng(seed);
  const float bound = 1.0f / std::sqrt(float(fan_in));
  auto draw = [&] { return (2.0f * rng.uniform() - 1.0f) * bound; };
  init_parameter(backend, weight, draw);
  init_parameter(backend, bias, draw);
}

// "dense(W)" with its fused activation: how a dense layer, shared or the
// members' own, is written in a spec.
std::string dense_text(std::int64_t width, Activation fused) {
  std::string s = "dense(" + std::to_string(width) + ")";
  if (fused != Activation::kNone) s += std::string(" ") + activation_name(fused);
  return s;
}

// dz = dy ⊙ act'(y) for a layer's fused activation (into `dz`), or dy itself
// without one.
const Tensor& through_activation(EltwiseOp* activation, const Tensor& y, const Tensor& dy, Tensor& dz) {
  if (activation == nullptr) return dy;
  activation->backward_from_output(y, dy, dz);
  return dz;
}

std::string param_name(int index, const char* kind, const char* role) {
  return std::to_string(index) + "." + kind + "." + role;
}

// ---- dense ------------------------------------------------------------------

class DenseLayer final : public Layer {
 public:
  DenseLayer(const LayerContext& ctx, std::int64_t width, Activation fused)
      : backend_(ctx.backend), fused_(fused) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{width};
    op_ = backend_.dense(DenseSpec{ctx.input, width, ctx.compute, fused, ctx.batch, ctx.batch_invariant});
    if (fused != Activation::kNone) activation_ = backend_.eltwise(EltwiseSpec{fused, ctx.compute});
    weight_.name = param_name(ctx.index, "dense", "weight");
    bias_.name = param_name(ctx.index, "dense", "bias");
    op_->shape_parameters(weight_.value, bias_.value);
    init_uniform_fan_in(backend_, weight_, bias_, ctx.input.product(), ctx.seed);
  }

  std::string describe() const override { return dense_text(output_shape_[0], fused_); }

  // x (N, I...) -> y (N, O):  y = act(x·Wᵀ + b),  W (O, I...), b (O)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, weight_.value, bias_.value, y_);
    return y_;
  }

  // dz = dy ⊙ act'(y)                  (N, O)   (dz = dy without activation)
  // dW (+)= dzᵀ·x   (O, I...)    db (+)= Σ_n dz   (O)
  // dx = dz·W                          (N, I...)
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    const Tensor* dz = &through_activation(activation_.get(), y_, dy, dz_);
    op_->backward_weights(*x_, *dz, weight_.grad, bias_.grad, ctx.accumulate);
    if (!need_dx) return empty_;
    op_->backward_data(*dz, weight_.value, dx_);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    out.push_back(&bias_);
  }

 private:
  Backend& backend_;
  Activation fused_;
  std::unique_ptr<DenseOp> op_;
  std::unique_ptr<EltwiseOp> activation_;
  Parameter weight_, bias_;
  const Tensor* x_ = nullptr;
  Tensor y_, dz_, dx_, empty_;
};

// ---- conv -------------------------------------------------------------------

class ConvLayer final : public Layer {
 public:
  ConvLayer(const LayerContext& ctx, std::int64_t channels, std::int64_t kernel,
            std::int64_t stride, std::int64_t pad, Activation fused, bool relu_mask_downstream)
      : backend_(ctx.backend), fused_(fused), stride_(stride), pad_(pad) {
    input_shape_ = ctx.input;
    const std::int64_t h = (ctx.input[1] + 2 * pad - kernel) / stride + 1;
    const std::int64_t w = (ctx.input[2] + 2 * pad - kernel) / stride + 1;
    output_shape_ = Dims{channels, h, w};
    op_ = backend_.conv(
        ConvSpec{ctx.input, channels, kernel, stride, pad, ctx.compute, fused, ctx.batch, ctx.batch_invariant});
    if (fused != Activation::kNone && !relu_mask_downstream)
      activation_ = backend_.eltwise(EltwiseSpec{fused, ctx.compute});
    weight_.name = param_name(ctx.index, "conv", "weight");
    bias_.name = param_name(ctx.index, "conv", "bias");
    op_->shape_parameters(weight_.value, bias_.value);
    init_uniform_fan_in(backend_, weight_, bias_, ctx.input[0] * kernel * kernel, ctx.seed);
  }

  std::string describe() const override {
    std::string s = "conv(" + std::to_string(output_shape_[0]) + "," +
                    std::to_string(weight_.value.dims()[2]);
    if (stride_ != 1) s += ",stride=" + std::to_string(stride_);
    if (pad_ != 0) s += ",pad=" + std::to_string(pad_);
    s += ")";
    if (fused_ != Activation::kNone) s += std::string(" ") + activation_name(fused_);
    return s;
  }

  // x (N, C, H, W) -> y (N, O, Ho, Wo):  y = act(W ⋆ x + b),  W (O, C, K, K), b (O)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, weight_.value, bias_.value, y_);
    return y_;
  }

  // dz = dy ⊙ act'(y)                         (N, O, Ho, Wo)
  //   (dz = dy when the maxpool after a relu has masked dy already)
  // dW (+)= Σ_n dz ⋆ x  (O, C, K, K)   db (+)= Σ_{n,h,w} dz  (O)
  // dx = dz ⋆ᵀ W  (transposed convolution)    (N, C, H, W)
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    const Tensor* dz = &through_activation(activation_.get(), y_, dy, dz_);
    op_->backward_weights(*x_, *dz, weight_.grad, bias_.grad, ctx.accumulate);
    if (!need_dx) return empty_;
    op_->backward_data(*dz, weight_.value, dx_);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    out.push_back(&bias_);
  }

 private:
  Backend& backend_;
  Activation fused_;
  std::int64_t stride_, pad_;
  std::unique_ptr<ConvOp> op_;
  std::unique_ptr<EltwiseOp> activation_;
  Parameter weight_, bias_;
  const Tensor* x_ = nullptr;
  Tensor y_, dz_, dx_, empty_;
};

// ---- maxpool / avgpool ------------------------------------------------------

class PoolLayer final : public Layer {
 public:
  PoolLayer(const LayerContext& ctx, bool max, std::int64_t kernel, std::int64_t stride,
            bool mask_relu)
      : max_(max), kernel_(kernel), stride_(stride) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input[0], (ctx.input[1] - kernel) / stride + 1,
                         (ctx.input[2] - kernel) / stride + 1};
    op_ = ctx.backend.pool(PoolSpec{ctx.input, kernel, stride, max, ctx.compute});
    if (mask_relu) relu_ = ctx.backend.eltwise(EltwiseSpec{Activation::kRelu, ctx.compute});
  }

  std::string describe() const override {
    std::string s = std::string(max_ ? "maxpool(" : "avgpool(") + std::to_string(kernel_);
    if (stride_ != kernel_) s += ",stride=" + std::to_string(stride_);
    return s + ")";
  }

  // x (N, C, H, W) -> y (N, C, Ho, Wo): max or mean over each K×K window
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, y_);
    return y_;
  }

  // max: dx routes dy to each window's argmax; avg: dx spreads dy/K² over the window
  //
  // With mask_relu, x = relu(z) from the conv before, and this also applies
  // relu's gradient: dz = maxpool'(dy ⊙ [y > 0]). It equals maxpool'(dy) ⊙
  // [x > 0] because the argmax x of each window is that window's y (and a
  // window with y = 0 sends nothing), at a quarter of the elements for a
  // 2x2 pool.
  const Tensor& backward(const Tensor& dy, const PassContext&, bool need_dx) override {
    if (!need_dx) return empty_;
    const Tensor* d = &dy;
    if (relu_) {
      relu_->backward_from_output(y_, dy, masked_dy_);
      d = &masked_dy_;
    }
    op_->backward(*x_, *d, dx_);
    return dx_;
  }

 private:
  bool max_;
  std::int64_t kernel_, stride_;
  std::unique_ptr<PoolOp> op_;
  std::unique_ptr<EltwiseOp> relu_;  // only with mask_relu
  const Tensor* x_ = nullptr;
  Tensor y_, masked_dy_, dx_, empty_;
};

// ---- relu / gelu / tanh / sigmoid -------------------------------------------

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(const LayerContext& ctx, Activation kind) : kind_(kind) {
    input_shape_ = output_shape_ = ctx.input;
    op_ = ctx.backend.eltwise(EltwiseSpec{kind, ctx.compute});
  }

  std::string describe() const override { return activation_name(kind_); }

  // y = f(x), elementwise, any shape
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, y_);
    return y_;
  }

  // dx = dy ⊙ f'(x)
  const Tensor& backward(const Tensor& dy, const PassContext&, bool need_dx) override {
    if (!need_dx) return empty_;
    op_->backward(*x_, dy, dx_);
    return dx_;
  }

 private:
  Activation kind_;
  std::unique_ptr<EltwiseOp> op_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_, empty_;
};

// ---- flatten ----------------------------------------------------------------

class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(const LayerContext& ctx) : backend_(ctx.backend) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input.product()};
  }

  std::string describe() const override { return "flatten"; }

  // x (N, C, H, W) -> y (N, C·H·W), row-major order
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    viewed_ = true;
    if (x.dims().rank() == 2) return x;
    x_ = &x;
    backend_.flatten(x, y_);
    viewed_ = y_.is_view();
    return y_;
  }

  LayerKernel kernel() const override { return {describe(), viewed_ ? "view" : "reorder", 0}; }

  // dx (N, C, H, W) = dy (N, C·H·W) folded back into x's layout
  const Tensor& backward(const Tensor& dy, const PassContext&, bool need_dx) override {
    if (!need_dx) return empty_;
    if (input_shape_.rank() == 1) return dy;
    backend_.unflatten(dy, *x_, dx_);
    return dx_;
  }

 private:
  Backend& backend_;
  const Tensor* x_ = nullptr;
  bool viewed_ = false;  // the latest forward copied nothing
  Tensor y_, dx_, empty_;
};

// ---- dropout ----------------------------------------------------------------

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(const LayerContext& ctx, float p)
      : backend_(ctx.backend), p_(p), index_(ctx.index) {
    input_shape_ = output_shape_ = ctx.input;
  }

  std::string describe() const override { return "dropout(" + fmt_number(p_) + ")"; }
  LayerKernel kernel() const override { return {describe(), "identity at inference", 0}; }

  // training: y = x ⊙ m / (1 − p), m ~ Bernoulli(1 − p) keyed by (seed, micro-step, layer),
  // each sample's part by its place in the global micro-batch (ctx.first_row + its row);
  // inference: y = x
  const Tensor& forward(const Tensor& x, const PassContext& ctx) override {
    if (!ctx.training || p_ == 0.0f) return x;
    stream_ = ctx.micro_step * 1024 + std::uint64_t(index_);
    first_row_ = ctx.first_row;
    backend_.dropout_forward(x, y_, p_, ctx.seed, stream_, first_row_);
    return y_;
  }

  // dx = dy ⊙ m / (1 − p), the mask regenerated from the same key
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    if (!need_dx) return empty_;
    if (p_ == 0.0f) return dy;
    backend_.dropout_backward(dy, dx_, p_, ctx.seed, stream_, first_row_);
    return dx_;
  }

 private:
  Backend& backend_;
  float p_;
  std::int64_t first_row_ = 0;  // of the last forward pass, for its backward
  int index_;
  std::uint64_t stream_ = 0;
  Tensor y_, dx_, empty_;
};

// ---- batchnorm / layernorm ----------------------------------------------------

class NormLayer final : public Layer {
 public:
  NormLayer(const LayerContext& ctx, bool layer) : backend_(ctx.backend), layer_(layer) {
    input_shape_ = output_shape_ = ctx.input;
    const NormSpec spec{ctx.input, 1e-5f, ctx.compute};
    op_ = layer ? backend_.layer_norm(spec) : backend_.batch_norm(spec);
    const char* kind = layer ? "layernorm" : "batchnorm";
    scale_.name = param_name(ctx.index, kind, "scale");
    shift_.name = param_name(ctx.index, kind, "shift");
    op_->shape_parameters(scale_.value, shift_.value);
    init_parameter(backend_, scale_, [] { return 1.0f; });
    init_parameter(backend_, shift_, [] { return 0.0f; });
    if (!layer) {
      backend_.shape_like(running_mean_, scale_.value, DType::kF32);
      backend_.shape_like(running_var_, scale_.value, DType::kF32);
      std::vector<float> zeros(std::size_t(running_mean_.elements()), 0.0f);
      std::vector<float> ones(std::size_t(running_var_.elements()), 1.0f);
      backend_.copy_from_host(zeros.data(), running_mean_);
      backend_.copy_from_host(ones.data(), running_var_);
      running_mean_name_ = param_name(ctx.index, kind, "running_mean");
      running_var_name_ = param_name(ctx.index, kind, "running_var");
    }
  }

  std::string describe() const override { return layer_ ? "layernorm" : "batchnorm"; }

  // batchnorm: μ, σ² per channel over (N, H, W)  [per feature over N for (N, F)]
  // layernorm: μ, σ² per sample over F
  // y = γ·(x − μ)/√(σ² + ε) + β        (x's shape)
  // batchnorm training also updates the running statistics used at inference:
  //   μ_run ← 0.9·μ_run + 0.1·μ,  σ²_run ← 0.9·σ²_run + 0.1·σ²·m/(m − 1)
  const Tensor& forward(const Tensor& x, const PassContext& ctx) override {
    x_ = &x;
    if (!ctx.training && !layer_) {
      op_->forward_inference(x, scale_.value, shift_.value, running_mean_, running_var_, y_);
      return y_;
    }
    op_->forward_training(x, scale_.value, shift_.value, y_, mean_, variance_);
    if (ctx.training && !layer_) {
      const double m = double(x.elements()) / double(input_shape_[0]);
      const float unbiased = m > 1 ? float(m / (m - 1)) : 1.0f;
      backend_.update_running_stat(running_mean_, mean_, kMomentum, 1.0f);
      backend_.update_running_stat(running_var_, variance_, kMomentum, unbiased);
    }
    return y_;
  }

  // x̂ = (x − μ)/√(σ² + ε)
  // dγ (+)= Σ dy ⊙ x̂     dβ (+)= Σ dy      (sums over what μ was taken over)
  // dx = γ/√(σ² + ε) · (dy − mean(dy) − x̂ ⊙ mean(dy ⊙ x̂))
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool) override {
    // oneDNN computes dx together with dγ, dβ, so dx is always produced.
    op_->backward(*x_, dy, scale_.value, shift_.value, mean_, variance_, dx_, scale_.grad,
                  shift_.grad,
                  ctx.accumulate);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&scale_);
    out.push_back(&shift_);
  }
  void collect_buffers(std::vector<StateBuffer>& out) override {
    if (layer_) return;
    out.push_back({running_mean_name_, &running_mean_});
    out.push_back({running_var_name_, &running_var_});
  }

 private:
  static constexpr float kMomentum = 0.1f;
  Backend& backend_;
  bool layer_;
  std::unique_ptr<NormOp> op_;
  Parameter scale_, shift_;
  Tensor running_mean_, running_var_;
  std::string running_mean_name_, running_var_name_;
  const Tensor* x_ = nullptr;
  Tensor y_, mean_, variance_, dx_;
};

// ---- periodic ---------------------------------------------------------------

// Draws from N(0, sigma²) by Box-Muller on SplitMix64's 53-bit uniforms: a
// pure function of the seed, as the other layers' initialisation is.
class NormalDraw {
 public:
  NormalDraw(std::uint64_t seed, double sigma) : rng_(seed), sigma_(sigma) {}
  float operator()() {
    const double u1 = double(rng_.next() >> 11) * 0x1p-53;  // [0, 1)
    const double u2 = double(rng_.next() >> 11) * 0x1p-53;
    return float(sigma_ * std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  SplitMix64 rng_;
  double sigma_;
};

class PeriodicLayer final : public Layer {
 public:
  PeriodicLayer(const LayerContext& ctx, std::int64_t frequencies, double sigma)
      : backend_(ctx.backend), k_(frequencies), sigma_(sigma) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input[0] * 2 * frequencies};
    op_ = backend_.periodic(PeriodicSpec{ctx.input[0], frequencies});
    frequencies_.name = param_name(ctx.index, "periodic", "frequencies");
    op_->shape_parameters(frequencies_.value);
    init_parameter(backend_, frequencies_, NormalDraw(ctx.seed, sigma));
  }

  std::string describe() const override {
    std::string s = "periodic(" + std::to_string(k_);
    if (sigma_ != kPeriodicSigma) {
      char text[32];
      const auto end = std::to_chars(text, text + sizeof text, sigma_).ptr;  // the shortest exact form
      s += ",sigma=" + std::string(text, end);
    }
    return s + ")";
  }

  // x (N, F) -> y (N, F·2K), per feature f its K sines then its K cosines:
  //   θ[n][f][j] = 2π·c[f][j]·x[n][f],   c (F, K)
  //   y[n][f·2K + j] = sin θ,   y[n][f·2K + K + j] = cos θ
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, frequencies_.value, y_);
    return y_;
  }

  // d[n][f][j] = dy[n][f·2K + j]·cos θ − dy[n][f·2K + K + j]·sin θ   (∂L/∂θ)
  // dc (+)= Σ_n 2π·x[n][f]·d[n][f][j]     (F, K)
  // dx = Σ_j 2π·c[f][j]·d[n][f][j]         (N, F)
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    op_->backward_weights(*x_, dy, frequencies_.value, frequencies_.grad, ctx.accumulate);
    if (!need_dx) return empty_;
    op_->backward_data(*x_, dy, frequencies_.value, dx_);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override { out.push_back(&frequencies_); }

 private:
  Backend& backend_;
  std::int64_t k_;
  double sigma_;
  std::unique_ptr<PeriodicOp> op_;
  Parameter frequencies_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_, empty_;
};

// ---- ple (piecewise-linear encoding) ----------------------------------------

class PiecewiseLinearLayer final : public Layer {
 public:
  PiecewiseLinearLayer(const LayerContext& ctx, std::int64_t bins) : backend_(ctx.backend), t_(bins) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{ctx.input[0] * bins};
    op_ = backend_.piecewise_linear(PiecewiseLinearSpec{ctx.input[0], bins});
    edges_name_ = param_name(ctx.index, "ple", "edges");
    op_->shape_edges(edges_);
    // Until fit_inputs(): T equal bins over [−2, 2], where most of a
    // standardized column lies.
    std::vector<float> start(std::size_t(edges_.elements()));
    for (std::size_t i = 0; i < start.size(); ++i) {
      const std::int64_t j = std::int64_t(i) % (bins + 1);
      start[i] = float(-2.0 + 4.0 * double(j) / double(bins));
    }
    backend_.copy_from_host(start.data(), edges_);
  }

  std::string describe() const override { return "ple(" + std::to_string(t_) + ")"; }
  bool fits_inputs() const override { return true; }

  void fit_inputs(std::span<const float> values, std::int64_t rows) override {
    const std::vector<float> edges = fit_piecewise_linear_edges(values, rows, input_shape_[0], t_);
    backend_.copy_from_host(edges.data(), edges_);
  }

  // x (N, F) -> y (N, F·T), per feature f its T bins:
  //   w = b[f][t+1] − b[f][t],  z = (x[n][f] − b[f][t])·(1/w)
  //   y[n][f·T + t] = clamp(z, lo, hi)  (0 for w = 0; lo = −∞ for t = 0, else 0;
  //                                      hi = +∞ for the last used bin, else 1)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, edges_, y_);
    return y_;
  }

  // dx[n][f] = Σ_t dy[n][f·T + t]·(1/w)·[lo < z < hi]      (N, F); the edges are not trained
  const Tensor& backward(const Tensor& dy, const PassContext&, bool need_dx) override {
    if (!need_dx) return empty_;
    op_->backward_data(*x_, dy, edges_, dx_);
    return dx_;
  }

  void collect_buffers(std::vector<StateBuffer>& out) override { out.push_back({edges_name_, &edges_}); }

 private:
  Backend& backend_;
  std::int64_t t_;
  std::unique_ptr<PiecewiseLinearOp> op_;
  Tensor edges_;
  std::string edges_name_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_, empty_;
};

// ---- ensemble ---------------------------------------------------------------

// TabM-mini (Gorishniy et al. 2024): k members share every layer after this
// one and differ by a trained scaling of their input, each scale started at
// a random sign (their code's "random-signs"), so the members start as k
// different views of the features and train apart.
class EnsembleLayer final : public Layer {
 public:
  EnsembleLayer(const LayerContext& ctx, std::int64_t members) : backend_(ctx.backend), k_(members) {
    input_shape_ = ctx.input;
    output_shape_ = ctx.input;
    op_ = backend_.ensemble(EnsembleSpec{ctx.input[0], members});
    scales_.name = param_name(ctx.index, "ensemble", "scale");
    op_->shape_parameters(scales_.value);
    SplitMix64 rng(ctx.seed);
    init_parameter(backend_, scales_, [&] { return (rng.next() >> 63) != 0 ? 1.0f : -1.0f; });
  }

  std::string describe() const override { return "ensemble(" + std::to_string(k_) + ")"; }
  std::int64_t members() const override { return k_; }

  // x (N, F) -> y (N·k, F), sample-major:  y[n·k + i][f] = x[n][f]·r[i][f],  r (k, F)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    op_->forward(x, scales_.value, y_);
    return y_;
  }

  // dr (+)= Σ_n dy[n·k + i] ⊙ x[n]      (k, F)
  // dx    = Σ_i dy[n·k + i] ⊙ r[i]      (N, F)
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    op_->backward_weights(*x_, dy, scales_.grad, ctx.accumulate);
    if (!need_dx) return empty_;
    op_->backward_data(dy, scales_.value, *x_, dx_);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override { out.push_back(&scales_); }

 private:
  Backend& backend_;
  std::int64_t k_;
  std::unique_ptr<EnsembleOp> op_;
  Parameter scales_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_, empty_;
};

// ---- the members' output layers -----------------------------------------------

// TabM's K heads: the network's last dense layer after an ensemble, with
// weights of its own for each member (Backend::member_dense); written as a
// dense layer in the spec, named as one ("5.dense.weight", K times the
// rows of a shared one).
class MemberDenseLayer final : public Layer {
 public:
  MemberDenseLayer(const LayerContext& ctx, std::int64_t width, Activation fused, std::int64_t members)
      : backend_(ctx.backend), fused_(fused) {
    input_shape_ = ctx.input;
    output_shape_ = Dims{width};
    op_ = backend_.member_dense(MemberDenseSpec{members, ctx.input[0], width});
    if (fused != Activation::kNone) activation_ = backend_.eltwise(EltwiseSpec{fused, ctx.compute});
    weight_.name = param_name(ctx.index, "dense", "weight");
    bias_.name = param_name(ctx.index, "dense", "bias");
    op_->shape_parameters(weight_.value, bias_.value);
    // Each member's layer as a dense layer's: U(±1/√I), all weights, then all biases.
    init_uniform_fan_in(backend_, weight_, bias_, ctx.input[0], ctx.seed);
  }

  std::string describe() const override { return dense_text(output_shape_[0], fused_); }

  // x (N·K, I) -> y (N·K, O):  y[n·K + i] = act(W[i]·x[n·K + i] + b[i]),  W (K, O, I), b (K, O)
  const Tensor& forward(const Tensor& x, const PassContext&) override {
    x_ = &x;
    if (!activation_) {
      op_->forward(x, weight_.value, bias_.value, y_);
      return y_;
    }
    op_->forward(x, weight_.value, bias_.value, z_);
    activation_->forward(z_, y_);
    return y_;
  }

  // dz = dy ⊙ act'(y)
  // dW[i] (+)= Σ_n dz[n·K + i]ᵀ·x[n·K + i]   (K, O, I)    db[i] (+)= Σ_n dz[n·K + i]   (K, O)
  // dx[n·K + i] = dz[n·K + i]·W[i]                       (N·K, I)
  const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) override {
    const Tensor* dz = &through_activation(activation_.get(), y_, dy, dz_);
    op_->backward_weights(*x_, *dz, weight_.grad, bias_.grad, ctx.accumulate);
    if (!need_dx) return empty_;
    op_->backward_data(*dz, weight_.value, *x_, dx_);
    return dx_;
  }

  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    out.push_back(&bias_);
  }

 private:
  Backend& backend_;
  Activation fused_;
  std::unique_ptr<MemberDenseOp> op_;
  std::unique_ptr<EltwiseOp> activation_;
  Parameter weight_, bias_;
  const Tensor* x_ = nullptr;
  Tensor z_, y_, dz_, dx_, empty_;
};

}  // namespace

std::unique_ptr<Layer> make_dense_layer(const LayerContext& ctx, std::int64_t width,
                                        Activation fused) {
  return std::make_unique<DenseLayer>(ctx, width, fused);
}
std::unique_ptr<Layer> make_conv_layer(const LayerContext& ctx, std::int64_t channels,
                                       std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                                       Activation fused, bool relu_mask_downstream) {
  return std::make_unique<ConvLayer>(ctx, channels, kernel, stride, pad, fused,
                                     relu_mask_downstream);
}
std::unique_ptr<Layer> make_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                       std::int64_t stride, bool mask_relu) {
  return std::make_unique<PoolLayer>(ctx, max, kernel, stride, mask_relu);
}
std::unique_ptr<Layer> make_activation_layer(const LayerContext& ctx, Activation kind) {
  return std::make_unique<ActivationLayer>(ctx, kind);
}
std::unique_ptr<Layer> make_flatten_layer(const LayerContext& ctx) {
  return std::make_unique<FlattenLayer>(ctx);
}
std::unique_ptr<Layer> make_dropout_layer(const LayerContext& ctx, float p) {
  return std::make_unique<DropoutLayer>(ctx, p);
}
std::unique_ptr<Layer> make_batch_norm_layer(const LayerContext& ctx) {
  return std::make_unique<NormLayer>(ctx, false);
}
std::unique_ptr<Layer> make_layer_norm_layer(const LayerContext& ctx) {
  return std::make_unique<NormLayer>(ctx, true);
}

std::unique_ptr<Layer> make_periodic_layer(const LayerContext& ctx, std::int64_t frequencies, double sigma) {
  return std::make_unique<PeriodicLayer>(ctx, frequencies, sigma);
}

std::vector<float> fit_piecewise_linear_edges(std::span<const float> values, std::int64_t rows,
                                              std::int64_t features, std::int64_t bins) {
  std::vector<float> edges(std::size_t(features * (bins + 1)));
  std::vector<float> column;
  column.reserve(std::size_t(rows));
  for (std::int64_t f = 0; f < features; ++f) {
    column.clear();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float v = values[std::size_t(r * features + f)];
      if (std::isfinite(v)) column.push_back(v);
    }
    float* b = edges.data() + f * (bins + 1);
    if (column.empty()) {  // nothing to fit: every bin unused (edges all 0)
      std::fill(b, b + bins + 1, 0.0f);
      continue;
    }
    std::sort(column.begin(), column.end());
    // The quantiles i/T at ranks ⌊i·(n−1)/T⌋ (the least and the greatest
    // value among them), each taken once: a value repeated across several
    // quantiles (a one-hot column, a mode) makes one edge, not empty bins.
    const std::int64_t n = std::int64_t(column.size());
    std::int64_t used = 0;
    for (std::int64_t i = 0; i <= bins; ++i) {
      const float q = column[std::size_t(i * (n - 1) / bins)];
      if (used == 0 || q != b[used - 1]) b[used++] = q;
    }
    // Fewer distinct edges than T + 1: the last one repeated, so the bins
    // after the last used one are unused (0) and that one is open above.
    std::fill(b + used, b + bins + 1, b[used - 1]);
  }
  return edges;
}

std::unique_ptr<Layer> make_piecewise_linear_layer(const LayerContext& ctx, std::int64_t bins) {
  return std::make_unique<PiecewiseLinearLayer>(ctx, bins);
}

std::unique_ptr<Layer> make_ensemble_layer(const LayerContext& ctx, std::int64_t members) {
  return std::make_unique<EnsembleLayer>(ctx, members);
}

std::unique_ptr<Layer> make_member_dense_layer(const LayerContext& ctx, std::int64_t width, Activation fused,
                                               std::int64_t members) {
  return std::make_unique<MemberDenseLayer>(ctx, width, fused, members);
}

}  // namespace anneal::engine
