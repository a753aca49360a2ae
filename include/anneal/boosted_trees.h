// Gradient-boosted decision trees: XGBoost's booster (its C API, Debian's
// libxgboost-dev) behind one small class, so the rest of anneal never sees
// an XGBoost handle. The booster is XGBoost's own ("hist" tree method);
// anneal adds only what it needs around it: input checks with anneal's
// errors, early stopping that keeps the best round, continued boosting for
// warm starts, and the model as bytes for the store.
//
// Inputs are dense, row-major float32 matrices; NaN is a missing value,
// which the trees route down a learned default branch (no imputation).
// Labels are class indices 0..classes-1 for classification, any finite
// value for regression.
//
// Determinism: for the same inputs, parameters and seed, training gives the
// same model bytes whatever `threads` is (the "hist" method sums its
// histograms in a fixed order; tests/unit/boosted_trees_test.cc pins it),
// and a row's prediction does not depend on the rows predicted with it.
//
// Thread-safety: a BoostedTrees may be used from one thread at a time.
// Errors: kBadData for inputs that disagree (sizes, a label that is not a
// class, a non-finite target); kCorrupt for model bytes XGBoost cannot
// read; kFailure for anything XGBoost itself reports, with its message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anneal {

enum class TreeObjective : std::uint8_t {
  kBinaryLogistic,  // two classes: one output, P(class 1)
  kMultiSoftmax,    // K > 2 classes: K outputs, probabilities summing to 1
  kSquaredError,    // regression: one output, the predicted value
};

// XGBoost's parameters that anneal sets; the rest keep XGBoost's defaults.
struct TreeParams {
  int max_rounds = 1000;          // boosting rounds, at most
  int early_stopping_rounds = 50; // with validation rows: stop after this many
                                  // rounds without a better validation loss
                                  // and keep the best round's trees; 0: off
  int max_depth = 6;
  double learning_rate = 0.1;     // XGBoost's eta
  double min_child_weight = 1.0;
  double subsample = 1.0;         // rows sampled per tree
  double colsample_bytree = 1.0;  // columns sampled per tree
  double l2 = 1.0;                // XGBoost's lambda
  double l1 = 0.0;                // XGBoost's alpha
  int max_bin = 256;
  std::uint64_t seed = 0;
  int threads = 1;                // OpenMP threads XGBoost may use
};

// One set of rows: `rows` x `width` features (row-major, NaN = missing),
// one label per row, and optionally one weight per row (empty: all 1).
struct TreeRows {
  std::span<const float> features;
  std::span<const float> labels;
  std::span<const float> weights;
  std::int64_t rows = 0;
  std::int64_t width = 0;
};

// What one boosting round scored: the objective's loss (log loss, or RMSE
// for regression) on the training rows and, when given, on the
// validation rows (NaN without).
struct TreeRound {
  int round = 0;
  double train_loss = 0;
  double validation_loss = 0;
};

class BoostedTrees {
 public:
  // Trains a booster on `train`, stopping early on `validation` when it is
  // not null and params.early_stopping_rounds > 0 (the model then holds the
  // trees up to the best round only). `classes`: K >= 2 for the two
  // classification objectives, ignored for regression. `base`, when not
  // null, is a model to continue boosting (warm start): its trees are kept
  // and up to params.max_rounds more are added; it must take the same
  // objective, classes and width. `on_round`, when set, is called after
  // every round (for progress and the run's curve); an exception it throws
  // stops training and propagates. For regression, the first round starts
  // from the weighted mean of the targets (XGBoost 1.7 would start at 0.5).
  static BoostedTrees train(TreeObjective objective, std::int64_t classes, const TreeRows& train,
                            const TreeRows* validation, const TreeParams& params,
                            const BoostedTrees* base = nullptr,
                            const std::function<void(const TreeRound&)>& on_round = {});

  // A model from the bytes save() wrote. Throws kCorrupt naming `owner` when
  // XGBoost cannot read them or they do not match `objective`/`width`.
  static BoostedTrees load(std::span<const std::uint8_t> bytes, TreeObjective objective, std::int64_t classes,
                           std::int64_t width, const std::string& owner);

  BoostedTrees(BoostedTrees&&) noexcept;
  BoostedTrees& operator=(BoostedTrees&&) noexcept;
  ~BoostedTrees();

  // XGBoost's own model format (UBJSON): everything needed to predict and to
  // continue boosting, and nothing of the training rows.
  std::vector<std::uint8_t> save() const;

  // rows x outputs(), as TreeObjective says. `features` holds rows x width()
  // floats. Each row's result depends on that row alone. Thread-safe:
  // concurrent calls on one model take turns.
  std::vector<float> predict(std::span<const float> features, std::int64_t rows) const;

  // Per input column: the total gain of the splits on it, divided by the
  // total over all columns (so they sum to 1; all 0 for a model without a
  // split). XGBoost's "total_gain".
  std::vector<double> importance() const;

  // The model in XGBoost's JSON model format (its schema: XGBoost's
  // doc/model.schema), for exporters: learner.gradient_booster.model.trees
  // holds each tree's children, split indices, split conditions (a leaf's
  // value at a leaf) and default directions, with every float exact, and
  // tree_info the output (class) each tree adds to.
  nlohmann::json model_json() const;

  // The base score XGBoost adds to every row's margin before the trees.
  double base_score() const;

  TreeObjective objective() const { return objective_; }
  std::int64_t classes() const { return classes_; }
  std::int64_t width() const { return width_; }
  std::int64_t outputs() const { return objective_ == TreeObjective::kMultiSoftmax ? classes_ : 1; }
  int rounds() const;  // boosting rounds the model holds

 private:
  struct Handle;
  BoostedTrees(std::unique_ptr<Handle> handle, TreeObjective objective, std::int64_t classes, std::int64_t width);
  std::unique_ptr<Handle> handle_;
  TreeObjective objective_;
  std::int64_t classes_;
  std::int64_t width_;
};

}  // namespace anneal
