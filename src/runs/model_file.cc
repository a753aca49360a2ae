#include "anneal/model_file.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>

#include "anneal/calibration.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/weights_hash.h"
#include "runs/legacy_weights_hash.h"

namespace anneal::runs {
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "model bytes are little-endian");

namespace {

constexpr char kModelMagic[8] = {'A', 'N', 'M', 'O', 'D', 'E', 'L', '1'};
constexpr char kCheckpointMagic[8] = {'A', 'N', 'C', 'K', 'P', 'T', '0', '1'};

// Header "format" = tensor layout (1 or 2) + kFormatOfLayout: formats 3 and
// 4 are layouts 1 and 2 with the weights hash of anneal/weights_hash.h;
// formats 1 and 2 (the same layouts) carry the legacy hash rules.
constexpr int kFormatOfLayout = 2;

std::string frame(const char (&magic)[8], const json& header, std::string_view payload) {
  std::string head = header.dump();
  std::uint64_t n = head.size();
  std::string out(magic, 8);
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += head;
  out.append(payload.data(), payload.size());
  return out;
}

// Splits framed bytes into (header, payload); kCorrupt naming `owner`.
std::pair<json, std::string_view> unframe(const char (&magic)[8], std::string_view bytes,
                                          const std::string& owner, const char* what) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), magic, 8) != 0)
    throw corrupt(owner + ": not an anneal " + what + " (bad magic)");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 8, 8);
  if (n > bytes.size() - 16) throw corrupt(owner + ": truncated " + what + " header");
  try {
    return {json::parse(bytes.substr(16, n)), bytes.substr(16 + n)};
  } catch (const json::exception& e) {
    throw corrupt(owner + ": " + what + " header: " + e.what());
  }
}

}  // namespace

bool inference_only(const ModelFile& m) {
  if (m.kind != ModelKindId::kNetwork) return false;  // only a network runs as a Network
  if (m.int8) return true;
  for (const auto& t : m.tensors)
    if (t.encoding == TensorEncoding::kBitmask) return true;
  return false;
}

InferenceOptions inference_options(const ModelFile& m) {
  InferenceOptions options;
  options.int8 = m.int8;
  for (const auto& t : m.tensors) {
    const auto dot = t.name.rfind('.');
    if (dot == std::string::npos) continue;
    const std::string prefix = t.name.substr(0, dot), role = t.name.substr(dot + 1);
    if (!prefix.ends_with(".dense") && !prefix.ends_with(".conv")) continue;
    InferenceLayer& layer = options.layers[prefix];
    if (role == "weight") {
      layer.weights.weight = t.values;
      layer.weights.q = t.q;
      layer.weights.scales = t.scales;
    } else if (role == "bias") {
      layer.weights.bias = t.values;
    }
    if (auto it = m.activation_scales.find(prefix); it != m.activation_scales.end()) {
      layer.input_scale = it->second.input;
      layer.output_scale = it->second.output;
    }
  }
  return options;
}

std::string encode_model(const ModelFile& m) {
  const ModelKind& kind = model_kind(m);
  json header = {{"kind", std::string(kind.name())},
                 {"features", m.features.to_json()},
                 {"labels", m.labels.to_json()},
                 {"loss", loss_name(m.loss)},
                 {"input_shape", m.input_shape},
                 {"outputs", m.outputs},
                 {"dataset_columns", columns_to_json(m.dataset_columns)},
                 {"label_column", m.label_column},
                 {"dataset_format", m.dataset_format},
                 {"weights_hash", m.weights_hash}};
  if (m.threshold) header["threshold"] = *m.threshold;
  if (m.temperature != 1) header["temperature"] = m.temperature;
  std::string payload;
  header["format"] = kind.encode(m, header, payload) + kFormatOfLayout;
  return frame(kModelMagic, header, payload);
}

ModelFile decode_model(std::string_view bytes, const std::string& owner) {
  auto [h, payload] = unframe(kModelMagic, bytes, owner, "model");
  try {
    const int format = h.at("format").get<int>();
    if (format < 1 || format > 2 + kFormatOfLayout)
      throw corrupt(owner + ": model format " + h.at("format").dump() + " is newer than this anneal reads");
    const int layout = format > kFormatOfLayout ? format - kFormatOfLayout : format;
    ModelFile m;
    m.format = format;
    const std::string kind_name = h.at("kind").get<std::string>();
    const std::optional<ModelKindId> kind = model_kind_named(kind_name);
    if (!kind)
      throw corrupt(owner + ": model kind '" + kind_name + "' is not one this anneal reads (" + model_kind_names() +
                    ")");
    m.kind = *kind;
    m.features = FeatureTransform::from_json(h.at("features"));
    m.labels = LabelEncoding::from_json(h.at("labels"));
    m.loss = parse_loss_kind(h.at("loss").get<std::string>());
    m.input_shape = h.at("input_shape").get<std::vector<std::int64_t>>();
    m.outputs = h.at("outputs").get<std::int64_t>();
    m.dataset_columns = columns_from_json(h.at("dataset_columns"));
    m.label_column = h.at("label_column").get<std::string>();
    m.dataset_format = h.at("dataset_format").get<std::string>();
    m.weights_hash = h.at("weights_hash").get<std::string>();
    if (h.contains("threshold")) {
      m.threshold = h.at("threshold").get<double>();
      if (!std::isfinite(*m.threshold) || m.labels.classes() != 2)
        throw corrupt(owner + ": a decision threshold belongs to a binary classifier with a finite value");
    }
    model_kind(m).decode(h, layout, payload, owner, m);
    // Verified on every read, as the store's objects are, and before any
    // payload reaches a library that trusts it (ModelKind::check_payload).
    // Except a network of formats 1 and 2: a pruned one fine-tuned after
    // pruning was hashed from values its file does not hold
    // (legacy_weights_hash.h), and such a model must stay readable.
    const bool legacy_network = format <= kFormatOfLayout && m.kind == ModelKindId::kNetwork;
    if (!legacy_network) {
      std::string hash;
      try {
        hash = expected_weights_hash(m);
      } catch (const std::invalid_argument& e) {
        throw corrupt(owner + ": " + e.what());
      }
      if (hash != m.weights_hash)
        throw corrupt(owner + ": its weights do not match its weights_hash (" + m.weights_hash +
                      "); they hash to " + hash);
    }
    model_kind(m).check_payload(m, owner);
    if (h.contains("temperature")) {
      // Checked after the kind's fields: a tree model's loss is its
      // objective's. The bounds are kMinTemperature and kMaxTemperature.
      m.temperature = h.at("temperature").get<double>();
      if (!(m.temperature >= kMinTemperature && m.temperature <= kMaxTemperature) || !m.labels.classification() ||
          !calibratable(model_kind(m).prediction_loss(m)))
        throw corrupt(owner + ": a temperature belongs to a classifier, with a value in [0.01, 100]");
    }
    return m;
  } catch (const json::exception& e) {
    throw corrupt(owner + ": model header: " + e.what());
  }
}

std::vector<NamedTensor> export_weights(const Trainer& trainer) {
  Backend& reader = trainer.backend();
  const auto scope = reader.enter();
  std::vector<NamedTensor> out;
  auto copy = [&](const std::string& name, const Tensor& t) {
    NamedTensor nt;
    nt.name = name;
    nt.dims = t.dims().to_vector();
    nt.values.resize(static_cast<std::size_t>(t.elements()));
    reader.copy_to_host(t, nt.values.data());
    out.push_back(std::move(nt));
  };
  for (const Parameter* p : trainer.network().parameters()) copy(p->name, p->value);
  for (const StateBuffer& b : trainer.network().buffers()) copy(b.name, *b.tensor);
  return out;
}

std::string encode_checkpoint(const Checkpoint& c) {
  return frame(kCheckpointMagic, c.header,
               std::string_view(reinterpret_cast<const char*>(c.state.data()), c.state.size()));
}

Checkpoint decode_checkpoint(std::string_view bytes, const std::string& owner) {
  auto [header, payload] = unframe(kCheckpointMagic, bytes, owner, "checkpoint");
  Checkpoint c;
  c.header = std::move(header);
  c.state.assign(reinterpret_cast<const std::uint8_t*>(payload.data()),
                 reinterpret_cast<const std::uint8_t*>(payload.data()) + payload.size());
  return c;
}

Predictor::Predictor(const ModelFile& model, Backend& backend, std::int64_t batch)
    : kind_predictor_(model_kind(model).predictor(model, backend, std::max<std::int64_t>(batch, 1))),
      loss_(model_kind(model).prediction_loss(model)),
      classes_(model.labels.classes()),
      temperature_(model.temperature) {}

std::vector<float> Predictor::predict(std::span<const float> features) {
  std::vector<float> out = kind_predictor_->predict(features);
  apply_temperature(loss_, classes_, temperature_, out);  // T = 1: as the kind gave them
  return out;
}

Predictor::~Predictor() = default;

std::string model_weights_hash(const ModelFile& model) {
  WeightsHasher hasher;
  model_kind(model).hash_weights(model, hasher);
  return hasher.finish_hex();
}

std::string expected_weights_hash(const ModelFile& model) {
  const bool legacy = model.format >= 1 && model.format <= kFormatOfLayout;
  return legacy ? legacy_weights_hash(model) : model_weights_hash(model);
}

}  // namespace anneal::runs
