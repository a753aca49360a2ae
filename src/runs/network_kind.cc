// The network kind of model: a layer spec and its tensors (parameters,
// then state buffers), trained by SGD; run by Network. See
// anneal/model_kind.h.
#include <algorithm>
#include <cstring>

#include "anneal/error.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "runs/model_kinds.h"
#include "runs/network_onnx.h"

namespace anneal::runs {
namespace {
using nlohmann::json;

// Format 2 tensor bytes: f32 LE values; s8 values; or a bitmask (bit i of
// byte i/8 set for each nonzero element, LSB first) followed by the nonzero
// values as f32 LE in element order.
std::string tensor_bytes(const NamedTensor& t) {
  switch (t.encoding) {
    case TensorEncoding::kF32:
      return std::string(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    case TensorEncoding::kS8:
      return std::string(reinterpret_cast<const char*>(t.q.data()), t.q.size());
    case TensorEncoding::kBitmask: {
      std::string out((t.values.size() + 7) / 8, '\0');
      std::string nonzero;
      for (std::size_t i = 0; i < t.values.size(); ++i)
        if (t.values[i] != 0.0f) {
          out[i / 8] = char(static_cast<unsigned char>(out[i / 8]) | (1u << (i % 8)));
          nonzero.append(reinterpret_cast<const char*>(&t.values[i]), sizeof(float));
        }
      return out + nonzero;
    }
  }
  return {};
}

const char* encoding_name(TensorEncoding e) {
  return e == TensorEncoding::kS8 ? "s8" : e == TensorEncoding::kBitmask ? "bitmask" : "f32";
}

std::int64_t element_count(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0 || d > (std::int64_t(1) << 40)) return -1;
    if (d != 0 && n > (std::int64_t(1) << 50) / d) return -1;  // no overflow: -1 is "too large"
    n *= d;
  }
  return n;
}

// Decodes one format 2 tensor from `bytes`; kCorrupt naming `owner`.
void decode_tensor(NamedTensor& t, std::string_view bytes, const std::string& owner) {
  const std::int64_t n = element_count(t.dims);
  if (n < 0) throw corrupt(owner + ": tensor " + t.name + " has bad dims");
  const auto count = std::size_t(n);
  // The stored bytes bound the element count before anything is allocated,
  // so dims that claim billions of elements cost nothing (each encoding
  // needs at least one bit per element).
  if (count / 8 > bytes.size()) throw corrupt(owner + ": tensor " + t.name + " has dims larger than its bytes");
  t.values.assign(count, 0.0f);
  switch (t.encoding) {
    case TensorEncoding::kF32:
      if (bytes.size() != count * sizeof(float)) throw corrupt(owner + ": tensor " + t.name + " has the wrong size");
      std::memcpy(t.values.data(), bytes.data(), bytes.size());
      return;
    case TensorEncoding::kS8: {
      if (bytes.size() != count || t.dims.empty() || std::int64_t(t.scales.size()) != t.dims[0] || t.dims[0] == 0)
        throw corrupt(owner + ": int8 tensor " + t.name + " has the wrong size or scales");
      t.q.resize(count);
      std::memcpy(t.q.data(), bytes.data(), count);
      const std::size_t per = count / t.scales.size();
      for (std::size_t i = 0; i < count; ++i) t.values[i] = float(t.q[i]) * t.scales[i / per];
      return;
    }
    case TensorEncoding::kBitmask: {
      const std::size_t mask = (count + 7) / 8;
      if (bytes.size() < mask) throw corrupt(owner + ": sparse tensor " + t.name + " is truncated");
      std::size_t at = mask;
      for (std::size_t i = 0; i < count; ++i)
        if (static_cast<unsigned char>(bytes[i / 8]) >> (i % 8) & 1u) {
          if (at + sizeof(float) > bytes.size()) throw corrupt(owner + ": sparse tensor " + t.name + " is truncated");
          std::memcpy(&t.values[i], bytes.data() + at, sizeof(float));
          at += sizeof(float);
        }
      if (at != bytes.size()) throw corrupt(owner + ": sparse tensor " + t.name + " has trailing bytes");
      return;
    }
  }
}

// The network of a model, built on a backend for inference.
class NetworkPredictor final : public KindPredictor {
 public:
  NetworkPredictor(const ModelFile& model, Backend& backend, std::int64_t batch);

  std::vector<float> predict(std::span<const float> features) override;
  std::string engine() const override {
    return !inference_only() ? "network" : model_.int8 ? "network (int8)" : "network (sparse)";
  }
  bool inference_only() const override { return network_->inference_only(); }
  std::vector<LayerKernel> kernels() const override { return network_->kernels(); }

 private:
  const ModelFile& model_;
  Backend* backend_;
  std::int64_t batch_;
  std::unique_ptr<Network> network_;
  std::unique_ptr<LossOp> loss_;
};

NetworkPredictor::NetworkPredictor(const ModelFile& model, Backend& backend, std::int64_t batch)
    : model_(model), backend_(&backend), batch_(batch) {
  const auto scope = backend_->enter();
  loss_ = backend_->loss(model.loss, model.outputs, {});
  NetworkOptions options;
  options.input_shape = Dims(model.input_shape);
  options.outputs = model.outputs;
  // An fp16 model computes in fp16 where the backend can (a GPU) and in
  // fp32 elsewhere: its weights are fp32 masters, and a CPU has no fp16
  // arithmetic.
  options.compute = model.precision == Precision::kFp16 && !backend.capabilities().fp16
                        ? DType::kF32
                        : compute_dtype(model.precision);
  options.batch = batch_;
  // A row's prediction must not depend on the rows predicted with it
  // (predict's windows, eval's pieces, a server's batches of requests).
  options.batch_invariant = backend.capabilities().batch_invariant;
  if (runs::inference_only(model)) {
    // int8 and pruned models: the ops own their weights, given here.
    options.inference = inference_options(model);
    network_ = std::make_unique<Network>(model.layers, options, *backend_);
    return;
  }
  network_ = std::make_unique<Network>(model.layers, options, *backend_);
  std::vector<const NamedTensor*> by_position;
  for (const auto& t : model.tensors) by_position.push_back(&t);
  std::size_t i = 0;
  auto load = [&](const std::string& name, Tensor& t) {
    if (i >= by_position.size() || by_position[i]->name != name ||
        by_position[i]->dims != t.dims().to_vector() ||
        std::int64_t(by_position[i]->values.size()) != t.elements())
      throw corrupt("model: tensor " + name + " " + t.dims().str() + " is missing or has other dims");
    backend_->copy_from_host(by_position[i]->values.data(), t);
    ++i;
  };
  for (Parameter* p : network_->parameters()) load(p->name, p->value);
  for (const StateBuffer& b : network_->buffers()) load(b.name, *b.tensor);
  if (i != by_position.size()) throw corrupt("model: holds more tensors than its network has");
}

std::vector<float> NetworkPredictor::predict(std::span<const float> features) {
  const auto scope = backend_->enter();
  std::int64_t width = 1;
  for (auto d : model_.input_shape) width *= d;
  if (features.size() % static_cast<std::size_t>(width) != 0)
    throw data_error("predict: features are not a whole number of rows of " + std::to_string(width));
  const auto rows = static_cast<std::int64_t>(features.size()) / width;
  const Dims sample(model_.input_shape);
  std::vector<float> out(static_cast<std::size_t>(rows * model_.outputs));
  Tensor x;
  PassContext ctx;
  ctx.training = false;
  for (std::int64_t start = 0; start < rows; start += batch_) {
    const std::int64_t n = std::min(batch_, rows - start);
    // An inference-only network reads the rows where they lie (its first
    // op quantizes or reorders them anyway); a trainable one gets its own
    // aligned copy, as in training.
    const float* rows_at = features.data() + start * width;
    if (!network_->inference_only() || !backend_->view_host(rows_at, sample.with_batch(n), x)) {
      if (x.is_view()) x = Tensor();
      backend_->shape_plain(x, sample.with_batch(n), DType::kF32);
      backend_->copy_from_host(rows_at, x);
    }
    const Tensor& y = network_->forward(x, ctx);
    loss_->predict(y, out.data() + start * model_.outputs);
  }
  return out;
}

class NetworkKind final : public ModelKind {
 public:
  std::string_view name() const override { return "network"; }

  int encode(const ModelFile& m, json& header, std::string& payload) const override {
    json tensors = json::array();
    std::uint64_t offset = 0;
    // Format 1 unless something needs format 2, so fp32/bf16 models keep
    // their exact bytes (and readers older than int8 can read them).
    bool v2 = m.int8;
    for (const auto& t : m.tensors) v2 = v2 || t.encoding != TensorEncoding::kF32;
    for (const auto& t : m.tensors) {
      if (!v2) {
        tensors.push_back({{"name", t.name}, {"dims", t.dims}, {"offset", offset}, {"count", t.values.size()}});
        payload.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
        offset += t.values.size();
        continue;
      }
      std::string bytes = tensor_bytes(t);
      json entry = {{"name", t.name}, {"dims", t.dims}, {"encoding", encoding_name(t.encoding)},
                    {"offset", payload.size()}, {"bytes", bytes.size()}};
      if (t.encoding == TensorEncoding::kS8) entry["scales"] = t.scales;
      tensors.push_back(std::move(entry));
      payload += bytes;
    }
    header["layers"] = m.layers;
    header["precision"] = m.int8 ? "int8" : precision_name(m.precision);
    header["tensors"] = tensors;
    if (m.int8) {
      json scales = json::object();
      for (const auto& [prefix, s] : m.activation_scales) scales[prefix] = {{"input", s.input}, {"output", s.output}};
      header["activation_scales"] = scales;
    }
    if (!m.compression.empty()) header["compression"] = m.compression;
    return v2 ? 2 : 1;
  }

  void decode(const json& h, int layout, std::string_view payload, const std::string& owner,
              ModelFile& m) const override {
    m.layers = h.at("layers").get<std::string>();
    const std::string precision = h.at("precision").get<std::string>();
    m.int8 = precision == "int8";
    m.precision = m.int8 ? Precision::kFp32 : parse_precision(precision);
    if (h.contains("compression")) m.compression = h.at("compression");
    if (m.int8)
      for (const auto& [prefix, s] : h.at("activation_scales").items())
        m.activation_scales[prefix] = {s.at("input").get<float>(), s.at("output").get<float>()};
    if (layout == 2) {
      for (const auto& t : h.at("tensors")) {
        NamedTensor nt;
        nt.name = t.at("name").get<std::string>();
        nt.dims = t.at("dims").get<std::vector<std::int64_t>>();
        const std::string encoding = t.at("encoding").get<std::string>();
        nt.encoding = encoding == "s8" ? TensorEncoding::kS8 : encoding == "bitmask" ? TensorEncoding::kBitmask
                                                                                     : TensorEncoding::kF32;
        if (encoding != "s8" && encoding != "bitmask" && encoding != "f32")
          throw corrupt(owner + ": tensor " + nt.name + " has unknown encoding '" + encoding + "'");
        if (nt.encoding == TensorEncoding::kS8) nt.scales = t.at("scales").get<std::vector<float>>();
        auto offset = t.at("offset").get<std::uint64_t>();
        auto size = t.at("bytes").get<std::uint64_t>();
        if (offset > payload.size() || size > payload.size() - offset)
          throw corrupt(owner + ": tensor " + nt.name + " lies past the end");
        decode_tensor(nt, payload.substr(offset, size), owner);
        m.tensors.push_back(std::move(nt));
      }
      return;
    }
    const std::size_t floats = payload.size() / sizeof(float);
    for (const auto& t : h.at("tensors")) {
      NamedTensor nt;
      nt.name = t.at("name").get<std::string>();
      nt.dims = t.at("dims").get<std::vector<std::int64_t>>();
      auto offset = t.at("offset").get<std::uint64_t>();
      auto count = t.at("count").get<std::uint64_t>();
      if (offset > floats || count > floats - offset) throw corrupt(owner + ": tensor " + nt.name + " lies past the end");
      // Without this a Predictor would copy dims' worth of floats from a
      // shorter vector (a crafted blob: count smaller than its dims).
      if (element_count(nt.dims) != std::int64_t(count))
        throw corrupt(owner + ": tensor " + nt.name + " holds " + std::to_string(count) + " values for dims of " +
                      std::to_string(element_count(nt.dims)));
      nt.values.resize(count);
      std::memcpy(nt.values.data(), payload.data() + offset * sizeof(float), count * sizeof(float));
      m.tensors.push_back(std::move(nt));
    }
  }

  // Each tensor's decoded f32 values: s8 dequantized, and a bitmask's
  // zeros +0.0 (pruning leaves -0.0 where a negative weight was masked).
  void hash_weights(const ModelFile& model, WeightsHasher& hasher) const override {
    std::vector<float> decoded;
    for (const NamedTensor& t : model.tensors) {
      if (t.encoding != TensorEncoding::kBitmask) {
        hasher.add_f32(t.name, t.dims, t.values);
        continue;
      }
      decoded.assign(t.values.begin(), t.values.end());
      for (float& v : decoded)
        if (v == 0.0f) v = 0.0f;
      hasher.add_f32(t.name, t.dims, decoded);
    }
  }

  std::vector<std::int64_t> input_shape(const ModelFile& model) const override { return model.input_shape; }

  std::unique_ptr<KindPredictor> predictor(const ModelFile& model, Backend& backend,
                                           std::int64_t batch) const override {
    return std::make_unique<NetworkPredictor>(model, backend, batch);
  }

  LossKind prediction_loss(const ModelFile& model) const override { return model.loss; }

  std::string precision(const ModelFile& model) const override {
    return model.int8 ? "int8" : precision_name(model.precision);
  }

  std::string write_onnx(onnx_graph::Graph& g, const ModelFile& model, const std::string& features) const override {
    // The preprocessed rows are flat; an image network takes (N, C, H, W).
    std::string x = features;
    if (model.input_shape.size() != 1) {
      onnx_graph::Shape shape = model.input_shape;
      shape.insert(shape.begin(), -1);
      x = g.op("Reshape", {x, g.int64s("shape", {static_cast<std::int64_t>(shape.size())}, shape)}, "image");
    }
    const std::string output = write_network_onnx(g, model, x);
    if (!model.labels.classification()) return output;  // the standardized value
    // LossOp::predict of the network's loss on its logits.
    if (model.loss == LossKind::kBinaryCrossEntropy)
      return onnx_graph::two_classes(g, g.op1("Sigmoid", output, "p1"));
    onnx::NodeProto* n = g.node("Softmax", {output}, {g.fresh("softmax")});
    onnx_graph::attr_int(n, "axis", 1);
    return n->output(0);
  }

  std::string why_not_quantizable(const ModelFile& model) const override {
    return model.int8 ? "the model is already int8" : "";
  }
  std::string why_not_prunable(const ModelFile& model) const override {
    return model.int8 ? "the model is int8; prune its fp32 parent, then quantize" : "";
  }
  // A warm start continues training the network: it needs trainable fp32
  // (or bf16) weights, which int8 and pruned models no longer have, and a
  // run that trains a network.
  std::string why_not_warm_start_parent(const ModelFile& model, ModelKindId child) const override {
    if (model.int8) return "it is an int8 model; warm-start from its fp32 parent";
    if (!model.compression.empty() || inference_only(model))
      return "it was made by " + model.compression.value("operation", std::string("compression")) +
             "; warm-start from the model it was made from";
    if (child != ModelKindId::kNetwork) return "layers = " + std::string(model_kind(child).name()) + " trains no network";
    return "";
  }
};

}  // namespace

const ModelKind& network_model_kind() {
  static const NetworkKind kind;
  return kind;
}

}  // namespace anneal::runs
