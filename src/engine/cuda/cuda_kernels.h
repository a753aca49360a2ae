// The CUDA backend's own kernels (cuda_kernels.cu): everything that is not
// a matrix product or a convolution. Each function launches on `stream` and
// returns without waiting; pointers are device memory, plain row-major.
// Parameters, statistics and optimizer state are fp32 (float*); activations
// and their gradients are fp32 or bf16 (Activations: a pointer and its
// dtype), converted to fp32 for the arithmetic and rounded to nearest even
// once when stored. Every reduction runs in a fixed order (a fixed grid, a fixed
// tree inside a block, no atomics), so results are the same bits run after
// run: the backend's `deterministic` holds for all of them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "anneal/backend.h"
#include "anneal/loss.h"
#include "engine/adam_scalars.h"
#include "engine/random.h"

namespace anneal::cuda::kernels {

// A device array of activations: DType::kF32 or DType::kBF16.
struct Activations {
  void* data;
  DType dtype;
};
struct ConstActivations {
  const void* data;
  DType dtype;
  ConstActivations(const void* d, DType t) : data(d), dtype(t) {}
  ConstActivations(Activations a) : data(a.data), dtype(a.dtype) {}  // NOLINT: a view may be read
};

inline Activations activations(Tensor& t) { return {t.data(), t.dtype()}; }
inline ConstActivations activations(const Tensor& t) { return {t.data(), t.dtype()}; }

// ---- Conversion -------------------------------------------------------------

// y = x, converting between fp32 and bf16 (round to nearest even); both may
// be the same dtype (a copy).
void convert(ConstActivations x, Activations y, int n, cudaStream_t stream);
// y (fp32) = x (fp32 or bf16), or y += x when `accumulate`.
void add_to_f32(ConstActivations x, float* y, int n, bool accumulate, cudaStream_t stream);

// ---- Elementwise ----------------------------------------------------------

// x ⊙= m.
void multiply(float* x, const float* m, int n, cudaStream_t stream);
// y = x · s.
void scale(const float* x, float* y, int n, float s, cudaStream_t stream);
// r = (1 − momentum)·r + momentum·scale·b.
void running_stat(float* r, const float* b, int n, float momentum, float scale, cudaStream_t stream);
// y = clamp(rint(x / scale), lo, hi) · scale.
void fake_quantize(const float* x, float* y, int n, float scale, float lo, float hi, cudaStream_t stream);
// Per row o of w (channels rows of `per` values): s = max|w[o]| / L (1 for
// an all-zero row), y = clamp(rint(w / s), −L, L) · s, L = levels.
void fake_quantize_channels(const float* w, float* y, int channels, int per, float levels, cudaStream_t stream);
// y[i] = x[i] · rule.factor(i) (engine/random.h, the rule the CPU backend
// applies too).
void dropout(ConstActivations x, Activations y, int n, engine::DropoutRule rule, cudaStream_t stream);

// ---- Activations ------------------------------------------------------------

// x, y, dy and dx of one dtype.
// y = f(x); may run in place (y == x).
void activation_forward(Activation f, ConstActivations x, Activations y, int n, cudaStream_t stream);
// dx = dy ⊙ f'(x).
void activation_backward(Activation f, ConstActivations x, ConstActivations dy, Activations dx, int n,
                         cudaStream_t stream);
// dx = dy ⊙ f'(x) from y = f(x) (relu, tanh, sigmoid, none).
void activation_backward_from_output(Activation f, ConstActivations y, ConstActivations dy, Activations dx, int n,
                                     cudaStream_t stream);

// ---- Bias -------------------------------------------------------------------

// y(N, C, S) = f(z + b(C)): a dense (S = 1) or conv output. z may be y
// (in place) or an fp32 product that y, of another dtype, rounds once.
void bias_activation(ConstActivations z, Activations y, const float* b, int n, int channels, int spatial,
                     Activation f, cudaStream_t stream);
// db(C) = Σ_{n,s} dy(N, C, S), or db += that sum when `accumulate`.
// `partials` holds bias_grad_partials(channels) floats of scratch.
void bias_grad(ConstActivations dy, float* db, int n, int channels, int spatial, bool accumulate, float* partials,
               cudaStream_t stream);
// Spatial outputs (conv) are summed in this many slices of the batch per
// channel, then the slices in order.
inline constexpr int kBiasSlices = 32;
inline std::size_t bias_grad_partials(int channels) { return std::size_t(channels) * kBiasSlices; }

// ---- Convolution lowering ---------------------------------------------------------

// A 2-D convolution's per-sample geometry: input (C, H, W), a k×k kernel,
// output (Ho, Wo).
struct ConvGeometry {
  int c, h, w, k, stride, pad, ho, wo;
};
// For the `ns` samples at x (ns, C, H, W), the row-major matrix
// col(C·k·k, ns·Ho·Wo) with col[(c·k + i)·k + j][s·Ho·Wo + oh·Wo + ow] =
// x[s][c][oh·stride − pad + i][ow·stride − pad + j], 0 outside the image.
// x and col of one dtype; col's element count must fit in int.
void im2col(ConstActivations x, Activations col, int ns, const ConvGeometry& g, cudaStream_t stream);
// out(C, N, S) = x(N, C, S): channels outermost. x and out of one dtype.
void channels_first(ConstActivations x, Activations out, int n, int channels, int spatial, cudaStream_t stream);

// ---- Optimizers and clipping --------------------------------------------------

using AdamArgs = engine::AdamScalars;
// The CPU backend's update; `grad_scale` is a device scalar or null (1).
void adam(float* w, const float* g, float* m, float* v, int n, const AdamArgs& a, const float* grad_scale,
          cudaStream_t stream);

struct SgdArgs {
  float lr, momentum, weight_decay;
  bool nesterov;
};
// `velocity` may be null when momentum is 0.
void sgd(float* w, const float* g, float* velocity, int n, const SgdArgs& a, const float* grad_scale,
         cudaStream_t stream);

// Partial sums of squares per tensor: kSquareBlocks doubles per tensor.
inline constexpr int kSquareBlocks = 64;
void sum_squares(const float* x, int n, double* partials, cudaStream_t stream);
// From `tensors` runs of kSquareBlocks partials: norm = √Σ, each tensor's
// partials summed first, then the tensors in order; writes max_norm /
// (norm + 1e-6) into *scale when norm > max_norm, else 1; both the norm and
// the result times *pre_scale when it is given (Backend::clip_scale).
void clip_scale(const double* partials, int tensors, float max_norm, const float* pre_scale, float* scale,
                cudaStream_t stream);

// ---- Loss scaling (precision fp16) ------------------------------------------------

// *flag = 1 when any of x's n values is not finite (else unchanged).
void flag_nonfinite(const float* x, int n, int* flag, cudaStream_t stream);
// Backend::unscale_gradients's step from the flag: *step_scale = 1/scale or
// 0, then engine::update_loss_scale on state.
void loss_scale_update(const int* flag, float* state, int growth_interval, float* step_scale, cudaStream_t stream);

// ---- Normalization --------------------------------------------------------------
// x viewed as (A, G, B): element (a, g, b) at (a·G + g)·B + b, statistics per
// group g over its A·B elements. Batch norm of (N, C, S): A = N, G = C,
// B = S, one γ/β per group. Layer norm of (N, F): A = 1, G = N, B = F, one
// γ/β per position b.
struct NormShape {
  int a = 1, g = 1, b = 1;
  bool params_per_group = true;  // batch norm: γ[g]; layer norm: γ[b]
  float epsilon = 1e-5f;
};
// y = γ·(x − μ_g)/√(σ²_g + ε) + β with each group's biased statistics,
// written to mean(G) and variance(G).
// x, y, dy and dx of one dtype.
void norm_forward_training(const NormShape& s, ConstActivations x, const float* gamma, const float* beta,
                           Activations y, float* mean, float* variance, cudaStream_t stream);
// The same with given statistics (batch norm's running ones).
void norm_forward_inference(const NormShape& s, ConstActivations x, const float* gamma, const float* beta,
                            const float* mean, const float* variance, Activations y, cudaStream_t stream);
// dx, dγ, dβ (dγ/dβ added to when `accumulate`).
void norm_backward(const NormShape& s, ConstActivations x, ConstActivations dy, const float* gamma,
                   const float* mean, const float* variance, Activations dx, float* dgamma, float* dbeta,
                   bool accumulate, cudaStream_t stream);

// ---- Periodic embedding (PeriodicOp) ---------------------------------------------
// x (N, F), y (N, F·2K), dy and dx of one dtype; c and dc (F, K) fp32;
// N·F·K must fit in int. w = 2π·c rounded to fp32, θ = w·x (backend.h).
// y[n][f·2K + j] = sin θ, y[n][f·2K + K + j] = cos θ.
void periodic_forward(ConstActivations x, const float* c, Activations y, int n, int f, int k, cudaStream_t stream);
// dx[n][f] = Σ_j w·(g_s·cos θ − g_c·sin θ), the j in order.
void periodic_backward_data(ConstActivations x, ConstActivations dy, const float* c, Activations dx, int n, int f,
                            int k, cudaStream_t stream);
// dc[f][j] (+)= 2π·Σ_n x·(g_s·cos θ − g_c·sin θ): one block per (f, j),
// summed in double in a fixed tree.
void periodic_backward_weights(ConstActivations x, ConstActivations dy, const float* c, float* dc, int n, int f,
                               int k, bool accumulate, cudaStream_t stream);

// ---- Piecewise-linear encoding (PiecewiseLinearOp) -------------------------------
// x (N, F), y (N, F·T), dy and dx of one dtype; edges b (F, T + 1) fp32;
// N·F·T must fit in int. The bins' arithmetic is anneal/piecewise_linear.h's.
void ple_forward(ConstActivations x, const float* edges, Activations y, int n, int f, int t, cudaStream_t stream);
// dx[n][f] = Σ_t dy[n][f·T + t]·∂y/∂x, the t in order.
void ple_backward_data(ConstActivations x, ConstActivations dy, const float* edges, Activations dx, int n, int f,
                       int t, cudaStream_t stream);

// ---- Ensemble members (EnsembleOp, Backend::member_mean) ------------------------
// x (N, F), y (N·k, F) sample-major (row n·k + i), dy and dx of one dtype;
// r and dr (k, F) fp32; N·k·F must fit in int.
// y[n·k + i][f] = x[n][f]·r[i][f].
void ensemble_forward(ConstActivations x, const float* r, Activations y, int n, int f, int k, cudaStream_t stream);
// dx[n][f] = Σ_i dy[n·k + i][f]·r[i][f], the i in order.
void ensemble_backward_data(ConstActivations dy, const float* r, Activations dx, int n, int f, int k,
                            cudaStream_t stream);
// dr[i][f] (+)= Σ_n dy[n·k + i][f]·x[n][f]: one block per (i, f), summed in
// double in a fixed tree.
void ensemble_backward_weights(ConstActivations x, ConstActivations dy, float* dr, int n, int f, int k,
                               bool accumulate, cudaStream_t stream);
// The members' own output layers (MemberDenseOp): x (N·k, in), y (N·k, out)
// of one dtype, w (k, out, in) and b (k, out) fp32. Each sum one fmaf chain
// in order, as the CPU's RowInvariantProduct computes it.
// y[r][o] = (Σ_a w[i][o][a]·x[r][a]) + b[i][o], i = r % k.
void member_dense_forward(ConstActivations x, const float* w, const float* b, Activations y, int rows, int in,
                          int out, int k, cudaStream_t stream);
// dx[r][a] = Σ_o dy[r][o]·w[i][o][a].
void member_dense_backward_data(ConstActivations dy, const float* w, Activations dx, int rows, int in, int out, int k,
                                cudaStream_t stream);
// dw[i][o][a] (+)= Σ_n dy[n·k + i][o]·x[n·k + i][a]; db[i][o] (+)= Σ_n dy[n·k + i][o] (double).
void member_dense_backward_weights(ConstActivations x, ConstActivations dy, float* dw, float* db, int rows, int in,
                                   int out, int k, bool accumulate, cudaStream_t stream);
// y (N, K) = (Σ_i z[n·k + i][j]) / k, the i in order in fp32; z and y of one dtype.
void member_mean(ConstActivations z, Activations y, int n, int width, int k, cudaStream_t stream);

// ---- Losses -----------------------------------------------------------------

// Running totals on the device. bad_labels counts softmax_ce labels that
// are not a class index (the batch is scored without them).
struct DeviceTotals {
  double loss_sum;
  long long correct;
  long long count;
  long long bad_labels;
};
// Scores pred(N, K) against labels(N): per-sample losses into sample_loss(N)
// and hits into sample_correct(N), the gradient · w[label] · grad_scale
// (· *loss_scale when given: a device scalar) into dpred when non-null,
// then the batch's sum (in a fixed order) added to *totals. class_weights:
// K (bce: 2) values, or null for all 1. dpred, when its data is non-null,
// has pred's dtype.
void loss_forward_backward(LossKind kind, ConstActivations pred, const float* labels, const float* class_weights,
                           int n, int k, Activations dpred, float grad_scale, const float* loss_scale,
                           double* sample_loss, int* sample_correct, DeviceTotals* totals, cudaStream_t stream);
// out(N, K) fp32: softmax_ce probabilities, bce P(1), or the value.
void loss_predict(LossKind kind, ConstActivations pred, float* out, int n, int k, cudaStream_t stream);

}  // namespace anneal::cuda::kernels
