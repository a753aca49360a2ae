// The linear kind of model: the linear baseline (anneal/linear.h)
// registered alone (`layers = linear`), its fitted weights in the model
// header. See anneal/model_kind.h.
#include <cstddef>

#include "anneal/error.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "runs/model_kinds.h"
#include "runs/onnx_graph.h"

namespace anneal::runs {
namespace {
using nlohmann::json;
using onnx_graph::attr_int;
using onnx_graph::Graph;

// LinearModel::predict, on the host whatever the backend.
class LinearPredictor final : public KindPredictor {
 public:
  explicit LinearPredictor(const LinearModel& model) : model_(model) {}

  std::vector<float> predict(std::span<const float> features) override { return model_.predict(features); }
  std::string engine() const override { return "linear"; }
  bool inference_only() const override { return false; }
  std::vector<LayerKernel> kernels() const override { return {}; }

 private:
  const LinearModel& model_;
};

// The linear model on the features: one score per fitted output, then
// LinearModel::predict's probabilities (or value).
std::string linear_scores(Graph& g, const LinearModel& m, const std::string& x) {
  const auto in = static_cast<std::size_t>(m.inputs), d = in + 1;
  const std::size_t fitted = d ? m.weights.size() / d : 0;
  if (in == 0 || fitted == 0 || fitted * d != m.weights.size())
    throw corrupt("the linear model's weights do not fit its " + std::to_string(m.inputs) + " inputs");
  std::vector<float> w(in * fitted), b(fitted);
  for (std::size_t j = 0; j < fitted; ++j) {
    for (std::size_t c = 0; c < in; ++c) w[j * in + c] = static_cast<float>(m.weights[j * d + c]);
    b[j] = static_cast<float>(m.weights[j * d + in]);
  }
  onnx::NodeProto* n = g.node("Gemm",
                              {x, g.floats("linear.weight", {static_cast<std::int64_t>(fitted), m.inputs}, w),
                               g.floats("linear.bias", {static_cast<std::int64_t>(fitted)}, b)},
                              {g.fresh("linear")});
  attr_int(n, "transB", 1);
  return n->output(0);
}

class LinearKind final : public ModelKind {
 public:
  std::string_view name() const override { return "linear"; }

  // The weights are JSON numbers in the header; there are no tensors.
  int encode(const ModelFile& model, json& header, std::string& /*payload*/) const override {
    header["linear"] = model.linear_model.to_json();
    return 1;
  }
  void decode(const json& header, int /*layout*/, std::string_view /*payload*/, const std::string& /*owner*/,
              ModelFile& model) const override {
    model.linear_model = LinearModel::from_json(header.at("linear"));
  }

  void hash_weights(const ModelFile& model, WeightsHasher& hasher) const override {
    const std::vector<double>& w = model.linear_model.weights;
    hasher.add_f64("linear.weights", std::vector<std::int64_t>{std::int64_t(w.size())}, w);
  }

  std::vector<std::int64_t> input_shape(const ModelFile& model) const override {
    return {model.features.output_width()};
  }

  std::unique_ptr<KindPredictor> predictor(const ModelFile& model, Backend& /*backend*/,
                                           std::int64_t /*batch*/) const override {
    return std::make_unique<LinearPredictor>(model.linear_model);
  }

  LossKind prediction_loss(const ModelFile& /*model*/) const override { return LossKind::kSoftmaxCrossEntropy; }

  std::string precision(const ModelFile& /*model*/) const override { return "fp64 (linear)"; }

  std::string write_onnx(Graph& g, const ModelFile& model, const std::string& features) const override {
    const LinearModel& linear = model.linear_model;
    const std::string scores = linear_scores(g, linear, features);
    if (!model.labels.classification()) return scores;  // the standardized value
    // LinearModel::predict: P(class 1), or one-vs-rest sigmoids normalized
    // to sum to 1.
    if (linear.classes == 2) return onnx_graph::two_classes(g, g.op1("Sigmoid", scores, "p1"));
    const std::string p = g.op1("Sigmoid", scores, "ovr");
    const std::string total = g.op("ReduceSum", {p, g.int64s("axes", {1}, {1})}, "total");
    return g.op("Div", {p, total}, "normalized");
  }

  std::string why_not_quantizable(const ModelFile& /*model*/) const override {
    return "a linear model has no network to quantize";
  }
  std::string why_not_prunable(const ModelFile& /*model*/) const override {
    return "a linear model has no network to prune";
  }
  std::string why_not_warm_start_parent(const ModelFile& /*model*/, ModelKindId /*child*/) const override {
    return "it is a linear model, without network weights to start from";
  }
};

}  // namespace

const ModelKind& linear_model_kind() {
  static const LinearKind kind;
  return kind;
}

}  // namespace anneal::runs
