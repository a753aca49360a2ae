#include "runs/model_file.h"

#include <omp.h>

#include <bit>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/hash.h"

namespace anneal::runs {
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "model bytes are little-endian");

namespace {

constexpr char kModelMagic[8] = {'A', 'N', 'M', 'O', 'D', 'E', 'L', '1'};
constexpr char kCheckpointMagic[8] = {'A', 'N', 'C', 'K', 'P', 'T', '0', '1'};

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

// Bounds the calling thread's OpenMP team for a scope, as the Trainer does.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace

std::string encode_model(const ModelFile& m) {
  json tensors = json::array();
  std::string payload;
  std::uint64_t offset = 0;
  for (const auto& t : m.tensors) {
    tensors.push_back({{"name", t.name}, {"dims", t.dims}, {"offset", offset}, {"count", t.values.size()}});
    payload.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    offset += t.values.size();
  }
  json header = {{"format", 1},
                 {"kind", m.linear ? "linear" : "network"},
                 {"features", m.features.to_json()},
                 {"labels", m.labels.to_json()},
                 {"loss", loss_name(m.loss)},
                 {"input_shape", m.input_shape},
                 {"outputs", m.outputs},
                 {"dataset_columns", columns_to_json(m.dataset_columns)},
                 {"label_column", m.label_column},
                 {"dataset_format", m.dataset_format},
                 {"weights_hash", m.weights_hash}};
  if (m.linear) {
    header["linear"] = m.linear_model.to_json();
  } else {
    header["layers"] = m.layers;
    header["precision"] = precision_name(m.precision);
    header["tensors"] = tensors;
  }
  return frame(kModelMagic, header, payload);
}

ModelFile decode_model(std::string_view bytes, const std::string& owner) {
  auto [h, payload] = unframe(kModelMagic, bytes, owner, "model");
  try {
    if (h.at("format").get<int>() != 1)
      throw corrupt(owner + ": model format " + h.at("format").dump() + " is newer than this anneal reads");
    ModelFile m;
    m.linear = h.at("kind").get<std::string>() == "linear";
    m.features = FeatureTransform::from_json(h.at("features"));
    m.labels = LabelEncoding::from_json(h.at("labels"));
    m.loss = parse_loss_kind(h.at("loss").get<std::string>());
    m.input_shape = h.at("input_shape").get<std::vector<std::int64_t>>();
    m.outputs = h.at("outputs").get<std::int64_t>();
    m.dataset_columns = columns_from_json(h.at("dataset_columns"));
    m.label_column = h.at("label_column").get<std::string>();
    m.dataset_format = h.at("dataset_format").get<std::string>();
    m.weights_hash = h.at("weights_hash").get<std::string>();
    if (m.linear) {
      m.linear_model = LinearModel::from_json(h.at("linear"));
      return m;
    }
    m.layers = h.at("layers").get<std::string>();
    m.precision = parse_precision(h.at("precision").get<std::string>());
    const std::size_t floats = payload.size() / sizeof(float);
    for (const auto& t : h.at("tensors")) {
      NamedTensor nt;
      nt.name = t.at("name").get<std::string>();
      nt.dims = t.at("dims").get<std::vector<std::int64_t>>();
      auto offset = t.at("offset").get<std::uint64_t>();
      auto count = t.at("count").get<std::uint64_t>();
      if (offset > floats || count > floats - offset) throw corrupt(owner + ": tensor " + nt.name + " lies past the end");
      nt.values.resize(count);
      std::memcpy(nt.values.data(), payload.data() + offset * sizeof(float), count * sizeof(float));
      m.tensors.push_back(std::move(nt));
    }
    return m;
  } catch (const json::exception& e) {
    throw corrupt(owner + ": model header: " + e.what());
  }
}

std::vector<NamedTensor> export_weights(const Trainer& trainer) {
  std::unique_ptr<Backend> reader = make_cpu_backend();
  std::vector<NamedTensor> out;
  auto copy = [&](const std::string& name, const Tensor& t) {
    NamedTensor nt;
    nt.name = name;
    nt.dims = t.dims().to_vector();
    nt.values.resize(static_cast<std::size_t>(t.elements()));
    reader->copy_to_host(t, nt.values.data());
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

Predictor::Predictor(const ModelFile& model, int threads) : model_(model), threads_(threads) {
  if (model.linear) return;
  OmpThreads scope(threads_);
  backend_ = make_cpu_backend();
  NetworkOptions options;
  options.input_shape = Dims(model.input_shape);
  options.outputs = model.outputs;
  options.compute = model.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  options.batch = 256;
  network_ = std::make_unique<Network>(model.layers, options, *backend_);
  std::vector<const NamedTensor*> by_position;
  for (const auto& t : model.tensors) by_position.push_back(&t);
  std::size_t i = 0;
  auto load = [&](const std::string& name, Tensor& t) {
    if (i >= by_position.size() || by_position[i]->name != name ||
        by_position[i]->dims != t.dims().to_vector())
      throw corrupt("model: tensor " + name + " " + t.dims().str() + " is missing or has other dims");
    backend_->copy_from_host(by_position[i]->values.data(), t);
    ++i;
  };
  for (Parameter* p : network_->parameters()) load(p->name, p->value);
  for (const StateBuffer& b : network_->buffers()) load(b.name, *b.tensor);
  if (i != by_position.size()) throw corrupt("model: holds more tensors than its network has");
  loss_ = backend_->loss(model.loss, model.outputs);
}

Predictor::~Predictor() = default;

std::vector<float> Predictor::predict(std::span<const float> features) {
  if (model_.linear) return model_.linear_model.predict(features);
  OmpThreads scope(threads_);
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
  constexpr std::int64_t kBatch = 256;
  for (std::int64_t start = 0; start < rows; start += kBatch) {
    const std::int64_t n = std::min(kBatch, rows - start);
    backend_->shape_plain(x, sample.with_batch(n), DType::kF32);
    backend_->copy_from_host(features.data() + start * width, x);
    const Tensor& y = network_->forward(x, ctx);
    loss_->predict(y, out.data() + start * model_.outputs);
  }
  return out;
}

std::string linear_weights_hash(const LinearModel& model) {
  return to_hex(hash_bytes(std::string_view(reinterpret_cast<const char*>(model.weights.data()),
                                            model.weights.size() * sizeof(double))));
}

std::string onednn_cpu_isa() {
  using dnnl::cpu_isa;
  // The effective ISA is a bit mask; name the widest level it includes.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const std::pair<cpu_isa, const char*> levels[] = {
      {cpu_isa::avx512_core_amx, "avx512_core_amx"}, {cpu_isa::avx512_core_bf16, "avx512_core_bf16"},
      {cpu_isa::avx512_core_vnni, "avx512_core_vnni"}, {cpu_isa::avx512_core, "avx512_core"},
      {cpu_isa::avx2_vnni, "avx2_vnni"}, {cpu_isa::avx2, "avx2"},
      {cpu_isa::avx, "avx"}, {cpu_isa::sse41, "sse41"}};
  for (const auto& [level, name] : levels) {
    const auto bits = static_cast<unsigned>(level);
    if ((isa & bits) == bits) return name;
  }
  return "default";
}

}  // namespace anneal::runs
