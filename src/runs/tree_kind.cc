// The tree kind of model: gradient-boosted trees (anneal/boosted_trees.h,
// XGBoost's booster), `layers = trees`. The model header's "trees" says
// what the booster was trained for; the payload after the header is
// XGBoost's own model bytes (UBJSON). See anneal/model_kind.h.
#include <cmath>
#include <cstddef>

#include "anneal/boosted_trees.h"
#include "anneal/error.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "runs/model_kinds.h"
#include "runs/onnx_graph.h"

namespace anneal::runs {
namespace {
using nlohmann::json;
using onnx_graph::attr_floats;
using onnx_graph::attr_int;
using onnx_graph::attr_ints;
using onnx_graph::attr_string;
using onnx_graph::attr_strings;
using onnx_graph::Graph;

const char* objective_name(TreeObjective objective) {
  switch (objective) {
    case TreeObjective::kBinaryLogistic: return "binary";
    case TreeObjective::kMultiSoftmax: return "multiclass";
    case TreeObjective::kSquaredError: return "regression";
  }
  return "";
}

TreeObjective objective_named(const std::string& name, const std::string& owner) {
  if (name == "binary") return TreeObjective::kBinaryLogistic;
  if (name == "multiclass") return TreeObjective::kMultiSoftmax;
  if (name == "regression") return TreeObjective::kSquaredError;
  throw corrupt(owner + ": unknown tree objective '" + name + "'");
}

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// The booster, loaded from the model's bytes once per predictor, so two
// predictors of one model never share XGBoost state.
class TreePredictor final : public KindPredictor {
 public:
  explicit TreePredictor(const ModelFile& model)
      : trees_(BoostedTrees::load(bytes_of(model.trees.booster), model.trees.objective, model.trees.classes,
                                  model.features.output_width(), "the tree model")) {}

  std::vector<float> predict(std::span<const float> features) override {
    const auto width = static_cast<std::size_t>(trees_.width());
    if (features.size() % width != 0)
      throw data_error("tree model: expected whole rows of " + std::to_string(width) + " values, found " +
                       std::to_string(features.size()) + " values");
    return trees_.predict(features, static_cast<std::int64_t>(features.size() / width));
  }
  std::string engine() const override { return "trees"; }
  bool inference_only() const override { return false; }
  std::vector<LayerKernel> kernels() const override { return {}; }

 private:
  BoostedTrees trees_;
};

// The trees' summed margins (N, outputs) as one ai.onnx.ml
// TreeEnsembleRegressor, from XGBoost's JSON model: a node goes to its
// left child when x < threshold (BRANCH_LT), a missing value (NaN) to its
// default child; each tree adds to the output tree_info names.
std::string tree_margins(Graph& g, const ModelFile& model, const std::string& x) {
  const BoostedTrees trees = BoostedTrees::load(bytes_of(model.trees.booster), model.trees.objective,
                                                model.trees.classes, model.features.output_width(), "the tree model");
  const json whole = trees.model_json();
  const json& booster = whole.at("learner").at("gradient_booster").at("model");
  const json& info = booster.at("tree_info");
  const json& list = booster.at("trees");
  std::vector<std::int64_t> tree_ids, node_ids, feature_ids, true_ids, false_ids, missing_true;
  std::vector<float> thresholds;
  std::vector<std::string> modes;
  std::vector<std::int64_t> target_trees, target_nodes, target_ids;
  std::vector<float> target_weights;
  for (std::size_t t = 0; t < list.size(); ++t) {
    const json& tree = list[t];
    const auto left = tree.at("left_children").get<std::vector<std::int64_t>>();
    const auto right = tree.at("right_children").get<std::vector<std::int64_t>>();
    const auto split = tree.at("split_indices").get<std::vector<std::int64_t>>();
    const auto conditions = tree.at("split_conditions").get<std::vector<float>>();
    const auto default_left = tree.at("default_left").get<std::vector<std::int64_t>>();
    const std::int64_t output = info.at(t).get<std::int64_t>();
    for (std::size_t n = 0; n < left.size(); ++n) {
      tree_ids.push_back(static_cast<std::int64_t>(t));
      node_ids.push_back(static_cast<std::int64_t>(n));
      if (left[n] < 0) {  // a leaf: its value sits in split_conditions
        modes.push_back("LEAF");
        feature_ids.push_back(0);
        thresholds.push_back(0);
        true_ids.push_back(0);
        false_ids.push_back(0);
        missing_true.push_back(0);
        target_trees.push_back(static_cast<std::int64_t>(t));
        target_nodes.push_back(static_cast<std::int64_t>(n));
        target_ids.push_back(output);
        target_weights.push_back(conditions[n]);
      } else {
        modes.push_back("BRANCH_LT");
        feature_ids.push_back(split[n]);
        thresholds.push_back(conditions[n]);
        true_ids.push_back(left[n]);
        false_ids.push_back(right[n]);
        missing_true.push_back(default_left[n] != 0 ? 1 : 0);
      }
    }
  }
  // XGBoost starts every margin at the base score, given as a probability
  // for the logistic objective (its margin is the logit).
  const double base = trees.base_score();
  const float margin_base = model.trees.objective == TreeObjective::kBinaryLogistic
                                ? static_cast<float>(std::log(base / (1 - base)))
                                : static_cast<float>(base);
  const std::int64_t outputs = trees.outputs();
  onnx::NodeProto* n = g.node("TreeEnsembleRegressor", {x}, {g.fresh("margins")}, "ai.onnx.ml");
  attr_int(n, "n_targets", outputs);
  attr_string(n, "aggregate_function", "SUM");
  attr_string(n, "post_transform", "NONE");
  attr_floats(n, "base_values", std::vector<float>(static_cast<std::size_t>(outputs), margin_base));
  attr_ints(n, "nodes_treeids", tree_ids);
  attr_ints(n, "nodes_nodeids", node_ids);
  attr_ints(n, "nodes_featureids", feature_ids);
  attr_floats(n, "nodes_values", thresholds);
  attr_strings(n, "nodes_modes", modes);
  attr_ints(n, "nodes_truenodeids", true_ids);
  attr_ints(n, "nodes_falsenodeids", false_ids);
  attr_ints(n, "nodes_missing_value_tracks_true", missing_true);
  attr_ints(n, "target_treeids", target_trees);
  attr_ints(n, "target_nodeids", target_nodes);
  attr_ints(n, "target_ids", target_ids);
  attr_floats(n, "target_weights", target_weights);
  g.declare(n->output(0), onnx::TensorProto::FLOAT, {-1, outputs});
  return n->output(0);
}

class TreeKind final : public ModelKind {
 public:
  std::string_view name() const override { return "trees"; }

  int encode(const ModelFile& model, json& header, std::string& payload) const override {
    header["trees"] = {{"objective", objective_name(model.trees.objective)},
                       {"classes", model.trees.classes},
                       {"bytes", model.trees.booster.size()},
                       {"rounds", model.trees.rounds},
                       {"params", model.trees.params},
                       {"importance", model.trees.importance}};
    payload += model.trees.booster;
    return 1;
  }

  void decode(const json& header, int /*layout*/, std::string_view payload, const std::string& owner,
              ModelFile& model) const override {
    const json& t = header.at("trees");
    model.trees.objective = objective_named(t.at("objective").get<std::string>(), owner);
    model.trees.classes = t.at("classes").get<std::int64_t>();
    model.trees.rounds = t.at("rounds").get<int>();
    model.trees.params = t.at("params");
    model.trees.importance = t.at("importance").get<std::vector<double>>();
    const auto size = t.at("bytes").get<std::uint64_t>();
    if (size != payload.size())
      throw corrupt(owner + ": the tree model holds " + std::to_string(payload.size()) + " bytes, its header says " +
                    std::to_string(size));
    model.trees.booster.assign(payload);
  }

  // Read at decode, so a booster XGBoost refuses is kCorrupt there and not
  // at predict; only after weights_hash matched (XGBoost's UBJSON reader
  // reads past its buffer on damaged bytes: tests/fuzz/regressions/model).
  void check_payload(const ModelFile& model, const std::string& owner) const override {
    BoostedTrees::load(bytes_of(model.trees.booster), model.trees.objective, model.trees.classes,
                       model.features.output_width(), owner);
  }

  void hash_weights(const ModelFile& model, WeightsHasher& hasher) const override {
    const std::string& booster = model.trees.booster;
    hasher.add_u8("trees.booster", std::vector<std::int64_t>{std::int64_t(booster.size())}, booster);
  }

  std::vector<std::int64_t> input_shape(const ModelFile& model) const override {
    return {model.features.output_width()};
  }

  std::unique_ptr<KindPredictor> predictor(const ModelFile& model, Backend& /*backend*/,
                                           std::int64_t /*batch*/) const override {
    return std::make_unique<TreePredictor>(model);
  }

  // Binary: P(1), as a bce network gives it; more classes: probabilities.
  LossKind prediction_loss(const ModelFile& model) const override {
    switch (model.trees.objective) {
      case TreeObjective::kBinaryLogistic: return LossKind::kBinaryCrossEntropy;
      case TreeObjective::kMultiSoftmax: return LossKind::kSoftmaxCrossEntropy;
      case TreeObjective::kSquaredError: return LossKind::kMeanSquaredError;
    }
    return LossKind::kMeanSquaredError;
  }

  std::string precision(const ModelFile& /*model*/) const override { return "fp32 (trees)"; }

  std::string write_onnx(Graph& g, const ModelFile& model, const std::string& features) const override {
    const std::string margins = tree_margins(g, model, features);
    switch (model.trees.objective) {
      case TreeObjective::kBinaryLogistic: return onnx_graph::two_classes(g, g.op1("Sigmoid", margins, "p1"));
      case TreeObjective::kMultiSoftmax: {
        onnx::NodeProto* n = g.node("Softmax", {margins}, {g.fresh("probabilities")});
        attr_int(n, "axis", 1);
        return n->output(0);
      }
      case TreeObjective::kSquaredError: break;
    }
    return margins;  // the standardized value
  }

  std::string why_not_quantizable(const ModelFile& /*model*/) const override {
    return "a tree model has no network weights to quantize";
  }
  std::string why_not_prunable(const ModelFile& /*model*/) const override {
    return "a tree model has no network weights to prune";
  }
  // A tree run continues boosting from its parent's trees (with the
  // parent's preprocessing); nothing else can start from them.
  std::string why_not_warm_start_parent(const ModelFile& /*model*/, ModelKindId child) const override {
    if (child == ModelKindId::kTrees) return "";
    return child == ModelKindId::kNetwork ? "it is a tree model; a network cannot start from its trees"
                                          : "it is a tree model; layers = linear cannot start from its trees";
  }
};

}  // namespace

TreeObjective tree_objective(std::int64_t classes) {
  return classes == 0 ? TreeObjective::kSquaredError
         : classes == 2 ? TreeObjective::kBinaryLogistic
                        : TreeObjective::kMultiSoftmax;
}

TreeModel tree_model_of(const BoostedTrees& trees, TreeObjective objective, std::int64_t classes,
                        const TreeParams& params) {
  TreeModel m;
  m.objective = objective;
  m.classes = classes;
  const std::vector<std::uint8_t> bytes = trees.save();
  m.booster.assign(bytes.begin(), bytes.end());
  m.rounds = trees.rounds();
  m.params = {{"max_rounds", params.max_rounds},
              {"early_stopping_rounds", params.early_stopping_rounds},
              {"max_depth", params.max_depth},
              {"learning_rate", params.learning_rate},
              {"min_child_weight", params.min_child_weight},
              {"subsample", params.subsample},
              {"colsample_bytree", params.colsample_bytree},
              {"l2", params.l2},
              {"seed", params.seed},
              {"threads", params.threads}};
  m.importance = trees.importance();
  return m;
}

const ModelKind& tree_model_kind() {
  static const TreeKind kind;
  return kind;
}

}  // namespace anneal::runs
