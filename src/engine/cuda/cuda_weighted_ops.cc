// The CUDA backend's dense and convolution ops (see cuda_ops.h): products
// on cuBLASLt, convolutions on cuDNN.
//
// Row-major on a column-major library: a row-major (R, C) matrix is a
// column-major (C, R) one, so y(N,O) = x(N,I)·W(O,I)ᵀ is computed as the
// column-major yᵀ(O,N) = Wᵀ·xᵀ, and so on for the backward products.
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

// cuBLASLt and cuDNN may use up to this much scratch memory per call.
constexpr std::size_t kWorkspaceBytes = std::size_t{64} << 20;

void* workspace(CudaContext& ctx, std::size_t bytes) {
  return bytes == 0 ? nullptr : ctx.workspace->ensure(bytes);
}

using kernels::activations;

cudaDataType_t blas_type(DType dtype) {
  return dtype == DType::kBF16 ? CUDA_R_16BF : dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// A 16-bit (the compute dtype's) copy of an fp32 tensor (the weights'
// working copy), remade only when the source's storage or version changes.
class WorkingCopy {
 public:
  WorkingCopy(MemoryAllocator& allocator, DType dtype) : buffer_(allocator), dtype_(dtype) {}
  const void* of(const Tensor& master, CudaContext& ctx) {
    if (master.data() != source_ || master.version() != version_) {
      const int n = kernel_count(master.elements(), "weights");
      void* copy = buffer_.ensure(std::size_t(std::max(n, 1)) * dtype_size(dtype_));
      kernels::convert(activations(master), {copy, dtype_}, n, ctx.stream);
      source_ = master.data();
      version_ = master.version();
    }
    return buffer_.data();
  }

 private:
  DeviceBuffer buffer_;
  DType dtype_;
  const void* source_ = nullptr;
  std::uint64_t version_ = 0;
};

// `x` in the op's compute dtype: itself, or converted into `scratch` (the
// fp32 network input under 16-bit compute).
const void* in_dtype(const Tensor& x, DType dtype, DeviceBuffer& scratch, CudaContext& ctx) {
  if (x.dtype() == dtype) return x.data();
  const int n = kernel_count(x.elements(), "input");
  void* out = scratch.ensure(std::size_t(std::max(n, 1)) * dtype_size(dtype));
  kernels::convert(activations(x), {out, dtype}, n, ctx.stream);
  return out;
}


// ---- Matrix products on cuBLASLt ----------------------------------------

// C(m, n) = op(A)·op(B) + beta·C, column-major, fp32 in and out with fp32
// accumulation (TF32 products only when the context allows them). One plan (descriptors and the heuristic's algorithm) per
// shape, made on first use: the same shape always runs the same algorithm.
class Gemm {
 public:
  explicit Gemm(CudaContext& ctx) : ctx_(ctx) {}
  ~Gemm() {
    for (Plan& p : plans_) p.destroy();
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // A and B are `ab` (fp32, bf16 or f16); C is fp32.
  void run(bool trans_a, bool trans_b, int m, int n, int k, DType ab, const void* a, int lda, const void* b, int ldb,
           float* c, int ldc, float beta) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum: C = beta·C
      if (beta == 0.0f) check(cudaMemset2DAsync(c, sizeof(float) * ldc, 0, sizeof(float) * m, n, ctx_.stream),
                              "zeroing an empty product");
      return;
    }
    const Plan& plan = plan_for({trans_a, trans_b, m, n, k, lda, ldb, ldc, ab});
    const float alpha = 1.0f;
    check(cublasLtMatmul(ctx_.blas, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c, plan.c,
                         &plan.algo, workspace(ctx_, plan.workspace), plan.workspace, ctx_.stream),
          "matmul");
  }

 private:
  struct Key {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    DType ab;
    bool operator==(const Key&) const = default;
  };
  struct Plan {
    Key key{};
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::size_t workspace = 0;
    void destroy() noexcept {
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (c) cublasLtMatrixLayoutDestroy(c);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };

  const Plan& plan_for(const Key& key) {
    for (const Plan& p : plans_)
      if (p.key == key) return p;
    Plan plan;
    plan.key = key;
    try {
      // TF32 only for fp32 operands; 16-bit ones are exact on the tensor cores.
      const bool tf32 = ctx_.tf32 && key.ab == DType::kF32;
      check(cublasLtMatmulDescCreate(&plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                     CUDA_R_32F),
            "matmul descriptor");
      const cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
      // Stored shapes: op(A) is m×k, so A is k×m when transposed.
      check(cublasLtMatrixLayoutCreate(&plan.a, blas_type(key.ab), key.trans_a ? key.k : key.m,
                                       key.trans_a ? key.m : key.k, key.lda), "layout of A");
      check(cublasLtMatrixLayoutCreate(&plan.b, blas_type(key.ab), key.trans_b ? key.n : key.k,
                                       key.trans_b ? key.k : key.n, key.ldb), "layout of B");
      check(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, key.m, key.n, key.ldc), "layout of C");
      cublasLtMatmulPreference_t preference = nullptr;
      check(cublasLtMatmulPreferenceCreate(&preference), "matmul preference");
      const std::uint64_t limit = kWorkspaceBytes;
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit);
      const cublasStatus_t asked =
          set == CUBLAS_STATUS_SUCCESS
              ? cublasLtMatmulAlgoGetHeuristic(ctx_.blas, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, 1,
                                               &result, &found)
              : set;
      cublasLtMatmulPreferenceDestroy(preference);
      check(asked, "choosing a matmul algorithm");
      if (found == 0)
        throw failure("cublasLt: no algorithm for a " + std::to_string(key.m) + "x" + std::to_string(key.n) + "x" +
                      std::to_string(key.k) + " " + dtype_name(key.ab) + " product");
      plan.algo = result.algo;
      plan.workspace = result.workspaceSize;
    } catch (...) {
      plan.destroy();
      throw;
    }
    plans_.push_back(plan);
    return plans_.back();
  }

  CudaContext& ctx_;
  std::vector<Plan> plans_;
};

std::int64_t flat_features(const Dims& in) { return in.product(); }

// ---- Dense ------------------------------------------------------------------

class CudaDenseOp final : public DenseOp {
 public:
  CudaDenseOp(CudaContext& ctx, const DenseSpec& spec)
      : ctx_(ctx), spec_(spec), in_(kernel_count(flat_features(spec.in), "dense input")),
        out_(kernel_count(spec.out, "dense output")), gemm_(ctx), weights16_(*ctx.allocator, spec.compute),
        input_(*ctx.allocator), product_(*ctx.allocator) {}

  void shape_parameters(Tensor& weights, Tensor& bias) override {
    std::vector<std::int64_t> w{spec_.out};
    for (int i = 0; i < spec_.in.rank(); ++i) w.push_back(spec_.in[i]);
    shape_plain(weights, Dims(w), DType::kF32, *ctx_.allocator);
    shape_plain(bias, Dims{spec_.out}, DType::kF32, *ctx_.allocator);
  }

  void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) override {
    const int n = batch_of(x);
    shape_plain(y, Dims{n, spec_.out}, spec_.compute, *ctx_.allocator);
    // yᵀ(O, N) = Wᵀ(O, I)·xᵀ(I, N), column-major, into y itself in fp32,
    // else into an fp32 product that the bias kernel rounds once.
    float* z = spec_.compute == DType::kF32 ? f32(y, "dense output") : product(n * out_);
    gemm_.run(true, false, out_, n, in_, spec_.compute, working(weights), in_,
              in_dtype(x, spec_.compute, input_, ctx_), in_, z, out_, 0.0f);
    kernels::bias_activation({z, DType::kF32}, activations(y), f32(bias, "dense bias"), n, out_, 1, spec_.fused,
                             ctx_.stream);
  }

  void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) override {
    const int n = kernel_count(dy.batch(), "dense batch");
    check_compute(dy, "dense gradient");
    shape_plain(dx, spec_.in.with_batch(n), spec_.compute, *ctx_.allocator);
    // dxᵀ(I, N) = W(I, O)·dyᵀ(O, N), column-major.
    float* z = spec_.compute == DType::kF32 ? f32(dx, "dense input gradient") : product(n * in_);
    gemm_.run(false, false, in_, n, out_, spec_.compute, working(weights), in_, dy.data(), out_, z, in_, 0.0f);
    if (spec_.compute != DType::kF32)
      kernels::convert({z, DType::kF32}, activations(dx), n * in_, ctx_.stream);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights, Tensor& dbias,
                        bool accumulate) override {
    const int n = batch_of(x);
    check_compute(dy, "dense gradient");
    shape_parameters(dweights, dbias);
    // dWᵀ(I, O) = xᵀ(I, N)·dy(N, O), column-major, fp32 whatever the compute.
    gemm_.run(false, true, in_, out_, n, spec_.compute, in_dtype(x, spec_.compute, input_, ctx_), in_, dy.data(),
              out_, f32(dweights, "dense weight gradient"), in_, accumulate ? 1.0f : 0.0f);
    kernels::bias_grad(activations(dy), f32(dbias, "dense bias gradient"), n, out_, 1, accumulate, nullptr,
                       ctx_.stream);
  }

 private:
  int batch_of(const Tensor& x) const {
    if (x.dims().rank() < 1 || x.elements() != x.batch() * flat_features(spec_.in))
      throw failure("dense: input " + x.dims().str() + " does not match " + spec_.in.str());
    return kernel_count(x.batch(), "dense batch");
  }
  void check_compute(const Tensor& t, const char* what) const {
    if (t.dtype() != spec_.compute)
      throw failure(std::string(what) + ": " + dtype_name(t.dtype()) + ", not the op's " +
                    dtype_name(spec_.compute));
  }
  // The weights in the compute dtype.
  const void* working(const Tensor& weights) {
    if (weights.dtype() != DType::kF32) throw failure("dense: the weights must be fp32 masters");
    return spec_.compute == DType::kF32 ? weights.data() : weights16_.of(weights, ctx_);
  }
  float* product(int elements) {
    return static_cast<float*>(product_.ensure(sizeof(float) * std::size_t(std::max(elements, 1))));
  }

  CudaContext& ctx_;
  DenseSpec spec_;
  int in_, out_;
  Gemm gemm_;
  WorkingCopy weights16_;
  DeviceBuffer input_, product_;  // x converted to the compute dtype; an fp32 product before rounding
};

// ---- Convolution ------------------------------------------------------------------

class CudaConvOp final : public ConvOp {
 public:
  CudaConvOp(CudaContext& ctx, const ConvSpec& spec)
      : ctx_(ctx), spec_(spec), dt_(spec.compute), weights16_(*ctx.allocator, spec.compute), input_(*ctx.allocator),
        dweights16_(*ctx.allocator), bias_partials_(*ctx.allocator), col_(*ctx.allocator),
        dy_channels_first_(*ctx.allocator), gemm_(ctx) {
    const auto [c, h, w] = image_dims(spec.in, "conv");
    c_ = c, h_ = h, w_ = w;
    o_ = kernel_count(spec.out_channels, "conv channels");
    const int k = kernel_count(spec.kernel, "conv kernel"), s = kernel_count(spec.stride, "conv stride"),
              p = kernel_count(spec.pad, "conv padding");
    if (k < 1 || s < 1 || p < 0 || h + 2 * p < k || w + 2 * p < k)
      throw usage_error("conv: a " + std::to_string(k) + "x" + std::to_string(k) + " kernel with stride " +
                        std::to_string(s) + " and padding " + std::to_string(p) + " does not fit a " +
                        std::to_string(h) + "x" + std::to_string(w) + " image");
    k_ = k, stride_ = s, pad_ = p;
    ho_ = (h + 2 * p - k) / s + 1;
    wo_ = (w + 2 * p - k) / s + 1;
    check(cudnnCreateFilterDescriptor(&filter_), "filter descriptor");
    check(cudnnSetFilter4dDescriptor(filter_, dnn_type(dt_), CUDNN_TENSOR_NCHW, o_, c_, k, k), "filter shape");
    check(cudnnCreateConvolutionDescriptor(&conv_), "convolution descriptor");
    check(cudnnSetConvolution2dDescriptor(conv_, p, p, s, s, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "convolution shape");
    // Accumulation in fp32 whatever the dtype; FMA math only for fp32
    // unless TF32 is allowed (TF32 tensor cores round the inputs to 10
    // bits); bf16 and fp16 products are exact on the tensor cores.
    check(cudnnSetConvolutionMathType(conv_, math()), "convolution math type");
  }
  ~CudaConvOp() override {
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(filter_);
  }
  CudaConvOp(const CudaConvOp&) = delete;
  CudaConvOp& operator=(const CudaConvOp&) = delete;

  void shape_parameters(Tensor& weights, Tensor& bias) override {
    shape_plain(weights, Dims{spec_.out_channels, spec_.in[0], spec_.kernel, spec_.kernel}, DType::kF32,
                *ctx_.allocator);
    shape_plain(bias, Dims{spec_.out_channels}, DType::kF32, *ctx_.allocator);
  }

  void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) override {
    Plan& plan = plan_for(x);
    shape_plain(y, Dims{plan.n, o_, ho_, wo_}, dt_, *ctx_.allocator);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionForward(ctx_.dnn, &one, plan.x.get(), in_dtype(x, dt_, input_, ctx_), filter_,
                                  working(weights), conv_, plan.forward, workspace(ctx_, plan.forward_bytes),
                                  plan.forward_bytes, &zero, plan.y.get(), y.data()),
          "convolution forward");
    kernels::bias_activation(activations(y), activations(y), f32(bias, "conv bias"), plan.n, o_, ho_ * wo_,
                             spec_.fused, ctx_.stream);
  }

  void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) override {
    Plan& plan = plan_for_batch(dy.batch());
    check_compute(dy, "conv gradient");
    shape_plain(dx, spec_.in.with_batch(plan.n), dt_, *ctx_.allocator);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionBackwardData(ctx_.dnn, &one, filter_, working(weights), plan.y.get(), dy.data(), conv_,
                                       plan.backward_data, workspace(ctx_, plan.backward_data_bytes),
                                       plan.backward_data_bytes, &zero, plan.x.get(), dx.data()),
          "convolution backward data");
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights, Tensor& dbias,
                        bool accumulate) override {
    Plan& plan = plan_for(x);
    check_compute(dy, "conv gradient");
    shape_parameters(dweights, dbias);
    if (plan.lowered_slice > 0) {
      lowered_weight_grad(in_dtype(x, dt_, input_, ctx_), dy, f32(dweights, "conv weight gradient"), plan.n,
                          plan.lowered_slice, accumulate);
    } else {
      const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f, zero = 0.0f;
      // cuDNN writes the filter gradient in the filter's dtype: fp32 straight
      // into dW; under bf16/fp16 into a 16-bit scratch, then added to the
      // fp32 dW.
      const bool direct = dt_ == DType::kF32;
      const int count = kernel_count(dweights.elements(), "conv weights");
      void* dw = direct ? dweights.data() : dweights16_.ensure(std::size_t(std::max(count, 1)) * dtype_size(dt_));
      check(cudnnConvolutionBackwardFilter(ctx_.dnn, &one, plan.x.get(), in_dtype(x, dt_, input_, ctx_),
                                           plan.y.get(), dy.data(), conv_, plan.backward_filter,
                                           workspace(ctx_, plan.backward_filter_bytes), plan.backward_filter_bytes,
                                           direct ? &beta : &zero, filter_, dw),
            "convolution backward filter");
      if (!direct)
        kernels::add_to_f32({dw, dt_}, f32(dweights, "conv weight gradient"), count, accumulate, ctx_.stream);
    }
    auto* partials = static_cast<float*>(bias_partials_.ensure(sizeof(float) * kernels::bias_grad_partials(o_)));
    kernels::bias_grad(activations(dy), f32(dbias, "conv bias gradient"), plan.n, o_, ho_ * wo_, accumulate,
                       partials, ctx_.stream);
  }

 private:
  // Descriptors and algorithms for one batch size.
  struct Plan {
    int n = 0;
    TensorDesc x, y;
    cudnnConvolutionFwdAlgo_t forward{};
    cudnnConvolutionBwdDataAlgo_t backward_data{};
    cudnnConvolutionBwdFilterAlgo_t backward_filter{};
    std::size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
    int lowered_slice = 0;  // > 0: the weight gradient is lowered_weight_grad's, in slices of this many samples
  };

  Plan& plan_for(const Tensor& x) {
    if (x.dims().rank() != 4 || x.dims().without_batch() != spec_.in)
      throw failure("conv: input " + x.dims().str() + " does not match " + spec_.in.str());
    return plan_for_batch(x.batch());
  }

  // CUDNN_DEFAULT_MATH permits TF32 on GPUs that have it; FMA math is
  // plain fp32.
  cudnnMathType_t math() const {
    if (dt_ != DType::kF32) return CUDNN_TENSOR_OP_MATH;
    return ctx_.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  }

  // The first algorithm of cuDNN's heuristic ranking that runs in the
  // context's math, fits the workspace and, when the context is
  // deterministic, is.
  template <typename Perf>
  bool acceptable(const Perf& p) const {
    const bool sixteen = dt_ != DType::kF32;
    const bool math_ok = p.mathType == CUDNN_FMA_MATH || ((ctx_.tf32 || sixteen) && p.mathType == CUDNN_DEFAULT_MATH) ||
                         (sixteen && p.mathType == CUDNN_TENSOR_OP_MATH);
    return p.status == CUDNN_STATUS_SUCCESS && p.memory <= kWorkspaceBytes && math_ok &&
           (!ctx_.deterministic || p.determinism == CUDNN_DETERMINISTIC);
  }

  Plan& plan_for_batch(std::int64_t batch) {
    const int n = kernel_count(batch, "conv batch");
    for (auto& p : plans_)
      if (p->n == n) return *p;
    auto plan = std::make_unique<Plan>();
    plan->n = n;
    plan->x.set(n, c_, h_, w_, dt_);
    plan->y.set(n, o_, ho_, wo_, dt_);
    constexpr int kAsk = 16;
    int found = 0;
    bool chosen = false;
    std::array<cudnnConvolutionFwdAlgoPerf_t, kAsk> fwd{};
    check(cudnnGetConvolutionForwardAlgorithm_v7(ctx_.dnn, plan->x.get(), filter_, conv_, plan->y.get(), kAsk,
                                                 &found, fwd.data()),
          "choosing a forward convolution algorithm");
    for (int i = 0; i < found && !chosen; ++i)
      if (acceptable(fwd[i])) {
        plan->forward = fwd[i].algo, plan->forward_bytes = fwd[i].memory, chosen = true;
      }
    if (!chosen) throw failure("cudnn: no forward algorithm for " + describe(n));
    std::array<cudnnConvolutionBwdDataAlgoPerf_t, kAsk> data{};
    check(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx_.dnn, filter_, plan->y.get(), conv_, plan->x.get(), kAsk,
                                                      &found, data.data()),
          "choosing a backward-data convolution algorithm");
    chosen = false;
    for (int i = 0; i < found && !chosen; ++i)
      if (acceptable(data[i])) {
        plan->backward_data = data[i].algo, plan->backward_data_bytes = data[i].memory, chosen = true;
      }
    if (!chosen) throw failure("cudnn: no backward-data algorithm for " + describe(n));
    plan->lowered_slice = lowered_slice(n);
    if (plan->lowered_slice > 0) {
      plans_.push_back(std::move(plan));
      return *plans_.back();
    }
    std::array<cudnnConvolutionBwdFilterAlgoPerf_t, kAsk> filter{};
    check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx_.dnn, plan->x.get(), plan->y.get(), conv_, filter_,
                                                        kAsk, &found, filter.data()),
          "choosing a backward-filter convolution algorithm");
    chosen = false;
    for (int i = 0; i < found && !chosen; ++i)
      if (acceptable(filter[i])) {
        plan->backward_filter = filter[i].algo, plan->backward_filter_bytes = filter[i].memory, chosen = true;
      }
    if (!chosen) throw failure("cudnn: no backward-filter algorithm for " + describe(n));
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  // The weight gradient as matrix products, for deterministic contexts:
  // cuDNN's deterministic filter-gradient algorithms are its slowest, while
  // one cuBLASLt product over a lowered input is deterministic and fast.
  // Per slice of `slice` samples (the last one shorter), with
  // S = Ho·Wo and CKK = C·k·k:
  //   col(CKK, ns·S)  = im2col(x[slice])
  //   dyc(O, ns·S)    = dy[slice] with channels outermost
  //   dW(O, CKK)     += dyc · colᵀ   (the first slice overwrites unless accumulating)
  // Slices run in order, so the sum's order is fixed.
  void lowered_weight_grad(const void* x, const Tensor& dy, float* dw, int n, int slice, bool accumulate) {
    const kernels::ConvGeometry g{c_, h_, w_, k_, stride_, pad_, ho_, wo_};
    const int spatial = ho_ * wo_, ckk = c_ * g.k * g.k;
    const std::size_t size = dtype_size(dt_);
    void* col = col_.ensure(std::size_t(ckk) * spatial * slice * size);
    void* dyc = dy_channels_first_.ensure(std::size_t(o_) * spatial * slice * size);
    const auto* x_bytes = static_cast<const std::byte*>(x);
    const auto* dy_bytes = static_cast<const std::byte*>(dy.data());
    for (int first = 0; first < n; first += slice) {
      const int ns = std::min(slice, n - first);
      kernels::im2col({x_bytes + std::size_t(first) * c_ * h_ * w_ * size, dt_}, {col, dt_}, ns, g, ctx_.stream);
      kernels::channels_first({dy_bytes + std::size_t(first) * o_ * spatial * size, dt_}, {dyc, dt_}, ns, o_,
                              spatial, ctx_.stream);
      // Column-major: dWᵀ(CKK, O) = col'ᵀ·dyc' with col' = colᵀ (ns·S, CKK)
      // and dyc' = dycᵀ (ns·S, O) as stored.
      const int k = ns * spatial;
      gemm_.run(true, false, ckk, o_, k, dt_, col, k, dyc, k, dw, ckk, first == 0 && !accumulate ? 0.0f : 1.0f);
    }
  }

  // Samples per lowered slice, or 0 to leave the weight gradient to cuDNN:
  // the lowering is for deterministic contexts (otherwise cuDNN may pick its
  // fastest, atomic algorithms) and for samples whose lowered input fits
  // kLoweredElements.
  int lowered_slice(int n) const {
    const std::int64_t per_sample = std::int64_t(c_) * k_ * k_ * ho_ * wo_;
    if (!ctx_.deterministic || per_sample > kLoweredElements) return 0;
    return int(std::min<std::int64_t>(n, kLoweredElements / per_sample));
  }
  static constexpr std::int64_t kLoweredElements = std::int64_t{32} << 20;

  std::string describe(int n) const {
    return "a " + std::to_string(spec_.kernel) + "x" + std::to_string(spec_.kernel) + " " + dtype_name(dt_) +
           " convolution of " + spec_.in.with_batch(n).str();
  }
  void check_compute(const Tensor& t, const char* what) const {
    if (t.dtype() != dt_)
      throw failure(std::string(what) + ": " + dtype_name(t.dtype()) + ", not the op's " + dtype_name(dt_));
  }
  const void* working(const Tensor& weights) {
    if (weights.dtype() != DType::kF32) throw failure("conv: the weights must be fp32 masters");
    return dt_ == DType::kF32 ? weights.data() : weights16_.of(weights, ctx_);
  }

  CudaContext& ctx_;
  ConvSpec spec_;
  DType dt_;
  WorkingCopy weights16_;
  DeviceBuffer input_, dweights16_;  // x in the compute dtype; a 16-bit filter gradient
  DeviceBuffer bias_partials_;        // the bias gradient's per-slice sums
  DeviceBuffer col_, dy_channels_first_;  // the lowered weight gradient's operands
  Gemm gemm_;
  int c_ = 0, h_ = 0, w_ = 0, o_ = 0, ho_ = 0, wo_ = 0, k_ = 0, stride_ = 0, pad_ = 0;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<DenseOp> make_dense_op(CudaContext& ctx, const DenseSpec& spec) {
  return std::make_unique<CudaDenseOp>(ctx, spec);
}
std::unique_ptr<ConvOp> make_conv_op(CudaContext& ctx, const ConvSpec& spec) {
  return std::make_unique<CudaConvOp>(ctx, spec);
}

}  // namespace anneal::cuda
