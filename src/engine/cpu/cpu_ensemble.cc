// The ensemble members' input scaling (EnsembleOp, anneal/backend.h), their
// own output layers (MemberDenseOp) and their mean (Backend::member_mean)
// on the CPU. The scaling and the mean are plain loops, one multiply or one
// short sum per element; the output layers' three products run on
// RowInvariantProduct (cpu_gemm.h), member by member, whose every output is
// one FMA chain in a fixed order. Activations are fp32 or bf16 (the
// arithmetic is fp32 either way); the parameters and their gradients fp32.
//
// Threads: rows are shared out schedule(static) and each output element is
// computed by one thread from its own inputs, its sums in a fixed order; the
// scale gradient's sums over the batch run in row order inside one thread
// per feature. So every result is the same bits for any thread count, and a
// sample's forward and mean are the same bits in any batch.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cpu/cpu_gemm.h"
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

// y[n·K + i] = W[i]·x[n·K + i] + b[i], member by member: each member's rows
// lie K rows apart, so its product reads them in place (a row stride of
// K·I) and its outputs are scattered back to theirs.
class CpuMemberDenseOp final : public MemberDenseOp {
 public:
  CpuMemberDenseOp(CpuContext& ctx, const MemberDenseSpec& spec)
      : ctx_(ctx), k_(spec.members), in_(spec.in), out_(spec.out),
        weight_md_(plain_md(Dims{spec.members, spec.out, spec.in}, DType::kF32)),
        bias_md_(plain_md(Dims{spec.members, spec.out}, DType::kF32)),
        zero_bias_(std::size_t(std::max<std::int64_t>(spec.in, 0)), 0.0f) {
    if (k_ < 1 || in_ < 1 || out_ < 1) throw usage_error("member dense: needs members, inputs and outputs");
  }

  void shape_parameters(Tensor& weight, Tensor& bias) override {
    weight.reshape(Dims{k_, out_, in_}, DType::kF32, make_layout(weight_md_), *ctx_.allocator);
    bias.reshape(Dims{k_, out_}, DType::kF32, make_layout(bias_md_), *ctx_.allocator);
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) override {
    const std::int64_t n = samples_of(x, in_, "input");
    const float* xs = widened(x, in_, converted_x_);
    const float* w = parameter(weight, weight_md_, "weights");
    const float* b = parameter(bias, bias_md_, "biases");
    const Dims out{n * k_, out_};
    shape_output(ctx_, y, out, cached_plain_layout(y_layout_, out, x.dtype()));
    float* result = floats(result_, std::size_t(n * out_));
    for (std::int64_t i = 0; i < k_; ++i) {
      product_.set_weights(w + i * out_ * in_, b + i * out_, out_, in_, *ctx_.allocator);
      product_.run(xs + i * in_, k_ * in_, n, false, result);
      scatter(result, n, out_, i, y.dtype(), y.data());
    }
  }

  void backward_data(const Tensor& dy, const Tensor& weight, const Tensor& x, Tensor& dx) override {
    const std::int64_t n = samples_of(x, in_, "input");
    if (dy.dims() != Dims{n * k_, out_}) throw failure("member dense: the gradient " + dy.dims().str() + " is not shaped as the output");
    const float* g = widened(dy, out_, converted_dy_);
    const float* w = parameter(weight, weight_md_, "weights");
    const MemDesc x_plain = plain_md(x.dims(), x.dtype());
    shape_output(ctx_, dx, x.dims(), std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout()));
    // dx mirrors x: written plain, then reordered when x was not plain.
    const bool direct = md_of(x) == x_plain;
    void* dxp = direct ? dx.data() : plain_dx_.ensure(x_plain.get_size(), *ctx_.allocator);
    float* transposed = floats(transposed_, std::size_t(in_ * out_));
    float* result = floats(result_, std::size_t(n * in_));
    for (std::int64_t i = 0; i < k_; ++i) {
      // dx_i (N, I) = dy_i (N, O) · W[i] (O, I): the product of dy_i with the
      // rows of W[i]ᵀ (I, O).
      const float* wi = w + i * out_ * in_;
      for (std::int64_t o = 0; o < out_; ++o)
        for (std::int64_t a = 0; a < in_; ++a) transposed[a * out_ + o] = wi[o * in_ + a];
      product_.set_weights(transposed, zero_bias_.data(), in_, out_, *ctx_.allocator);
      product_.run(g + i * out_, k_ * out_, n, false, result);
      scatter(result, n, in_, i, x.dtype(), dxp);
    }
    if (!direct) reorders_.run(ctx_, x_plain, dxp, md_of(x), dx.data());
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    const std::int64_t n = samples_of(x, in_, "input");
    if (dy.dims() != Dims{n * k_, out_}) throw failure("member dense: the gradient " + dy.dims().str() + " is not shaped as the output");
    const float* xs = widened(x, in_, converted_x_);
    const float* g = widened(dy, out_, converted_dy_);
    float* dw = mutable_parameter(dweight, weight_md_, "weight gradient");
    float* db = mutable_parameter(dbias, bias_md_, "bias gradient");
    float* dy_t = floats(transposed_, std::size_t(out_ * std::max<std::int64_t>(n, 1)));
    float* x_t = floats(x_t_, std::size_t(in_ * std::max<std::int64_t>(n, 1)));
    float* result = floats(result_, std::size_t(out_ * in_));
    for (std::int64_t i = 0; i < k_; ++i) {
      // dW[i] (O, I) = dy_iᵀ (O, N) · x_i (N, I): the rows of dy_iᵀ against
      // those of x_iᵀ (I, N), each a chain over the samples in order.
      for (std::int64_t s = 0; s < n; ++s) {
        const std::int64_t row = s * k_ + i;
        for (std::int64_t o = 0; o < out_; ++o) dy_t[o * n + s] = g[row * out_ + o];
        for (std::int64_t a = 0; a < in_; ++a) x_t[a * n + s] = xs[row * in_ + a];
      }
      if (n > 0) {
        product_.set_weights(x_t, zero_bias_.data(), in_, n, *ctx_.allocator);
        product_.run(dy_t, n, out_, false, result);
      } else {
        std::fill_n(result, out_ * in_, 0.0f);
      }
      float* dwi = dw + i * out_ * in_;
      for (std::int64_t e = 0; e < out_ * in_; ++e) dwi[e] = accumulate ? dwi[e] + result[e] : result[e];
      for (std::int64_t o = 0; o < out_; ++o) {
        double sum = 0;
        for (std::int64_t s = 0; s < n; ++s) sum += double(dy_t[o * n + s]);
        db[i * out_ + o] = accumulate ? db[i * out_ + o] + float(sum) : float(sum);
      }
    }
  }

 private:
  // N for x (N·K, width); kFailure when x is not that.
  std::int64_t samples_of(const Tensor& x, std::int64_t width, const char* what) const {
    if (x.dims().rank() != 2 || x.dims()[1] != width || x.dims()[0] % k_ != 0)
      throw failure(std::string("member dense: ") + what + " " + x.dims().str() + " is not (N·" +
                    std::to_string(k_) + ", " + std::to_string(width) + ")");
    return x.dims()[0] / k_;
  }
  // t as plain fp32 rows of `width`: its own storage, or a converted copy.
  const float* widened(const Tensor& t, std::int64_t width, ScratchBuffer& scratch) {
    return static_cast<const float*>(
        conform(ctx_, reorders_, t, plain_md(Dims{t.dims()[0], width}, DType::kF32), scratch));
  }
  static const float* parameter(const Tensor& t, const MemDesc& md, const char* what) {
    if (t.dtype() != DType::kF32 || md_of(t) != md)
      throw failure(std::string("member dense: the ") + what + " are not shaped by shape_parameters");
    return static_cast<const float*>(t.data());
  }
  static float* mutable_parameter(Tensor& t, const MemDesc& md, const char* what) {
    parameter(t, md, what);
    return static_cast<float*>(t.data());
  }
  float* floats(ScratchBuffer& buffer, std::size_t count) {
    return static_cast<float*>(buffer.ensure(std::max<std::size_t>(count, 1) * sizeof(float), *ctx_.allocator));
  }
  // rows (N, width) of member i into `out`'s rows n·K + i, in `dtype`.
  void scatter(const float* rows, std::int64_t n, std::int64_t width, std::int64_t i, DType dtype, void* out) const {
    with_storage(dtype, "member dense", [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out);
      for (std::int64_t s = 0; s < n; ++s)
        for (std::int64_t j = 0; j < width; ++j) store(o, (s * k_ + i) * width + j, rows[s * width + j]);
    });
  }

  CpuContext& ctx_;
  std::int64_t k_, in_, out_;
  MemDesc weight_md_, bias_md_;
  // The gradients' products have no bias: I zeros, made once (a step
  // allocates nothing).
  std::vector<float> zero_bias_;
  RowInvariantProduct product_;
  std::shared_ptr<const CpuLayout> y_layout_;
  Reorders reorders_;
  ScratchBuffer converted_x_, converted_dy_, plain_dx_, result_, transposed_, x_t_;
};

}  // namespace

std::unique_ptr<EnsembleOp> make_ensemble_op(CpuContext& ctx, const EnsembleSpec& spec) {
  return std::make_unique<CpuEnsembleOp>(ctx, spec);
}

std::unique_ptr<MemberDenseOp> make_member_dense_op(CpuContext& ctx, const MemberDenseSpec& spec) {
  return std::make_unique<CpuMemberDenseOp>(ctx, spec);
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
