// Backend: the one seam between the training engine and the hardware.
//
// Every compute-heavy operation a layer, a loss or an optimizer performs goes
// through a Backend: tensor memory, host transfers, the layer ops (dense,
// conv, pooling, eltwise, normalization, periodic and piecewise-linear
// embeddings, softmax)
// forward and backward, the loss, and the optimizer's elementwise updates. Layers, optimizers and the
// Trainer see only this interface, so a CUDA backend (cuBLAS/cuDNN) can slot
// in by implementing it; nothing above it touches tensor bytes.
//
// Ops are objects: a layer asks the backend once, at build time, for an op of
// a fixed per-sample shape (e.g. Backend::dense()), and calls it every step.
// An op caches whatever the hardware library needs per batch size (the CPU
// backend: oneDNN primitives, memory objects, reorders, scratchpads), so a
// steady-state step creates and allocates nothing. Output tensors are owned
// by the caller and shaped by the op (dims and layout are the op's choice).
//
// Layout rule: a gradient always has the layout and dtype of the tensor it is
// the gradient of (dx mirrors x, dy mirrors y). Ops convert mismatching inputs
// themselves, which only happens at the edges (the fp32 network input under
// bf16 compute, the loss).
//
// Threads and streams: a Backend and its ops are used by one thread at a
// time, and only inside an ExecutionScope that thread opened with enter():
// the scope binds the backend's compute resources to the calling thread (the
// CPU backend: an OpenMP team of capabilities().threads threads; a GPU
// backend: its device and stream). Ops are issued in order on the backend's
// one stream; they may run asynchronously. The host sees results only
// through copy_to_host(), LossOp::totals()/predict() and host_view(), each
// of which waits for the ops issued before it. Nothing above the backend
// assumes a shared address space or a threading library.
//
// Determinism: with capabilities().deterministic, the same ops on the same
// inputs give the same bits run after run for a fixed thread count, and the
// elementwise ops and reductions (the optimizer updates, eltwise, periodic,
// piecewise-linear, dropout, fake quantization, running statistics,
// clip_scale, loss totals)
// and the int8 inference ops give the same bits for any thread count.
// With capabilities().batch_invariant, every op an inference forward runs
// (dense and conv built with batch_invariant, pooling, eltwise, batch norm's
// forward_inference, layer norm, periodic, piecewise-linear, LossOp::predict, the
// inference-only ops)
// gives a sample the same bits whatever samples share its batch.
//
// Numerics every backend shares (tests/unit/backend_conformance_test.cc
// holds each to them): gelu is the exact erf form, 0.5·x·(1 + erf(x/√2));
// batch norm's variance is the biased one (divided by the count); fp32 to
// bf16 rounds to nearest even; fake_quantize is bit-exact to its formula.
//
// Errors: anneal::Error kFailure when the library refuses a shape or runs out
// of memory; kUsage when a spec cannot be honoured (e.g. a kernel larger than
// the image).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anneal/loss.h"
#include "anneal/tensor.h"

namespace anneal {

enum class Activation : std::uint8_t { kNone, kRelu, kGelu, kTanh, kSigmoid };
const char* activation_name(Activation activation);

// ---- Layer ops -----------------------------------------------------------
// In the comments: N batch, I/O input/output features, C channels, H/W
// height/width. Every tensor argument of a forward call must stay alive and
// unmodified until the matching backward calls have run.

// Elementwise activation y = f(x).
struct EltwiseSpec {
  Activation kind = Activation::kRelu;
  DType compute = DType::kF32;
};
class EltwiseOp {
 public:
  virtual ~EltwiseOp() = default;
  // y (x's dims and layout) = f(x).
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy ⊙ f'(x). `x` is the forward input.
  virtual void backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  // dx = dy ⊙ f'(x) computed from the forward *output* y = f(x): how a
  // dense/conv with the activation fused into its forward differentiates it.
  // Only relu, tanh and sigmoid (whose derivative is a function of y).
  virtual void backward_from_output(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

// Fully connected: y(N,O) = act(x(N,I...) · W(O,I...)ᵀ + b(O)). The input may
// be flat (N,F) or an image (N,C,H,W); an image is flattened implicitly in
// C,H,W order, and W then has dims (O,C,H,W).
struct DenseSpec {
  Dims in;                            // per-sample input dims
  std::int64_t out = 0;               // O
  DType compute = DType::kF32;
  Activation fused = Activation::kNone;  // relu/tanh/sigmoid may be fused
  std::int64_t batch = 128;  // expected batch size: picks the weights' layout
  // Forward only (backward_* fail), each sample's output independent of its
  // batch (see Determinism): for networks that only predict.
  bool batch_invariant = false;
};
class DenseOp {
 public:
  virtual ~DenseOp() = default;
  // Shapes fp32 master parameters: weights (O, I...) and bias (O). The
  // weights' layout is the backend's choice (the one its backward pass
  // writes gradients in), so steps need no layout conversion; checkpoints
  // see plain values through copy_to_host.
  virtual void shape_parameters(Tensor& weights, Tensor& bias) = 0;
  virtual void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) = 0;
  // dx(N,I...) = dy(N,O) · W. dy here is the gradient before any fused
  // activation (see EltwiseOp::backward_from_output).
  virtual void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) = 0;
  // dW(O,I...) = dyᵀ · x, db(O) = Σ_n dy; added to dW/db instead of
  // overwriting them when `accumulate` (gradient accumulation).
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights,
                                Tensor& dbias, bool accumulate) = 0;
};

// 2-D convolution, square kernel, symmetric zero padding:
// y(N,O,Ho,Wo) = act(conv(x(N,C,H,W), W(O,C,K,K), stride, pad) + b(O)),
// Ho = (H + 2·pad − K)/stride + 1.
struct ConvSpec {
  Dims in;  // (C, H, W)
  std::int64_t out_channels = 0, kernel = 0, stride = 1, pad = 0;
  DType compute = DType::kF32;
  Activation fused = Activation::kNone;
  std::int64_t batch = 128;  // expected batch size: picks the weights' layout
  bool batch_invariant = false;  // as DenseSpec's
};
class ConvOp {
 public:
  virtual ~ConvOp() = default;
  // Shapes fp32 master parameters: weights (O, C, K, K) and bias (O).
  virtual void shape_parameters(Tensor& weights, Tensor& bias) = 0;
  virtual void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) = 0;
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights,
                                Tensor& dbias, bool accumulate) = 0;
};

// Max or average pooling over K×K windows (average excludes nothing: no
// padding is used). Ho = (H − K)/stride + 1.
struct PoolSpec {
  Dims in;  // (C, H, W)
  std::int64_t kernel = 2, stride = 2;
  bool max = true;
  DType compute = DType::kF32;
};
class PoolOp {
 public:
  virtual ~PoolOp() = default;
  // y(N,C,Ho,Wo). The op keeps what backward needs (the argmax positions of
  // max pooling) until the next forward with the same batch size.
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx(N,C,H,W) from dy(N,C,Ho,Wo), for the latest forward of x.
  virtual void backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
};

// Normalization with a learned scale γ and shift β.
// Batch norm: statistics per channel (per feature for flat input) over the
// batch (and H, W). Layer norm: statistics per sample over the last dim
// (flat input only).
struct NormSpec {
  Dims in;  // per-sample dims: (F) or, batch norm only, (C, H, W)
  float epsilon = 1e-5f;
  DType compute = DType::kF32;
};
class NormOp {
 public:
  virtual ~NormOp() = default;
  // Shapes fp32 scale and shift (C or F values each).
  virtual void shape_parameters(Tensor& scale, Tensor& shift) = 0;
  // y = γ·(x − μ)/√(σ² + ε) + β with the batch's statistics, written to
  // mean/variance (shaped by the op; batch norm: (C); layer norm: (N)).
  virtual void forward_training(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                Tensor& y, Tensor& mean, Tensor& variance) = 0;
  // Batch norm: normalizes with the given (running) mean/variance. Layer
  // norm ignores them and uses each sample's own statistics.
  virtual void forward_inference(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                 const Tensor& mean, const Tensor& variance, Tensor& y) = 0;
  // dx, dγ, dβ from dy and the statistics forward_training wrote. dγ/dβ are
  // added to instead of overwritten when `accumulate`.
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& scale,
                        const Tensor& shift, const Tensor& mean, const Tensor& variance,
                        Tensor& dx, Tensor& dscale, Tensor& dshift, bool accumulate) = 0;
};

// Periodic embedding of numeric features (Gorishniy et al. 2022, "On
// Embeddings for Numerical Features in Tabular Deep Learning"): each of the
// F features of a flat input gets K trained frequencies c[f][j] and becomes
// 2K values, its K sines then its K cosines:
//   θ[n][f][j] = w[f][j]·x[n][f],   w[f][j] = 2π·c[f][j] rounded to fp32,
//   y[n][f·2K + j] = sin θ,   y[n][f·2K + K + j] = cos θ,   j < K.
// θ is that one fp32 product (so an exporter that multiplies x by the fp32
// w gets the same θ); sin and cos are then taken in fp32.
// w = 2π·c rounded to fp32: the one rounding every backend (and the ONNX
// export, which stores w) takes before θ = w·x.
inline float periodic_angular_frequency(float c) { return static_cast<float>(6.283185307179586 * double(c)); }
struct PeriodicSpec {
  std::int64_t features = 0;     // F
  std::int64_t frequencies = 0;  // K
};
class PeriodicOp {
 public:
  virtual ~PeriodicOp() = default;
  // Shapes the fp32 master frequencies c (F, K), plain row-major.
  virtual void shape_parameters(Tensor& frequencies) = 0;
  // x (N, F) -> y (N, F·2K), y of x's dtype (fp32, or the bf16/fp16
  // activations of those precisions; the arithmetic is fp32 either way).
  virtual void forward(const Tensor& x, const Tensor& frequencies, Tensor& y) = 0;
  // With the gradient of each (sin, cos) pair, g_s = dy[n][f·2K + j] and
  // g_c = dy[n][f·2K + K + j], let d[n][f][j] = g_s·cos θ − g_c·sin θ:
  // dx(N, F) = Σ_j w[f][j]·d[n][f][j]   (x's dims, layout and dtype).
  virtual void backward_data(const Tensor& x, const Tensor& dy, const Tensor& frequencies, Tensor& dx) = 0;
  // dc(F, K) = Σ_n 2π·x[n][f]·d[n][f][j], summed over n in order; added to
  // dc instead of overwriting it when `accumulate`.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, const Tensor& frequencies,
                                Tensor& dfrequencies, bool accumulate) = 0;
};

// Piecewise-linear encoding of numeric features (PLE: Gorishniy et al.
// 2022, "On Embeddings for Numerical Features in Tabular Deep Learning"):
// each of the F features of a flat input has T bins between T + 1
// non-decreasing edges b[f][0..T], fitted on the training rows (quantiles)
// and not trained, and becomes T values, one a bin, saying how far x has
// come through it. For bin t < T of feature f, with w = b[t+1] − b[t]:
//   z = (x − b[t])·(1/w)     (x − b[t], 1/w and the product each fp32)
//   y[n][f·T + t] = 0 when w == 0 (an unused bin), else clamp(z, lo, hi)
//   lo = −∞ for t = 0, else 0;   hi = +∞ when b[t+1] == b[T], else 1
// so the first bin extends below the edges and the last used one above
// them (a value outside the fitted range still orders), and a feature with
// fewer distinct values than bins pads its edges by repeating the last
// (its extra bins are 0). An exporter that stores b[t], 1/w, lo and hi
// computes the same bits with Sub, Mul, Min and Max (anneal/piecewise_linear.h
// holds the arithmetic every backend and the export share).
struct PiecewiseLinearSpec {
  std::int64_t features = 0;  // F
  std::int64_t bins = 0;      // T
};
class PiecewiseLinearOp {
 public:
  virtual ~PiecewiseLinearOp() = default;
  // Shapes the fp32 edges b (F, T + 1), plain row-major.
  virtual void shape_edges(Tensor& edges) = 0;
  // x (N, F) -> y (N, F·T), y of x's dtype (fp32, or the bf16/fp16
  // activations of those precisions; the arithmetic is fp32 either way).
  virtual void forward(const Tensor& x, const Tensor& edges, Tensor& y) = 0;
  // dx[n][f] = Σ_t dy[n][f·T + t]·(1/w) over the bins where lo < z < hi
  // (the clamp's flat parts pass nothing back), t in order, an fp32 sum
  // (x's dims, layout and dtype). The edges have no gradient.
  virtual void backward_data(const Tensor& x, const Tensor& dy, const Tensor& edges, Tensor& dx) = 0;
};

// The members of a parameter-efficient ensemble (TabM-mini: Gorishniy et
// al. 2024, "TabM: Advancing Tabular Deep Learning with Parameter-Efficient
// Ensembling"): k networks that share every weight after a per-member
// scaling of their flat input. Each sample becomes k rows, sample-major
// (member i of sample n is row n·k + i), and every layer after it runs on
// k·N rows with weights shared by the members:
//   y[n·k + i][f] = x[n][f]·r[i][f],   r (k, F) trained.
struct EnsembleSpec {
  std::int64_t features = 0;  // F
  std::int64_t members = 0;   // k
};
class EnsembleOp {
 public:
  virtual ~EnsembleOp() = default;
  // Shapes the fp32 master scales r (k, F), plain row-major.
  virtual void shape_parameters(Tensor& scales) = 0;
  // x (N, F) -> y (N·k, F), y of x's dtype (the product is taken in fp32
  // and rounded once to it).
  virtual void forward(const Tensor& x, const Tensor& scales, Tensor& y) = 0;
  // dx (N, F) = Σ_i dy[n·k + i][f]·r[i][f], summed over i in order (x's
  // dims, layout and dtype).
  virtual void backward_data(const Tensor& dy, const Tensor& scales, const Tensor& x, Tensor& dx) = 0;
  // dr (k, F) = Σ_n dy[n·k + i][f]·x[n][f], summed over n in order (in
  // double); added to dr instead of overwriting it when `accumulate`.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dscales, bool accumulate) = 0;
};

// The members' own output layers (TabM's K heads): member i of sample n
// (row n·K + i, as EnsembleOp orders them) has its own weights W[i] (O, I)
// and bias b[i] (O):
//   y[n·K + i][o] = (Σ_a W[i][o][a]·x[n·K + i][a]) + b[i][o]
// each sum one fp32 fused multiply-add chain over a = 0, 1, ... in order,
// the bias added after it, so a row's outputs are its own values' alone
// (the same bits in any batch, for any thread count). The arithmetic is
// fp32 whatever the activations' dtype (they are widened on the way in and
// rounded once on the way out).
struct MemberDenseSpec {
  std::int64_t members = 0;  // K
  std::int64_t in = 0;       // I
  std::int64_t out = 0;      // O
};
class MemberDenseOp {
 public:
  virtual ~MemberDenseOp() = default;
  // Shapes the fp32 master weights (K, O, I) and biases (K, O), plain.
  virtual void shape_parameters(Tensor& weight, Tensor& bias) = 0;
  // x (N·K, I) -> y (N·K, O), y plain of x's dtype.
  virtual void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) = 0;
  // dx[n·K + i][a] = Σ_o dy[n·K + i][o]·W[i][o][a], one fp32 FMA chain over
  // o in order (x's dims, layout and dtype).
  virtual void backward_data(const Tensor& dy, const Tensor& weight, const Tensor& x, Tensor& dx) = 0;
  // dW[i][o][a] = Σ_n dy[n·K + i][o]·x[n·K + i][a], one fp32 FMA chain over
  // n in order; db[i][o] = Σ_n dy[n·K + i][o], in double in order; both
  // added to instead of overwritten when `accumulate`.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor& dbias,
                                bool accumulate) = 0;
};

// A loss over the network output pred(N, K) and labels(N) (fp32, plain),
// optionally weighted per class: with class weights w (one per class; bce:
// w[0] for label 0, w[1] for label 1) each sample's loss and gradient are
// multiplied by w[label], so the running loss sum is Σ w_y · loss and its
// mean over samples is the weighted objective (balanced weights average 1
// over the training rows). Without weights, every w is 1.
// The op keeps running totals (loss sum, correct predictions, samples
// scored) on the backend's device: forward_backward() adds each batch to
// them without a host round trip, and the caller reads them back with
// totals() once per logging interval (an epoch, a checkpoint).
class LossOp {
 public:
  virtual ~LossOp() = default;
  // Scores the batch and adds its totals to the running totals (the batch's
  // loss summed on its own first, then added: the order is fixed). When
  // `dpred` is non-null, also writes ∂(Σ loss)/∂pred · grad_scale into it
  // (pred's dims and layout); grad_scale = 1/(samples in the optimizer step)
  // gives the mean's gradient.
  // softmax_ce: log-softmax then −log p[label]; bce: log(1+e^z) − y·z.
  // `loss_scale`, when given (precision fp16), is Backend::unscale_gradients's
  // state tensor: the gradient is also multiplied by its scale (element 0),
  // before it is rounded to dpred's dtype.
  virtual void forward_backward(const Tensor& pred, const Tensor& labels, Tensor* dpred,
                                float grad_scale, const Tensor* loss_scale) = 0;
  // The running totals, read back to the host (waits for the ops issued
  // before it).
  virtual LossTotals totals() = 0;
  // Replaces the running totals: LossTotals{} to start an epoch, or the
  // totals a checkpoint saved mid-epoch.
  virtual void set_totals(const LossTotals& totals) = 0;
  // The prediction for each sample on the host, rows x K floats:
  // softmax_ce class probabilities, bce P(label 1), mse/mae the value.
  virtual void predict(const Tensor& pred, float* out) = 0;
};

// ---- Optimizer updates ---------------------------------------------------
// All apply to a parameter w, its gradient g and state tensors of w's
// layout, elementwise, with the gradient first multiplied by *grad_scale
// when it is given: a one-element fp32 device tensor that
// Backend::clip_scale() (global-norm clipping) or unscale_gradients() (fp16
// loss scaling) wrote, so the scale never visits the host. A scale of 0
// skips the update: w and the state tensors stay as they are.

struct AdamUpdate {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = false;  // AdamW: w −= lr·wd·w, not g += wd·w
  std::int64_t step = 1;                // t, 1-based, for bias correction
  const Tensor* grad_scale = nullptr;   // null: 1
};

struct SgdUpdate {
  float lr = 1e-2f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  const Tensor* grad_scale = nullptr;   // null: 1
};

// ---- Inference-only ops: int8 and sparse models ------------------------------
// What an inference-only Network (NetworkOptions::inference) is built from:
// INT8-quantized models (s8 weights with a scale per output channel, u8/s8
// activations with calibrated scales, on oneDNN's int8 primitives with the
// activation fused) and pruned models (fp32 weights, mostly zero, whose
// dense layers run a CSR kernel when it measures faster than oneDNN's dense
// one). Forward only: there are no gradients and nothing to train.
//
// Weights: each op takes host copies of its layer's weights in its spec and
// owns them from then on (the spec may be destroyed after the factory call);
// it reorders them into the layout its primitive wants once per batch size.
//
// Quantized activations: a kS8/kU8 tensor holds q with real x ≈ q · scale
// (symmetric, no zero point); u8 holds values known non-negative (after a
// relu), at twice the resolution of s8. s8 saturates at [−128, 127] here,
// while fake_quantize (quantization-aware training) clamps at ±127: the two
// differ by one step on negative saturation only (kept, so int8 predictions
// stay those of the models already stored). The scale is not in the tensor: it is
// static per layer (calibrated when the model was quantized) and every op
// that reads or writes one is told it in its spec.
//
// Caching: each op builds its primitives, reordered weights and scratch
// memory the first time it sees an input of a given batch size and layout,
// and reuses them after: a steady-state forward allocates nothing. Outputs
// are shaped by the op (dims, dtype and layout its choice, as for the layer
// ops); the caller owns them. Inputs may arrive in any layout and are
// converted by the op. Errors as for the layer ops.

// How an fp32 dense layer with mostly-zero weights runs.
inline constexpr double kCsrZeroFraction = 0.8;
enum class SparseKernel : std::uint8_t {
  // CSR when at least kCsrZeroFraction of the weights are zero (and the
  // fused activation is none or relu), else the dense product: a fixed rule,
  // so a model's predictions are the same bits in every process (a choice
  // by timing made serve and predict disagree in the last digit).
  kAuto,
  kDense,    // always oneDNN's dense inner product
  kSparse,   // always CSR (for tests)
};

// One dense or conv layer's weights, host values, row-major.
struct InferenceWeights {
  std::vector<float> weight;  // (O, I...) real values (int8: q · scales, for reports only)
  std::vector<float> bias;    // (O), real values
  // int8 only: weight ≈ q · scales[o], q (O, I...) in [-127, 127] (any
  // value there computes exactly, on every CPU).
  std::vector<std::int8_t> q;
  std::vector<float> scales;  // (O), > 0
};

// The activation side of an int8 dense or conv layer. oneDNN computes
// dst = act(oscale · (Σ q_x·q_w + bias / (s_in·s_w))) with
// oscale = s_in · s_w[o] / s_out, so an s8/u8 output comes out quantized.
struct Int8Activations {
  // The scale of x when x is s8/u8; an f32 x is quantized to s8 at this scale.
  float input_scale = 0;
  // y's dtype: kU8 (only with a fused relu), kS8, or kF32 (real values: the
  // network's last layer, or a fused tanh/sigmoid, which cannot run on a
  // rescaled accumulator).
  DType output = DType::kF32;
  float output_scale = 0;  // y's scale when y is s8/u8
};

// y(N,O) = act(x(N,I...) · Wᵀ + b). An image x (N,C,H,W) is read in C,H,W
// order, as DenseOp does. With `int8`: x is f32, s8 or u8 and y as `quant`
// says. Without: x and y are f32; when at least half the weights are zero
// and the activation is none or relu, `sparse` picks the kernel.
struct InferenceDenseSpec {
  Dims in;                              // per-sample: (F) or (C, H, W)
  std::int64_t out = 0;                 // O
  Activation fused = Activation::kNone; // relu/tanh/sigmoid
  InferenceWeights weights;
  bool int8 = false;
  Int8Activations quant;                // int8 only
  SparseKernel sparse = SparseKernel::kAuto;  // fp32 only
};

// y(N,O,Ho,Wo) = act(conv(x(N,C,H,W), W(O,C,K,K)) + b), square kernel,
// symmetric zero padding, Ho = (H + 2·pad − K)/stride + 1. dtypes as for
// InferenceDenseSpec (fp32 convs never run sparse).
struct InferenceConvSpec {
  Dims in;  // (C, H, W)
  std::int64_t out_channels = 0, kernel = 0, stride = 1, pad = 0;
  Activation fused = Activation::kNone;
  InferenceWeights weights;
  bool int8 = false;
  Int8Activations quant;
  // The pooling layer right after this conv (fused activation between),
  // when its window equals its stride: pool = that window (0: none). An
  // int8 conv lowered to a matrix product may run it on the product's rows
  // (see InferenceConvOp::runs_pool).
  std::int64_t pool = 0;
  bool pool_max = true;
};

// Max or average pooling over K×K windows, no padding, Ho = (H − K)/stride + 1,
// of an f32, s8 or u8 x: y keeps x's dtype (and so its scale).
struct InferencePoolSpec {
  Dims in;  // (C, H, W)
  std::int64_t kernel = 2, stride = 2;
  bool max = true;
};

class InferenceOp {
 public:
  virtual ~InferenceOp() = default;
  // y = op(x), x (N, in...). x must not be y.
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // What the latest forward ran on, for reports: "int8 inner product",
  // "sparse csr", "fp32 convolution", ...; empty before the first forward.
  virtual std::string kernel() const = 0;
};

class InferenceConvOp : public InferenceOp {
 public:
  // True when the op also runs the pooling named in its spec, so that y is
  // the pooled (N, O, Ho/pool, Wo/pool) and the pooling layer has nothing
  // left to do. Fixed at construction.
  virtual bool runs_pool() const = 0;
};

// ---- The backend ---------------------------------------------------------

// What a backend can do, asked instead of probing the hardware.
struct BackendCapabilities {
  bool bf16 = false;           // bf16 compute at speed (Precision::kBf16)
  bool fp16 = false;           // fp16 compute with loss scaling (Precision::kFp16)
  bool int8 = false;           // int8 inference ops
  // The largest |s8 weight| the int8 ops multiply at full speed. 127 where
  // products are summed in 32 bits (VNNI); 64 on CPUs without VNNI, whose
  // int8 instructions add products in pairs into 16 bits: larger weights are
  // still computed exactly there, at twice the cost. quantize_model
  // quantizes weights to this many levels each side of zero.
  int int8_weight_levels = 127;
  bool deterministic = false;  // reproducible bits: see "Determinism" at the top
  bool batch_invariant = false;  // inference bits ignore the batch: see "Determinism"
  int threads = 1;             // compute threads the backend uses
  std::string device;          // the device kind it runs on: "cpu", "cuda"
  std::string isa;             // the instruction set its kernels use: "avx512_core_bf16", "sm_90"
};

// Returned by Backend::enter(): while it lives, the calling thread may run
// the backend's ops. Destroying it restores the thread's previous binding.
class ExecutionScope {
 public:
  virtual ~ExecutionScope() = default;
};

class Backend : public MemoryAllocator {
 public:
  ~Backend() override = default;

  virtual const char* name() const = 0;  // "cpu-onednn"
  virtual const BackendCapabilities& capabilities() const = 0;
  // Binds the backend to the calling thread until the scope is destroyed.
  // Scopes nest; they are cheap (no allocation of compute resources).
  virtual std::unique_ptr<ExecutionScope> enter() = 0;

  // Shapes `t` as a dense row-major tensor of the given dims and dtype.
  virtual void shape_plain(Tensor& t, const Dims& dims, DType dtype) = 0;
  // Shapes `t` with `like`'s dims and layout but element type `dtype`.
  virtual void shape_like(Tensor& t, const Tensor& like, DType dtype) = 0;

  // Copies t.elements() row-major floats from the host into `t`, converting
  // to its layout and dtype. Marks t modified.
  virtual void copy_from_host(const float* host, Tensor& t) = 0;
  // Copies `t` out to the host as t.elements() row-major floats.
  virtual void copy_to_host(const Tensor& t, float* host) = 0;
  // The tensor's storage as host floats when it is plain fp32 and directly
  // addressable by the host (the CPU backend), else null: lets a batch
  // pipeline gather straight into it instead of staging and copying.
  virtual float* host_view(Tensor& t) = 0;
  // The tensor's storage as host floats in whatever layout it has (blocked
  // layouts included, their padding zero), with a description of that
  // layout that two processes compute equal exactly when they order the
  // storage alike; empty (null data) when t is not fp32 or the host cannot
  // address it (every tensor of the CUDA backend). For element-wise work
  // that needs no particular order, only the same one everywhere: the sum
  // of gradients across ranks, done in place without a copy to plain
  // floats and back. Valid until t is reshaped; writing through it must be
  // followed by t.mark_modified().
  struct StorageView {
    float* data = nullptr;
    std::size_t elements = 0;  // storage bytes / 4, padding included
    std::string layout;
  };
  virtual StorageView storage_view(Tensor& t) = 0;

  // dst (N, F) = src (N, ...) read in row-major order: the flatten of an
  // image batch for layers that need flat input. dst is plain, src's dtype;
  // it may be a view of src's storage, valid as long as src is unchanged.
  virtual void flatten(const Tensor& src, Tensor& dst) = 0;
  // The inverse for gradients: dst gets `like`'s dims, layout and dtype and
  // src's values, src being plain row-major with like.elements() elements.
  virtual void unflatten(const Tensor& src, const Tensor& like, Tensor& dst) = 0;

  virtual void fill_zero(Tensor& t) = 0;
  // Global-norm gradient clipping without a host round trip, of the
  // gradients p·g where p is `pre_scale`'s one value (null: 1): with
  // norm = p·√(Σ over `grads` of Σ g²), summed per tensor in a fixed order
  // and then over tensors in the order given, writes into `scale` (shaped
  // here, one fp32 value) p·c with c = max_norm / (norm + 1e-6) when
  // norm > max_norm, else c = 1. So p = 0 (a skipped step) gives 0.
  virtual void clip_scale(const std::vector<const Tensor*>& grads, float max_norm, const Tensor* pre_scale,
                          Tensor& scale) = 0;
  // Dynamic loss scaling (precision fp16), on the device without a host
  // round trip. `state` holds 4 fp32 values: [scale, good steps in a row,
  // skipped steps in all, the caller's own (left alone)], counts exact
  // below 2^24. `grads` were
  // computed from a loss multiplied by the scale. When any of their values
  // is not finite, writes 0 into `step_scale` (shaped here, one fp32 value:
  // the optimizer then skips the step), halves the scale (not below 1),
  // zeroes the good steps and counts a skipped step; else writes 1/scale
  // into `step_scale`, counts a good step and, at `growth_interval` good
  // steps in a row, doubles the scale (up to 2^24) and zeroes the count.
  virtual void unscale_gradients(const std::vector<const Tensor*>& grads, Tensor& state, int growth_interval,
                                 Tensor& step_scale) = 0;
  // running = (1 − momentum)·running + momentum·scale·batch (fp32 tensors of
  // one layout): the batch-norm running statistics.
  virtual void update_running_stat(Tensor& running, const Tensor& batch, float momentum,
                                   float scale) = 0;
  // t ⊙= mask, elementwise (fp32 tensors of one layout): how a pruning mask
  // keeps removed weights at exactly zero. Marks t modified.
  virtual void multiply(Tensor& t, const Tensor& mask) = 0;
  // y (N, K) = (Σ_i z[n·k + i][j]) / k for z (N·k, K), `members` = k:
  // the mean of an ensemble's members (EnsembleOp's row order), summed over
  // i in order in fp32, then divided; y plain, of z's dtype. kUsage when
  // z's rows are not a multiple of k.
  virtual void member_mean(const Tensor& z, std::int64_t members, Tensor& y) = 0;

  // Fake quantization for quantization-aware training (fp32 tensors only;
  // kUsage otherwise). The backward of both is the straight-through
  // estimator: the caller passes gradients through unchanged.
  //
  // y (x's dims and layout) = clamp(nearbyint(x / scale), lo, hi) · scale:
  // an activation as an int8 layer sees it (lo, hi = 0, 255 for u8 after a
  // relu; −127, 127 for s8).
  virtual void fake_quantize(const Tensor& x, Tensor& y, float scale, float lo, float hi) = 0;
  // Weights w (O, ...) quantized to s8 per output channel and back, with the
  // arithmetic of quantize_per_channel + dequantize (bit for bit), L =
  // `levels` (1..127; 127, or 64 for CPUs without VNNI, see
  // BackendCapabilities::int8_weight_levels):
  // s_o = max|w[o, ...]| / L (1 for an all-zero row),
  // y[o, ...] (w's dims and layout) = clamp(nearbyint(w / s_o), −L, L) · s_o.
  virtual void fake_quantize_channels(const Tensor& w, Tensor& y, int levels) = 0;

  // Inverted dropout: y = x·mask/(1 − p), mask ~ Bernoulli(1 − p) drawn from a
  // counter-based generator keyed by (seed, stream), so the mask is a pure
  // function of the key: backward recomputes it, resume reproduces it.
  // x's samples (its first dim) are samples first_sample, first_sample + 1,
  // ... of a larger batch: each element draws with its index in that batch
  // (first_sample × the stored elements of one sample, plus its own), so a
  // sample gets the same mask in a rank's share of a batch as in the whole.
  virtual void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t seed, std::uint64_t stream,
                               std::int64_t first_sample) = 0;
  virtual void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t seed, std::uint64_t stream,
                                std::int64_t first_sample) = 0;

  virtual void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                           const AdamUpdate& update) = 0;
  virtual void sgd_update(Tensor& w, const Tensor& g, Tensor& velocity,
                          const SgdUpdate& update) = 0;

  // Op factories; called while a network is built. Throw kUsage/kFailure
  // when the shape cannot be supported.
  virtual std::unique_ptr<EltwiseOp> eltwise(const EltwiseSpec& spec) = 0;
  virtual std::unique_ptr<DenseOp> dense(const DenseSpec& spec) = 0;
  virtual std::unique_ptr<ConvOp> conv(const ConvSpec& spec) = 0;
  virtual std::unique_ptr<PoolOp> pool(const PoolSpec& spec) = 0;
  virtual std::unique_ptr<NormOp> batch_norm(const NormSpec& spec) = 0;
  virtual std::unique_ptr<NormOp> layer_norm(const NormSpec& spec) = 0;
  virtual std::unique_ptr<PeriodicOp> periodic(const PeriodicSpec& spec) = 0;
  virtual std::unique_ptr<PiecewiseLinearOp> piecewise_linear(const PiecewiseLinearSpec& spec) = 0;
  virtual std::unique_ptr<EnsembleOp> ensemble(const EnsembleSpec& spec) = 0;
  virtual std::unique_ptr<MemberDenseOp> member_dense(const MemberDenseSpec& spec) = 0;
  // `class_weights`: empty (unweighted) or one per class (softmax_ce: K,
  // bce: 2), each finite and > 0; kUsage otherwise or for mse/mae.
  virtual std::unique_ptr<LossOp> loss(LossKind kind, std::int64_t outputs,
                                       std::span<const float> class_weights) = 0;

  // Inference-only op factories (see their section above); called while an
  // inference-only network is built. kCorrupt when the weights do not match
  // the shape, kUsage/kFailure as for the other factories.
  virtual std::unique_ptr<InferenceOp> inference_dense(InferenceDenseSpec spec) = 0;
  virtual std::unique_ptr<InferenceConvOp> inference_conv(InferenceConvSpec spec) = 0;
  virtual std::unique_ptr<InferenceOp> inference_pool(const InferencePoolSpec& spec) = 0;
  // y (x's dims, plain row-major f32) = x · scale, for x f32, s8 or u8 in
  // any layout: an int8 activation turned into real values. When x already
  // is plain f32 and scale is 1, y becomes a view of x (valid while x is).
  virtual void dequantize(const Tensor& x, float scale, Tensor& y) = 0;
  // Makes `t` a plain row-major f32 tensor of `dims` over caller-owned host
  // memory, without a copy, and returns true, when this backend computes in
  // host memory (the CPU backend); else returns false and leaves t alone
  // (copy_from_host then). `host` must stay alive and unchanged while t is
  // in use; ops only read an input. How an inference-only network reads a
  // batch of rows where they lie, as a forward-only pass can afford.
  virtual bool view_host(const float* host, const Dims& dims, Tensor& t) = 0;
};

// Backends are made by the registry in anneal/device.h.

}  // namespace anneal
