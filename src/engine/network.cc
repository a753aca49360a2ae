// Layer-spec syntax and network building. What each layer kind accepts and
// builds is its row in the layer table (layer_table.h); the constructor runs
// the table's passes in order.
#include "anneal/network.h"
#include "anneal/spelling.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <variant>

#include "anneal/error.h"
#include "engine/layer_table.h"
#include "engine/layers_internal.h"
#include "engine/random.h"

namespace anneal {
namespace {

double parse_number(std::string_view text, const std::string& layer_text) {
  const std::string t(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v))
    throw usage_error("layer spec: '" + t + "' in '" + layer_text + "' is not a number");
  return v;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

const std::vector<std::string>& known_layer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const engine::LayerKind& kind : engine::layer_table()) out.emplace_back(kind.name);
    return out;
  }();
  return names;
}

std::vector<LayerSpec> parse_layer_spec(std::string_view spec) {
  std::vector<LayerSpec> out;
  std::size_t i = 0;
  while (true) {
    while (i < spec.size() && std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
    if (i >= spec.size()) break;
    const std::size_t start = i;
    while (i < spec.size() && (std::isalnum(static_cast<unsigned char>(spec[i])) || spec[i] == '_')) ++i;
    LayerSpec layer;
    layer.position = int(out.size()) + 1;
    layer.name = std::string(spec.substr(start, i - start));
    if (layer.name.empty())
      throw usage_error("layer spec: unexpected '" + std::string(1, spec[i]) + "' at character " +
                        std::to_string(i + 1) + " of '" + std::string(spec) + "'");
    std::string args_text;
    bool has_parens = false;
    if (i < spec.size() && spec[i] == '(') {
      has_parens = true;
      const std::size_t close = spec.find(')', i);
      if (close == std::string_view::npos)
        throw usage_error("layer spec: '(' after '" + layer.name + "' is never closed");
      args_text = std::string(spec.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    layer.text = std::string(spec.substr(start, i - start));
    if (i < spec.size() && !std::isspace(static_cast<unsigned char>(spec[i])))
      throw usage_error("layer spec: expected a space after '" + layer.text + "', found '" +
                        std::string(1, spec[i]) + "'");
    const auto& known = known_layer_names();
    if (std::find(known.begin(), known.end(), layer.name) == known.end()) {
      const std::vector<std::string_view> names(known.begin(), known.end());
      throw usage_error("layer spec: unknown layer '" + layer.name + "' (layer " +
                        std::to_string(layer.position) + ")" + did_you_mean(layer.name, names));
    }
    if (has_parens) {
      std::size_t pos = 0;
      while (pos <= args_text.size()) {
        std::size_t comma = args_text.find(',', pos);
        if (comma == std::string::npos) comma = args_text.size();
        const std::string item = trim(std::string_view(args_text).substr(pos, comma - pos));
        pos = comma + 1;
        if (item.empty()) {
          if (args_text.find_first_not_of(" \t") == std::string::npos) break;  // "relu()"
          throw usage_error("layer spec: empty argument in '" + layer.text + "'");
        }
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos) {
          if (!layer.options.empty())
            throw usage_error("layer spec: positional argument after key=value in '" + layer.text + "'");
          layer.args.push_back(parse_number(item, layer.text));
        } else {
          layer.options.emplace_back(trim(item.substr(0, eq)),
                                     parse_number(trim(item.substr(eq + 1)), layer.text));
        }
      }
    }
    out.push_back(std::move(layer));
  }
  if (out.empty()) throw usage_error("layer spec is empty: give layers such as 'dense(128) relu dense(10)'");
  return out;
}

namespace {

// The WeightedLayer of dense/conv `layer`, built from `desc` in `ctx`.
WeightedLayer weighted_layer(const engine::LayerDesc& desc, const engine::LayerPlan& plan,
                             const engine::LayerContext& ctx, const Layer& layer) {
  const Dims& out = layer.output_shape();
  const auto* conv = std::get_if<engine::ConvArgs>(&desc.args);
  WeightedLayer w;
  w.prefix = std::to_string(ctx.index) + "." + desc.spec.name;
  w.text = layer.describe();
  w.conv = conv != nullptr;
  w.relu = plan.fused == Activation::kRelu;
  w.out = out[0];
  w.weight_dims = conv ? std::vector<std::int64_t>{out[0], ctx.input[0], conv->kernel, conv->kernel}
                       : ctx.input.with_batch(out[0]).to_vector();
  if (plan.member_heads > 0) w.weight_dims.insert(w.weight_dims.begin(), plan.member_heads);
  return w;
}

}  // namespace

Network::Network(std::string_view spec, const NetworkOptions& options, Backend& backend)
    : backend_(backend), input_shape_(options.input_shape), input_gradient_(options.input_gradient) {
  // 1. Parse: every layer's arguments checked and typed.
  const std::vector<engine::LayerDesc> layers = engine::parse_layers(spec);
  if (input_shape_.rank() != 1 && input_shape_.rank() != 3)
    throw usage_error("network input must be flat {F} or an image {C, H, W}, not " + input_shape_.str());
  const InferenceOptions* inference = options.inference ? &*options.inference : nullptr;
  inference_only_ = inference != nullptr;
  if (inference_only_) input_gradient_ = false;
  const engine::BuildMode mode = !inference       ? engine::BuildMode::kTraining
                                 : inference->int8 ? engine::BuildMode::kInt8
                                                   : engine::BuildMode::kInference;

  // 2. Shapes, and what training needs (a trainable network only), before
  // anything is allocated.
  const std::vector<engine::LayerShape> shapes =
      engine::check_layer_shapes(layers, input_shape_, {inference ? 0 : options.memory_limit, options.batch});
  for (const engine::LayerDesc& layer : layers)
    if (layer.kind->inference == nullptr && inference_blocker_.empty())
      inference_blocker_ = engine::inference_blocker(layer);

  // 3. Fusion: which layers run inside another.
  const std::vector<engine::LayerPlan> plan = engine::plan_fusion(layers, shapes, mode);

  // 4. Each layer from its row's builder for this mode.
  engine::BuildState state;
  state.inference = inference;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const engine::LayerDesc& desc = layers[i];
    const engine::LayerKind& kind = *desc.kind;
    if (plan[i].absorbed) continue;
    const int index = int(layers_.size());
    engine::LayerContext ctx{backend,
                             shapes[i].input,
                             options.compute,
                             engine::derive_seed(options.seed, 0x1a7e5, std::uint64_t(index)),
                             index,
                             options.batch,
                             options.batch_invariant};
    if (plan[i].flatten_first) {
      layers_.push_back(mode == engine::BuildMode::kInt8 ? engine::make_deferred_flatten_layer(ctx)
                                                          : engine::make_flatten_layer(ctx));
      // The dense keeps the seed of the index the spec layer started at
      // (what trained models' weights were drawn with).
      ctx.input = layers_.back()->output_shape();
      ctx.index = int(layers_.size());
    }
    const engine::LayerBuilder build = mode == engine::BuildMode::kTraining    ? kind.train
                                       : mode == engine::BuildMode::kInference ? kind.inference
                                                                               : kind.int8;
    if (build == nullptr) throw usage_error(engine::inference_blocker(desc));
    std::unique_ptr<Layer> layer = build(ctx, desc, plan[i], state);
    if (layer->output_shape() != shapes[i].output)
      throw failure("network: " + engine::where(desc.spec) + " built an output " + layer->output_shape().str() +
                    ", its row's shape is " + shapes[i].output.str());
    if (kind.weighted) {
      weighted_.push_back(weighted_layer(desc, plan[i], ctx, *layer));
      weighted_at_.push_back(layers_.size());
    }
    layers_.push_back(std::move(layer));
  }
  if (layers_.empty()) throw usage_error("layer spec '" + std::string(spec) + "' builds no layer");
  if (!weighted_.empty()) weighted_.back().last = true;
  if (inference_only_ && weighted_.empty()) throw usage_error("inference: the network has no dense or conv layer");
  const Dims& shape = layers_.back()->output_shape();
  if (options.outputs > 0) {
    const std::string meaning = options.output_meaning.empty()
                                    ? std::to_string(options.outputs) + " outputs"
                                    : options.output_meaning;
    if (shape.rank() != 1)
      throw usage_error("layer spec ends with an image " + shape.str() + " but the task needs " +
                        meaning + "; end it with flatten dense(" + std::to_string(options.outputs) + ")");
    if (shape[0] != options.outputs)
      throw usage_error("layer spec's last layer outputs " + std::to_string(shape[0]) +
                        " values but the task needs " + meaning + "; end it with dense(" +
                        std::to_string(options.outputs) + ")");
  }
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i]->members() > 1) {
      members_ = layers_[i]->members();
      members_from_ = i + 1;
    }
  for (auto& layer : layers_) {
    first_parameter_.push_back(parameters_.size());
    layer->collect_parameters(parameters_);
    layer->collect_buffers(buffers_);
  }
  for (first_trainable_ = 0; first_trainable_ + 1 < layers_.size(); ++first_trainable_) {
    std::vector<Parameter*> own;
    layers_[first_trainable_]->collect_parameters(own);
    if (!own.empty()) break;
  }
}

Network::~Network() = default;

bool Network::fits_inputs() const { return !layers_.empty() && layers_.front()->fits_inputs(); }

void Network::fit_inputs(std::span<const float> values, std::int64_t rows) {
  if (!fits_inputs()) return;
  if (rows < 0 || values.size() != std::size_t(rows) * std::size_t(input_shape_.product()))
    throw failure("network: fit_inputs got " + std::to_string(values.size()) + " values for " + std::to_string(rows) +
                  " rows of " + input_shape_.str());
  layers_.front()->fit_inputs(values, rows);
}

void Layer::fit_inputs(std::span<const float>, std::int64_t) {
  throw failure("layer " + describe() + " is not fitted on its inputs");
}

const Tensor& Network::forward(const Tensor& x, const PassContext& ctx) { return forward(x, ctx, nullptr); }

const Tensor& Network::forward(const Tensor& x, const PassContext& ctx, const LayerObserver& observe) {
  if (x.dims().without_batch() != input_shape_)
    throw usage_error("network input " + x.dims().str() + " does not match the input shape " +
                      input_shape_.str());
  if (inference_only_ && ctx.training) throw usage_error("an inference-only network cannot run a training pass");
  // Hands layer i's output to the observer when layer i is the k-th dense/conv.
  std::size_t k = 0;
  auto observed = [&](std::size_t i, const Tensor& y) {
    if (!observe || k >= weighted_at_.size() || weighted_at_[k] != i) return;
    observe(k, y);
    ++k;
  };
  if (fq_weights_.empty() && fq_outputs_.empty() && fq_input_scale_ == 0) {
    const PassContext rows = member_rows(ctx);
    const Tensor* h = &x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = &layers_[i]->forward(*h, i < members_from_ ? ctx : rows);
      observed(i, *h);
    }
    return members_output(*h, ctx);
  }
  // Fake-quantized pass. A training forward that never got its backward
  // (an exception in between) left the masters aside: bring them back first.
  restore_master_weights();
  for (QuantizedWeight& w : fq_weights_) {
    // Swapping Tensor objects keeps the Parameter (which layers and the
    // optimizer refer to) in place; only the storage changes hands.
    std::swap(w.param->value, w.master);
    backend_.fake_quantize_channels(w.master, w.param->value, fq_weight_levels_);
  }
  swapped_ = true;
  const Tensor* h = &x;
  if (fq_input_scale_ > 0) {
    backend_.fake_quantize(x, fq_input_, fq_input_scale_, -127.0f, 127.0f);
    h = &fq_input_;
  }
  auto next = fq_outputs_.begin();
  const PassContext rows = member_rows(ctx);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    h = &layers_[i]->forward(*h, i < members_from_ ? ctx : rows);
    observed(i, *h);
    if (next != fq_outputs_.end() && next->layer == i) {
      backend_.fake_quantize(*h, next->y, next->scale, next->lo, next->hi);
      h = &next->y;
      ++next;
    }
  }
  if (!ctx.training) restore_master_weights();
  return members_output(*h, ctx);
}

PassContext Network::member_rows(const PassContext& ctx) const {
  PassContext rows = ctx;
  rows.first_row = ctx.first_row * members_;
  return rows;
}

const Tensor& Network::members_output(const Tensor& y, const PassContext& ctx) {
  if (members_ == 1 || ctx.training) return y;
  backend_.member_mean(y, members_, member_mean_);
  return member_mean_;
}

void Network::restore_master_weights() {
  if (!swapped_) return;
  for (QuantizedWeight& w : fq_weights_) {
    std::swap(w.param->value, w.master);
    // The quantized storage now sits in `master`; anything keyed on the
    // value's version (a bf16 working copy) must not mistake it for current.
    w.param->value.mark_modified();
  }
  swapped_ = false;
}

void Network::set_fake_quantization(const FakeQuantization& fq) {
  if (inference_only_) throw usage_error("fake quantization: an inference-only network has no fp32 weights");
  restore_master_weights();
  std::vector<QuantizedWeight> weights;
  std::vector<QuantizedOutput> outputs;
  for (const FakeQuantization::Point& point : fq.layers) {
    const std::string weight = point.prefix + ".weight";
    bool found = false;
    for (std::size_t i = 0; i < layers_.size() && !found; ++i) {
      std::vector<Parameter*> own;
      layers_[i]->collect_parameters(own);
      for (Parameter* p : own) {
        if (p->name != weight) continue;
        found = true;
        weights.push_back({p, Tensor()});
        if (point.output_scale > 0)
          outputs.push_back({i, point.output_scale, point.output_unsigned ? 0.0f : -127.0f,
                             point.output_unsigned ? 255.0f : 127.0f, Tensor()});
      }
    }
    if (!found) throw usage_error("fake quantization: the network has no parameter " + weight);
  }
  std::sort(outputs.begin(), outputs.end(), [](const auto& a, const auto& b) { return a.layer < b.layer; });
  fq_input_scale_ = fq.input_scale;
  fq_weight_levels_ = fq.weight_levels;
  fq_weights_ = std::move(weights);
  fq_outputs_ = std::move(outputs);
}

void Network::backward(const Tensor& dloss, const PassContext& ctx) { backward(dloss, ctx, nullptr); }

void Network::backward(const Tensor& dloss, const PassContext& ctx, const GradientsReady& ready) {
  if (inference_only_) throw usage_error("an inference-only network has no backward pass");
  // Layers below the first one with parameters (the implicit flatten before
  // a first dense, a leading activation) have nothing to learn: unless the
  // input gradient is wanted, backward stops at that first parametric layer
  // and skips its dx, which for a first dense is as costly as its dW.
  const std::size_t first = input_gradient_ ? 0 : first_trainable_;
  const Tensor* d = &dloss;
  const PassContext rows = member_rows(ctx);
  for (std::size_t i = layers_.size(); i-- > first;) {
    const bool need_dx = i > first || input_gradient_;
    d = &layers_[i]->backward(*d, i < members_from_ ? ctx : rows, need_dx);
    if (ready) ready(first_parameter_[i]);
  }
  input_grad_ = input_gradient_ ? d : nullptr;
  // The gradient was taken at the quantized weights; the optimizer applies
  // it to the fp32 masters (straight-through estimator).
  restore_master_weights();
}

const Tensor& Network::input_gradient() const {
  if (input_grad_ == nullptr)
    throw failure("Network::input_gradient: build with input_gradient and run backward first");
  return *input_grad_;
}

std::int64_t Network::parameter_count() const {
  std::int64_t n = 0;
  for (const Parameter* p : parameters_) n += p->value.elements();
  return n;
}

const Dims& Network::output_shape() const { return layers_.back()->output_shape(); }

std::vector<std::string> Network::summary() const {
  std::vector<std::string> lines;
  for (const auto& layer : layers_) {
    std::vector<Parameter*> params;
    layer->collect_parameters(params);
    std::int64_t count = 0;
    for (const Parameter* p : params) count += p->value.elements();
    lines.push_back(layer->describe() + "  " + layer->input_shape().str() + " -> " +
                    layer->output_shape().str() + "  " + std::to_string(count) + " params");
  }
  return lines;
}

std::vector<LayerKernel> Network::kernels() const {
  std::vector<LayerKernel> out;
  if (!inference_only_) return out;
  for (const auto& layer : layers_) {
    LayerKernel k = layer->kernel();
    if (k.kernel.empty()) return {};  // not run yet
    out.push_back(std::move(k));
  }
  return out;
}

double network_multiply_adds(std::string_view spec, const Dims& input) {
  const std::vector<engine::LayerDesc> layers = engine::parse_layers(spec);
  return engine::forward_multiply_adds(layers, engine::check_layer_shapes(layers, input, {}));
}

std::vector<WeightedLayer> weighted_layers(std::string_view spec, const Dims& input, Backend& backend) {
  NetworkOptions options;
  options.input_shape = input;
  options.batch = 1;
  const Network network(spec, options, backend);
  if (!network.inference_blocker().empty()) throw usage_error(network.inference_blocker());
  return network.weighted_layers();
}

std::string Network::describe() const {
  std::string s;
  for (const auto& layer : layers_) {
    if (!s.empty()) s += " ";
    s += layer->describe();
  }
  return s;
}

}  // namespace anneal
