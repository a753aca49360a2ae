// The CUDA backend: libanneal-cuda-ops.so, which libanneal-cuda.so (the
// plugin, cuda_plugin.cc) loads only to make a backend, so that probing for
// a GPU maps the CUDA runtime alone and not cuBLASLt and cuDNN (hundreds of
// MB of address space in every command that asks `auto`). Built only where
// CMake finds the CUDA toolkit (-DANNEAL_CUDA=auto|on|off); the anneal
// executable never links it.
//
// One device (the first), one compute stream (and one for uploads), one
// cuBLASLt and one cuDNN handle per backend. Tensors are plain row-major fp32 in device memory; the host sees
// values only through copy_to_host, the loss op's totals()/predict() and
// the running totals, each of which synchronizes the stream. Everything
// else is issued asynchronously in order on the stream.
//
// Activations are fp32 or, under precision = bf16 (Ampere and newer) or
// fp16, 16-bit with fp32 master weights, a 16-bit working copy of them per
// op, and fp32 accumulation; fp16 trains with a dynamic loss scale kept on
// the device (unscale_gradients). What is not here yet: int8 inference
// (int8 models run on the CPU backend).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "anneal/device.h"
#include "anneal/error.h"
#include "engine/cuda/cuda_common.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/cuda/cuda_ops.h"
#include "engine/backend_rules.h"

namespace anneal::cuda {
namespace {

// Binds the calling thread to the backend's device, restoring the previous
// binding when it ends.
class DeviceScope final : public ExecutionScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "reading the current device");
    check(cudaSetDevice(device), "selecting the device");
  }
  ~DeviceScope() override { cudaSetDevice(previous_); }  // a device set before cannot fail to be set again
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

void check_same_size(const Tensor& a, const Tensor& b, const char* what) {
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || a.bytes() != b.bytes())
    throw failure(std::string(what) + ": tensors differ in size or type");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options) : partials_(*this), nonfinite_(*this) {
    ctx_.device = 0;
    ctx_.allocator = this;
    ctx_.deterministic = options.deterministic;
    ctx_.tf32 = options.tf32;
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, ctx_.device), "reading the device's properties");
    // bf16 tensor-core products and convolutions from Ampere (8.0) on.
    capabilities_.bf16 = p.major >= 8;
    // fp16 tensor cores from Volta (7.0) on: every device the plugin takes.
    capabilities_.fp16 = p.major >= 7;
    capabilities_.int8 = false;
    // Every kernel reduces in a fixed order and, unless the options allow
    // otherwise, the library algorithms are chosen deterministic
    // (cuda_ops.h).
    capabilities_.deterministic = options.deterministic;
    capabilities_.threads = options.threads;
    capabilities_.device = "cuda";
    capabilities_.isa = "sm_" + std::to_string(p.major) + std::to_string(p.minor);
    device_name_ = p.name;
    DeviceScope scope(ctx_.device);
    try {
      check(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking), "creating a stream");
      check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "creating a stream");
      check(cublasLtCreate(&ctx_.blas), "creating a handle");
      check(cudnnCreate(&ctx_.dnn), "creating a handle");
      check(cudnnSetStream(ctx_.dnn, ctx_.stream), "binding the stream");
    } catch (...) {
      release();
      throw;
    }
    ctx_.workspace = std::make_unique<DeviceBuffer>(*this);
  }

  // Storage (the workspace, partials_) is freed after the handles; cudaFree
  // needs neither.
  ~CudaBackend() override { release(); }

  const char* name() const override { return "cuda"; }
  const BackendCapabilities& capabilities() const override { return capabilities_; }
  std::unique_ptr<ExecutionScope> enter() override { return std::make_unique<DeviceScope>(ctx_.device); }

  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, std::max<std::size_t>(bytes, 256));
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw failure("cuda backend: out of device memory allocating " + std::to_string(bytes) + " bytes on " +
                    device_name_ + " (" + cudaGetErrorName(status) + ")");
    }
    return p;
  }
  // cudaFree waits for the work issued before it, so storage is never freed
  // under a kernel still using it. Its only failures are a bad pointer
  // (impossible: it came from allocate) or an earlier asynchronous fault,
  // which the next checked call reports.
  void deallocate(void* data) noexcept override { cudaFree(data); }

  void shape_plain(Tensor& t, const Dims& dims, DType dtype) override {
    cuda::shape_plain(t, dims, dtype, *this);
  }
  void shape_like(Tensor& t, const Tensor& like, DType dtype) override {
    cuda::shape_plain(t, like.dims(), dtype, *this);
  }

  // Through a pinned staging buffer and a device one, on the copy stream:
  // from pageable memory the runtime would first wait for the stream to
  // drain, so the host could not gather the next batch while the GPU trains
  // on this one; and on the compute stream the transfer would queue behind
  // the current step's kernels. So the host-to-device transfer runs on its
  // own stream, overlapping the step in flight, and the compute stream,
  // after waiting for it, only copies device to device into `t`: ordered
  // after every op issued before, so it never overwrites a tensor an
  // earlier op still reads.
  void copy_from_host(const float* host, Tensor& t) override {
    if (t.dtype() != DType::kF32) {
      // fp32 values up, then rounded on the device (to nearest even).
      Tensor& f = upload_;
      cuda::shape_plain(f, t.dims(), DType::kF32, *this);
      copy_from_host(host, f);
      kernels::convert(kernels::activations(f), kernels::activations(t), count(t), ctx_.stream);
      t.mark_modified();
      return;
    }
    float* device = f32(t, "copy_from_host");
    const std::size_t bytes = t.bytes();
    if (bytes > kStagingLimit) {
      // A large upload (a big layer's weights at load): the runtime stages
      // it, and the call returns once it has read `host`.
      check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, ctx_.stream), "copy to the device");
    } else if (bytes > 0) {
      Staging& s = staging_[next_staging_];
      next_staging_ = (next_staging_ + 1) % staging_.size();
      // The compute stream's last read of this slot (its device to device
      // copy) comes after the transfer into it, so once it is done both
      // buffers are free.
      if (s.pending) check(cudaEventSynchronize(s.consumed), "waiting for a staging buffer");
      s.pending = false;
      if (s.bytes < bytes) {
        if (s.host) check(cudaFreeHost(s.host), "freeing a staging buffer");
        if (s.device) check(cudaFree(s.device), "freeing a staging buffer");
        s.host = s.device = nullptr;
        s.bytes = 0;
        check(cudaHostAlloc(&s.host, bytes, cudaHostAllocDefault), "allocating a staging buffer");
        s.device = allocate(bytes);
        s.bytes = bytes;
      }
      if (!s.uploaded) check(cudaEventCreateWithFlags(&s.uploaded, cudaEventDisableTiming), "creating an event");
      if (!s.consumed) check(cudaEventCreateWithFlags(&s.consumed, cudaEventDisableTiming), "creating an event");
      std::memcpy(s.host, host, bytes);
      check(cudaMemcpyAsync(s.device, s.host, bytes, cudaMemcpyHostToDevice, copy_stream_), "copy to the device");
      check(cudaEventRecord(s.uploaded, copy_stream_), "recording a copy");
      check(cudaStreamWaitEvent(ctx_.stream, s.uploaded, 0), "ordering a copy");
      check(cudaMemcpyAsync(device, s.device, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), "copy on the device");
      check(cudaEventRecord(s.consumed, ctx_.stream), "recording a copy");
      s.pending = true;
    }
    t.mark_modified();
  }
  void copy_to_host(const Tensor& t, float* host) override {
    const Tensor* from = &t;
    if (t.dtype() != DType::kF32) {
      cuda::shape_plain(download_, t.dims(), DType::kF32, *this);
      kernels::convert(kernels::activations(t), kernels::activations(download_), count(t), ctx_.stream);
      from = &download_;
    }
    check(cudaMemcpyAsync(host, f32(*from, "copy_to_host"), from->bytes(), cudaMemcpyDeviceToHost, ctx_.stream),
          "copy to the host");
    check(cudaStreamSynchronize(ctx_.stream), "copy to the host");
  }
  float* host_view(Tensor&) override { return nullptr; }
  StorageView storage_view(Tensor&) override { return {}; }  // device memory: the host cannot address it

  void flatten(const Tensor& src, Tensor& dst) override {
    const Dims flat{src.batch(), src.elements() / std::max<std::int64_t>(src.batch(), 1)};
    dst.view_of(src, flat, std::make_shared<const CudaLayout>(src.bytes()));
  }
  void unflatten(const Tensor& src, const Tensor& like, Tensor& dst) override {
    if (src.bytes() != like.bytes() || src.dtype() != like.dtype())
      throw failure("unflatten: gradient does not match the flattened tensor");
    shape_like(dst, like, like.dtype());
    if (dst.data() != src.data())
      check(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream),
            "unflatten");
  }

  void fill_zero(Tensor& t) override {
    check(cudaMemsetAsync(t.data(), 0, t.bytes(), ctx_.stream), "fill_zero");
    t.mark_modified();
  }

  void clip_scale(const std::vector<const Tensor*>& grads, float max_norm, const Tensor* pre_scale,
                  Tensor& scale) override {
    const std::size_t per = kernels::kSquareBlocks;
    auto* partials =
        static_cast<double*>(partials_.ensure(sizeof(double) * per * std::max<std::size_t>(grads.size(), 1)));
    for (std::size_t i = 0; i < grads.size(); ++i)
      kernels::sum_squares(f32(*grads[i], "clip_scale"), count(*grads[i]), partials + i * per, ctx_.stream);
    shape_plain(scale, Dims{1}, DType::kF32);
    kernels::clip_scale(partials, int(grads.size()), max_norm, scale_of(pre_scale), f32(scale, "clip_scale"),
                        ctx_.stream);
    scale.mark_modified();
  }

  void unscale_gradients(const std::vector<const Tensor*>& grads, Tensor& state, int growth_interval,
                         Tensor& step_scale) override {
    if (state.elements() != 4) throw failure("unscale_gradients: the state holds 4 values");
    auto* flag = static_cast<int*>(nonfinite_.ensure(sizeof(int)));
    check(cudaMemsetAsync(flag, 0, sizeof(int), ctx_.stream), "clearing a flag");
    for (const Tensor* g : grads) kernels::flag_nonfinite(f32(*g, "unscale_gradients"), count(*g), flag, ctx_.stream);
    shape_plain(step_scale, Dims{1}, DType::kF32);
    kernels::loss_scale_update(flag, f32(state, "loss scale state"), growth_interval, f32(step_scale, "step scale"),
                               ctx_.stream);
    state.mark_modified();
    step_scale.mark_modified();
  }

  void update_running_stat(Tensor& running, const Tensor& batch, float momentum, float scale) override {
    check_same_size(running, batch, "update_running_stat");
    kernels::running_stat(f32(running, "running"), f32(batch, "batch"), count(running), momentum, scale,
                          ctx_.stream);
    running.mark_modified();
  }

  void multiply(Tensor& t, const Tensor& mask) override {
    check_same_size(t, mask, "multiply");
    kernels::multiply(f32(t, "multiply"), f32(mask, "mask"), count(t), ctx_.stream);
    t.mark_modified();
  }

  void member_mean(const Tensor& z, std::int64_t members, Tensor& y) override {
    if (z.dims().rank() != 2 || members < 1 || z.dims()[0] % members != 0)
      throw usage_error("member_mean: " + z.dims().str() + " is not (N·" + std::to_string(members) + ", K)");
    const std::int64_t n = z.dims()[0] / members, width = z.dims()[1];
    kernel_count(z.elements(), "member_mean input");
    shape_plain(y, Dims{n, width}, z.dtype());
    kernels::member_mean(kernels::activations(z), kernels::activations(y), int(n), int(width), int(members), ctx_.stream);
  }

  void fake_quantize(const Tensor& x, Tensor& y, float scale, float lo, float hi) override {
    if (!(scale > 0)) throw usage_error("fake_quantize: the scale must be > 0");
    engine::check_f32_usage(x, "fake_quantize");
    shape_like(y, x, DType::kF32);
    kernels::fake_quantize(f32(x, "fake_quantize"), f32(y, "fake_quantize"), count(x), scale, lo, hi,
                           ctx_.stream);
    y.mark_modified();
  }

  void fake_quantize_channels(const Tensor& w, Tensor& y, int levels) override {
    engine::check_f32_usage(w, "fake_quantize_channels");
    engine::check_weight_levels(levels);
    shape_like(y, w, DType::kF32);
    const std::int64_t channels = w.dims().rank() > 0 ? w.dims()[0] : 0;
    kernels::fake_quantize_channels(f32(w, "fake_quantize_channels"), f32(y, "fake_quantize_channels"),
                                    int(channels), channels > 0 ? count(w) / int(channels) : 0, float(levels),
                                    ctx_.stream);
    y.mark_modified();
  }

  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t seed, std::uint64_t stream,
                       std::int64_t first_sample) override {
    shape_like(y, x, x.dtype());
    dropout(x, y, p, seed, stream, first_sample);
  }
  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t seed, std::uint64_t stream,
                        std::int64_t first_sample) override {
    shape_like(dx, dy, dy.dtype());
    dropout(dy, dx, p, seed, stream, first_sample);
  }

  void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamUpdate& u) override {
    check_same_size(w, g, "adam");
    check_same_size(w, m, "adam");
    check_same_size(w, v, "adam");
    kernels::adam(f32(w, "adam"), f32(g, "adam"), f32(m, "adam"), f32(v, "adam"), count(w), engine::adam_scalars(u),
                  scale_of(u.grad_scale), ctx_.stream);
    w.mark_modified();
  }

  void sgd_update(Tensor& w, const Tensor& g, Tensor& velocity, const SgdUpdate& u) override {
    check_same_size(w, g, "sgd");
    float* v = nullptr;
    if (u.momentum != 0.0f) {
      check_same_size(w, velocity, "sgd");
      v = f32(velocity, "sgd");
    }
    kernels::sgd(f32(w, "sgd"), f32(g, "sgd"), v, count(w), {u.lr, u.momentum, u.weight_decay, u.nesterov},
                 scale_of(u.grad_scale), ctx_.stream);
    w.mark_modified();
  }

  std::unique_ptr<EltwiseOp> eltwise(const EltwiseSpec& spec) override {
    check_precision(spec.compute);
    return make_eltwise_op(ctx_, spec);
  }
  std::unique_ptr<DenseOp> dense(const DenseSpec& spec) override {
    check_precision(spec.compute);
    return make_dense_op(ctx_, spec);
  }
  std::unique_ptr<ConvOp> conv(const ConvSpec& spec) override {
    check_precision(spec.compute);
    return make_conv_op(ctx_, spec);
  }
  std::unique_ptr<PoolOp> pool(const PoolSpec& spec) override {
    check_precision(spec.compute);
    return make_pool_op(ctx_, spec);
  }
  std::unique_ptr<NormOp> batch_norm(const NormSpec& spec) override {
    check_precision(spec.compute);
    return make_batch_norm_op(ctx_, spec);
  }
  std::unique_ptr<NormOp> layer_norm(const NormSpec& spec) override {
    check_precision(spec.compute);
    return make_layer_norm_op(ctx_, spec);
  }
  std::unique_ptr<PeriodicOp> periodic(const PeriodicSpec& spec) override { return make_periodic_op(ctx_, spec); }
  std::unique_ptr<PiecewiseLinearOp> piecewise_linear(const PiecewiseLinearSpec& spec) override {
    return make_piecewise_linear_op(ctx_, spec);
  }
  std::unique_ptr<EnsembleOp> ensemble(const EnsembleSpec& spec) override { return make_ensemble_op(ctx_, spec); }
  std::unique_ptr<MemberDenseOp> member_dense(const MemberDenseSpec& spec) override {
    return make_member_dense_op(ctx_, spec);
  }
  std::unique_ptr<LossOp> loss(LossKind kind, std::int64_t outputs, std::span<const float> class_weights) override {
    return make_loss_op(ctx_, kind, outputs, class_weights);
  }

  std::unique_ptr<InferenceOp> inference_dense(InferenceDenseSpec spec) override {
    return make_inference_dense_op(ctx_, std::move(spec));
  }
  std::unique_ptr<InferenceConvOp> inference_conv(InferenceConvSpec spec) override {
    return make_inference_conv_op(ctx_, std::move(spec));
  }
  std::unique_ptr<InferenceOp> inference_pool(const InferencePoolSpec& spec) override {
    return make_inference_pool_op(ctx_, spec);
  }

  void dequantize(const Tensor& x, float scale, Tensor& y) override {
    if (x.dtype() != DType::kF32) throw usage_error("int8 models run on the CPU backend; use device cpu");
    if (scale == 1.0f) {
      y.view_of(x, x.dims(), std::make_shared<const CudaLayout>(x.bytes()));
      return;
    }
    shape_plain(y, x.dims(), DType::kF32);
    kernels::scale(f32(x, "dequantize"), f32(y, "dequantize"), count(x), scale, ctx_.stream);
  }

  bool view_host(const float*, const Dims&, Tensor&) override { return false; }

 private:
  static int count(const Tensor& t) { return kernel_count(t.elements(), "tensor"); }

  void check_precision(DType compute) const {
    if (compute == DType::kF32 || (compute == DType::kBF16 && capabilities_.bf16) ||
        (compute == DType::kF16 && capabilities_.fp16))
      return;
    throw usage_error(std::string("the CUDA backend on ") + device_name_ + " computes in f32" +
                      (capabilities_.bf16 ? ", bf16" : "") + (capabilities_.fp16 ? " or f16" : "") + ", not " +
                      dtype_name(compute));
  }
  static const float* scale_of(const Tensor* t) { return t ? f32(*t, "grad_scale") : nullptr; }

  // The kernel draws element i with key + i; a share of a larger batch
  // starts its key at its first sample's first element (plain layouts: the
  // elements of one sample are count / rows).
  void dropout(const Tensor& in, Tensor& out, float p, std::uint64_t seed, std::uint64_t stream,
               std::int64_t first_sample) {
    const std::int64_t rows = in.dims().rank() > 0 ? in.dims()[0] : 1;
    const std::int64_t offset = rows > 0 ? first_sample * (std::int64_t(count(in)) / rows) : 0;
    engine::DropoutRule rule = engine::DropoutRule::of(p, seed, stream);
    rule.key += std::uint64_t(offset);  // the kernel counts from this share's first element
    kernels::dropout(kernels::activations(in), kernels::activations(out), count(in), rule, ctx_.stream);
  }

  void release() noexcept {
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
    for (Staging& st : staging_) {
      if (st.host) cudaFreeHost(st.host);
      if (st.device) cudaFree(st.device);
      if (st.uploaded) cudaEventDestroy(st.uploaded);
      if (st.consumed) cudaEventDestroy(st.consumed);
      st = Staging{};
    }
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    copy_stream_ = nullptr;
    if (ctx_.dnn) cudnnDestroy(ctx_.dnn);
    if (ctx_.blas) cublasLtDestroy(ctx_.blas);
    if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
    ctx_.dnn = nullptr;
    ctx_.blas = nullptr;
    ctx_.stream = nullptr;
  }

  // copy_from_host's buffers, used in turn: a batch's features and labels,
  // and the next batch's, can be in flight at once.
  struct Staging {
    void* host = nullptr;    // pinned
    void* device = nullptr;  // what the copy stream writes
    std::size_t bytes = 0;   // of each
    cudaEvent_t uploaded = nullptr;  // on the copy stream, after the transfer into `device`
    cudaEvent_t consumed = nullptr;  // on the compute stream, after the copy out of `device`
    bool pending = false;
  };
  static constexpr std::size_t kStagingLimit = std::size_t{64} << 20;

  BackendCapabilities capabilities_;
  std::string device_name_;
  std::array<Staging, 4> staging_{};
  cudaStream_t copy_stream_ = nullptr;  // copy_from_host's transfers
  std::size_t next_staging_ = 0;
  CudaContext ctx_;
  DeviceBuffer partials_;  // clip_scale's per-block sums
  DeviceBuffer nonfinite_;  // unscale_gradients's flag
  Tensor upload_, download_;  // fp32 values of a bf16 or f16 tensor on their way in and out
};

}  // namespace
}  // namespace anneal::cuda

// What libanneal-cuda.so calls once its probe found a usable device
// (cuda_plugin.cc): a new backend the caller owns. Throws anneal::Error.
extern "C" __attribute__((visibility("default"))) anneal::Backend* anneal_cuda_make_backend(
    const anneal::BackendOptions* options) {
  return new anneal::cuda::CudaBackend(*options);
}
