// The CUDA backend's own kernels; contracts in cuda_kernels.h.
//
// Elementwise kernels are grid-stride loops. Reductions give every block a
// fixed share of the elements, sum each thread's share in order (in double
// where the CPU backend sums in double), then add a block's threads in a
// fixed tree: no atomics anywhere, so the same inputs give the same bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "engine/cuda/cuda_common.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/loss_scale.h"
#include "anneal/piecewise_linear.h"

namespace anneal::cuda::kernels {
namespace {

constexpr int kThreads = 256;

int blocks_for(int n) {
  const int blocks = (n + kThreads - 1) / kThreads;
  return blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks);
}

// fp32 arithmetic on either storage type; bf16 stores round to nearest even.
__device__ float ld(float v) { return v; }
__device__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ float ld(__half v) { return __half2float(v); }
template <typename T>
__device__ T st(float v);
template <>
__device__ float st<float>(float v) { return v; }
template <>
__device__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __half st<__half>(float v) { return __float2half_rn(v); }

template <typename T>
struct Type {
  using type = T;
};
// Calls f(Type<T>{}) with T the storage type of `dtype`.
template <typename F>
void with_type(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kF32) {
    f(Type<float>{});
  } else if (dtype == DType::kBF16) {
    f(Type<__nv_bfloat16>{});
  } else if (dtype == DType::kF16) {
    f(Type<__half>{});
  } else {
    throw failure(std::string(what) + ": expects f32, bf16 or f16, not " + dtype_name(dtype));
  }
}
template <typename T>
const T* as(ConstActivations a) {
  return static_cast<const T*>(a.data);
}
template <typename T>
T* as(Activations a) {
  return static_cast<T*>(a.data);
}

// i steps by the grid's size, compared before it is added: kernel_count
// lets n reach 2^31 - 1, where i + step would wrap to a negative index.
#define ANNEAL_GRID_STRIDE(i, n)                                                                 \
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x),                        \
           i##_step = static_cast<int>(gridDim.x * blockDim.x);                                 \
       i < (n); i = (n) - i > i##_step ? i + i##_step : (n))

// Sums v over the block's kThreads threads in a fixed tree; the result is
// valid in thread 0. `shared` holds kThreads values.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();  // shared may be reused right after
  return total;
}

__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const float m = shared[0];
  __syncthreads();
  return m;
}

// ---- Conversion ----

template <typename In, typename Out>
__global__ void convert_kernel(const In* x, Out* y, int n) {
  ANNEAL_GRID_STRIDE(i, n) y[i] = st<Out>(ld(x[i]));
}

template <typename In>
__global__ void add_to_f32_kernel(const In* x, float* y, int n, bool accumulate) {
  ANNEAL_GRID_STRIDE(i, n) y[i] = accumulate ? y[i] + ld(x[i]) : ld(x[i]);
}

// ---- Elementwise ----

__global__ void multiply_kernel(float* x, const float* m, int n) {
  ANNEAL_GRID_STRIDE(i, n) x[i] *= m[i];
}

__global__ void scale_kernel(const float* x, float* y, int n, float s) {
  ANNEAL_GRID_STRIDE(i, n) y[i] = x[i] * s;
}

__global__ void running_stat_kernel(float* r, const float* b, int n, float momentum, float scale) {
  ANNEAL_GRID_STRIDE(i, n) r[i] = (1.0f - momentum) * r[i] + momentum * scale * b[i];
}

__global__ void fake_quantize_kernel(const float* x, float* y, int n, float scale, float lo, float hi) {
  // Division, not multiplication by 1/scale: the formula's own rounding.
  ANNEAL_GRID_STRIDE(i, n) y[i] = fminf(fmaxf(rintf(__fdiv_rn(x[i], scale)), lo), hi) * scale;
}

__global__ void fake_quantize_channels_kernel(const float* w, float* y, int per, float levels) {
  __shared__ float shared[kThreads];
  const float* row = w + static_cast<std::int64_t>(blockIdx.x) * per;
  float* out = y + static_cast<std::int64_t>(blockIdx.x) * per;
  float m = 0.0f;
  for (int i = threadIdx.x; i < per; i += kThreads) m = fmaxf(m, fabsf(row[i]));
  m = block_max(m, shared);
  const float scale = m > 0.0f ? __fdiv_rn(m, levels) : 1.0f;
  for (int i = threadIdx.x; i < per; i += kThreads) {
    const float q = fminf(fmaxf(rintf(__fdiv_rn(row[i], scale)), -levels), levels);
    out[i] = q * scale;
  }
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int n, engine::DropoutRule rule) {
  ANNEAL_GRID_STRIDE(i, n) { y[i] = st<T>(ld(x[i]) * rule.factor(static_cast<std::uint64_t>(i))); }
}

// ---- Activations ----

__device__ float activate(Activation f, float x) {
  switch (f) {
    case Activation::kRelu: return x > 0.0f ? x : 0.0f;
    case Activation::kGelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Activation::kTanh: return tanhf(x);
    case Activation::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case Activation::kNone: break;
  }
  return x;
}

// f'(x).
__device__ float derivative(Activation f, float x) {
  switch (f) {
    case Activation::kRelu: return x > 0.0f ? 1.0f : 0.0f;
    case Activation::kGelu:
      return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
    case Activation::kTanh: {
      const float t = tanhf(x);
      return 1.0f - t * t;
    }
    case Activation::kSigmoid: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f - s);
    }
    case Activation::kNone: break;
  }
  return 1.0f;
}

// f'(x) written with y = f(x).
__device__ float derivative_from_output(Activation f, float y) {
  switch (f) {
    case Activation::kRelu: return y > 0.0f ? 1.0f : 0.0f;
    case Activation::kTanh: return 1.0f - y * y;
    case Activation::kSigmoid: return y * (1.0f - y);
    default: break;
  }
  return 1.0f;
}

template <typename T>
__global__ void activation_forward_kernel(Activation f, const T* x, T* y, int n) {
  ANNEAL_GRID_STRIDE(i, n) y[i] = st<T>(activate(f, ld(x[i])));
}
template <typename T>
__global__ void activation_backward_kernel(Activation f, const T* x, const T* dy, T* dx, int n) {
  ANNEAL_GRID_STRIDE(i, n) dx[i] = st<T>(ld(dy[i]) * derivative(f, ld(x[i])));
}
template <typename T>
__global__ void activation_backward_from_output_kernel(Activation f, const T* y, const T* dy, T* dx, int n) {
  ANNEAL_GRID_STRIDE(i, n) dx[i] = st<T>(ld(dy[i]) * derivative_from_output(f, ld(y[i])));
}

// ---- Bias ----

template <typename In, typename Out>
__global__ void bias_activation_kernel(const In* z, Out* y, const float* b, int total, int channels, int spatial,
                                       Activation f) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int c = (i / spatial) % channels;
    y[i] = st<Out>(activate(f, ld(z[i]) + b[c]));
  }
}

// Conv outputs: block (c, slice) sums channel c over its slice of the
// batch, each sample's S values read contiguously (coalesced); then one
// thread per channel adds its slices in order.
template <typename T>
__global__ void bias_grad_slices_kernel(const T* dy, float* partials, int n, int channels, int spatial) {
  __shared__ float shared[kThreads];
  const int c = blockIdx.x, slice = blockIdx.y;
  const int per = (n + kBiasSlices - 1) / kBiasSlices;
  const int begin = slice * per, end = min(n, begin + per);
  float sum = 0.0f;
  for (int sample = begin; sample < end; ++sample) {
    const T* row = dy + (static_cast<std::int64_t>(sample) * channels + c) * spatial;
    for (int s = threadIdx.x; s < spatial; s += kThreads) sum += ld(row[s]);
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[c * kBiasSlices + slice] = sum;
}

__global__ void bias_grad_total_kernel(const float* partials, float* db, int channels, bool accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float sum = 0.0f;
  for (int slice = 0; slice < kBiasSlices; ++slice) sum += partials[c * kBiasSlices + slice];
  db[c] = accumulate ? db[c] + sum : sum;
}

// Dense outputs (S = 1): one block per column, its N values summed per
// thread in order, then the tree.
template <typename T>
__global__ void bias_grad_kernel(const T* dy, float* db, int n, int channels, int spatial, bool accumulate) {
  __shared__ float shared[kThreads];
  const int c = blockIdx.x;
  const int per = n * spatial;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < per; j += kThreads) {
    const int sample = j / spatial, s = j % spatial;
    sum += ld(dy[(static_cast<std::int64_t>(sample) * channels + c) * spatial + s]);
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) db[c] = accumulate ? db[c] + sum : sum;
}

// ---- Convolution lowering ----

// One thread per element of col, in col's order: consecutive threads write
// consecutive output positions and read neighbouring input pixels.
template <typename T>
__global__ void im2col_kernel(const T* x, T* col, int total, int ns, ConvGeometry g) {
  const int spatial = g.ho * g.wo, columns = ns * spatial;
  ANNEAL_GRID_STRIDE(i, total) {
    const int column = i % columns, row = i / columns;
    const int j = row % g.k, ki = (row / g.k) % g.k, c = row / (g.k * g.k);
    const int s = column / spatial, p = column % spatial;
    const int ih = (p / g.wo) * g.stride - g.pad + ki, iw = (p % g.wo) * g.stride - g.pad + j;
    col[i] = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w
                 ? x[((std::int64_t(s) * g.c + c) * g.h + ih) * g.w + iw]
                 : st<T>(0.0f);
  }
}

template <typename T>
__global__ void channels_first_kernel(const T* x, T* out, int total, int n, int channels, int spatial) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int p = i % spatial, s = (i / spatial) % n, c = i / (spatial * n);
    out[i] = x[(std::int64_t(s) * channels + c) * spatial + p];
  }
}

// ---- Optimizers ----

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int n, AdamArgs a, const float* scale) {
  const float gs = scale ? *scale : 1.0f;
  if (gs == 0.0f) return;  // a skipped step
  ANNEAL_GRID_STRIDE(i, n) {
    const float grad = g[i] * gs + a.l2 * w[i];
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * grad;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * a.decay - a.step_size * mi / (sqrtf(vi) * a.inv_sqrt_bc2 + a.epsilon);
  }
}

__global__ void sgd_kernel(float* w, const float* g, float* velocity, int n, SgdArgs a, const float* scale) {
  const float gs = scale ? *scale : 1.0f;
  if (gs == 0.0f) return;  // a skipped step
  ANNEAL_GRID_STRIDE(i, n) {
    const float grad = g[i] * gs + a.weight_decay * w[i];
    if (velocity == nullptr) {
      w[i] -= a.lr * grad;
    } else if (a.nesterov) {
      const float vi = a.momentum * velocity[i] + grad;
      velocity[i] = vi;
      w[i] -= a.lr * (grad + a.momentum * vi);
    } else {
      const float vi = a.momentum * velocity[i] + grad;
      velocity[i] = vi;
      w[i] -= a.lr * vi;
    }
  }
}

// kSquareBlocks blocks, each over a fixed contiguous share of x.
__global__ void sum_squares_kernel(const float* x, int n, double* partials) {
  __shared__ double shared[kThreads];
  const int share = (n + kSquareBlocks - 1) / kSquareBlocks;
  const int begin = blockIdx.x * share;
  const int end = min(n, begin + share);
  double sum = 0;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) sum += double(x[i]) * double(x[i]);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void clip_scale_kernel(const double* partials, int tensors, float max_norm, const float* pre_scale,
                                  float* scale) {
  // One thread: a few hundred additions, in the documented order.
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int t = 0; t < tensors; ++t) {
    double tensor = 0;
    for (int b = 0; b < kSquareBlocks; ++b) tensor += partials[t * kSquareBlocks + b];
    total += tensor;
  }
  const float pre = pre_scale ? *pre_scale : 1.0f;
  const double norm = double(pre) * sqrt(total);
  *scale = pre * (norm > max_norm ? float(max_norm / (norm + 1e-6)) : 1.0f);
}

// ---- Loss scaling ----

// Any thread that sees a value that is not finite stores 1: the flag's
// final value does not depend on which, or on the order.
__global__ void flag_nonfinite_kernel(const float* x, int n, int* flag) {
  ANNEAL_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;
  }
}

__global__ void loss_scale_update_kernel(const int* flag, float* state, int growth_interval, float* step_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const bool finite = *flag == 0;
  *step_scale = finite ? 1.0f / state[0] : 0.0f;
  engine::update_loss_scale(state, finite, growth_interval);
}

// ---- Normalization ----

__device__ std::int64_t norm_index(const NormShape& s, int g, int j) {
  // j-th element of group g, j in [0, A·B).
  const int a = j / s.b, b = j % s.b;
  return (static_cast<std::int64_t>(a) * s.g + g) * s.b + b;
}

// Mean and biased variance of group blockIdx.x (two passes, in double).
template <typename T>
__device__ void group_statistics(const NormShape& s, const T* x, int g, double* shared, float& mean,
                                 float& variance) {
  const int count = s.a * s.b;
  double sum = 0;
  for (int j = threadIdx.x; j < count; j += kThreads) sum += ld(x[norm_index(s, g, j)]);
  const double mu = block_sum(sum, shared) / count;
  double squares = 0;
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const double d = ld(x[norm_index(s, g, j)]) - mu;
    squares += d * d;
  }
  mean = float(mu);
  variance = float(block_sum(squares, shared) / count);
}

template <typename T>
__global__ void norm_forward_training_kernel(NormShape s, const T* x, const float* gamma, const float* beta, T* y,
                                             float* mean, float* variance) {
  __shared__ double shared[kThreads];
  const int g = blockIdx.x;
  float mu, var;
  group_statistics(s, x, g, shared, mu, var);
  if (threadIdx.x == 0) {
    mean[g] = mu;
    variance[g] = var;
  }
  const float inv = 1.0f / sqrtf(var + s.epsilon);
  const int count = s.a * s.b;
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t i = norm_index(s, g, j);
    const int p = s.params_per_group ? g : j % s.b;
    y[i] = st<T>(gamma[p] * ((ld(x[i]) - mu) * inv) + beta[p]);
  }
}

template <typename T>
__global__ void norm_forward_inference_kernel(NormShape s, const T* x, const float* gamma, const float* beta,
                                              const float* mean, const float* variance, T* y, int total) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int g = (i / s.b) % s.g;
    const int p = s.params_per_group ? g : i % s.b;
    const float inv = 1.0f / sqrtf(variance[g] + s.epsilon);
    y[i] = st<T>(gamma[p] * ((ld(x[i]) - mean[g]) * inv) + beta[p]);
  }
}

// Per group: dx = inv·(dy·γ − mean(dy·γ) − x̂·mean(dy·γ·x̂)), where the
// means run over the group; with per-group γ, also dγ_g = Σ dy·x̂ and
// dβ_g = Σ dy.
template <typename T>
__global__ void norm_backward_kernel(NormShape s, const T* x, const T* dy, const float* gamma, const float* mean,
                                     const float* variance, T* dx, float* dgamma, float* dbeta, bool accumulate) {
  __shared__ double shared[kThreads];
  const int g = blockIdx.x;
  const int count = s.a * s.b;
  const float mu = mean[g];
  const float inv = 1.0f / sqrtf(variance[g] + s.epsilon);
  double sum_dyg = 0, sum_dyg_xhat = 0;
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t i = norm_index(s, g, j);
    const float gm = gamma[s.params_per_group ? g : j % s.b];
    const float xhat = (ld(x[i]) - mu) * inv;
    sum_dyg += double(ld(dy[i])) * gm;
    sum_dyg_xhat += double(ld(dy[i])) * gm * xhat;
  }
  const double a = block_sum(sum_dyg, shared);
  const double b = block_sum(sum_dyg_xhat, shared);
  const float mean_dyg = float(a / count), mean_dyg_xhat = float(b / count);
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t i = norm_index(s, g, j);
    const float gm = gamma[s.params_per_group ? g : j % s.b];
    const float xhat = (ld(x[i]) - mu) * inv;
    dx[i] = st<T>(inv * (ld(dy[i]) * gm - mean_dyg - xhat * mean_dyg_xhat));
  }
  if (s.params_per_group) {
    // dγ and dβ summed again without γ: dividing Σ dy·γ by γ would lose
    // bits, and fail at γ = 0.
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int j = threadIdx.x; j < count; j += kThreads) {
      const std::int64_t i = norm_index(s, g, j);
      sum_dy += ld(dy[i]);
      sum_dy_xhat += double(ld(dy[i])) * ((ld(x[i]) - mu) * inv);
    }
    const double db = block_sum(sum_dy, shared);
    const double dg = block_sum(sum_dy_xhat, shared);
    if (threadIdx.x == 0) {
      dbeta[g] = accumulate ? dbeta[g] + float(db) : float(db);
      dgamma[g] = accumulate ? dgamma[g] + float(dg) : float(dg);
    }
  }
}

// Per-position γ (layer norm): dγ_b = Σ_groups dy·x̂, dβ_b = Σ dy, one thread
// per position summing the groups in order.
template <typename T>
__global__ void norm_param_grad_kernel(NormShape s, const T* x, const T* dy, const float* mean, const float* variance,
                                       float* dgamma, float* dbeta, bool accumulate) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= s.b) return;
  double dg = 0, db = 0;
  for (int g = 0; g < s.g; ++g) {
    const float inv = 1.0f / sqrtf(variance[g] + s.epsilon);
    for (int a = 0; a < s.a; ++a) {
      const std::int64_t i = (static_cast<std::int64_t>(a) * s.g + g) * s.b + b;
      db += ld(dy[i]);
      dg += double(ld(dy[i])) * ((ld(x[i]) - mean[g]) * inv);
    }
  }
  dbeta[b] = accumulate ? dbeta[b] + float(db) : float(db);
  dgamma[b] = accumulate ? dgamma[b] + float(dg) : float(dg);
}

// ---- Piecewise-linear encoding ----

// One thread per (n, f, t).
template <typename T>
__global__ void ple_forward_kernel(const T* x, const float* edges, T* y, int total, int f, int t) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int bin = i % t, row_feature = i / t, feature = row_feature % f;
    const PiecewiseBin b = piecewise_bin(edges + feature * (t + 1), bin, t);
    y[i] = st<T>(piecewise_value(b, ld(x[row_feature])));
  }
}

// One thread per (n, f), the T bins in order.
template <typename T>
__global__ void ple_backward_data_kernel(const T* x, const T* dy, const float* edges, T* dx, int total, int f,
                                         int t) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int feature = i % f;
    const float v = ld(x[i]);
    const std::int64_t base = static_cast<std::int64_t>(i) * t;
    float sum = 0.0f;
    for (int bin = 0; bin < t; ++bin)
      sum += ld(dy[base + bin]) * piecewise_slope(piecewise_bin(edges + feature * (t + 1), bin, t), v);
    dx[i] = st<T>(sum);
  }
}

// ---- Periodic embedding ----

// w = 2π·c rounded to fp32, as periodic_angular_frequency (backend.h).
__device__ float angular_frequency(float c) { return float(6.283185307179586 * double(c)); }

// One thread per (n, f, j): the sine and the cosine of θ.
template <typename T>
__global__ void periodic_forward_kernel(const T* x, const float* c, T* y, int total, int f, int k) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int j = i % k, row_feature = i / k, feature = row_feature % f;
    const float theta = angular_frequency(c[feature * k + j]) * ld(x[row_feature]);
    const std::int64_t base = static_cast<std::int64_t>(row_feature) * 2 * k;
    y[base + j] = st<T>(sinf(theta));
    y[base + k + j] = st<T>(cosf(theta));
  }
}

// One thread per (n, f), the K frequencies in order.
template <typename T>
__global__ void periodic_backward_data_kernel(const T* x, const T* dy, const float* c, T* dx, int total, int f,
                                              int k) {
  ANNEAL_GRID_STRIDE(i, total) {
    const int feature = i % f;
    const float v = ld(x[i]);
    const std::int64_t base = static_cast<std::int64_t>(i) * 2 * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      const float w = angular_frequency(c[feature * k + j]);
      const float theta = w * v;
      sum += w * (ld(dy[base + j]) * cosf(theta) - ld(dy[base + k + j]) * sinf(theta));
    }
    dx[i] = st<T>(sum);
  }
}

// One block per (f, j): each thread its strided share of the rows, then a
// fixed tree.
template <typename T>
__global__ void periodic_backward_weights_kernel(const T* x, const T* dy, const float* c, float* dc, int n, int f,
                                                 int k, bool accumulate) {
  __shared__ double shared[kThreads];
  const int o = blockIdx.x, feature = o / k, j = o % k;
  const float w = angular_frequency(c[o]);
  double acc = 0;
  for (int r = threadIdx.x; r < n; r += kThreads) {
    const int i = r * f + feature;
    const float v = ld(x[i]);
    const float theta = w * v;
    const std::int64_t base = static_cast<std::int64_t>(i) * 2 * k;
    acc += double(v) * double(ld(dy[base + j]) * cosf(theta) - ld(dy[base + k + j]) * sinf(theta));
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const float value = float(6.283185307179586 * total);
    dc[o] = accumulate ? dc[o] + value : value;
  }
}

// ---- Ensemble members ----

// One thread per output element (n·k + i, f).
template <typename T>
__global__ void ensemble_forward_kernel(const T* x, const float* r, T* y, int total, int f, int k) {
  ANNEAL_GRID_STRIDE(o, total) {
    const int feature = o % f, row = o / f, member = row % k, sample = row / k;
    y[o] = st<T>(ld(x[sample * f + feature]) * r[member * f + feature]);
  }
}

// One thread per (n, f), the members in order.
template <typename T>
__global__ void ensemble_backward_data_kernel(const T* dy, const float* r, T* dx, int total, int f, int k) {
  ANNEAL_GRID_STRIDE(o, total) {
    const int feature = o % f, sample = o / f;
    float sum = 0.0f;
    for (int i = 0; i < k; ++i)
      sum += ld(dy[(static_cast<std::int64_t>(sample) * k + i) * f + feature]) * r[i * f + feature];
    dx[o] = st<T>(sum);
  }
}

// One block per (i, f): each thread its strided share of the samples, then
// a fixed tree.
template <typename T>
__global__ void ensemble_backward_weights_kernel(const T* x, const T* dy, float* dr, int n, int f, int k,
                                                 bool accumulate) {
  __shared__ double shared[kThreads];
  const int o = blockIdx.x, member = o / f, feature = o % f;
  double acc = 0;
  for (int s = threadIdx.x; s < n; s += kThreads)
    acc += double(ld(dy[(static_cast<std::int64_t>(s) * k + member) * f + feature])) * double(ld(x[s * f + feature]));
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) dr[o] = accumulate ? dr[o] + float(total) : float(total);
}

// One thread per output (r, o): its chain over the inputs in order.
template <typename T>
__global__ void member_dense_forward_kernel(const T* x, const float* w, const float* b, T* y, int total, int in,
                                            int out, int k) {
  ANNEAL_GRID_STRIDE(e, total) {
    const int o = e % out, r = e / out, member = r % k;
    const float* wo = w + (static_cast<std::int64_t>(member) * out + o) * in;
    const T* xr = x + static_cast<std::int64_t>(r) * in;
    float acc = 0.0f;
    for (int a = 0; a < in; ++a) acc = fmaf(ld(xr[a]), wo[a], acc);
    y[e] = st<T>(acc + b[member * out + o]);
  }
}

// One thread per (r, a): its chain over the outputs in order.
template <typename T>
__global__ void member_dense_backward_data_kernel(const T* dy, const float* w, T* dx, int total, int in, int out,
                                                  int k) {
  ANNEAL_GRID_STRIDE(e, total) {
    const int a = e % in, r = e / in, member = r % k;
    const float* wm = w + static_cast<std::int64_t>(member) * out * in;
    const T* g = dy + static_cast<std::int64_t>(r) * out;
    float acc = 0.0f;
    for (int o = 0; o < out; ++o) acc = fmaf(ld(g[o]), wm[o * in + a], acc);
    dx[e] = st<T>(acc);
  }
}

// One thread per weight (i, o, a): its chain over the samples in order; the
// threads with a == 0 also sum the bias gradient, in double.
template <typename T>
__global__ void member_dense_backward_weights_kernel(const T* x, const T* dy, float* dw, float* db, int samples,
                                                     int in, int out, int k, bool accumulate) {
  const int total = k * out * in;
  ANNEAL_GRID_STRIDE(e, total) {
    const int a = e % in, o = (e / in) % out, member = e / (in * out);
    float acc = 0.0f;
    double bias = 0;
    for (int s = 0; s < samples; ++s) {
      const std::int64_t r = static_cast<std::int64_t>(s) * k + member;
      const float g = ld(dy[r * out + o]);
      acc = fmaf(g, ld(x[r * in + a]), acc);
      bias += double(g);
    }
    dw[e] = accumulate ? dw[e] + acc : acc;
    if (a == 0) {
      const int c = member * out + o;
      db[c] = accumulate ? db[c] + float(bias) : float(bias);
    }
  }
}

// One thread per (n, j), the members in order.
template <typename T>
__global__ void member_mean_kernel(const T* z, T* y, int total, int width, int k) {
  ANNEAL_GRID_STRIDE(o, total) {
    const int j = o % width, sample = o / width;
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += ld(z[(static_cast<std::int64_t>(sample) * k + i) * width + j]);
    y[o] = st<T>(sum / float(k));
  }
}

// ---- Losses ----

__device__ float class_weight(const float* weights, int label) { return weights ? weights[label] : 1.0f; }

// One thread per sample.
template <typename T>
__global__ void loss_rows_kernel(LossKind kind, const T* pred, const float* labels, const float* weights, int n,
                                 int k, T* dpred, float host_scale, const float* loss_scale, double* sample_loss,
                                 int* sample_correct) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // Scaled before the rounding to T, so that small gradients survive fp16.
  const float grad_scale = loss_scale ? host_scale * loss_scale[0] : host_scale;
  const float y = labels[i];
  switch (kind) {
    case LossKind::kSoftmaxCrossEntropy: {
      const T* z = pred + static_cast<std::int64_t>(i) * k;
      const float label_f = floorf(y);
      if (!(label_f >= 0.0f && label_f < float(k))) {
        // Not a class index: counted as bad and left out of the batch.
        sample_loss[i] = 0;
        sample_correct[i] = -1;
        if (dpred)
          for (int j = 0; j < k; ++j) dpred[static_cast<std::int64_t>(i) * k + j] = st<T>(0.0f);
        return;
      }
      const int label = int(label_f);
      float m = ld(z[0]);
      for (int j = 1; j < k; ++j) m = fmaxf(m, ld(z[j]));
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += expf(ld(z[j]) - m);
      const float lse = m + logf(sum);
      int best = 0;
      for (int j = 1; j < k; ++j)
        if (ld(z[j]) - lse > ld(z[best]) - lse) best = j;
      const float w = class_weight(weights, label);
      sample_loss[i] = -double(w) * double(ld(z[label]) - lse);
      sample_correct[i] = best == label;
      if (dpred)
        for (int j = 0; j < k; ++j)
          dpred[static_cast<std::int64_t>(i) * k + j] =
              st<T>((expf(ld(z[j]) - lse) - (j == label ? 1.0f : 0.0f)) * w * grad_scale);
      break;
    }
    case LossKind::kBinaryCrossEntropy: {
      const float z = ld(pred[i]);
      const float w = class_weight(weights, y > 0.5f ? 1 : 0);
      sample_loss[i] = double(w) * double(fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z))));
      sample_correct[i] = (z > 0.0f) == (y > 0.5f);
      if (dpred) dpred[i] = st<T>((1.0f / (1.0f + expf(-z)) - y) * w * grad_scale);
      break;
    }
    case LossKind::kMeanSquaredError: {
      const float d = ld(pred[i]) - y;
      sample_loss[i] = double(d) * double(d);
      sample_correct[i] = 0;
      if (dpred) dpred[i] = st<T>(2.0f * d * grad_scale);
      break;
    }
    case LossKind::kMeanAbsoluteError: {
      const float d = ld(pred[i]) - y;
      sample_loss[i] = fabs(double(d));
      sample_correct[i] = 0;
      if (dpred) dpred[i] = st<T>((d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f) * grad_scale);
      break;
    }
  }
}

// One block: the batch's loss summed on its own in a fixed order, then
// added to the running totals.
__global__ void loss_totals_kernel(const double* sample_loss, const int* sample_correct, int n,
                                   DeviceTotals* totals) {
  __shared__ double shared[kThreads];
  __shared__ long long counts[kThreads];
  double sum = 0;
  long long correct = 0, bad = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    sum += sample_loss[i];
    correct += sample_correct[i] > 0;
    bad += sample_correct[i] < 0;
  }
  sum = block_sum(sum, shared);
  correct = block_sum(correct, counts);
  bad = block_sum(bad, counts);
  if (threadIdx.x == 0) {
    totals->loss_sum += sum;
    totals->correct += correct;
    totals->count += n - bad;
    totals->bad_labels += bad;
  }
}

template <typename T>
__global__ void loss_predict_kernel(LossKind kind, const T* pred, float* out, int n, int k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const T* z = pred + static_cast<std::int64_t>(i) * k;
  float* o = out + static_cast<std::int64_t>(i) * k;
  if (kind == LossKind::kSoftmaxCrossEntropy) {
    float m = ld(z[0]);
    for (int j = 1; j < k; ++j) m = fmaxf(m, ld(z[j]));
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += expf(ld(z[j]) - m);
    const float lse = m + logf(sum);
    for (int j = 0; j < k; ++j) o[j] = expf(ld(z[j]) - lse);
  } else if (kind == LossKind::kBinaryCrossEntropy) {
    o[0] = 1.0f / (1.0f + expf(-ld(z[0])));
  } else {
    for (int j = 0; j < k; ++j) o[j] = ld(z[j]);
  }
}

}  // namespace

// ---- Launchers ----

void convert(ConstActivations x, Activations y, int n, cudaStream_t stream) {
  with_type(x.dtype, "convert", [&](auto in) {
    with_type(y.dtype, "convert", [&](auto out) {
      using In = typename decltype(in)::type;
      using Out = typename decltype(out)::type;
      convert_kernel<In, Out><<<blocks_for(n), kThreads, 0, stream>>>(as<In>(x), as<Out>(y), n);
    });
  });
  check_launch("convert");
}
void add_to_f32(ConstActivations x, float* y, int n, bool accumulate, cudaStream_t stream) {
  with_type(x.dtype, "add_to_f32", [&](auto in) {
    using In = typename decltype(in)::type;
    add_to_f32_kernel<In><<<blocks_for(n), kThreads, 0, stream>>>(as<In>(x), y, n, accumulate);
  });
  check_launch("add_to_f32");
}
void multiply(float* x, const float* m, int n, cudaStream_t stream) {
  multiply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, m, n);
  check_launch("multiply");
}
void scale(const float* x, float* y, int n, float s, cudaStream_t stream) {
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, s);
  check_launch("scale");
}
void running_stat(float* r, const float* b, int n, float momentum, float scale, cudaStream_t stream) {
  running_stat_kernel<<<blocks_for(n), kThreads, 0, stream>>>(r, b, n, momentum, scale);
  check_launch("running_stat");
}
void fake_quantize(const float* x, float* y, int n, float scale, float lo, float hi, cudaStream_t stream) {
  fake_quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, scale, lo, hi);
  check_launch("fake_quantize");
}
void fake_quantize_channels(const float* w, float* y, int channels, int per, float levels, cudaStream_t stream) {
  if (channels == 0) return;
  fake_quantize_channels_kernel<<<channels, kThreads, 0, stream>>>(w, y, per, levels);
  check_launch("fake_quantize_channels");
}
void dropout(ConstActivations x, Activations y, int n, engine::DropoutRule rule, cudaStream_t stream) {
  with_type(x.dtype, "dropout", [&](auto t) {
    using T = typename decltype(t)::type;
    dropout_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(as<T>(x), as<T>(y), n, rule);
  });
  check_launch("dropout");
}
void activation_forward(Activation f, ConstActivations x, Activations y, int n, cudaStream_t stream) {
  with_type(x.dtype, "activation", [&](auto t) {
    using T = typename decltype(t)::type;
    activation_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(f, as<T>(x), as<T>(y), n);
  });
  check_launch("activation_forward");
}
void activation_backward(Activation f, ConstActivations x, ConstActivations dy, Activations dx, int n,
                         cudaStream_t stream) {
  with_type(x.dtype, "activation", [&](auto t) {
    using T = typename decltype(t)::type;
    activation_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(f, as<T>(x), as<T>(dy), as<T>(dx), n);
  });
  check_launch("activation_backward");
}
void activation_backward_from_output(Activation f, ConstActivations y, ConstActivations dy, Activations dx, int n,
                                     cudaStream_t stream) {
  with_type(y.dtype, "activation", [&](auto t) {
    using T = typename decltype(t)::type;
    activation_backward_from_output_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(f, as<T>(y), as<T>(dy), as<T>(dx), n);
  });
  check_launch("activation_backward_from_output");
}
void bias_activation(ConstActivations z, Activations y, const float* b, int n, int channels, int spatial,
                     Activation f, cudaStream_t stream) {
  const int total = n * channels * spatial;
  if (total == 0) return;
  with_type(z.dtype, "bias", [&](auto in) {
    with_type(y.dtype, "bias", [&](auto out) {
      using In = typename decltype(in)::type;
      using Out = typename decltype(out)::type;
      bias_activation_kernel<In, Out>
          <<<blocks_for(total), kThreads, 0, stream>>>(as<In>(z), as<Out>(y), b, total, channels, spatial, f);
    });
  });
  check_launch("bias_activation");
}
void bias_grad(ConstActivations dy, float* db, int n, int channels, int spatial, bool accumulate, float* partials,
               cudaStream_t stream) {
  if (channels == 0) return;
  with_type(dy.dtype, "bias gradient", [&](auto t) {
    using T = typename decltype(t)::type;
    if (spatial == 1) {
      bias_grad_kernel<T><<<channels, kThreads, 0, stream>>>(as<T>(dy), db, n, channels, spatial, accumulate);
      return;
    }
    bias_grad_slices_kernel<T><<<dim3(channels, kBiasSlices), kThreads, 0, stream>>>(as<T>(dy), partials, n,
                                                                                     channels, spatial);
    check_launch("bias_grad_slices");
    bias_grad_total_kernel<<<(channels + kThreads - 1) / kThreads, kThreads, 0, stream>>>(partials, db, channels,
                                                                                        accumulate);
  });
  check_launch("bias_grad");
}
void im2col(ConstActivations x, Activations col, int ns, const ConvGeometry& g, cudaStream_t stream) {
  const std::int64_t total = std::int64_t(g.c) * g.k * g.k * ns * g.ho * g.wo;
  if (total == 0) return;
  // The grid-stride index must not overflow int on its last step.
  if (total > INT32_MAX / 2) throw failure("im2col: " + std::to_string(total) + " elements do not fit one launch");
  with_type(x.dtype, "im2col", [&](auto t) {
    using T = typename decltype(t)::type;
    im2col_kernel<T><<<blocks_for(int(total)), kThreads, 0, stream>>>(as<T>(x), as<T>(col), int(total), ns, g);
  });
  check_launch("im2col");
}
void channels_first(ConstActivations x, Activations out, int n, int channels, int spatial, cudaStream_t stream) {
  const std::int64_t total = std::int64_t(n) * channels * spatial;
  if (total == 0) return;
  if (total > INT32_MAX / 2)
    throw failure("channels_first: " + std::to_string(total) + " elements do not fit one launch");
  with_type(x.dtype, "channels_first", [&](auto t) {
    using T = typename decltype(t)::type;
    channels_first_kernel<T>
        <<<blocks_for(int(total)), kThreads, 0, stream>>>(as<T>(x), as<T>(out), int(total), n, channels, spatial);
  });
  check_launch("channels_first");
}
void adam(float* w, const float* g, float* m, float* v, int n, const AdamArgs& a, const float* grad_scale,
          cudaStream_t stream) {
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, m, v, n, a, grad_scale);
  check_launch("adam");
}
void sgd(float* w, const float* g, float* velocity, int n, const SgdArgs& a, const float* grad_scale,
         cudaStream_t stream) {
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, velocity, n, a, grad_scale);
  check_launch("sgd");
}
void sum_squares(const float* x, int n, double* partials, cudaStream_t stream) {
  sum_squares_kernel<<<kSquareBlocks, kThreads, 0, stream>>>(x, n, partials);
  check_launch("sum_squares");
}
void clip_scale(const double* partials, int tensors, float max_norm, const float* pre_scale, float* scale,
                cudaStream_t stream) {
  clip_scale_kernel<<<1, 32, 0, stream>>>(partials, tensors, max_norm, pre_scale, scale);
  check_launch("clip_scale");
}
void flag_nonfinite(const float* x, int n, int* flag, cudaStream_t stream) {
  if (n == 0) return;
  flag_nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, flag);
  check_launch("flag_nonfinite");
}
void loss_scale_update(const int* flag, float* state, int growth_interval, float* step_scale, cudaStream_t stream) {
  loss_scale_update_kernel<<<1, 32, 0, stream>>>(flag, state, growth_interval, step_scale);
  check_launch("loss_scale_update");
}
void norm_forward_training(const NormShape& s, ConstActivations x, const float* gamma, const float* beta,
                           Activations y, float* mean, float* variance, cudaStream_t stream) {
  with_type(x.dtype, "norm", [&](auto t) {
    using T = typename decltype(t)::type;
    norm_forward_training_kernel<T><<<s.g, kThreads, 0, stream>>>(s, as<T>(x), gamma, beta, as<T>(y), mean, variance);
  });
  check_launch("norm_forward_training");
}
void norm_forward_inference(const NormShape& s, ConstActivations x, const float* gamma, const float* beta,
                            const float* mean, const float* variance, Activations y, cudaStream_t stream) {
  const int total = s.a * s.g * s.b;
  with_type(x.dtype, "norm", [&](auto t) {
    using T = typename decltype(t)::type;
    norm_forward_inference_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(s, as<T>(x), gamma, beta, mean,
                                                                               variance, as<T>(y), total);
  });
  check_launch("norm_forward_inference");
}
void norm_backward(const NormShape& s, ConstActivations x, ConstActivations dy, const float* gamma,
                   const float* mean, const float* variance, Activations dx, float* dgamma, float* dbeta,
                   bool accumulate, cudaStream_t stream) {
  with_type(x.dtype, "norm", [&](auto t) {
    using T = typename decltype(t)::type;
    norm_backward_kernel<T><<<s.g, kThreads, 0, stream>>>(s, as<T>(x), as<T>(dy), gamma, mean, variance, as<T>(dx),
                                                          dgamma, dbeta, accumulate);
    check_launch("norm_backward");
    if (!s.params_per_group) {
      norm_param_grad_kernel<T><<<(s.b + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
          s, as<T>(x), as<T>(dy), mean, variance, dgamma, dbeta, accumulate);
      check_launch("norm_param_grad");
    }
  });
}
void periodic_forward(ConstActivations x, const float* c, Activations y, int n, int f, int k, cudaStream_t stream) {
  const int total = n * f * k;
  with_type(x.dtype, "periodic", [&](auto t) {
    using T = typename decltype(t)::type;
    periodic_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), c, as<T>(y), total, f, k);
  });
  check_launch("periodic_forward");
}
void periodic_backward_data(ConstActivations x, ConstActivations dy, const float* c, Activations dx, int n, int f,
                            int k, cudaStream_t stream) {
  const int total = n * f;
  with_type(x.dtype, "periodic", [&](auto t) {
    using T = typename decltype(t)::type;
    periodic_backward_data_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), as<T>(dy), c,
                                                                                 as<T>(dx), total, f, k);
  });
  check_launch("periodic_backward_data");
}
void periodic_backward_weights(ConstActivations x, ConstActivations dy, const float* c, float* dc, int n, int f,
                               int k, bool accumulate, cudaStream_t stream) {
  with_type(x.dtype, "periodic", [&](auto t) {
    using T = typename decltype(t)::type;
    periodic_backward_weights_kernel<T><<<f * k, kThreads, 0, stream>>>(as<T>(x), as<T>(dy), c, dc, n, f, k,
                                                                        accumulate);
  });
  check_launch("periodic_backward_weights");
}
void ple_forward(ConstActivations x, const float* edges, Activations y, int n, int f, int t, cudaStream_t stream) {
  const int total = n * f * t;
  with_type(x.dtype, "ple", [&](auto type) {
    using T = typename decltype(type)::type;
    ple_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), edges, as<T>(y), total, f, t);
  });
  check_launch("ple_forward");
}
void ple_backward_data(ConstActivations x, ConstActivations dy, const float* edges, Activations dx, int n, int f,
                       int t, cudaStream_t stream) {
  const int total = n * f;
  with_type(x.dtype, "ple", [&](auto type) {
    using T = typename decltype(type)::type;
    ple_backward_data_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), as<T>(dy), edges, as<T>(dx),
                                                                            total, f, t);
  });
  check_launch("ple_backward_data");
}
void ensemble_forward(ConstActivations x, const float* r, Activations y, int n, int f, int k, cudaStream_t stream) {
  const int total = n * k * f;
  with_type(x.dtype, "ensemble", [&](auto t) {
    using T = typename decltype(t)::type;
    ensemble_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), r, as<T>(y), total, f, k);
  });
  check_launch("ensemble_forward");
}
void ensemble_backward_data(ConstActivations dy, const float* r, Activations dx, int n, int f, int k,
                            cudaStream_t stream) {
  const int total = n * f;
  with_type(dy.dtype, "ensemble", [&](auto t) {
    using T = typename decltype(t)::type;
    ensemble_backward_data_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(dy), r, as<T>(dx), total, f,
                                                                                 k);
  });
  check_launch("ensemble_backward_data");
}
void ensemble_backward_weights(ConstActivations x, ConstActivations dy, float* dr, int n, int f, int k,
                               bool accumulate, cudaStream_t stream) {
  with_type(x.dtype, "ensemble", [&](auto t) {
    using T = typename decltype(t)::type;
    ensemble_backward_weights_kernel<T><<<k * f, kThreads, 0, stream>>>(as<T>(x), as<T>(dy), dr, n, f, k,
                                                                        accumulate);
  });
  check_launch("ensemble_backward_weights");
}
void member_dense_forward(ConstActivations x, const float* w, const float* b, Activations y, int rows, int in,
                          int out, int k, cudaStream_t stream) {
  const int total = rows * out;
  with_type(x.dtype, "member dense", [&](auto t) {
    using T = typename decltype(t)::type;
    member_dense_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(x), w, b, as<T>(y), total, in,
                                                                               out, k);
  });
  check_launch("member_dense_forward");
}
void member_dense_backward_data(ConstActivations dy, const float* w, Activations dx, int rows, int in, int out, int k,
                                cudaStream_t stream) {
  const int total = rows * in;
  with_type(dy.dtype, "member dense", [&](auto t) {
    using T = typename decltype(t)::type;
    member_dense_backward_data_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(dy), w, as<T>(dx), total,
                                                                                     in, out, k);
  });
  check_launch("member_dense_backward_data");
}
void member_dense_backward_weights(ConstActivations x, ConstActivations dy, float* dw, float* db, int rows, int in,
                                   int out, int k, bool accumulate, cudaStream_t stream) {
  const int total = k * out * in;
  with_type(x.dtype, "member dense", [&](auto t) {
    using T = typename decltype(t)::type;
    member_dense_backward_weights_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
        as<T>(x), as<T>(dy), dw, db, rows / k, in, out, k, accumulate);
  });
  check_launch("member_dense_backward_weights");
}
void member_mean(ConstActivations z, Activations y, int n, int width, int k, cudaStream_t stream) {
  const int total = n * width;
  if (total == 0) return;
  with_type(z.dtype, "member_mean", [&](auto t) {
    using T = typename decltype(t)::type;
    member_mean_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(as<T>(z), as<T>(y), total, width, k);
  });
  check_launch("member_mean");
}
void loss_forward_backward(LossKind kind, ConstActivations pred, const float* labels, const float* class_weights,
                           int n, int k, Activations dpred, float grad_scale, const float* loss_scale,
                           double* sample_loss, int* sample_correct, DeviceTotals* totals, cudaStream_t stream) {
  if (n > 0) {
    with_type(pred.dtype, "loss", [&](auto t) {
      using T = typename decltype(t)::type;
      loss_rows_kernel<T><<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
          kind, as<T>(pred), labels, class_weights, n, k, as<T>(dpred), grad_scale, loss_scale, sample_loss,
          sample_correct);
    });
    check_launch("loss_rows");
  }
  loss_totals_kernel<<<1, kThreads, 0, stream>>>(sample_loss, sample_correct, n, totals);
  check_launch("loss_totals");
}
void loss_predict(LossKind kind, ConstActivations pred, float* out, int n, int k, cudaStream_t stream) {
  if (n == 0) return;
  with_type(pred.dtype, "loss", [&](auto t) {
    using T = typename decltype(t)::type;
    loss_predict_kernel<T><<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(kind, as<T>(pred), out, n, k);
  });
  check_launch("loss_predict");
}

}  // namespace anneal::cuda::kernels
