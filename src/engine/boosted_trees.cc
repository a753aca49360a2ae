#include "anneal/boosted_trees.h"

#include <xgboost/c_api.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "anneal/error.h"

namespace anneal {
namespace {

using nlohmann::json;

// Every XGBoost call returns 0 or -1 with the reason kept per thread.
void check(int rc, const char* what) {
  if (rc != 0) throw failure(std::string("XGBoost: ") + what + ": " + XGBGetLastError());
}

// Owns one DMatrix.
class Matrix {
 public:
  Matrix(std::span<const float> features, std::int64_t rows, std::int64_t width, int threads) {
    check(XGDMatrixCreateFromMat_omp(features.data(), static_cast<bst_ulong>(rows), static_cast<bst_ulong>(width),
                                     std::numeric_limits<float>::quiet_NaN(), &handle_, threads),
          "cannot build a matrix");
  }
  ~Matrix() { XGDMatrixFree(handle_); }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;
  DMatrixHandle get() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

const char* objective_name(TreeObjective objective) {
  switch (objective) {
    case TreeObjective::kBinaryLogistic: return "binary:logistic";
    case TreeObjective::kMultiSoftmax: return "multi:softprob";
    case TreeObjective::kSquaredError: return "reg:squarederror";
  }
  return "";
}

const char* metric_name(TreeObjective objective) {
  switch (objective) {
    case TreeObjective::kBinaryLogistic: return "logloss";
    case TreeObjective::kMultiSoftmax: return "mlogloss";
    case TreeObjective::kSquaredError: return "rmse";
  }
  return "";
}

// Throws kBadData unless `rows` is a consistent set of rows for `objective`.
void check_rows(const TreeRows& rows, TreeObjective objective, std::int64_t classes, const char* which) {
  const std::string where = std::string("boosted trees, ") + which + " rows: ";
  if (rows.rows < 1 || rows.width < 1)
    throw data_error(where + "expected at least one row and one column, found " + std::to_string(rows.rows) +
                     " x " + std::to_string(rows.width));
  if (rows.features.size() != static_cast<std::size_t>(rows.rows * rows.width))
    throw data_error(where + "expected " + std::to_string(rows.rows * rows.width) + " feature values, found " +
                     std::to_string(rows.features.size()));
  if (rows.labels.size() != static_cast<std::size_t>(rows.rows))
    throw data_error(where + "expected " + std::to_string(rows.rows) + " labels, found " +
                     std::to_string(rows.labels.size()));
  if (!rows.weights.empty() && rows.weights.size() != static_cast<std::size_t>(rows.rows))
    throw data_error(where + "expected " + std::to_string(rows.rows) + " weights, found " +
                     std::to_string(rows.weights.size()));
  for (std::size_t i = 0; i < rows.features.size(); ++i)
    if (std::isinf(rows.features[i]))
      throw data_error(where + "row " + std::to_string(i / static_cast<std::size_t>(rows.width)) + ", column " +
                       std::to_string(i % static_cast<std::size_t>(rows.width)) +
                       ": expected a finite value or NaN (missing), found infinity");
  for (std::size_t i = 0; i < rows.labels.size(); ++i) {
    const float y = rows.labels[i];
    const bool ok = objective == TreeObjective::kSquaredError
                        ? std::isfinite(y)
                        : y >= 0 && y < static_cast<float>(classes) && y == std::floor(y);
    if (!ok)
      throw data_error(where + "row " + std::to_string(i) + ": expected " +
                       (objective == TreeObjective::kSquaredError
                            ? std::string("a finite target")
                            : "a class index from 0 to " + std::to_string(classes - 1)) +
                       ", found " + std::to_string(y));
  }
  for (std::size_t i = 0; i < rows.weights.size(); ++i)
    if (!(std::isfinite(rows.weights[i]) && rows.weights[i] >= 0))
      throw data_error(where + "row " + std::to_string(i) + ": expected a finite weight >= 0, found " +
                       std::to_string(rows.weights[i]));
}

// The rows as a DMatrix with their labels (and weights).
std::unique_ptr<Matrix> matrix_of(const TreeRows& rows, int threads) {
  auto m = std::make_unique<Matrix>(rows.features, rows.rows, rows.width, threads);
  check(XGDMatrixSetFloatInfo(m->get(), "label", rows.labels.data(), static_cast<bst_ulong>(rows.rows)),
        "cannot set labels");
  if (!rows.weights.empty())
    check(XGDMatrixSetFloatInfo(m->get(), "weight", rows.weights.data(), static_cast<bst_ulong>(rows.rows)),
          "cannot set weights");
  return m;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// The loss named `name` in XGBoost's evaluation line
// ("[3]\ttrain-logloss:0.41\tvalidation-logloss:0.52").
double loss_in(const std::string& line, const std::string& name) {
  const std::size_t at = line.find("\t" + name + "-");
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t colon = line.find(':', at);
  if (colon == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(line.c_str() + colon + 1, nullptr);
}

json learner_config(BoosterHandle handle) {
  bst_ulong length = 0;
  const char* text = nullptr;
  check(XGBoosterSaveJsonConfig(handle, &length, &text), "cannot read the booster's configuration");
  return json::parse(std::string_view(text, length));
}

}  // namespace

struct BoostedTrees::Handle {
  BoosterHandle booster = nullptr;
  // predict()'s rows are handed to XGBoost through this proxy (made on the
  // first prediction), and only under `predicting`: a proxy holds one
  // array at a time. A DMatrix per call would cost XGBoost 1.7 a context,
  // which reads the cgroup's CPU quota from /sys each time: a one-row
  // request to an ensemble of trees and networks took 282 µs, 230 without.
  std::mutex predicting;
  DMatrixHandle proxy = nullptr;
  // A new booster that caches its predictions for the matrices in `cached`.
  explicit Handle(const std::vector<DMatrixHandle>& cached = {}) {
    check(XGBoosterCreate(cached.data(), cached.size(), &booster), "cannot create a booster");
  }
  // Takes ownership of a booster XGBoost made (a slice).
  struct Adopt {};
  Handle(Adopt, BoosterHandle adopted) : booster(adopted) {}
  ~Handle() {
    if (proxy != nullptr) XGDMatrixFree(proxy);
    XGBoosterFree(booster);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  void set(const char* name, const std::string& value) {
    check(XGBoosterSetParam(booster, name, value.c_str()), name);
  }
};

BoostedTrees::BoostedTrees(std::unique_ptr<Handle> handle, TreeObjective objective, std::int64_t classes,
                           std::int64_t width)
    : handle_(std::move(handle)), objective_(objective), classes_(classes), width_(width) {}
BoostedTrees::BoostedTrees(BoostedTrees&&) noexcept = default;
BoostedTrees& BoostedTrees::operator=(BoostedTrees&&) noexcept = default;
BoostedTrees::~BoostedTrees() = default;

BoostedTrees BoostedTrees::train(TreeObjective objective, std::int64_t classes, const TreeRows& train,
                                 const TreeRows* validation, const TreeParams& params, const BoostedTrees* base,
                                 const std::function<void(const TreeRound&)>& on_round) {
  if (objective == TreeObjective::kSquaredError) classes = 0;
  else if (classes < 2 || (objective == TreeObjective::kBinaryLogistic && classes != 2))
    throw data_error("boosted trees: expected 2 classes for binary:logistic and more for multi:softprob, found " +
                     std::to_string(classes));
  check_rows(train, objective, classes, "training");
  if (validation != nullptr) {
    check_rows(*validation, objective, classes, "validation");
    if (validation->width != train.width)
      throw data_error("boosted trees: validation rows have " + std::to_string(validation->width) +
                       " columns, training rows " + std::to_string(train.width));
  }
  if (base != nullptr && (base->objective_ != objective || base->classes_ != classes || base->width_ != train.width))
    throw data_error("boosted trees: the model to continue was trained for another objective, class count or "
                     "column count");
  if (params.max_rounds < 0 || params.early_stopping_rounds < 0 || params.threads < 1)
    throw std::invalid_argument("BoostedTrees::train: negative rounds or no threads");

  const std::unique_ptr<Matrix> train_matrix = matrix_of(train, params.threads);
  std::unique_ptr<Matrix> validation_matrix;
  if (validation != nullptr) validation_matrix = matrix_of(*validation, params.threads);

  // The matrices the booster evaluates on each round: it caches their
  // predictions, so a round's evaluation costs one round's trees.
  std::vector<DMatrixHandle> evaluated{train_matrix->get()};
  std::vector<const char*> names{"train"};
  if (validation_matrix) {
    evaluated.push_back(validation_matrix->get());
    names.push_back("validation");
  }
  auto handle = std::make_unique<Handle>(evaluated);
  int base_rounds = 0;
  if (base != nullptr) {
    const std::vector<std::uint8_t> bytes = base->save();
    check(XGBoosterLoadModelFromBuffer(handle->booster, bytes.data(), bytes.size()),
          "cannot load the model to continue");
    base_rounds = base->rounds();
  }
  handle->set("verbosity", "0");
  handle->set("tree_method", "hist");
  handle->set("objective", objective_name(objective));
  handle->set("eval_metric", metric_name(objective));
  if (objective == TreeObjective::kMultiSoftmax) handle->set("num_class", std::to_string(classes));
  if (objective == TreeObjective::kSquaredError && base == nullptr) {
    double sum = 0, weight = 0;
    for (std::int64_t i = 0; i < train.rows; ++i) {
      const double w = train.weights.empty() ? 1.0 : train.weights[static_cast<std::size_t>(i)];
      sum += w * train.labels[static_cast<std::size_t>(i)];
      weight += w;
    }
    handle->set("base_score", number(weight > 0 ? sum / weight : 0.0));
  }
  handle->set("max_depth", std::to_string(params.max_depth));
  handle->set("eta", number(params.learning_rate));
  handle->set("min_child_weight", number(params.min_child_weight));
  handle->set("subsample", number(params.subsample));
  handle->set("colsample_bytree", number(params.colsample_bytree));
  handle->set("lambda", number(params.l2));
  handle->set("alpha", number(params.l1));
  handle->set("max_bin", std::to_string(params.max_bin));
  handle->set("seed", std::to_string(params.seed));
  handle->set("nthread", std::to_string(params.threads));

  const bool early = validation_matrix && params.early_stopping_rounds > 0;
  auto evaluate = [&](int iteration) {
    const char* line = nullptr;
    check(XGBoosterEvalOneIter(handle->booster, iteration, evaluated.data(), names.data(), evaluated.size(), &line),
          "cannot evaluate a round");
    const std::string text = line;
    return TreeRound{iteration, loss_in(text, "train"), loss_in(text, "validation")};
  };
  // With a model to continue, its own trees are the first candidate: more
  // rounds are kept only where they score better on the validation rows.
  double best_loss = std::numeric_limits<double>::infinity();
  int best_rounds = base_rounds;
  if (early && base != nullptr) best_loss = evaluate(base_rounds).validation_loss;
  for (int r = 0; r < params.max_rounds; ++r) {
    const int iteration = base_rounds + r;
    check(XGBoosterUpdateOneIter(handle->booster, iteration, train_matrix->get()), "cannot boost a round");
    const TreeRound scored = evaluate(iteration);
    if (on_round) on_round(scored);
    if (!early) continue;
    if (scored.validation_loss < best_loss) {
      best_loss = scored.validation_loss;
      best_rounds = iteration + 1;
    } else if (iteration + 1 - best_rounds >= params.early_stopping_rounds) {
      break;
    }
  }
  int held = 0;
  check(XGBoosterBoostedRounds(handle->booster, &held), "cannot count rounds");
  if (early && best_rounds < held) {
    // Keep the trees of rounds [0, best_rounds); a new booster without the
    // training matrices' caches.
    BoosterHandle sliced = nullptr;
    check(XGBoosterSlice(handle->booster, 0, best_rounds, 1, &sliced), "cannot keep the best rounds");
    handle = std::make_unique<Handle>(Handle::Adopt{}, sliced);
  }
  return BoostedTrees(std::move(handle), objective, classes, train.width);
}

BoostedTrees BoostedTrees::load(std::span<const std::uint8_t> bytes, TreeObjective objective, std::int64_t classes,
                                std::int64_t width, const std::string& owner) {
  // save() writes UBJSON, an object: '{' first. XGBoost reads anything
  // else as its legacy binary format, whose length fields it allocates
  // from before checking them against the bytes, so damaged bytes could ask
  // for terabytes; they are refused here instead.
  if (bytes.empty() || bytes[0] != '{')
    throw corrupt(owner + ": not a tree model XGBoost can read (not a UBJSON object)");
  auto handle = std::make_unique<Handle>();
  if (XGBoosterLoadModelFromBuffer(handle->booster, bytes.data(), bytes.size()) != 0)
    throw corrupt(owner + ": not a tree model XGBoost can read (" + XGBGetLastError() + ")");
  bst_ulong features = 0;
  check(XGBoosterGetNumFeature(handle->booster, &features), "cannot read the model's column count");
  const json config = learner_config(handle->booster);
  const std::string stored = config.at("learner").at("objective").at("name").get<std::string>();
  const std::int64_t stored_classes =
      std::stoll(config.at("learner").at("learner_model_param").at("num_class").get<std::string>());
  const bool classes_match = objective == TreeObjective::kMultiSoftmax ? stored_classes == classes : true;
  if (stored != objective_name(objective) || static_cast<std::int64_t>(features) != width || !classes_match)
    throw corrupt(owner + ": the tree model is " + stored + " over " + std::to_string(features) +
                  " columns; its header says " + objective_name(objective) + " over " + std::to_string(width));
  handle->set("verbosity", "0");
  handle->set("nthread", "1");
  return BoostedTrees(std::move(handle), objective,
                      objective == TreeObjective::kSquaredError ? 0 : classes, width);
}

std::vector<std::uint8_t> BoostedTrees::save() const {
  bst_ulong length = 0;
  const char* data = nullptr;
  check(XGBoosterSaveModelToBuffer(handle_->booster, R"({"format": "ubj"})", &length, &data), "cannot save");
  return std::vector<std::uint8_t>(data, data + length);
}

std::vector<float> BoostedTrees::predict(std::span<const float> features, std::int64_t rows) const {
  if (rows < 0 || features.size() != static_cast<std::size_t>(rows * width_))
    throw data_error("boosted trees: expected " + std::to_string(rows) + " rows of " + std::to_string(width_) +
                     " values, found " + std::to_string(features.size()) + " values");
  if (rows == 0) return {};
  // The rows as a NumPy __array_interface__ (XGBoost's way to name a
  // caller's dense float32 array without copying it): row-major, NaN missing.
  const json array = {{"data", json::array({reinterpret_cast<std::uintptr_t>(features.data()), true})},
                      {"shape", json::array({rows, width_})},
                      {"typestr", "<f4"},
                      {"version", 3}};
  const std::string array_text = array.dump();
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* result = nullptr;
  const std::lock_guard<std::mutex> lock(handle_->predicting);
  if (handle_->proxy == nullptr) check(XGProxyDMatrixCreate(&handle_->proxy), "cannot make a proxy matrix");
  check(XGBoosterPredictFromDense(handle_->booster, array_text.c_str(),
                                  R"({"type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0,)"
                                  R"( "strict_shape": true, "missing": NaN, "cache_id": 0})",
                                  handle_->proxy, &shape, &dims, &result),
        "cannot predict");
  const std::size_t n = static_cast<std::size_t>(rows * outputs());
  bst_ulong total = 1;
  for (bst_ulong d = 0; d < dims; ++d) total *= shape[d];
  if (total != n) throw failure("XGBoost: predicted " + std::to_string(total) + " values, expected " + std::to_string(n));
  return std::vector<float>(result, result + n);
}

std::vector<double> BoostedTrees::importance() const {
  std::vector<double> scores(static_cast<std::size_t>(width_), 0.0);
  bst_ulong count = 0, dims = 0;
  const char** names = nullptr;
  const bst_ulong* shape = nullptr;
  const float* values = nullptr;
  check(XGBoosterFeatureScore(handle_->booster, R"({"importance_type": "total_gain"})", &count, &names, &dims,
                              &shape, &values),
        "cannot score the columns");
  double total = 0;
  for (bst_ulong i = 0; i < count; ++i) {
    // XGBoost names an unnamed column "f<index>".
    const std::string name = names[i];
    if (name.size() < 2 || name[0] != 'f') continue;
    const std::size_t column = std::stoul(name.substr(1));
    if (column >= scores.size()) continue;
    scores[column] += values[i];
    total += values[i];
  }
  if (total > 0)
    for (double& s : scores) s /= total;
  return scores;
}

json BoostedTrees::model_json() const {
  bst_ulong length = 0;
  const char* data = nullptr;
  check(XGBoosterSaveModelToBuffer(handle_->booster, R"({"format": "json"})", &length, &data), "cannot save");
  return json::parse(std::string_view(data, length));
}

double BoostedTrees::base_score() const {
  const json config = learner_config(handle_->booster);
  return std::stod(config.at("learner").at("learner_model_param").at("base_score").get<std::string>());
}

int BoostedTrees::rounds() const {
  int rounds = 0;
  check(XGBoosterBoostedRounds(handle_->booster, &rounds), "cannot count rounds");
  return rounds;
}

}  // namespace anneal
