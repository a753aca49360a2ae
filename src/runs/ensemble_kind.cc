// The ensemble kind of model: a weighted sum of models of the other kinds
// (the members), chosen by `layers = auto`'s ensemble selection
// (auto_search.h). See anneal/model_kind.h; docs/STORE.md ("Ensemble
// models") specifies the bytes.
//
// Header "members": one entry per member, in order:
//   {"kind", "weight", "outputs", "loss", "fields": the member kind's own
//    header fields (what its encode() writes), "offset", "bytes": its
//    payload's place in this model's payload}
// The members share the ensemble's common fields (features, labels, input
// shape, dataset columns). Their payloads are layout 1 (f32 tensors,
// offsets in floats from the start of the member's own payload).
#include <cmath>
#include <cstddef>
#include <set>

#include "anneal/error.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "anneal/scoring.h"
#include "runs/auto_search.h"
#include "runs/model_kinds.h"
#include "runs/onnx_graph.h"

namespace anneal::runs {
namespace {
using nlohmann::json;
using onnx_graph::Graph;

// The common header fields encode_model() writes (model_file.cc): a
// member's kind fields are what its encode() adds beyond them.
bool common_field(const std::string& key) {
  static const std::set<std::string> kCommon = {"kind",    "features",        "labels",      "loss",
                                                "input_shape", "outputs",     "dataset_columns",
                                                "label_column", "dataset_format", "weights_hash", "threshold",
                                                "temperature",  "format"};
  return kCommon.contains(key);
}

// What a member's predictions are read as: its kind's prediction loss.
LossKind member_loss(const ModelFile& member) { return model_kind(member).prediction_loss(member); }

// The members' predictions, each as class probabilities (rows x classes)
// or the standardized value, summed by weight (weighted_sum: the search
// scored the ensemble the same way).
class EnsemblePredictor final : public KindPredictor {
 public:
  EnsemblePredictor(const ModelFile& model, Backend& backend, std::int64_t batch)
      : classes_(model.labels.classification() ? model.labels.classes() : 0), weights_(model.member_weights) {
    for (const ModelFile& m : model.members) {
      members_.push_back(model_kind(m).predictor(m, backend, batch));
      losses_.push_back(member_loss(m));
    }
  }

  std::vector<float> predict(std::span<const float> features) override {
    std::vector<std::vector<float>> each;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      std::vector<float> p = members_[i]->predict(features);
      each.push_back(classes_ > 0 ? class_probabilities(losses_[i], p) : std::move(p));
    }
    std::vector<std::span<const float>> spans(each.begin(), each.end());
    return weighted_sum(spans, weights_);
  }
  std::string engine() const override {
    std::string names;
    for (const auto& m : members_) names += (names.empty() ? "" : ", ") + m->engine();
    return "ensemble (" + names + ")";
  }
  bool inference_only() const override { return false; }
  std::vector<LayerKernel> kernels() const override { return {}; }

 private:
  std::int64_t classes_;
  std::vector<double> weights_;
  std::vector<std::unique_ptr<KindPredictor>> members_;
  std::vector<LossKind> losses_;
};

class EnsembleKind final : public ModelKind {
 public:
  std::string_view name() const override { return "ensemble"; }

  int encode(const ModelFile& model, json& header, std::string& payload) const override {
    check_shape(model, "the ensemble being written");
    json members = json::array();
    for (std::size_t i = 0; i < model.members.size(); ++i) {
      const ModelFile& m = model.members[i];
      json fields = json::object();
      std::string bytes;
      if (model_kind(m).encode(m, fields, bytes) != 1)
        throw std::logic_error("an ensemble member must be stored in layout 1 (f32 tensors)");
      members.push_back({{"kind", std::string(model_kind(m).name())},
                         {"weight", model.member_weights[i]},
                         {"outputs", m.outputs},
                         {"loss", loss_name(m.loss)},
                         {"fields", std::move(fields)},
                         {"offset", payload.size()},
                         {"bytes", bytes.size()}});
      payload += bytes;
    }
    header["members"] = std::move(members);
    return 1;
  }

  void decode(const json& header, int layout, std::string_view payload, const std::string& owner,
              ModelFile& model) const override {
    if (layout != 1) throw corrupt(owner + ": an ensemble's members are stored in layout 1 only");
    const json& members = header.at("members");
    if (!members.is_array() || members.size() < 2)
      throw corrupt(owner + ": an ensemble holds two or more members");
    std::uint64_t end = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const json& e = members[i];
      const std::string what = owner + ": ensemble member " + std::to_string(i + 1);
      const std::string kind_name = e.at("kind").get<std::string>();
      const std::optional<ModelKindId> kind = model_kind_named(kind_name);
      if (!kind || *kind == ModelKindId::kEnsemble)
        throw corrupt(what + " is of kind '" + kind_name + "', not a network, linear or tree model");
      const auto offset = e.at("offset").get<std::uint64_t>(), bytes = e.at("bytes").get<std::uint64_t>();
      // The payloads follow one another, each after the one before.
      if (offset != end || offset > payload.size() || bytes > payload.size() - offset)
        throw corrupt(what + "'s bytes lie outside the model's payload");
      end = offset + bytes;
      ModelFile m;
      m.kind = *kind;
      m.features = model.features;
      m.labels = model.labels;
      m.loss = parse_loss_kind(e.at("loss").get<std::string>());
      m.input_shape = model.input_shape;
      m.outputs = e.at("outputs").get<std::int64_t>();
      m.format = model.format;
      json fields = e.at("fields");
      if (!fields.is_object()) throw corrupt(what + "'s fields are not an object");
      for (const auto& [key, value] : fields.items())
        if (common_field(key)) throw corrupt(what + "'s fields hold the common field '" + key + "'");
      model_kind(m).decode(fields, 1, payload.substr(offset, bytes), what, m);
      model.member_weights.push_back(e.at("weight").get<double>());
      model.members.push_back(std::move(m));
    }
    if (end != payload.size()) throw corrupt(owner + ": the ensemble's payload has bytes past its last member");
    check_shape(model, owner);
  }

  void check_payload(const ModelFile& model, const std::string& owner) const override {
    for (std::size_t i = 0; i < model.members.size(); ++i) {
      const ModelFile& member = model.members[i];
      model_kind(member).check_payload(member, owner + ": ensemble member " + std::to_string(i + 1));
    }
  }

  void hash_weights(const ModelFile& model, WeightsHasher& hasher) const override {
    const std::vector<double>& w = model.member_weights;
    hasher.add_f64("ensemble.weights", std::vector<std::int64_t>{std::int64_t(w.size())}, w);
    for (const ModelFile& m : model.members) {
      const std::string_view kind = model_kind(m).name();
      hasher.add_u8("ensemble.member", std::vector<std::int64_t>{std::int64_t(kind.size())}, kind);
      model_kind(m).hash_weights(m, hasher);
    }
  }

  std::vector<std::int64_t> input_shape(const ModelFile& model) const override {
    return {model.features.output_width()};
  }

  std::unique_ptr<KindPredictor> predictor(const ModelFile& model, Backend& backend, std::int64_t batch) const override {
    return std::make_unique<EnsemblePredictor>(model, backend, batch);
  }

  // The weighted class probabilities (rows x classes), or the value.
  LossKind prediction_loss(const ModelFile& model) const override {
    return model.labels.classification() ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
  }

  std::string precision(const ModelFile& model) const override {
    std::string out;
    for (const ModelFile& m : model.members) out += (out.empty() ? "" : ", ") + model_kind(m).precision(m);
    return "ensemble of " + out;
  }

  // Each member's scores (class probabilities or the value, as write_onnx
  // gives them) times its weight, summed.
  std::string write_onnx(Graph& g, const ModelFile& model, const std::string& features) const override {
    std::vector<std::string> weighted;
    for (std::size_t i = 0; i < model.members.size(); ++i) {
      const ModelFile& m = model.members[i];
      const std::string scores = model_kind(m).write_onnx(g, m, features);
      weighted.push_back(g.op("Mul", {scores, g.scalar_f(static_cast<float>(model.member_weights[i]))}, "weighted"));
    }
    return g.op("Sum", weighted, "ensemble");
  }

  std::string why_not_quantizable(const ModelFile& model) const override {
    return "it is an ensemble of " + std::to_string(model.members.size()) + " models, not one network to quantize";
  }
  std::string why_not_prunable(const ModelFile& model) const override {
    return "it is an ensemble of " + std::to_string(model.members.size()) + " models, not one network to prune";
  }
  std::string why_not_warm_start_parent(const ModelFile& model, ModelKindId /*child*/) const override {
    return "it is an ensemble of " + std::to_string(model.members.size()) +
           " models; a warm start continues one model's training";
  }

 private:
  // Members and weights that make an ensemble: two or more members, one
  // finite positive weight each, summing to 1 within rounding.
  static void check_shape(const ModelFile& model, const std::string& owner) {
    if (model.members.size() < 2 || model.members.size() != model.member_weights.size())
      throw corrupt(owner + ": an ensemble holds two or more members, one weight each");
    double total = 0;
    for (double w : model.member_weights) {
      if (!(w > 0 && w <= 1)) throw corrupt(owner + ": an ensemble member's weight is not in (0, 1]");
      total += w;
    }
    if (std::abs(total - 1) > 1e-9) throw corrupt(owner + ": the ensemble's weights do not sum to 1");
    for (const ModelFile& m : model.members)
      if (m.kind == ModelKindId::kEnsemble || !m.members.empty())
        throw corrupt(owner + ": an ensemble member is itself an ensemble");
  }
};

}  // namespace

const ModelKind& ensemble_model_kind() {
  static const EnsembleKind kind;
  return kind;
}

}  // namespace anneal::runs
