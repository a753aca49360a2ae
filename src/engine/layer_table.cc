// The layer table (layer_table.h): each layer kind's arguments, shape,
// training cost and builders, then the passes that use them. Every check on
// a spec happens here, before any layer is built, with a one-line kUsage
// message that names the layer as written and its position.
#include "engine/layer_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "anneal/error.h"

namespace anneal::engine {

std::string where(const LayerSpec& s) {
  return "layer " + std::to_string(s.position) + " '" + s.text + "'";
}

namespace {

// ---- argument checks -----------------------------------------------------------

// Argument access with checks; `usage` is how the layer is written.
struct Args {
  const LayerSpec& spec;
  std::string_view usage;

  [[noreturn]] void fail(const std::string& what) const {
    throw usage_error(where(spec) + ": " + what + " (usage: " + std::string(usage) + ")");
  }
  void expect_positional(std::size_t min, std::size_t max) const {
    if (spec.args.size() < min || spec.args.size() > max)
      fail(min == max ? "takes " + std::to_string(min) + " positional argument" + (min == 1 ? "" : "s")
                      : "takes " + std::to_string(min) + " to " + std::to_string(max) +
                            " positional arguments");
  }
  void allow_options(std::initializer_list<const char*> allowed) const {
    for (const auto& [key, value] : spec.options) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) fail("has no option '" + key + "'");
    }
  }
  std::int64_t positive_int(double v, const char* what) const {
    if (v < 1 || v != std::floor(v) || v > 1e9) fail(std::string(what) + " must be a positive integer");
    return static_cast<std::int64_t>(v);
  }
  // The first `key=` option, checked; `fallback` when there is none.
  std::int64_t option_int(const char* key, std::int64_t fallback, std::int64_t min) const {
    for (const auto& [k, v] : spec.options) {
      if (k != key) continue;
      if (v < double(min) || v != std::floor(v) || v > 1e9)
        fail(std::string(key) + " must be an integer >= " + std::to_string(min));
      return static_cast<std::int64_t>(v);
    }
    return fallback;
  }
};

LayerArgs parse_dense(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(1, 1);
  a.allow_options({});
  return DenseArgs{a.positive_int(s.args[0], "WIDTH")};
}

LayerArgs parse_conv(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(2, 2);
  a.allow_options({"stride", "pad"});
  ConvArgs c;
  c.channels = a.positive_int(s.args[0], "CHANNELS");
  c.kernel = a.positive_int(s.args[1], "KERNEL");
  c.stride = a.option_int("stride", 1, 1);
  c.pad = a.option_int("pad", 0, 0);
  if (c.pad >= c.kernel) a.fail("pad must be smaller than the kernel");
  return c;
}

LayerArgs parse_pool(const LayerSpec& s, std::string_view usage, bool max) {
  const Args a{s, usage};
  a.expect_positional(1, 1);
  a.allow_options({"stride"});
  PoolArgs p;
  p.max = max;
  p.kernel = a.positive_int(s.args[0], "KERNEL");
  p.stride = a.option_int("stride", p.kernel, 1);
  return p;
}

// A layer written without arguments: flatten, the activations, the norms.
void parse_bare(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(0, 0);
  a.allow_options({});
}

LayerArgs parse_dropout(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(1, 1);
  a.allow_options({});
  if (!(s.args[0] >= 0 && s.args[0] < 1)) a.fail("P must be in [0, 1)");
  return DropoutArgs{s.args[0]};
}

LayerArgs parse_periodic(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(0, 1);
  a.allow_options({"sigma"});
  PeriodicArgs p;
  if (!s.args.empty()) p.frequencies = a.positive_int(s.args[0], "K");
  for (const auto& [key, v] : s.options)
    if (key == "sigma") {
      if (!(v > 0) || v > 1e6) a.fail("sigma must be a number > 0");
      p.sigma = v;
    }
  return p;
}

LayerArgs parse_ple(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(0, 1);
  a.allow_options({});
  PiecewiseLinearArgs p;
  if (!s.args.empty()) p.bins = a.positive_int(s.args[0], "T");
  if (p.bins > kPiecewiseLinearMaxBins) a.fail("T must be at most " + std::to_string(kPiecewiseLinearMaxBins));
  return p;
}

LayerArgs parse_ensemble(const LayerSpec& s, std::string_view usage) {
  const Args a{s, usage};
  a.expect_positional(0, 1);
  a.allow_options({});
  EnsembleArgs e;
  if (!s.args.empty()) e.members = a.positive_int(s.args[0], "K");
  if (e.members > kEnsembleMaxMembers) a.fail("K must be at most " + std::to_string(kEnsembleMaxMembers));
  return e;
}

// ---- shapes ----------------------------------------------------------------------

void require_image(const LayerDesc& l, const Dims& input) {
  if (input.rank() != 3)
    throw usage_error(where(l.spec) + " needs an image input {C, H, W} but gets " + input.str() +
                      (input.rank() == 1 ? " (a flat input)" : ""));
}

Dims same_shape(const LayerDesc&, const Dims& input) { return input; }

Dims dense_shape(const LayerDesc& l, const Dims&) { return Dims{std::get<DenseArgs>(l.args).width}; }

Dims conv_shape(const LayerDesc& l, const Dims& in) {
  const ConvArgs& c = std::get<ConvArgs>(l.args);
  require_image(l, in);
  if (c.kernel > in[1] + 2 * c.pad || c.kernel > in[2] + 2 * c.pad)
    throw usage_error(where(l.spec) + ": kernel " + std::to_string(c.kernel) + " is larger than its padded input " +
                      std::to_string(in[1] + 2 * c.pad) + "x" + std::to_string(in[2] + 2 * c.pad));
  return Dims{c.channels, (in[1] + 2 * c.pad - c.kernel) / c.stride + 1,
              (in[2] + 2 * c.pad - c.kernel) / c.stride + 1};
}

Dims pool_shape(const LayerDesc& l, const Dims& in) {
  const PoolArgs& p = std::get<PoolArgs>(l.args);
  require_image(l, in);
  if (p.kernel > in[1] || p.kernel > in[2])
    throw usage_error(where(l.spec) + ": window " + std::to_string(p.kernel) + " is larger than its input " +
                      std::to_string(in[1]) + "x" + std::to_string(in[2]));
  return Dims{in[0], (in[1] - p.kernel) / p.stride + 1, (in[2] - p.kernel) / p.stride + 1};
}

Dims flatten_shape(const LayerDesc&, const Dims& in) { return Dims{in.product()}; }

Dims norm_shape(const LayerDesc& l, const Dims& in) {
  if (std::get<NormArgs>(l.args).layer_norm && in.rank() != 1)
    throw usage_error(where(l.spec) + " needs a flat input {F} but gets the image " + in.str() +
                      "; put flatten before it");
  return in;
}

Dims periodic_shape(const LayerDesc& l, const Dims& in) {
  if (in.rank() != 1)
    throw usage_error(where(l.spec) + " needs a flat input {F} but gets the image " + in.str() +
                      "; put flatten before it");
  return Dims{in[0] * 2 * std::get<PeriodicArgs>(l.args).frequencies};
}

Dims ple_shape(const LayerDesc& l, const Dims& in) {
  if (in.rank() != 1)
    throw usage_error(where(l.spec) + " needs a flat input {F} but gets the image " + in.str());
  return Dims{in[0] * std::get<PiecewiseLinearArgs>(l.args).bins};
}

Dims ensemble_shape(const LayerDesc& l, const Dims& in) {
  if (in.rank() != 1)
    throw usage_error(where(l.spec) + " needs a flat input {F} but gets the image " + in.str() +
                      "; put flatten before it");
  return in;
}

TrainingCost dense_cost(const LayerDesc& l, const Dims& in) {
  const double width = double(std::get<DenseArgs>(l.args).width);
  return {width * (double(in.product()) + 1), width, width * double(in.product())};
}

TrainingCost conv_cost(const LayerDesc& l, const Dims& in) {
  const ConvArgs& c = std::get<ConvArgs>(l.args);
  const double window = double(in[0]) * double(c.kernel) * double(c.kernel);
  const double outputs = double(c.channels) * double((in[1] + 2 * c.pad - c.kernel) / c.stride + 1) *
                         double((in[2] + 2 * c.pad - c.kernel) / c.stride + 1);
  return {double(c.channels) * (window + 1), outputs, outputs * window};
}

TrainingCost periodic_cost(const LayerDesc& l, const Dims& in) {
  const double k = double(std::get<PeriodicArgs>(l.args).frequencies);
  return {double(in.product()) * k, double(in.product()) * 2 * k, double(in.product()) * k};
}

// Its edges (not trained, counted as parameters all the same) and its output.
TrainingCost ple_cost(const LayerDesc& l, const Dims& in) {
  const double t = double(std::get<PiecewiseLinearArgs>(l.args).bins);
  return {double(in.product()) * (t + 1), double(in.product()) * t, double(in.product()) * t};
}

// Its scales, and its output: k rows of F values for each sample.
TrainingCost ensemble_cost(const LayerDesc& l, const Dims& in) {
  const double k = double(std::get<EnsembleArgs>(l.args).members);
  return {k * double(in.product()), k * double(in.product()), k * double(in.product())};
}

// ---- builders --------------------------------------------------------------------

bool is_int8(DType d) { return d == DType::kS8 || d == DType::kU8; }

// Dense/conv layer `prefix` of an inference-only network, its weights
// checked against the layer's shape (kCorrupt: the model is damaged).
const InferenceLayer& inference_layer(const InferenceOptions& inference, const std::string& prefix,
                                      std::int64_t out, std::int64_t fan_in) {
  auto it = inference.layers.find(prefix);
  if (it == inference.layers.end()) throw corrupt("inference: no weights for layer " + prefix);
  const InferenceWeights& w = it->second.weights;
  if (std::int64_t(w.weight.size()) != out * fan_in || std::int64_t(w.bias.size()) != out)
    throw corrupt("inference: layer " + prefix + " weights have the wrong size");
  return it->second;
}

// The int8 layer's activations: its input at the scale it arrives in (an
// f32 input is quantized at the layer's own input scale), its output u8
// after a relu, s8 otherwise, f32 for the last layer and tanh/sigmoid.
Int8Activations int8_activations(const InferenceLayer& l, const std::string& prefix, const LayerPlan& plan,
                                 BuildState& state) {
  const InferenceWeights& w = l.weights;
  const bool last = plan.last_weighted;
  if (w.q.size() != w.weight.size() || w.scales.size() != w.bias.size() || !(l.input_scale > 0) ||
      (!(l.output_scale > 0) && !last))
    throw corrupt("inference: layer " + prefix + " lacks its int8 weights or scales");
  Int8Activations q;
  q.input_scale = is_int8(state.act_dtype) ? state.act_scale : l.input_scale;
  const bool f32_out = last || (plan.fused != Activation::kNone && plan.fused != Activation::kRelu);
  q.output = f32_out ? DType::kF32 : plan.fused == Activation::kRelu ? DType::kU8 : DType::kS8;
  q.output_scale = f32_out ? 0.0f : l.output_scale;
  state.act_dtype = q.output;
  state.act_scale = f32_out ? 1.0f : l.output_scale;
  return q;
}

std::unique_ptr<Layer> train_dense(const LayerContext& ctx, const LayerDesc& l, const LayerPlan& plan,
                                   BuildState&) {
  const std::int64_t width = std::get<DenseArgs>(l.args).width;
  if (plan.member_heads > 0) return make_member_dense_layer(ctx, width, plan.fused, plan.member_heads);
  return make_dense_layer(ctx, width, plan.fused);
}

std::unique_ptr<Layer> inference_dense(const LayerContext& ctx, const LayerDesc& l, const LayerPlan& plan,
                                       BuildState& state, bool int8) {
  const std::int64_t width = std::get<DenseArgs>(l.args).width;
  const std::string prefix = std::to_string(ctx.index) + ".dense";
  const InferenceLayer& w = inference_layer(*state.inference, prefix, width, ctx.input.product());
  InferenceDenseSpec d;
  d.in = ctx.input;
  d.out = width;
  d.fused = plan.fused;
  d.weights = w.weights;
  d.int8 = int8;
  if (int8) d.quant = int8_activations(w, prefix, plan, state);
  d.sparse = state.inference->sparse;
  return make_inference_dense_layer(ctx, std::move(d));
}

std::unique_ptr<Layer> train_conv(const LayerContext& ctx, const LayerDesc& l, const LayerPlan& plan,
                                  BuildState&) {
  const ConvArgs& c = std::get<ConvArgs>(l.args);
  return make_conv_layer(ctx, c.channels, c.kernel, c.stride, c.pad, plan.fused, plan.relu_masked_by_pool);
}

std::unique_ptr<Layer> inference_conv(const LayerContext& ctx, const LayerDesc& l, const LayerPlan& plan,
                                      BuildState& state, bool int8) {
  const ConvArgs& a = std::get<ConvArgs>(l.args);
  const std::string prefix = std::to_string(ctx.index) + ".conv";
  const InferenceLayer& w = inference_layer(*state.inference, prefix, a.channels, ctx.input[0] * a.kernel * a.kernel);
  InferenceConvSpec c;
  c.in = ctx.input;
  c.out_channels = a.channels;
  c.kernel = a.kernel;
  c.stride = a.stride;
  c.pad = a.pad;
  c.fused = plan.fused;
  c.weights = w.weights;
  c.int8 = int8;
  if (int8) {
    c.quant = int8_activations(w, prefix, plan, state);
    c.pool = plan.offered_pool;
    c.pool_max = plan.offered_pool_max;
  }
  return make_inference_conv_layer(ctx, std::move(c), &state.pool_ran_by_conv);
}

std::unique_ptr<Layer> train_pool(const LayerContext& ctx, const LayerDesc& l, const LayerPlan& plan,
                                  BuildState&) {
  const PoolArgs& p = std::get<PoolArgs>(l.args);
  return make_pool_layer(ctx, p.max, p.kernel, p.stride, plan.pool_masks_relu);
}

// Inference and int8 alike: the conv before it may have run it already.
std::unique_ptr<Layer> inference_pool(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&,
                                      BuildState& state) {
  const PoolArgs& p = std::get<PoolArgs>(l.args);
  if (std::exchange(state.pool_ran_by_conv, false)) return make_fused_pool_layer(ctx, p.max, p.kernel, p.stride);
  return make_inference_pool_layer(ctx, p.max, p.kernel, p.stride);
}

std::unique_ptr<Layer> flatten(const LayerContext& ctx, const LayerDesc&, const LayerPlan&, BuildState&) {
  return make_flatten_layer(ctx);
}

std::unique_ptr<Layer> int8_flatten(const LayerContext& ctx, const LayerDesc&, const LayerPlan& plan,
                                    BuildState&) {
  return plan.deferred_flatten ? make_deferred_flatten_layer(ctx) : make_flatten_layer(ctx);
}

std::unique_ptr<Layer> train_activation(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&,
                                        BuildState&) {
  return make_activation_layer(ctx, std::get<ActivationArgs>(l.args).kind);
}

// Inference and int8 alike: reads f32 or s8/u8 at the scale it arrives in,
// hands f32 on.
std::unique_ptr<Layer> inference_activation(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&,
                                            BuildState& state) {
  auto layer = make_inference_activation_layer(ctx, std::get<ActivationArgs>(l.args).kind, state.act_scale);
  state.act_dtype = DType::kF32;
  state.act_scale = 1.0f;
  return layer;
}

// Every mode: the identity outside training.
std::unique_ptr<Layer> dropout(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&, BuildState&) {
  return make_dropout_layer(ctx, float(std::get<DropoutArgs>(l.args).p));
}

std::unique_ptr<Layer> train_norm(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&, BuildState&) {
  return std::get<NormArgs>(l.args).layer_norm ? make_layer_norm_layer(ctx) : make_batch_norm_layer(ctx);
}

std::unique_ptr<Layer> train_ensemble(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&, BuildState&) {
  return make_ensemble_layer(ctx, std::get<EnsembleArgs>(l.args).members);
}

std::unique_ptr<Layer> train_ple(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&, BuildState&) {
  return make_piecewise_linear_layer(ctx, std::get<PiecewiseLinearArgs>(l.args).bins);
}

std::unique_ptr<Layer> train_periodic(const LayerContext& ctx, const LayerDesc& l, const LayerPlan&, BuildState&) {
  const PeriodicArgs& p = std::get<PeriodicArgs>(l.args);
  return make_periodic_layer(ctx, p.frequencies, p.sigma);
}

// A row for relu, gelu, tanh, sigmoid.
template <Activation kind>
LayerArgs parse_activation(const LayerSpec& s, std::string_view usage) {
  parse_bare(s, usage);
  return ActivationArgs{kind};
}

}  // namespace

// clang-format off
const std::vector<LayerKind>& layer_table() {
  static const std::vector<LayerKind> table = {
      // name, usage, weighted,
      //   parse, shape, training cost,
      //   builders: training, inference (fp32/sparse), int8
      {"dense", "dense(WIDTH)", true,
       parse_dense, dense_shape, dense_cost,
       train_dense,
       [](const LayerContext& c, const LayerDesc& l, const LayerPlan& p, BuildState& s) { return inference_dense(c, l, p, s, false); },
       [](const LayerContext& c, const LayerDesc& l, const LayerPlan& p, BuildState& s) { return inference_dense(c, l, p, s, true); }},
      {"conv", "conv(CHANNELS,KERNEL[,stride=S][,pad=P])", true,
       parse_conv, conv_shape, conv_cost,
       train_conv,
       [](const LayerContext& c, const LayerDesc& l, const LayerPlan& p, BuildState& s) { return inference_conv(c, l, p, s, false); },
       [](const LayerContext& c, const LayerDesc& l, const LayerPlan& p, BuildState& s) { return inference_conv(c, l, p, s, true); }},
      {"maxpool", "maxpool(KERNEL[,stride=S])", false,
       [](const LayerSpec& s, std::string_view u) { return parse_pool(s, u, true); }, pool_shape, nullptr,
       train_pool, inference_pool, inference_pool},
      {"avgpool", "avgpool(KERNEL[,stride=S])", false,
       [](const LayerSpec& s, std::string_view u) { return parse_pool(s, u, false); }, pool_shape, nullptr,
       train_pool, inference_pool, inference_pool},
      {"flatten", "flatten", false,
       [](const LayerSpec& s, std::string_view u) -> LayerArgs { parse_bare(s, u); return FlattenArgs{}; },
       flatten_shape, nullptr,
       flatten, flatten, int8_flatten},
      {"relu", "relu", false, parse_activation<Activation::kRelu>, same_shape, nullptr,
       train_activation, inference_activation, inference_activation},
      {"gelu", "gelu", false, parse_activation<Activation::kGelu>, same_shape, nullptr,
       train_activation, inference_activation, inference_activation},
      {"tanh", "tanh", false, parse_activation<Activation::kTanh>, same_shape, nullptr,
       train_activation, inference_activation, inference_activation},
      {"sigmoid", "sigmoid", false, parse_activation<Activation::kSigmoid>, same_shape, nullptr,
       train_activation, inference_activation, inference_activation},
      {"dropout", "dropout(P) with 0 <= P < 1", false,
       parse_dropout, same_shape, nullptr,
       dropout, dropout, dropout},
      {"batchnorm", "batchnorm", false,
       [](const LayerSpec& s, std::string_view u) -> LayerArgs { parse_bare(s, u); return NormArgs{false}; },
       norm_shape, nullptr,
       train_norm, nullptr, nullptr},
      {"layernorm", "layernorm", false,
       [](const LayerSpec& s, std::string_view u) -> LayerArgs { parse_bare(s, u); return NormArgs{true}; },
       norm_shape, nullptr,
       train_norm, nullptr, nullptr},
      // Not in inference-only networks: int8 and pruned models refuse it
      // (its frequencies are no dense/conv weights to quantize or prune).
      {"periodic", "periodic(K[,sigma=S]) with K >= 1 (default 16) and S > 0 (default 0.1)", false,
       parse_periodic, periodic_shape, periodic_cost,
       train_periodic, nullptr, nullptr},
      // Not in inference-only networks: int8 and pruned models refuse it
      // (its edges are no dense/conv weights to quantize or prune).
      {"ple", "ple(T) with 1 <= T <= 256 (default 16), the network's first layer", false,
       parse_ple, ple_shape, ple_cost,
       train_ple, nullptr, nullptr},
      // Not in inference-only networks either: int8 and pruned models
      // refuse it, and their dense ops take one row a sample.
      {"ensemble", "ensemble(K) with 1 <= K <= 256 (default 32)", false,
       parse_ensemble, ensemble_shape, ensemble_cost,
       train_ensemble, nullptr, nullptr},
  };
  return table;
}
// clang-format on

std::string inference_blocker(const LayerDesc& layer) {
  return where(layer.spec) + ": int8 and sparse inference support dense, conv, pooling, flatten, "
                             "dropout and activations, not " + layer.spec.name;
}

std::vector<LayerDesc> parse_layers(std::string_view spec) {
  std::vector<LayerDesc> out;
  for (LayerSpec& s : parse_layer_spec(spec)) {
    const LayerKind* kind = nullptr;
    for (const LayerKind& k : layer_table())
      if (k.name == s.name) kind = &k;
    // parse_layer_spec accepts only the table's names.
    if (kind == nullptr) throw failure("layer spec: no table row for '" + s.name + "'");
    LayerArgs args = kind->parse(s, kind->usage);
    out.push_back(LayerDesc{kind, std::move(s), std::move(args)});
  }
  return out;
}

std::vector<LayerShape> check_layer_shapes(const std::vector<LayerDesc>& layers, const Dims& input,
                                           const ShapeLimits& limits) {
  std::vector<LayerShape> shapes;
  Dims shape = input;
  double parameters = 0, outputs = static_cast<double>(input.product());
  // Rows a sample, from an ensemble on: every layer after it runs on k rows
  // for each sample, so its outputs count k times.
  double rows = 1;
  const LayerDesc* ensemble = nullptr;
  const LayerDesc* last_weighted = nullptr;
  for (const LayerDesc& l : layers)
    if (l.kind->weighted) last_weighted = &l;
  for (const LayerDesc& l : layers) {
    // Its edges are fitted on the rows the network is given (Network::fit_inputs).
    if (std::holds_alternative<PiecewiseLinearArgs>(l.args) && &l != &layers.front())
      throw usage_error(where(l.spec) + " must be the network's first layer: its bins are fitted on the "
                                        "network's input");
    const Dims out = l.kind->shape(l, shape);
    if (std::holds_alternative<EnsembleArgs>(l.args)) {
      if (ensemble != nullptr)
        throw usage_error(where(l.spec) + ": a network takes one ensemble layer, and " + where(ensemble->spec) +
                          " is one");
      ensemble = &l;
    }
    if (l.kind->cost != nullptr) {
      const TrainingCost cost = l.kind->cost(l, shape);
      // The members' own output layer (plan_fusion's member_heads): K sets of weights.
      parameters += cost.parameters * (ensemble != nullptr && &l == last_weighted ? rows : 1);
      outputs += cost.outputs * (ensemble == &l ? 1 : rows);
      const double batch = static_cast<double>(std::max<std::int64_t>(limits.batch, 1));
      const double needed =
          parameters * double(kTrainBytesPerParameter) + outputs * batch * double(kTrainBytesPerOutput);
      if (limits.memory_limit != 0 && needed > static_cast<double>(limits.memory_limit)) {
        char text[160];
        std::snprintf(text, sizeof text, "%.4g parameters and %.4g values a sample in batches of %lld", parameters,
                      outputs, static_cast<long long>(batch));
        char bytes[64];
        std::snprintf(bytes, sizeof bytes, "%.4g", needed);
        throw usage_error(where(l.spec) + ": training the network up to here needs at least " + bytes + " bytes (" +
                          text + "), more than the limit of " + std::to_string(limits.memory_limit) + " bytes");
      }
    }
    for (std::int64_t d : out.to_vector())
      if (d < 1)
        throw usage_error(where(l.spec) + " leaves nothing of its input " + shape.str() + " (output " + out.str() +
                          ")");
    if (ensemble == &l) rows = double(std::get<EnsembleArgs>(l.args).members);
    shapes.push_back({shape, out});
    shape = out;
  }
  return shapes;
}

double forward_multiply_adds(const std::vector<LayerDesc>& layers, const std::vector<LayerShape>& shapes) {
  double total = 0;
  double rows = 1;  // rows a sample: k from an ensemble(k) on
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerDesc& l = layers[i];
    if (l.kind->cost != nullptr) total += rows * l.kind->cost(l, shapes.at(i).input).multiply_adds;
    if (const auto* e = std::get_if<EnsembleArgs>(&l.args)) rows = double(e->members);
  }
  return total;
}

std::vector<LayerPlan> plan_fusion(const std::vector<LayerDesc>& layers, const std::vector<LayerShape>& shapes,
                                   BuildMode mode) {
  const std::size_t n = layers.size();
  std::vector<LayerPlan> plan(n);
  auto is_conv = [&](std::size_t i) { return i < n && std::holds_alternative<ConvArgs>(layers[i].args); };
  auto is_dense = [&](std::size_t i) { return i < n && std::holds_alternative<DenseArgs>(layers[i].args); };
  auto is_maxpool = [&](std::size_t i) {
    const PoolArgs* p = i < n ? std::get_if<PoolArgs>(&layers[i].args) : nullptr;
    return p != nullptr && p->max;
  };
  std::size_t last_weighted = n;
  for (std::size_t i = 0; i < n; ++i)
    if (layers[i].kind->weighted) last_weighted = i;
  if (last_weighted < n) plan[last_weighted].last_weighted = true;
  // After an ensemble, the last dense layer is the members' own (K heads).
  for (std::size_t i = 0; i < n && last_weighted < n; ++i)
    if (const auto* e = std::get_if<EnsembleArgs>(&layers[i].args); e != nullptr && i < last_weighted &&
                                                                    is_dense(last_weighted))
      plan[last_weighted].member_heads = e->members;

  for (std::size_t i = 0; i < n; ++i) {
    LayerPlan& p = plan[i];
    if (layers[i].kind->weighted && i + 1 < n) {
      // relu/tanh/sigmoid after dense or conv: the op's post-op. (gelu has
      // no fused form.)
      const auto* next = std::get_if<ActivationArgs>(&layers[i + 1].args);
      if (next != nullptr && next->kind != Activation::kGelu) {
        p.fused = next->kind;
        plan[i + 1].absorbed = true;
      }
    }
    if (is_dense(i)) p.flatten_first = shapes[i].input.rank() != 1;
    if (std::holds_alternative<FlattenArgs>(layers[i].args)) {
      p.absorbed = shapes[i].input.rank() == 1;
      p.deferred_flatten = mode == BuildMode::kInt8 && is_dense(i + 1);
    }
    if (!is_conv(i)) continue;
    if (mode == BuildMode::kTraining && p.fused == Activation::kRelu && is_maxpool(i + 2)) {
      // conv relu maxpool: relu's gradient is applied on the pool's output
      // (a quarter of the conv's for 2x2) by the pool layer.
      p.relu_masked_by_pool = true;
      plan[i + 2].pool_masks_relu = true;
    }
    if (mode == BuildMode::kInt8) {
      // The pooling after it (past its fused activation), offered to the
      // op, which may run it on its own output: one whose window equals
      // its stride.
      const std::size_t next = i + (p.fused != Activation::kNone ? 2 : 1);
      if (next < n) {
        const PoolArgs* pool = std::get_if<PoolArgs>(&layers[next].args);
        p.offered_pool = pool != nullptr && pool->stride == pool->kernel ? pool->kernel : 0;
        p.offered_pool_max = is_maxpool(next);
      }
    }
  }
  return plan;
}

}  // namespace anneal::engine
