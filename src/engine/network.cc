// Layer-spec parsing and network building. Every check on a spec happens
// here, before any training, with a one-line kUsage message that names the
// layer as written and its position.
#include "anneal/network.h"
#include "anneal/spelling.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "anneal/error.h"
#include "engine/layers_internal.h"
#include "engine/random.h"

namespace anneal {
namespace {

std::string where(const LayerSpec& s) {
  return "layer " + std::to_string(s.position) + " '" + s.text + "'";
}

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

// Argument access with checks; `usage` is how the layer is written.
struct Args {
  const LayerSpec& spec;
  const char* usage;

  [[noreturn]] void fail(const std::string& what) const {
    throw usage_error(where(spec) + ": " + what + " (usage: " + usage + ")");
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

Activation activation_of(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  return Activation::kNone;
}

void require_image(const LayerSpec& s, const Dims& input) {
  if (input.rank() != 3)
    throw usage_error(where(s) + " needs an image input {C, H, W} but gets " + input.str() +
                      (input.rank() == 1 ? " (a flat input)" : ""));
}

}  // namespace

const std::vector<std::string>& known_layer_names() {
  static const std::vector<std::string> names = {
      "dense", "conv", "maxpool", "avgpool", "flatten", "relu", "gelu",
      "tanh", "sigmoid", "dropout", "batchnorm", "layernorm"};
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

// A pooling layer spec that an int8 conv may run on its own output: a
// window equal to its stride. Its window, or 0. (The layer itself is checked
// when its turn comes.)
std::int64_t poolable_window(const LayerSpec& s) {
  if ((s.name != "maxpool" && s.name != "avgpool") || s.args.size() != 1) return 0;
  const double k = s.args[0];
  double stride = k;
  for (const auto& [key, v] : s.options)
    if (key == "stride") stride = v;
  if (!(k >= 1) || k != std::floor(k) || k > 1e9 || stride != k) return 0;
  return std::int64_t(k);
}

}  // namespace

Network::Network(std::string_view spec, const NetworkOptions& options, Backend& backend)
    : backend_(backend), input_shape_(options.input_shape), input_gradient_(options.input_gradient) {
  const std::vector<LayerSpec> layers = parse_layer_spec(spec);
  if (input_shape_.rank() != 1 && input_shape_.rank() != 3)
    throw usage_error("network input must be flat {F} or an image {C, H, W}, not " + input_shape_.str());
  const InferenceOptions* inference = options.inference ? &*options.inference : nullptr;
  inference_only_ = inference != nullptr;
  const bool int8 = inference && inference->int8;
  if (inference_only_) input_gradient_ = false;
  std::size_t last_weighted = layers.size();  // the spec's last dense/conv
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == "dense" || layers[i].name == "conv") last_weighted = i;
  // In an int8 network, what flows from one layer to the next: f32 or s8/u8
  // at `act_scale`. Fixed here, so each op is told the scales it meets.
  DType act_dtype = DType::kF32;
  float act_scale = 1.0f;
  // The int8 layer's activations: its input at the scale it arrives in (an
  // f32 input is quantized at the layer's own input scale), its output u8
  // after a relu, s8 otherwise, f32 for the last layer and tanh/sigmoid.
  auto int8_activations = [&](const InferenceLayer& l, const std::string& prefix, Activation fused,
                              bool last) {
    const InferenceWeights& w = l.weights;
    if (w.q.size() != w.weight.size() || w.scales.size() != w.bias.size() || !(l.input_scale > 0) ||
        (!(l.output_scale > 0) && !last))
      throw corrupt("inference: layer " + prefix + " lacks its int8 weights or scales");
    Int8Activations q;
    q.input_scale = is_int8(act_dtype) ? act_scale : l.input_scale;
    const bool f32_out = last || (fused != Activation::kNone && fused != Activation::kRelu);
    q.output = f32_out ? DType::kF32 : fused == Activation::kRelu ? DType::kU8 : DType::kS8;
    q.output_scale = f32_out ? 0.0f : l.output_scale;
    act_dtype = q.output;
    act_scale = f32_out ? 1.0f : l.output_scale;
    return q;
  };
  Dims shape = input_shape_;
  // What training the layers built so far needs (NetworkOptions::
  // memory_limit), counted in doubles: a spec may ask for 1e9 x 1e9.
  double parameters = 0, outputs = static_cast<double>(input_shape_.product());
  auto check_memory = [&](const LayerSpec& s, double layer_parameters, double layer_outputs) {
    parameters += layer_parameters;
    outputs += layer_outputs;
    if (options.memory_limit == 0 || inference) return;
    const double batch = static_cast<double>(std::max<std::int64_t>(options.batch, 1));
    const double needed = parameters * double(kTrainBytesPerParameter) + outputs * batch * double(kTrainBytesPerOutput);
    if (needed <= static_cast<double>(options.memory_limit)) return;
    char text[160];
    std::snprintf(text, sizeof text, "%.4g parameters and %.4g values a sample in batches of %lld", parameters,
                  outputs, static_cast<long long>(batch));
    char bytes[64];
    std::snprintf(bytes, sizeof bytes, "%.4g", needed);
    throw usage_error(where(s) + ": training the network up to here needs at least " + bytes + " bytes (" + text +
                      "), more than the limit of " + std::to_string(options.memory_limit) + " bytes");
  };
  bool pool_masks_relu = false;  // the next layer is a maxpool after conv relu
  bool pool_fused = false;       // the next layer is a pooling the int8 conv before it runs
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& s = layers[i];
    const int index = int(layers_.size());
    engine::LayerContext ctx{backend,
                             shape,
                             options.compute,
                             engine::derive_seed(options.seed, 0x1a7e5, std::uint64_t(index)),
                             index,
                             options.batch,
                             options.batch_invariant};
    // A relu/tanh/sigmoid right after dense or conv runs as the op's fused
    // post-op (one pass over the output instead of two).
    Activation fused = Activation::kNone;
    if ((s.name == "dense" || s.name == "conv") && i + 1 < layers.size()) {
      const Activation next = activation_of(layers[i + 1].name);
      if (next != Activation::kNone && next != Activation::kGelu &&
          layers[i + 1].args.empty() && layers[i + 1].options.empty())
        fused = next;
    }
    std::unique_ptr<Layer> layer;
    std::int64_t conv_kernel = 0;  // conv: K
    if (s.name == "dense") {
      Args a{s, "dense(WIDTH)"};
      a.expect_positional(1, 1);
      a.allow_options({});
      const std::int64_t width = a.positive_int(s.args[0], "WIDTH");
      check_memory(s, double(width) * (double(shape.product()) + 1), double(width));
      if (shape.rank() != 1) {
        // An image into dense flattens implicitly. A real (plain, row-major)
        // flatten first lets the inner product run on a 2-D input, which
        // oneDNN handles far faster than a blocked 4-D one. (An int8 dense
        // flattens itself, see make_deferred_flatten_layer.)
        layers_.push_back(int8 ? engine::make_deferred_flatten_layer(ctx) : engine::make_flatten_layer(ctx));
        shape = layers_.back()->output_shape();
        ctx.input = shape;
        ctx.index = int(layers_.size());
      }
      if (inference) {
        const std::string prefix = std::to_string(ctx.index) + ".dense";
        const InferenceLayer& l = inference_layer(*inference, prefix, width, shape.product());
        InferenceDenseSpec d;
        d.in = shape;
        d.out = width;
        d.fused = fused;
        d.weights = l.weights;
        d.int8 = int8;
        if (int8) d.quant = int8_activations(l, prefix, fused, i == last_weighted);
        d.sparse = inference->sparse;
        layer = engine::make_inference_dense_layer(ctx, std::move(d));
      } else {
        layer = engine::make_dense_layer(ctx, width, fused);
      }
    } else if (s.name == "conv") {
      Args a{s, "conv(CHANNELS,KERNEL[,stride=S][,pad=P])"};
      a.expect_positional(2, 2);
      a.allow_options({"stride", "pad"});
      require_image(s, shape);
      const std::int64_t channels = a.positive_int(s.args[0], "CHANNELS");
      const std::int64_t kernel = a.positive_int(s.args[1], "KERNEL");
      const std::int64_t stride = a.option_int("stride", 1, 1);
      const std::int64_t pad = a.option_int("pad", 0, 0);
      conv_kernel = kernel;
      if (kernel > shape[1] + 2 * pad || kernel > shape[2] + 2 * pad)
        throw usage_error(where(s) + ": kernel " + std::to_string(kernel) +
                          " is larger than its padded input " + std::to_string(shape[1] + 2 * pad) +
                          "x" + std::to_string(shape[2] + 2 * pad));
      if (pad >= kernel) a.fail("pad must be smaller than the kernel");
      check_memory(s, double(channels) * (double(shape[0]) * double(kernel) * double(kernel) + 1),
                   double(channels) * double((shape[1] + 2 * pad - kernel) / stride + 1) *
                       double((shape[2] + 2 * pad - kernel) / stride + 1));
      if (inference) {
        const std::string prefix = std::to_string(index) + ".conv";
        const InferenceLayer& l = inference_layer(*inference, prefix, channels, shape[0] * kernel * kernel);
        InferenceConvSpec c;
        c.in = shape;
        c.out_channels = channels;
        c.kernel = kernel;
        c.stride = stride;
        c.pad = pad;
        c.fused = fused;
        c.weights = l.weights;
        c.int8 = int8;
        if (int8) {
          c.quant = int8_activations(l, prefix, fused, i == last_weighted);
          // The pooling after it (past its fused activation) is offered to
          // the op, which may run it on its own output.
          const std::size_t next = i + (fused != Activation::kNone ? 2 : 1);
          if (next < layers.size()) {
            c.pool = poolable_window(layers[next]);
            c.pool_max = layers[next].name == "maxpool";
          }
        }
        layer = engine::make_inference_conv_layer(ctx, std::move(c), &pool_fused);
      } else {
        // conv relu maxpool: relu's gradient is applied on the pool's output
        // (a quarter of the conv's for 2x2) by the pool layer.
        const bool relu_then_maxpool = fused == Activation::kRelu && i + 2 < layers.size() &&
                                       layers[i + 2].name == "maxpool";
        layer = engine::make_conv_layer(ctx, channels, kernel, stride, pad, fused, relu_then_maxpool);
        pool_masks_relu = relu_then_maxpool;
      }
    } else if (s.name == "maxpool" || s.name == "avgpool") {
      Args a{s, s.name == "maxpool" ? "maxpool(KERNEL[,stride=S])" : "avgpool(KERNEL[,stride=S])"};
      a.expect_positional(1, 1);
      a.allow_options({"stride"});
      require_image(s, shape);
      const std::int64_t kernel = a.positive_int(s.args[0], "KERNEL");
      const std::int64_t stride = a.option_int("stride", kernel, 1);
      if (kernel > shape[1] || kernel > shape[2])
        throw usage_error(where(s) + ": window " + std::to_string(kernel) +
                          " is larger than its input " + std::to_string(shape[1]) + "x" +
                          std::to_string(shape[2]));
      const bool max = s.name == "maxpool";
      if (std::exchange(pool_fused, false)) layer = engine::make_fused_pool_layer(ctx, max, kernel, stride);
      else if (inference) layer = engine::make_inference_pool_layer(ctx, max, kernel, stride);
      else layer = engine::make_pool_layer(ctx, max, kernel, stride, std::exchange(pool_masks_relu, false));
    } else if (s.name == "flatten") {
      Args a{s, "flatten"};
      a.expect_positional(0, 0);
      a.allow_options({});
      // dense reads an image input in flatten order itself: skip the copy.
      if (shape.rank() == 1) continue;  // already flat
      const bool dense_next = i + 1 < layers.size() && layers[i + 1].name == "dense";
      layer = int8 && dense_next ? engine::make_deferred_flatten_layer(ctx) : engine::make_flatten_layer(ctx);
    } else if (activation_of(s.name) != Activation::kNone) {
      Args a{s, s.name.c_str()};
      a.expect_positional(0, 0);
      a.allow_options({});
      if (i > 0 && !layers_.empty() && activation_of(s.name) != Activation::kGelu &&
          (layers[i - 1].name == "dense" || layers[i - 1].name == "conv"))
        continue;  // fused into the previous layer
      if (inference) {
        layer = engine::make_inference_activation_layer(ctx, activation_of(s.name), act_scale);
        act_dtype = DType::kF32;
        act_scale = 1.0f;
      } else {
        layer = engine::make_activation_layer(ctx, activation_of(s.name));
      }
    } else if (s.name == "dropout") {
      Args a{s, "dropout(P) with 0 <= P < 1"};
      a.expect_positional(1, 1);
      a.allow_options({});
      if (!(s.args[0] >= 0 && s.args[0] < 1)) a.fail("P must be in [0, 1)");
      layer = engine::make_dropout_layer(ctx, float(s.args[0]));
    } else if (s.name == "batchnorm" || s.name == "layernorm") {
      Args a{s, s.name.c_str()};
      a.expect_positional(0, 0);
      a.allow_options({});
      const bool layer_norm = s.name == "layernorm";
      if (layer_norm && shape.rank() != 1)
        throw usage_error(where(s) + " needs a flat input {F} but gets the image " + shape.str() +
                          "; put flatten before it");
      if (inference_blocker_.empty())
        inference_blocker_ = where(s) + ": int8 and sparse inference support dense, conv, pooling, flatten, "
                             "dropout and activations, not " + s.name;
      if (inference) throw usage_error(inference_blocker_);
      layer = layer_norm ? engine::make_layer_norm_layer(ctx) : engine::make_batch_norm_layer(ctx);
    } else {
      throw usage_error(where(s) + ": no builder for this layer");
    }
    shape = layer->output_shape();
    for (std::int64_t d : shape.to_vector())
      if (d < 1)
        throw usage_error(where(s) + " leaves nothing of its input " + ctx.input.str() +
                          " (output " + shape.str() + ")");
    if (s.name == "dense" || s.name == "conv") {
      WeightedLayer w;
      w.prefix = std::to_string(ctx.index) + "." + s.name;
      w.text = layer->describe();
      w.conv = s.name == "conv";
      w.relu = fused == Activation::kRelu;
      w.out = shape[0];
      w.weight_dims = w.conv ? std::vector<std::int64_t>{shape[0], ctx.input[0], conv_kernel, conv_kernel}
                             : ctx.input.with_batch(shape[0]).to_vector();
      weighted_.push_back(std::move(w));
      weighted_at_.push_back(layers_.size());
    }
    layers_.push_back(std::move(layer));
  }
  if (layers_.empty()) throw usage_error("layer spec '" + std::string(spec) + "' builds no layer");
  if (!weighted_.empty()) weighted_.back().last = true;
  if (inference_only_ && weighted_.empty()) throw usage_error("inference: the network has no dense or conv layer");
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
    const Tensor* h = &x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = &layers_[i]->forward(*h, ctx);
      observed(i, *h);
    }
    return *h;
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
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    h = &layers_[i]->forward(*h, ctx);
    observed(i, *h);
    if (next != fq_outputs_.end() && next->layer == i) {
      backend_.fake_quantize(*h, next->y, next->scale, next->lo, next->hi);
      h = &next->y;
      ++next;
    }
  }
  if (!ctx.training) restore_master_weights();
  return *h;
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
  for (std::size_t i = layers_.size(); i-- > first;) {
    const bool need_dx = i > first || input_gradient_;
    d = &layers_[i]->backward(*d, ctx, need_dx);
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
