// Network: a layer spec parsed and built into a chain of layers.
//
// Spec grammar: layers separated by whitespace; each is a name with optional
// arguments in parentheses, positional first, then key=value:
//   dense(256) relu dense(128) relu dense(10)
//   conv(32,3,pad=1) relu maxpool(2) conv(64,3,pad=1) relu maxpool(2) flatten dense(128) relu dense(10)
// Layers: dense(W), conv(C,K[,stride=S][,pad=P]), maxpool(K[,stride=S]),
// avgpool(K[,stride=S]), flatten, relu, gelu, tanh, sigmoid, dropout(P),
// batchnorm, layernorm, periodic(K[,sigma=S]), ple(T), ensemble(K). Pool
// stride defaults to K; conv stride 1, pad 0; periodic K =
// kPeriodicFrequencies, sigma = kPeriodicSigma (written bare, `periodic`,
// both defaults); ple T = kPiecewiseLinearBins, and only as the first
// layer; ensemble K = kEnsembleMembers.
// A dense layer on an image input flattens it implicitly.
//
// One builder makes every network: trainable ones (fp32 or bf16 parameters,
// forward and backward) and inference-only ones (NetworkOptions::inference)
// for INT8-quantized and pruned models, which run the same spec on the
// Backend's inference ops with the weights given in the options. Both name
// and number their layers the same way, so a model's tensors ("3.conv.weight")
// fit either.
//
// Each layer kind is one row of the engine's layer table
// (src/engine/layer_table.h); known_layer_names() lists its rows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/backend.h"
#include "anneal/layers.h"
#include "anneal/tensor.h"

namespace anneal {

// periodic(K[,sigma=S]) defaults: K = 16 frequencies per feature, drawn
// from N(0, 0.1²). A small σ starts each feature's embedding close to a
// linear one (sin θ ≈ θ for the standardized inputs a tabular network
// gets) and training moves the frequencies; Gorishniy et al.
// tune σ per dataset over a wide range (about 0.01 to 100).
inline constexpr std::int64_t kPeriodicFrequencies = 16;
inline constexpr double kPeriodicSigma = 0.1;

// ple(T) default: T = 16 bins per feature, their edges the training rows'
// quantiles; at most 256.
inline constexpr std::int64_t kPiecewiseLinearBins = 16;
inline constexpr std::int64_t kPiecewiseLinearMaxBins = 256;

// ensemble(K) default: TabM's k = 32 members (Gorishniy et al. 2024), and
// the most a spec may ask for.
inline constexpr std::int64_t kEnsembleMembers = 32;
inline constexpr std::int64_t kEnsembleMaxMembers = 256;

// One layer as written in a spec.
struct LayerSpec {
  std::string name;                 // "conv"
  std::vector<double> args;         // positional arguments, in order
  std::vector<std::pair<std::string, double>> options;  // key=value arguments
  std::string text;                 // as written: "conv(32,3,pad=1)"
  int position = 0;                 // 1-based index in the spec
};

// Splits a spec into layers, checking only syntax and layer names. Throws
// anneal::Error kUsage with a one-line message: an unknown layer (naming the
// closest known one), unbalanced parentheses, a malformed number.
std::vector<LayerSpec> parse_layer_spec(std::string_view spec);

// The layer names parse_layer_spec() accepts.
const std::vector<std::string>& known_layer_names();

// One dense or conv layer of an inference-only network: its weights and,
// int8 only, its activation scales from calibration (real ≈ q · scale).
struct InferenceLayer {
  InferenceWeights weights;  // backend.h; int8 needs q and scales too
  float input_scale = 0;     // int8: the scale its input is quantized to
  float output_scale = 0;    // int8: the scale of its output (unused for the last layer)
};

// An inference-only network. Supports dense, conv (with a fused
// relu/tanh/sigmoid), maxpool, avgpool, flatten, dropout (the identity) and
// standalone activations; batchnorm, layernorm, periodic, ple and ensemble
// are kUsage.
//
// int8: every dense/conv runs int8. A layer's output is u8 after a fused
// relu, s8 otherwise, at its output_scale, and the next int8 layer reads it
// at that scale; the last dense/conv layer's output (and one with a fused
// tanh/sigmoid) is f32, as is a standalone activation's. A layer reading an
// f32 input quantizes it to s8 at its input_scale.
// Otherwise (pruned models): fp32 weights; a dense layer with at least half
// its weights zero runs a CSR kernel when `sparse` says so (see SparseKernel).
struct InferenceOptions {
  bool int8 = false;
  SparseKernel sparse = SparseKernel::kAuto;
  std::map<std::string, InferenceLayer> layers;  // by parameter prefix: "0.dense", "3.conv"
};

struct NetworkOptions {
  Dims input_shape;                // per sample: {F} or {C, H, W}
  std::int64_t outputs = 0;        // width the last layer must have (0: unchecked)
  std::string output_meaning;      // for the width error: "10 classes"
  DType compute = DType::kF32;     // activations and working weights
  std::uint64_t seed = 0;          // weight initialisation
  bool input_gradient = false;     // compute ∂L/∂input (gradient checks)
  std::int64_t batch = 128;        // expected batch size (lets the backend pick layouts)
  // Forward passes only, each sample's output the same bits in any batch
  // (DenseSpec::batch_invariant; what a Predictor builds): for a backend
  // with capabilities().batch_invariant. Its dense and conv layers have no
  // backward pass.
  bool batch_invariant = false;
  // Set: an inference-only network with these weights (compute, seed and
  // input_gradient are then unused).
  std::optional<InferenceOptions> inference;
  // The most memory training this network may need, in bytes; 0: unchecked.
  // Checked layer by layer before each dense or conv layer is allocated, so
  // a spec too large for the machine (dense(1e9)) is refused instead of
  // being killed by the kernel: kUsage naming the layer, what it needs and
  // the limit. What it needs, at least: kTrainBytesPerParameter for each
  // parameter and kTrainBytesPerOutput for each value of the input and of
  // each dense/conv output, per sample of a batch.
  std::uint64_t memory_limit = 0;
};

// Bytes a parameter takes while training: fp32 weights, their gradients and
// the optimizer's two moments (Adam's m and v; SGD's momentum is one of them).
inline constexpr std::uint64_t kTrainBytesPerParameter = 4 * 4;
// Bytes an activation value takes while training: fp32 output and gradient.
inline constexpr std::uint64_t kTrainBytesPerOutput = 2 * 4;

// A dense or conv layer of a network, in order, with its parameter prefix.
struct WeightedLayer {
  std::string prefix;  // "3.conv"
  std::string text;    // "conv(32,3,pad=1) relu"
  bool conv = false;
  bool relu = false;   // a fused relu follows (its output is non-negative)
  bool last = false;   // the network's last dense/conv layer
  std::int64_t out = 0;                    // O (features or channels)
  std::vector<std::int64_t> weight_dims;   // (O, I...) or (O, C, K, K)
};

// Quantization-aware training: which tensors the forward pass passes
// through fake quantization (Backend::fake_quantize*), so training sees the
// rounding and clipping of the int8 model it will become.
struct FakeQuantization {
  float input_scale = 0;  // the network input, s8 levels; 0: left as is
  int weight_levels = 127;  // weights per channel to ±this (quantize_per_channel)
  struct Point {
    std::string prefix;       // a dense/conv layer, "3.conv": its weight per channel
    float output_scale = 0;   // its output (fused activation included); 0: left as is
    bool output_unsigned = false;  // u8 levels 0..255 (after a relu), else s8 ±127
  };
  std::vector<Point> layers;
};

class Network {
 public:
  // Parses and builds `spec`, checking every shape: throws anneal::Error
  // kUsage for bad arguments, a layer that does not fit its input (conv on a
  // flat input, a kernel larger than the image, layernorm on an image) or a
  // last layer whose width is not options.outputs. Every layer's arguments
  // are checked before any shape, and every shape (and memory_limit) before
  // any layer is allocated; the first failing check is the one reported.
  // Weights are initialised as PyTorch does by default (U(±1/√fan_in)) from
  // options.seed.
  // `backend` must outlive the network; it is used from one thread at a time.
  // Inference-only (options.inference): the same checks, and kCorrupt for a
  // dense/conv layer whose weights are missing, mis-sized or (int8) lack
  // q, scales or activation scales; kUsage for batchnorm/layernorm.
  Network(std::string_view spec, const NetworkOptions& options, Backend& backend);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // Logits/values (N, outputs) for x (N, input_shape...). The result is owned
  // by the network, valid until the next forward(). x must stay alive until
  // backward() has run.
  // With an ensemble(K) layer (members() = K > 1), a training forward
  // returns every member's output, (N·K, outputs) with member i of sample
  // n at row n·K + i, and the loss scores each row against its sample's
  // label (TabM trains each member on its own loss); any other forward
  // returns their mean (Backend::member_mean), (N, outputs).
  // Inference-only networks take only ctx.training = false (kUsage).
  const Tensor& forward(const Tensor& x, const PassContext& ctx);

  // Called during a forward with the output of the k-th dense/conv layer
  // (fused activation included; in an int8 network, a pooling its op ran
  // included), in whatever dtype and layout the layer produced: how
  // calibration reads activation ranges. Valid only during the call.
  using LayerObserver = std::function<void(std::size_t k, const Tensor& y)>;
  const Tensor& forward(const Tensor& x, const PassContext& ctx, const LayerObserver& observe);
  // Backpropagates dloss = ∂L/∂output of the latest training forward,
  // filling every parameter's grad (adding to it with ctx.accumulate).
  // kUsage for an inference-only network.
  void backward(const Tensor& dloss, const PassContext& ctx);
  // The same, calling `ready(pending)` after each layer's backward (in
  // reverse layer order): the gradients of parameters()[pending..] are
  // final for this pass, those before it are still to come. How the
  // trainer sends gradients across processes while backward goes on; the
  // network knows nothing of where they go.
  using GradientsReady = std::function<void(std::size_t pending)>;
  void backward(const Tensor& dloss, const PassContext& ctx, const GradientsReady& ready);
  // ∂L/∂input of the latest backward; only with options.input_gradient.
  const Tensor& input_gradient() const;

  // From now on every forward fake-quantizes what `fq` names (empty: none).
  // Weights: the forward and backward passes use the quantized weights
  // while the fp32 master weights are set aside, and backward puts the
  // masters back, so the optimizer applies the gradient to them (the
  // straight-through estimator); an inference forward puts them back at its
  // end. Activations: the next layer gets the quantized copy and the
  // gradient passes through unchanged. kUsage for an unknown prefix, or
  // for an inference-only network (it has no fp32 parameters).
  void set_fake_quantization(const FakeQuantization& fq);

  // Whether the network's first layer is fitted on the rows it trains on
  // (ple's bin edges): the Trainer then calls fit_inputs() once, before the
  // first step, with a sample of its training rows.
  bool fits_inputs() const;
  // Fits that layer on `rows` samples of the network's input, given on the
  // host row-major (rows × input_shape().product() values); non-finite
  // values are left out. Does nothing for a network without such a layer.
  void fit_inputs(std::span<const float> values, std::int64_t rows);

  // Trainable networks only (an inference-only one has none: its ops own
  // their weights).
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  const std::vector<StateBuffer>& buffers() const { return buffers_; }
  std::int64_t parameter_count() const;  // scalars over all parameters
  const Dims& output_shape() const;
  // Rows a training forward gives each sample: an ensemble layer's K, else 1.
  std::int64_t members() const { return members_; }
  // One line per layer: "dense(128) relu  {784} -> {128}  100480 params".
  std::vector<std::string> summary() const;
  // The spec as built, fused activations included.
  std::string describe() const;

  // The dense and conv layers as built, in order.
  const std::vector<WeightedLayer>& weighted_layers() const { return weighted_; }
  bool inference_only() const { return inference_only_; }
  // Inference-only: what each layer ran on in the latest forward (empty
  // before the first); empty for a trainable network.
  std::vector<LayerKernel> kernels() const;
  // Why this spec cannot be built inference-only ("layer 3 'batchnorm': ..."),
  // or empty when it can.
  const std::string& inference_blocker() const { return inference_blocker_; }

 private:
  Backend& backend_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<WeightedLayer> weighted_;
  std::vector<std::size_t> weighted_at_;  // index into layers_ of each weighted_ entry
  bool inference_only_ = false;
  std::string inference_blocker_;
  std::vector<Parameter*> parameters_;
  std::vector<StateBuffer> buffers_;
  Dims input_shape_;
  std::int64_t members_ = 1;
  // The first layer that runs on the members' rows (the one after the
  // ensemble layer); past every layer without one.
  std::size_t members_from_ = std::size_t(-1);
  Tensor member_mean_;  // the members' mean an inference forward returns
  bool input_gradient_ = false;
  const Tensor* input_grad_ = nullptr;
  // Index of the first layer with parameters: backward needs nothing below it.
  std::size_t first_trainable_ = 0;
  // Per layer, the index in parameters_ of its first parameter.
  std::vector<std::size_t> first_parameter_;

  // Fake quantization (set_fake_quantization). While `swapped`, each
  // weight's Parameter::value holds the quantized weights and `master` the
  // fp32 ones.
  struct QuantizedWeight {
    Parameter* param = nullptr;
    Tensor master;
  };
  struct QuantizedOutput {
    std::size_t layer = 0;  // index into layers_
    float scale = 0, lo = 0, hi = 0;
    Tensor y;               // the quantized output the next layer reads
  };
  // The forward's result from the last layer's output y: y itself, or the
  // members' mean (see forward()).
  const Tensor& members_output(const Tensor& y, const PassContext& ctx);
  // ctx for the layers after the ensemble layer: first_row counts their
  // rows, K a sample, so a member row's dropout mask is the one it gets in
  // the whole batch on any rank.
  PassContext member_rows(const PassContext& ctx) const;
  void restore_master_weights();
  float fq_input_scale_ = 0;
  int fq_weight_levels_ = 127;
  Tensor fq_input_;
  std::vector<QuantizedWeight> fq_weights_;
  std::vector<QuantizedOutput> fq_outputs_;  // in layer order
  bool swapped_ = false;
};

// The multiply-adds of one sample's forward pass through the network
// `spec` builds for `input` (per sample: {F} or {C, H, W}): a dense layer's
// inputs × width, a conv's output values × its window (C·K·K), one for each
// value periodic, ple and ensemble(K) make, and every layer after
// ensemble(K) K times (it runs on K rows a sample). Activations, pooling,
// norms and dropout are not counted: beside the products they are a small
// share. Training a sample costs about three times this (the forward, dx
// and the weight gradients). What the search weighs a network candidate's
// time by. Allocates no layer; kUsage for a spec Network refuses by its
// arguments or shapes.
double network_multiply_adds(std::string_view spec, const Dims& input);

// The dense and conv layers `spec` builds for `input` (built on `backend`,
// batch 1, fp32): what quantize and prune walk. kUsage for a bad spec, or one
// an inference-only network cannot run (batchnorm, layernorm), since the
// models quantize and prune make must run as one.
std::vector<WeightedLayer> weighted_layers(std::string_view spec, const Dims& input, Backend& backend);

}  // namespace anneal
