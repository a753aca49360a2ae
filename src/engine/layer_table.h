// The layer table: one row per layer kind (dense, conv, maxpool, ...) with
// everything about it in one place: its name, how its arguments are written
// and checked, what shape it makes of its input, and its builders for a
// trainable, an inference-only (fp32/sparse) and an int8 network.
//
// Network::Network runs the passes below top to bottom:
//   parse_layers()        the spec, once, into typed LayerDescs (arguments
//                         checked here, each layer on its own);
//   check_layer_shapes()  every layer against the shape it receives, and
//                         the training memory limit, before anything is
//                         allocated;
//   plan_fusion()         which layers run inside another (an activation as
//                         a dense/conv post-op, a pooling offered to an int8
//                         conv, relu's gradient applied by the maxpool);
//   then each layer is built from its row's builder for the network's mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "anneal/network.h"
#include "engine/layers_internal.h"

namespace anneal::engine {

// ---- typed layer descriptions ----------------------------------------------

struct DenseArgs {
  std::int64_t width = 0;
};
struct ConvArgs {
  std::int64_t channels = 0, kernel = 0, stride = 1, pad = 0;
};
struct PoolArgs {
  bool max = false;
  std::int64_t kernel = 0, stride = 0;  // stride defaults to the kernel
};
struct FlattenArgs {};
struct ActivationArgs {
  Activation kind = Activation::kNone;
};
struct DropoutArgs {
  double p = 0;  // in [0, 1)
};
struct NormArgs {
  bool layer_norm = false;  // else batch norm
};
struct PeriodicArgs {
  std::int64_t frequencies = kPeriodicFrequencies;  // K
  double sigma = kPeriodicSigma;  // the frequencies' initial standard deviation, > 0
};
struct PiecewiseLinearArgs {
  std::int64_t bins = kPiecewiseLinearBins;  // T
};
struct EnsembleArgs {
  std::int64_t members = kEnsembleMembers;  // k
};
using LayerArgs = std::variant<DenseArgs, ConvArgs, PoolArgs, FlattenArgs, ActivationArgs, DropoutArgs, NormArgs,
                               PeriodicArgs, PiecewiseLinearArgs, EnsembleArgs>;

struct LayerKind;

// What training one dense/conv layer needs, counted in doubles: a spec may
// ask for 1e9 x 1e9.
struct TrainingCost {
  double parameters = 0;
  double outputs = 0;  // values a sample
  // Multiply-adds of its forward pass for one row of its input (a member
  // row after an ensemble layer): network_multiply_adds() sums them.
  double multiply_adds = 0;
};

// One layer of a spec, its arguments checked and typed.
struct LayerDesc {
  const LayerKind* kind = nullptr;  // its row in layer_table()
  LayerSpec spec;                   // as written (text, position: for errors)
  LayerArgs args;
};

// "layer 3 'conv(8,3)'": how errors name a layer.
std::string where(const LayerSpec& spec);

// Parses `spec` (parse_layer_spec) and checks each layer's arguments with
// its row. Throws anneal::Error kUsage, one line naming the layer and how
// it is written: a wrong argument count, an unknown option, a number out of
// range. Shapes are not checked here.
std::vector<LayerDesc> parse_layers(std::string_view spec);

// ---- shapes ------------------------------------------------------------------

// What check_layer_shapes() needs besides the layers.
struct ShapeLimits {
  std::uint64_t memory_limit = 0;  // NetworkOptions::memory_limit; 0: unchecked
  std::int64_t batch = 1;          // NetworkOptions::batch
};

// Each layer's input and output shape (per sample), as its layer will have
// them (an activation fused into the layer before has output == input).
struct LayerShape {
  Dims input, output;
};

// Walks `layers` from `input`, checking each against the shape it gets
// (conv on a flat input, a kernel larger than the image, layernorm on an
// image, a layer that leaves nothing) and, with limits.memory_limit, that
// training the network up to each dense/conv fits it. kUsage naming the
// first layer that fails. One entry per layer.
std::vector<LayerShape> check_layer_shapes(const std::vector<LayerDesc>& layers, const Dims& input,
                                           const ShapeLimits& limits);

// The multiply-adds of one sample's forward pass through `layers` (whose
// shapes check_layer_shapes() gave): network_multiply_adds() (network.h).
double forward_multiply_adds(const std::vector<LayerDesc>& layers, const std::vector<LayerShape>& shapes);

// ---- fusion ------------------------------------------------------------------

enum class BuildMode { kTraining, kInference, kInt8 };

// How one parsed layer is built, decided by plan_fusion().
struct LayerPlan {
  // Builds nothing: an activation run as the dense/conv's post-op before
  // it, or a flatten of an input that is already flat.
  bool absorbed = false;
  // dense/conv: the relu/tanh/sigmoid right after it, run as its post-op
  // (one pass over the output instead of two).
  Activation fused = Activation::kNone;
  // dense on an image: a flatten is built right before it (a plain,
  // row-major one lets the inner product run on a 2-D input; int8 dense
  // reads the image itself, see make_deferred_flatten_layer).
  bool flatten_first = false;
  // flatten (int8) right before a dense: hands the image on unchanged.
  bool deferred_flatten = false;
  // Training: conv relu maxpool. The conv leaves relu's gradient to the
  // maxpool, which applies it on its (smaller) output.
  bool relu_masked_by_pool = false;  // the conv
  bool pool_masks_relu = false;      // the maxpool
  // int8 conv: the pooling after it (past its fused activation) whose
  // window equals its stride, offered to the op; 0: none.
  std::int64_t offered_pool = 0;
  bool offered_pool_max = false;
  // dense/conv: the spec's last one (an int8 network's f32 output).
  bool last_weighted = false;
  // dense: the last one after an ensemble(K) layer: K, the members' own
  // output layers (TabM's heads); 0 otherwise.
  std::int64_t member_heads = 0;
};

// The fusion pass: one LayerPlan per layer. `shapes` from
// check_layer_shapes() (a flatten's and a dense's input rank decide theirs).
std::vector<LayerPlan> plan_fusion(const std::vector<LayerDesc>& layers, const std::vector<LayerShape>& shapes,
                                   BuildMode mode);

// ---- building ----------------------------------------------------------------

// What the builder loop carries from one layer to the next.
struct BuildState {
  const InferenceOptions* inference = nullptr;  // inference and int8 modes
  // int8: what flows between layers, f32 or s8/u8 at `act_scale`; each op
  // is told the scales it meets.
  DType act_dtype = DType::kF32;
  float act_scale = 1.0f;
  // The int8 conv just built runs the pooling it was offered: that pooling
  // layer only hands its input on.
  bool pool_ran_by_conv = false;
};

// Builds one layer (ctx: its input shape, index and seed) as planned.
using LayerBuilder = std::unique_ptr<Layer> (*)(const LayerContext& ctx, const LayerDesc& layer,
                                                const LayerPlan& plan, BuildState& state);

// One row of the table.
struct LayerKind {
  std::string_view name;   // as written in a spec: "conv"
  std::string_view usage;  // how it is written, for errors: "conv(CHANNELS,KERNEL[,stride=S][,pad=P])"
  bool weighted;           // has weights (dense, conv): a WeightedLayer, "3.conv.weight"
  // Checks the arguments of one layer written with this name.
  LayerArgs (*parse)(const LayerSpec& spec, std::string_view usage);
  // Checks the layer against its input shape; its output shape.
  Dims (*shape)(const LayerDesc& layer, const Dims& input);
  // Weighted kinds, periodic and ple (which widen their input 2K- and
  // T-fold) and ensemble
  // (whose k rows a sample every layer after it runs on): what training it
  // needs, for NetworkOptions::memory_limit; null for the rest.
  TrainingCost (*cost)(const LayerDesc& layer, const Dims& input);
  // The builders; a null inference/int8 builder: the kind cannot run in an
  // inference-only network (Network::inference_blocker()).
  LayerBuilder train, inference, int8;
};

// Every layer kind, in the order known_layer_names() lists them.
const std::vector<LayerKind>& layer_table();

// Why an inference-only network cannot run `layer` (its kind has no
// inference builder): the one-line kUsage text.
std::string inference_blocker(const LayerDesc& layer);

}  // namespace anneal::engine
