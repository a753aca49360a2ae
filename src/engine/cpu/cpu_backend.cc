// The CPU backend: host memory, oneDNN ops (cpu_ops.cc, cpu_weighted_ops.cc,
// cpu_loss.cc) and the elementwise vector work of optimizers, dropout and
// running statistics. Loops are OpenMP `schedule(static)` over independent
// elements, so their results do not depend on the thread count; the one
// reduction (sum_squares) adds fixed-size blocks in a fixed order.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_common.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/loss_scale.h"
#include "engine/backend_rules.h"
#include "engine/random.h"

namespace anneal {

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kTanh: return "tanh";
    case Activation::kSigmoid: return "sigmoid";
  }
  return "?";
}

namespace cpu {
namespace {

// True when oneDNN dispatches bf16 to native instructions here
// (AVX512_BF16 or AMX); elsewhere bf16 would be emulated, slower than fp32.
bool cpu_has_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

// The instruction set oneDNN dispatches to on this CPU: the widest level the
// effective ISA (a bit mask) includes.
std::string onednn_cpu_isa() {
  using dnnl::cpu_isa;
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const std::pair<cpu_isa, const char*> levels[] = {
      {cpu_isa::avx512_core_amx, "avx512_core_amx"}, {cpu_isa::avx512_core_bf16, "avx512_core_bf16"},
      {cpu_isa::avx512_core_vnni, "avx512_core_vnni"}, {cpu_isa::avx512_core, "avx512_core"},
      {cpu_isa::avx2_vnni, "avx2_vnni"}, {cpu_isa::avx2, "avx2"},
      {cpu_isa::avx, "avx"}, {cpu_isa::sse41, "sse41"}};
  for (const auto& [level, name] : levels) {
    const auto bits = static_cast<unsigned>(level);
    if ((isa & bits) == bits) return name;
  }
  return "default";
}

// The CPU backend's execution scope: bounds the calling thread's OpenMP team
// (ours and oneDNN's, a per-thread OpenMP setting) to the backend's thread
// count, restoring the previous bound when it ends.
class OmpTeamScope final : public ExecutionScope {
 public:
  explicit OmpTeamScope(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpTeamScope() override { omp_set_num_threads(previous_); }
  OmpTeamScope(const OmpTeamScope&) = delete;
  OmpTeamScope& operator=(const OmpTeamScope&) = delete;

 private:
  int previous_;
};

// Small loops are not worth waking the OpenMP team for.
constexpr std::int64_t kParallelThreshold = 1 << 15;

float* f32_data(Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32) throw failure(std::string(what) + ": expects an f32 tensor");
  return static_cast<float*>(t.data());
}
const float* f32_data(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32) throw failure(std::string(what) + ": expects an f32 tensor");
  return static_cast<const float*>(t.data());
}
std::int64_t stored_elements(const Tensor& t) {
  return static_cast<std::int64_t>(t.bytes() / dtype_size(t.dtype()));
}
void check_same_layout(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.layout() || !b.layout() || !a.layout()->same_as(*b.layout()))
    throw failure(std::string(what) + ": tensors differ in layout");
}

// Runs fn(begin, count) over [0, n) in fixed chunks on the OpenMP team; the
// chunking depends only on n, so elementwise results do not depend on the
// thread count.
template <typename Fn>
void for_chunks(std::int64_t n, Fn fn) {
  constexpr std::int64_t kChunk = 16384;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options) {
    capabilities_.bf16 = cpu_has_bf16();
    capabilities_.int8 = true;
    capabilities_.int8_weight_levels = int8_weight_levels();
    // Loops are schedule(static) over fixed chunks and the reductions add
    // fixed blocks in a fixed order; oneDNN's CPU primitives are
    // run-to-run reproducible for a fixed thread count.
    capabilities_.deterministic = true;
    // Ops built batch_invariant compute each sample on its own (cpu_gemm.h,
    // ImageConv); the others an inference pass runs are elementwise or
    // per-sample in oneDNN (the conformance suite checks every one).
    capabilities_.batch_invariant = true;
    capabilities_.threads = options.threads;
    capabilities_.device = "cpu";
    capabilities_.isa = onednn_cpu_isa();
    try {
      ctx_.engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
      ctx_.stream = dnnl::stream(ctx_.engine);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "creating the oneDNN CPU engine");
    }
    ctx_.allocator = this;
  }

  const char* name() const override { return "cpu-onednn"; }
  const BackendCapabilities& capabilities() const override { return capabilities_; }
  std::unique_ptr<ExecutionScope> enter() override {
    return std::make_unique<OmpTeamScope>(capabilities_.threads);
  }

  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw failure("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* data) noexcept override { std::free(data); }

  void shape_plain(Tensor& t, const Dims& dims, DType dtype) override {
    const MemDesc md = plain_md(dims, dtype);
    if (!t.empty() && t.dims() == dims && t.dtype() == dtype && md_of(t) == md) return;
    t.reshape(dims, dtype, make_layout(md), *this);
  }

  void shape_like(Tensor& t, const Tensor& like, DType dtype) override {
    const MemDesc md = with_dtype(md_of(like), dtype);
    if (dtype == like.dtype()) {
      t.reshape(like.dims(), dtype, like.shared_layout(), *this);
    } else {
      t.reshape(like.dims(), dtype, make_layout(md), *this);
    }
  }

  void copy_from_host(const float* host, Tensor& t) override {
    const MemDesc host_md = plain_md(t.dims(), DType::kF32);
    if (md_of(t) == host_md) {
      std::memcpy(t.data(), host, host_md.get_size());
    } else {
      // Blocked layouts may carry padding that must be zero.
      std::memset(t.data(), 0, t.bytes());
      edge_reorders_.run(ctx_, host_md, host, md_of(t), t.data());
    }
    t.mark_modified();
  }

  void copy_to_host(const Tensor& t, float* host) override {
    const MemDesc host_md = plain_md(t.dims(), DType::kF32);
    if (md_of(t) == host_md) {
      std::memcpy(host, t.data(), host_md.get_size());
    } else {
      edge_reorders_.run(ctx_, md_of(t), t.data(), host_md, host);
    }
  }

  float* host_view(Tensor& t) override {
    if (t.empty() || t.dtype() != DType::kF32 || !t.layout()->is_plain()) return nullptr;
    return static_cast<float*>(t.data());
  }

  StorageView storage_view(Tensor& t) override {
    if (t.empty() || t.dtype() != DType::kF32) return {};
    return {static_cast<float*>(t.data()), t.bytes() / sizeof(float), layout_string(md_of(t))};
  }

  void flatten(const Tensor& src, Tensor& dst) override {
    const Dims flat{src.batch(), src.elements() / std::max<std::int64_t>(src.batch(), 1)};
    const MemDesc& src_md = md_of(src);
    const MemDesc src_plain = plain_md(src.dims(), src.dtype());
    if (src_md == src_plain) {
      // Row-major (N, C, H, W) already is row-major (N, C·H·W): view it
      // instead of copying (the fp32 network input under a first dense).
      const MemDesc flat_md = plain_md(flat, src.dtype());
      const bool same_layout = !dst.empty() && md_of(dst) == flat_md;
      if (!dst.is_view() || dst.data() != src.data() || !same_layout)
        dst.view_of(src, flat, same_layout ? dst.shared_layout() : make_layout(flat_md));
      return;
    }
    if (dst.is_view()) dst = Tensor();  // the previous input was plain; own storage again
    shape_plain(dst, flat, src.dtype());
    edge_reorders_.run(ctx_, src_md, src.data(), src_plain, dst.data());
  }

  void unflatten(const Tensor& src, const Tensor& like, Tensor& dst) override {
    shape_like(dst, like, like.dtype());
    const MemDesc like_plain = plain_md(like.dims(), like.dtype());
    if (md_of(src).get_size() != like_plain.get_size() || src.dtype() != like.dtype())
      throw failure("unflatten: gradient does not match the flattened tensor");
    if (md_of(like) == like_plain) {
      std::memcpy(dst.data(), src.data(), like_plain.get_size());
    } else {
      edge_reorders_.run(ctx_, like_plain, src.data(), md_of(like), dst.data());
    }
  }

  void fill_zero(Tensor& t) override {
    std::memset(t.data(), 0, t.bytes());
    t.mark_modified();
  }

  void clip_scale(const std::vector<const Tensor*>& grads, float max_norm, const Tensor* pre_scale,
                  Tensor& scale) override {
    const float pre = scale_of(pre_scale);
    double squares = 0;
    for (const Tensor* g : grads) squares += sum_squares(*g);
    const double norm = double(pre) * std::sqrt(squares);
    shape_plain(scale, Dims{1}, DType::kF32);
    *static_cast<float*>(scale.data()) = pre * (norm > max_norm ? float(max_norm / (norm + 1e-6)) : 1.0f);
    scale.mark_modified();
  }

  void unscale_gradients(const std::vector<const Tensor*>& grads, Tensor& state, int growth_interval,
                         Tensor& step_scale) override {
    if (state.elements() != 4) throw failure("unscale_gradients: the state holds 4 values");
    float* s = f32_data(state, "loss scale state");
    bool finite = true;
    for (const Tensor* g : grads) {
      const float* x = f32_data(*g, "unscale_gradients");
      const std::int64_t n = stored_elements(*g);
      for (std::int64_t i = 0; i < n && finite; ++i) finite = std::isfinite(x[i]);
    }
    shape_plain(step_scale, Dims{1}, DType::kF32);
    *static_cast<float*>(step_scale.data()) = finite ? 1.0f / s[0] : 0.0f;
    step_scale.mark_modified();
    engine::update_loss_scale(s, finite, growth_interval);
    state.mark_modified();
  }

 private:
  // Σ t², in fixed blocks added in a fixed order: the same bits for any
  // thread count.
  double sum_squares(const Tensor& t) {
    const float* x = f32_data(t, "sum_squares");
    const std::int64_t n = stored_elements(t);
    constexpr std::int64_t kBlock = 8192;
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
    auto* partial = static_cast<double*>(
        partials_.ensure(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)) * sizeof(double), *this));
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
    for (std::int64_t b = 0; b < blocks; ++b) {
      double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const std::int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
      std::int64_t i = begin;
      for (; i + 8 <= end; i += 8)
        for (int j = 0; j < 8; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
      for (; i < end; ++i) lane[0] += double(x[i]) * double(x[i]);
      partial[b] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    double total = 0;
    for (std::int64_t b = 0; b < blocks; ++b) total += partial[b];
    return total;
  }

 public:

  void update_running_stat(Tensor& running, const Tensor& batch, float momentum,
                           float scale) override {
    check_same_layout(running, batch, "update_running_stat");
    float* r = f32_data(running, "update_running_stat");
    const float* b = f32_data(batch, "update_running_stat");
    const std::int64_t n = stored_elements(running);
    for (std::int64_t i = 0; i < n; ++i) r[i] = (1.0f - momentum) * r[i] + momentum * scale * b[i];
    running.mark_modified();
  }

  void multiply(Tensor& t, const Tensor& mask) override {
    check_same_layout(t, mask, "multiply");
    float* x = f32_data(t, "multiply");
    const float* m = f32_data(mask, "multiply");
    const std::int64_t n = stored_elements(t);
    for (std::int64_t i = 0; i < n; ++i) x[i] *= m[i];
    t.mark_modified();
  }

  void member_mean(const Tensor& z, std::int64_t members, Tensor& y) override {
    member_mean_.run(ctx_, z, members, y);
  }

  void fake_quantize(const Tensor& x, Tensor& y, float scale, float lo, float hi) override {
    if (!(scale > 0)) throw usage_error("fake_quantize: the scale must be > 0");
    engine::check_f32_usage(x, "fake_quantize");
    const float* in = f32_data(x, "fake_quantize");
    shape_like(y, x, DType::kF32);
    float* out = static_cast<float*>(y.data());
    // Elementwise, so any layout works as is; a blocked layout's zero
    // padding stays zero (0 quantizes to 0 because lo <= 0 <= hi).
    const std::int64_t n = stored_elements(x);
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::clamp(std::nearbyint(in[i] / scale), lo, hi) * scale;
    y.mark_modified();
  }

  void fake_quantize_channels(const Tensor& w, Tensor& y, int levels) override {
    engine::check_f32_usage(w, "fake_quantize_channels");  // fp32 only
    engine::check_weight_levels(levels);
    const float l = float(levels);
    // Per-channel maxima need the plain (O, I...) order; the weights are
    // small beside a batch's activations, so a round trip through a host
    // buffer (kept across steps, so steady state allocates nothing) is cheap.
    const auto n = static_cast<std::size_t>(w.elements());
    const auto channels = static_cast<std::size_t>(w.dims()[0]);
    if (fq_host_.size() < n) fq_host_.resize(n);
    float* h = fq_host_.data();
    copy_to_host(w, h);
    const std::size_t per = n / channels;
#pragma omp parallel for schedule(static) if (std::int64_t(n) >= kParallelThreshold)
    for (std::size_t o = 0; o < channels; ++o) {
      float* row = h + o * per;
      float max = 0;
      for (std::size_t i = 0; i < per; ++i) max = std::max(max, std::fabs(row[i]));
      // The same expressions as quantize_per_channel and dequantize, so the
      // fine-tuned network sees exactly the weights the int8 model stores.
      const float scale = max > 0 ? max / l : 1.0f;
      for (std::size_t i = 0; i < per; ++i) {
        const float q = std::clamp(std::nearbyint(row[i] / scale), -l, l);
        row[i] = float(std::int8_t(q)) * scale;
      }
    }
    shape_like(y, w, DType::kF32);
    copy_from_host(h, y);
  }

  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t seed, std::uint64_t stream,
                       std::int64_t first_sample) override {
    shape_like(y, x, x.dtype());
    apply_mask(x, y, engine::DropoutRule::of(p, seed, stream), first_sample);
  }

  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t seed, std::uint64_t stream,
                        std::int64_t first_sample) override {
    shape_like(dx, dy, dy.dtype());
    apply_mask(dy, dx, engine::DropoutRule::of(p, seed, stream), first_sample);
  }

  void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                   const AdamUpdate& u) override {
    check_same_layout(w, g, "adam");
    check_same_layout(w, m, "adam");
    check_same_layout(w, v, "adam");
    float* wp = f32_data(w, "adam");
    const float* gp = f32_data(g, "adam");
    float* mp = f32_data(m, "adam");
    float* vp = f32_data(v, "adam");
    const std::int64_t n = stored_elements(w);
    AdamKernelArgs args;
    static_cast<engine::AdamScalars&>(args) = engine::adam_scalars(u);
    args.grad_scale = scale_of(u.grad_scale);
    if (args.grad_scale == 0.0f) return;  // a skipped step
    for_chunks(n, [&](std::int64_t begin, std::int64_t count) {
      adam_kernel(wp + begin, gp + begin, mp + begin, vp + begin, count, args);
    });
    w.mark_modified();
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& velocity, const SgdUpdate& u) override {
    check_same_layout(w, g, "sgd");
    float* wp = f32_data(w, "sgd");
    const float* gp = f32_data(g, "sgd");
    const std::int64_t n = stored_elements(w);
    float* vp = nullptr;
    if (u.momentum != 0.0f) {
      check_same_layout(w, velocity, "sgd");
      vp = f32_data(velocity, "sgd");
    }
    const SgdKernelArgs args{u.lr, u.momentum, u.weight_decay, scale_of(u.grad_scale), u.nesterov};
    if (args.grad_scale == 0.0f) return;  // a skipped step
    for_chunks(n, [&](std::int64_t begin, std::int64_t count) {
      sgd_kernel(wp + begin, gp + begin, vp ? vp + begin : nullptr, count, args);
    });
    w.mark_modified();
  }

  std::unique_ptr<EltwiseOp> eltwise(const EltwiseSpec& spec) override {
    return make_eltwise_op(ctx_, spec);
  }
  std::unique_ptr<DenseOp> dense(const DenseSpec& spec) override {
    return make_dense_op(ctx_, spec);
  }
  std::unique_ptr<ConvOp> conv(const ConvSpec& spec) override { return make_conv_op(ctx_, spec); }
  std::unique_ptr<PoolOp> pool(const PoolSpec& spec) override { return make_pool_op(ctx_, spec); }
  std::unique_ptr<NormOp> batch_norm(const NormSpec& spec) override {
    return make_batch_norm_op(ctx_, spec);
  }
  std::unique_ptr<NormOp> layer_norm(const NormSpec& spec) override {
    return make_layer_norm_op(ctx_, spec);
  }
  std::unique_ptr<PeriodicOp> periodic(const PeriodicSpec& spec) override {
    return make_periodic_op(ctx_, spec);
  }
  std::unique_ptr<PiecewiseLinearOp> piecewise_linear(const PiecewiseLinearSpec& spec) override {
    return make_piecewise_linear_op(ctx_, spec);
  }
  std::unique_ptr<EnsembleOp> ensemble(const EnsembleSpec& spec) override {
    return make_ensemble_op(ctx_, spec);
  }
  std::unique_ptr<MemberDenseOp> member_dense(const MemberDenseSpec& spec) override {
    return make_member_dense_op(ctx_, spec);
  }
  std::unique_ptr<LossOp> loss(LossKind kind, std::int64_t outputs,
                               std::span<const float> class_weights) override {
    return make_loss_op(ctx_, kind, outputs, class_weights);
  }

  // ---- inference-only ops ----

  std::unique_ptr<InferenceOp> inference_dense(InferenceDenseSpec spec) override {
    return make_inference_dense_op(ctx_, std::move(spec));
  }
  std::unique_ptr<InferenceConvOp> inference_conv(InferenceConvSpec spec) override {
    return make_inference_conv_op(ctx_, std::move(spec));
  }
  std::unique_ptr<InferenceOp> inference_pool(const InferencePoolSpec& spec) override {
    return make_inference_pool_op(ctx_, spec);
  }

  bool view_host(const float* host, const Dims& dims, Tensor& t) override {
    const MemDesc md = plain_md(dims, DType::kF32);
    const bool same_layout = !t.empty() && t.is_view() && md_of(t) == md;
    t.view_of_memory(const_cast<float*>(host), md.get_size(), dims, DType::kF32,
                     same_layout ? t.shared_layout() : make_layout(md));
    return true;
  }

  void dequantize(const Tensor& x, float scale, Tensor& y) override {
    const MemDesc plain = plain_md(x.dims(), DType::kF32);
    if (md_of(x) == plain && scale == 1.0f) {
      const bool same_layout = !y.empty() && md_of(y) == plain;
      if (!y.is_view() || y.data() != x.data() || !same_layout)
        y.view_of(x, x.dims(), same_layout ? y.shared_layout() : make_layout(plain));
      return;
    }
    if (y.is_view()) y = Tensor();  // viewed an earlier input; own storage again
    shape_plain(y, x.dims(), DType::kF32);
    edge_reorders_.run_scaled(ctx_, md_of(x), x.data(), plain, y.data(), scale);
  }

 private:
  // The value of a clip_scale() tensor (host memory on this backend).
  static float scale_of(const Tensor* t) {
    if (t == nullptr) return 1.0f;
    return *f32_data(*t, "grad_scale");
  }

  // Element i of `in`'s storage draws with index first_sample × (stored
  // elements per sample) + i: the batch dim is outermost and unblocked in
  // every activation layout (with_batch), so that is its index in the
  // storage of the whole batch.
  void apply_mask(const Tensor& in, Tensor& out, const engine::DropoutRule& mask, std::int64_t first_sample) {
    const std::int64_t n = stored_elements(in);
    const std::int64_t rows = in.dims().rank() > 0 ? in.dims()[0] : 1;
    const std::int64_t offset = rows > 0 ? first_sample * (n / rows) : 0;
    if (in.dtype() == DType::kF32) {
      const float* a = static_cast<const float*>(in.data());
      float* b = static_cast<float*>(out.data());
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
      for (std::int64_t i = 0; i < n; ++i) b[i] = a[i] * mask.factor(std::uint64_t(offset + i));
    } else {
      const auto* a = static_cast<const std::uint16_t*>(in.data());
      auto* b = static_cast<std::uint16_t*>(out.data());
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
      for (std::int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) * mask.factor(std::uint64_t(offset + i)));
    }
  }

  BackendCapabilities capabilities_;
  CpuContext ctx_;
  Reorders edge_reorders_;
  MemberMean member_mean_;
  ScratchBuffer partials_;
  std::vector<float> fq_host_;  // fake_quantize_channels: plain (O, I...) weights
};

}  // namespace
}  // namespace cpu

namespace cpu {
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}
}  // namespace cpu

}  // namespace anneal
