#include "runs/network_onnx.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "anneal/error.h"
#include "anneal/network.h"
#include "anneal/piecewise_linear.h"

namespace anneal::runs {
namespace {

using namespace onnx_graph;

enum class Act : std::uint8_t { kF32, kS8, kU8 };

class NetworkWriter {
 public:
  NetworkWriter(Graph& g, const ModelFile& model) : g_(g), model_(model) {
    for (const auto& t : model.tensors) tensors_[t.name] = &t;
  }

  // The network's output (N, outputs): logits or the standardized value.
  std::string write(std::string x) {
    const std::vector<LayerSpec> specs = parse_layer_spec(model_.layers);
    std::size_t last_weighted = specs.size();
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == "dense" || specs[i].name == "conv") last_weighted = i;
    Shape shape = model_.input_shape;
    int index = 0;  // the layer number, as Network numbers them (its parameters' prefix)
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const LayerSpec& s = specs[i];
      std::string fused;  // a relu/tanh/sigmoid the dense/conv op runs (network.cc)
      if ((s.name == "dense" || s.name == "conv") && i + 1 < specs.size() && specs[i + 1].args.empty() &&
          specs[i + 1].options.empty() &&
          (specs[i + 1].name == "relu" || specs[i + 1].name == "tanh" || specs[i + 1].name == "sigmoid"))
        fused = specs[i + 1].name;
      if (s.name == "dense") {
        if (shape.size() != 1) {  // the implicit flatten takes a number
          x = flatten(x);
          shape = {product(shape)};
          ++index;
        }
        const std::int64_t width = static_cast<std::int64_t>(s.args.at(0));
        if (members_ > 1 && i == last_weighted) {  // the members' own output layers (Network's K heads)
          x = member_heads(s, std::to_string(index) + ".dense", x, fused, members_, shape[0], width);
          shape = {width};
          ++index;
          continue;
        }
        x = weighted(s, std::to_string(index) + ".dense", x, fused, i == last_weighted, {width, shape[0]},
                     [&](const std::string& in, const std::string& w, const std::string& b) {
                       onnx::NodeProto* n = g_.node("Gemm", {in, w, b}, {g_.fresh(s.text)});
                       attr_int(n, "transB", 1);
                       return n->output(0);
                     });
        shape = {width};
      } else if (s.name == "conv") {
        const auto channels = static_cast<std::int64_t>(s.args.at(0));
        const auto kernel = static_cast<std::int64_t>(s.args.at(1));
        const std::int64_t stride = option(s, "stride", 1), pad = option(s, "pad", 0);
        need_image(s, shape);
        x = weighted(s, std::to_string(index) + ".conv", x, fused, i == last_weighted,
                     {channels, shape[0], kernel, kernel},
                     [&](const std::string& in, const std::string& w, const std::string& b) {
                       onnx::NodeProto* n = g_.node("Conv", {in, w, b}, {g_.fresh(s.text)});
                       attr_ints(n, "kernel_shape", {kernel, kernel});
                       attr_ints(n, "strides", {stride, stride});
                       attr_ints(n, "pads", {pad, pad, pad, pad});
                       return n->output(0);
                     });
        shape = {channels, (shape[1] + 2 * pad - kernel) / stride + 1, (shape[2] + 2 * pad - kernel) / stride + 1};
      } else if (s.name == "maxpool" || s.name == "avgpool") {
        const auto kernel = static_cast<std::int64_t>(s.args.at(0));
        const std::int64_t stride = option(s, "stride", kernel);
        need_image(s, shape);
        onnx::NodeProto* n = g_.node(s.name == "maxpool" ? "MaxPool" : "AveragePool", {x}, {g_.fresh(s.text)});
        attr_ints(n, "kernel_shape", {kernel, kernel});
        attr_ints(n, "strides", {stride, stride});
        x = n->output(0);
        // int8: the pooling runs on the quantized values and its output is
        // quantized again at the same scale (an average rounds).
        if (act_ != Act::kF32 && s.name == "avgpool") x = qdq(x, act_scale_, act_ == Act::kS8);
        shape = {shape[0], (shape[1] - kernel) / stride + 1, (shape[2] - kernel) / stride + 1};
      } else if (s.name == "flatten") {
        if (shape.size() == 1) continue;  // already flat: Network builds nothing
        x = flatten(x);
        shape = {product(shape)};
      } else if (s.name == "relu" || s.name == "tanh" || s.name == "sigmoid" || s.name == "gelu") {
        if (s.name != "gelu" && i > 0 && index > 0 && (specs[i - 1].name == "dense" || specs[i - 1].name == "conv"))
          continue;  // fused into the layer before: written with it
        x = activation(s.name, x);
        act_ = Act::kF32;
      } else if (s.name == "dropout") {
        // The identity at inference: no node, but a layer number.
      } else if (s.name == "batchnorm") {
        const std::string p = std::to_string(index) + ".batchnorm.";
        onnx::NodeProto* n = g_.node("BatchNormalization",
                                     {x, tensor(s, p + "scale", {shape[0]}), tensor(s, p + "shift", {shape[0]}),
                                      tensor(s, p + "running_mean", {shape[0]}), tensor(s, p + "running_var", {shape[0]})},
                                     {g_.fresh(s.text)});
        attr_float(n, "epsilon", 1e-5f);
        x = n->output(0);
      } else if (s.name == "layernorm") {
        const std::string p = std::to_string(index) + ".layernorm.";
        onnx::NodeProto* n = g_.node("LayerNormalization",
                                     {x, tensor(s, p + "scale", {shape[0]}), tensor(s, p + "shift", {shape[0]})},
                                     {g_.fresh(s.text)});
        attr_int(n, "axis", -1);
        attr_float(n, "epsilon", 1e-5f);
        x = n->output(0);
      } else if (s.name == "periodic") {
        if (shape.size() != 1) throw corrupt(where(s) + " needs a flat input but gets an image");
        const std::int64_t k = s.args.empty() ? kPeriodicFrequencies : static_cast<std::int64_t>(s.args.at(0));
        x = periodic(s, std::to_string(index) + ".periodic.frequencies", x, shape[0], k);
        shape = {shape[0] * 2 * k};
      } else if (s.name == "ple") {
        if (shape.size() != 1) throw corrupt(where(s) + " needs a flat input but gets an image");
        const std::int64_t t = s.args.empty() ? kPiecewiseLinearBins : static_cast<std::int64_t>(s.args.at(0));
        x = piecewise_linear(s, std::to_string(index) + ".ple.edges", x, shape[0], t);
        shape = {shape[0] * t};
      } else if (s.name == "ensemble") {
        if (shape.size() != 1) throw corrupt(where(s) + " needs a flat input but gets an image");
        members_ = s.args.empty() ? kEnsembleMembers : static_cast<std::int64_t>(s.args.at(0));
        x = ensemble(s, std::to_string(index) + ".ensemble.scale", x, shape[0], members_);
      } else {
        throw usage_error(where(s) + ": the ONNX export has no operator for this layer");
      }
      ++index;
    }
    return members_ > 1 ? member_mean(x, members_, shape[0]) : x;
  }

 private:
  static std::string where(const LayerSpec& s) {
    return "layer " + std::to_string(s.position) + " '" + s.text + "'";
  }
  static std::int64_t option(const LayerSpec& s, const std::string& key, std::int64_t fallback) {
    for (const auto& [k, v] : s.options)
      if (k == key) return static_cast<std::int64_t>(v);
    return fallback;
  }
  static void need_image(const LayerSpec& s, const Shape& shape) {
    if (shape.size() != 3) throw corrupt(where(s) + " needs an image input but gets a flat one");
  }

  std::string flatten(const std::string& x) {
    onnx::NodeProto* n = g_.node("Flatten", {x}, {g_.fresh("flatten")});
    attr_int(n, "axis", 1);
    return n->output(0);
  }

  std::string activation(const std::string& name, const std::string& x) {
    if (name == "relu") return g_.op1("Relu", x, "relu");
    if (name == "tanh") return g_.op1("Tanh", x, "tanh");
    if (name == "sigmoid") return g_.op1("Sigmoid", x, "sigmoid");
    // gelu (oneDNN's erf form): x · (1 + erf(x / √2)) / 2. Opset 17 has no Gelu.
    const std::string erf = g_.op1("Erf", g_.op("Mul", {x, g_.scalar_f(static_cast<float>(1.0 / std::sqrt(2.0)))}, "scaled"), "erf");
    const std::string half = g_.op("Mul", {x, g_.scalar_f(0.5f)}, "half");
    return g_.op("Mul", {half, g_.op("Add", {erf, g_.scalar_f(1.0f)}, "one_plus_erf")}, "gelu");
  }

  // periodic: θ = w·x with w = 2π·c rounded to fp32 as the backends round
  // it (periodic_angular_frequency), so θ is the same fp32 product:
  // x (N, F) → Unsqueeze (N, F, 1) → Mul w (F, K) → θ (N, F, K) →
  // Concat(Sin, Cos) on the last axis (N, F, 2K) → Flatten (N, F·2K): per
  // feature its K sines then its K cosines, the layer's order.
  std::string periodic(const LayerSpec& s, const std::string& name, const std::string& x, std::int64_t f,
                       std::int64_t k) {
    const NamedTensor& c = find(s, name, {f, k});
    std::vector<float> w(c.values.size());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = periodic_angular_frequency(c.values[i]);
    const std::string column = g_.op("Unsqueeze", {x, g_.int64s("axes", {1}, {2})}, "column");
    const std::string theta = g_.op("Mul", {column, g_.floats(name + ".angular", {f, k}, w)}, "theta");
    onnx::NodeProto* both =
        g_.node("Concat", {g_.op1("Sin", theta, "sin"), g_.op1("Cos", theta, "cos")}, {g_.fresh(s.text)});
    attr_int(both, "axis", 2);
    return flatten(both->output(0));
  }

  // ple: each bin's lower edge, inverse width and clamp bounds computed
  // from the edges as the backends compute them (anneal/piecewise_linear.h),
  // so every value is the same fp32 steps: x (N, F) → Unsqueeze (N, F, 1) →
  // Sub lower (F, T) → Mul inverse (F, T) → Min hi → Max lo (N, F, T) →
  // Flatten (N, F·T). An unused bin has inverse 0 and bounds around 0: 0.
  std::string piecewise_linear(const LayerSpec& s, const std::string& name, const std::string& x, std::int64_t f,
                               std::int64_t t) {
    const NamedTensor& edges = find(s, name, {f, t + 1});
    const std::size_t bins = std::size_t(f * t);
    std::vector<float> lower(bins), inverse(bins), lo(bins), hi(bins);
    const float inf = std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < f; ++i)
      for (std::int64_t j = 0; j < t; ++j) {
        const PiecewiseBin b = piecewise_bin(edges.values.data() + i * (t + 1), int(j), int(t));
        const std::size_t at = std::size_t(i * t + j);
        lower[at] = b.lower;
        inverse[at] = b.inverse;
        lo[at] = b.open_below ? -inf : 0.0f;
        hi[at] = b.open_above ? inf : 1.0f;
      }
    const std::string column = g_.op("Unsqueeze", {x, g_.int64s("axes", {1}, {2})}, "column");
    const std::string shifted = g_.op("Sub", {column, g_.floats(name + ".lower", {f, t}, lower)}, "shifted");
    const std::string z = g_.op("Mul", {shifted, g_.floats(name + ".inverse", {f, t}, inverse)}, "z");
    const std::string below = g_.op("Min", {z, g_.floats(name + ".hi", {f, t}, hi)}, "clamped_above");
    return flatten(g_.op("Max", {below, g_.floats(name + ".lo", {f, t}, lo)}, s.text));
  }

  // ensemble: x (N, F) → Unsqueeze (N, 1, F) → Mul r (k, F) → (N, k, F) →
  // Reshape (N·k, F): member i of sample n at row n·k + i, the layer's
  // order, each value the same fp32 product.
  std::string ensemble(const LayerSpec& s, const std::string& name, const std::string& x, std::int64_t f,
                       std::int64_t k) {
    const std::string rows = g_.op("Unsqueeze", {x, g_.int64s("axes", {1}, {1})}, "rows");
    const std::string members = g_.op("Mul", {rows, tensor(s, name, {k, f})}, s.text);
    return g_.op("Reshape", {members, g_.int64s("shape", {2}, {-1, f})}, "member_rows");
  }

  // The members' own output layers: x (N·k, I) → Reshape (N, k, I) →
  // Einsum "nki,koi->nko" with W (k, O, I) → Add b (k, O) → Reshape (N·k, O),
  // then the fused activation.
  std::string member_heads(const LayerSpec& s, const std::string& prefix, const std::string& x,
                           const std::string& fused, std::int64_t k, std::int64_t in, std::int64_t out) {
    const std::string w = tensor(s, prefix + ".weight", {k, out, in});
    const std::string b = tensor(s, prefix + ".bias", {k, out});
    const std::string grouped = g_.op("Reshape", {x, g_.int64s("shape", {3}, {-1, k, in})}, "member_inputs");
    onnx::NodeProto* n = g_.node("Einsum", {grouped, w}, {g_.fresh(s.text)});
    attr_string(n, "equation", "nki,koi->nko");
    const std::string biased = g_.op("Add", {n->output(0), b}, "member_outputs");
    const std::string y = g_.op("Reshape", {biased, g_.int64s("shape", {2}, {-1, out})}, "member_rows");
    return fused.empty() ? y : activation(fused, y);
  }

  // The members' mean (N, width) of their rows (N·k, width): Reshape (N, k,
  // width), then ReduceMean over the members.
  std::string member_mean(const std::string& x, std::int64_t k, std::int64_t width) {
    const std::string grouped = g_.op("Reshape", {x, g_.int64s("shape", {3}, {-1, k, width})}, "members");
    onnx::NodeProto* n = g_.node("ReduceMean", {grouped}, {g_.fresh("member_mean")});
    attr_ints(n, "axes", {1});
    attr_int(n, "keepdims", 0);
    return n->output(0);
  }

  // The f32 initializer of parameter `name`, checked against `dims`.
  std::string tensor(const LayerSpec& s, const std::string& name, const Shape& dims) {
    const NamedTensor& t = find(s, name, dims);
    return g_.floats(name, dims, t.values);
  }
  const NamedTensor& find(const LayerSpec& s, const std::string& name, const Shape& dims) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw corrupt(where(s) + " has no tensor '" + name + "'");
    if (static_cast<std::int64_t>(it->second->values.size()) != product(dims))
      throw corrupt("tensor '" + name + "' has " + std::to_string(it->second->values.size()) +
                    " values, expected " + std::to_string(product(dims)));
    return *it->second;
  }

  // QuantizeLinear then DequantizeLinear at `scale` (zero point 0): int8
  // (s8) or uint8 (u8) levels.
  std::string qdq(const std::string& x, float scale, bool is_signed) {
    const std::string s = g_.scalar_f(scale);
    const std::string zero = g_.bytes("zero_point", {}, is_signed, {0});
    const std::string q = g_.op("QuantizeLinear", {x, s, zero}, "quantized");
    return g_.op("DequantizeLinear", {q, s, zero}, "dequantized");
  }

  // A dense or conv layer: `make(input, weight, bias)` writes its op. int8:
  // the input quantized (an f32 input at the layer's input scale; an s8/u8
  // one arrives quantized), the weights s8 per output channel, the output
  // quantized u8 after a relu, s8 otherwise, f32 for the last layer and
  // after tanh/sigmoid (network.cc's int8_activations).
  template <class Make>
  std::string weighted(const LayerSpec& s, const std::string& prefix, std::string x, const std::string& fused,
                       bool last, const Shape& weight_dims, Make make) {
    const NamedTensor& w = find(s, prefix + ".weight", weight_dims);
    const std::string bias = tensor(s, prefix + ".bias", {weight_dims[0]});
    std::string weight;
    if (model_.int8) {
      auto sc = model_.activation_scales.find(prefix);
      if (w.encoding != TensorEncoding::kS8 || w.q.size() != w.values.size() ||
          static_cast<std::int64_t>(w.scales.size()) != weight_dims[0] || sc == model_.activation_scales.end())
        throw corrupt("int8 layer " + prefix + " lacks its s8 weights or scales");
      if (act_ == Act::kF32) x = qdq(x, sc->second.input, true);
      const std::string q = g_.bytes(prefix + ".weight_q", weight_dims, true, w.q);
      const std::string scales = g_.floats(prefix + ".weight_scale", {weight_dims[0]}, w.scales);
      const std::string zeros =
          g_.bytes(prefix + ".weight_zero", {weight_dims[0]}, true, std::vector<std::int8_t>(w.scales.size(), 0));
      weight = g_.fresh(prefix + ".weight");
      onnx::NodeProto* n = g_.node("DequantizeLinear", {q, scales, zeros}, {weight});
      attr_int(n, "axis", 0);
    } else {
      weight = g_.floats(prefix + ".weight", weight_dims, w.values);
    }
    std::string y = make(x, weight, bias);
    if (!fused.empty()) y = activation(fused, y);
    if (model_.int8) {
      const bool f32_out = last || (!fused.empty() && fused != "relu");
      if (f32_out) {
        act_ = Act::kF32;
      } else {
        act_ = fused == "relu" ? Act::kU8 : Act::kS8;
        act_scale_ = model_.activation_scales.at(prefix).output;
        y = qdq(y, act_scale_, act_ == Act::kS8);
      }
    }
    return y;
  }

  Graph& g_;
  const ModelFile& model_;
  std::map<std::string, const NamedTensor*> tensors_;
  Act act_ = Act::kF32;  // int8: what flows between layers
  std::int64_t members_ = 1;  // an ensemble layer's k
  float act_scale_ = 1;
};

}  // namespace

std::string write_network_onnx(Graph& g, const ModelFile& model, const std::string& x) {
  return NetworkWriter(g, model).write(x);
}

}  // namespace anneal::runs
