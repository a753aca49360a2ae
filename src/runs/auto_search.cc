// layers = auto: the portfolio, the folds, successive halving and the
// trials (auto_search.h).
#include "runs/auto_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "anneal/boosted_trees.h"
#include "anneal/error.h"
#include "anneal/linear.h"
#include "anneal/sample_source.h"
#include "anneal/scoring.h"
#include "anneal/trainer.h"

namespace anneal::runs {
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// SplitMix64: a small generator whose sequence is fixed by its definition,
// so the folds are the same with every standard library.
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, n) for a shuffle (n is far below 2^64).
  std::uint64_t below(std::uint64_t n) { return next() % n; }

 private:
  std::uint64_t state_;
};

std::string g4(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// The rows a fold's models train on and the rows that score them.
struct Split {
  std::vector<float> x_fit, y_fit, x_held, y_held;
};

void append_row(std::vector<float>& x, std::vector<float>& y, const std::vector<float>& from_x,
                const std::vector<float>& from_y, std::size_t row, std::size_t width) {
  x.insert(x.end(), from_x.begin() + static_cast<std::ptrdiff_t>(row * width),
           from_x.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
  y.push_back(from_y[row]);
}

// A fold's held-out predictions and what its model kept.
struct FoldResult {
  std::vector<float> predictions;
  LossKind as = LossKind::kSoftmaxCrossEntropy;  // how to read the predictions
  std::int64_t kept = 0;
};

class Search {
 public:
  Search(PreparedData& data, const TrainConfig& config, Backend& backend, const SearchOptions& options,
         Reporter& reporter, const std::stop_token& stop)
      : data_(data), config_(config), backend_(backend), options_(options), reporter_(reporter), stop_(stop) {}

  SearchResult run(const std::vector<Trial>& finished, const std::function<void(const std::vector<Trial>&)>& on_trial) {
    const auto start = Clock::now();
    materialize(data_);
    width_ = static_cast<std::size_t>(data_.features.output_width());
    classes_ = data_.labels.classification() ? data_.labels.classes() : 0;
    make_splits();
    result_.metric = classes_ > 0 ? "accuracy" : "r2";
    const std::vector<Candidate> portfolio = search_portfolio();
    // Candidate 0 is the linear model; the others halve.
    std::vector<std::size_t> entrants(portfolio.size() - 1);
    std::iota(entrants.begin(), entrants.end(), std::size_t{1});
    const std::vector<HalvingRung> schedule = halving_schedule(entrants.size());
    std::size_t planned = 1;
    for (const HalvingRung& r : schedule) planned += r.entrants;

    double resumed_seconds = 0;
    for (const Trial& t : finished) resumed_seconds += t.seconds;
    // Runs (or takes from `finished`) the next trial; false when the budget
    // or max_trials says no more start.
    auto next_trial = [&](std::size_t candidate, int rung, double budget) {
      const std::size_t index = result_.trials.size();
      if (index < finished.size()) {
        const Trial& done = finished[index];
        if (done.candidate != candidate || done.rung != rung)
          throw corrupt("the search's recorded trial " + std::to_string(index + 1) +
                        " is not the one this search would run next; the run's records do not match its config");
        result_.trials.push_back(done);
        return true;
      }
      if (options_.max_trials && static_cast<std::int64_t>(index) >= *options_.max_trials) {
        result_.skipped_by = "max_trials";
        return false;
      }
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count() + resumed_seconds;
      if (options_.time_budget && elapsed >= *options_.time_budget) {
        result_.skipped_by = "time_budget";
        return false;
      }
      result_.trials.push_back(run_trial(portfolio, candidate, rung, budget));
      const Trial& t = result_.trials.back();
      reporter_.note("trial " + std::to_string(index + 1) + "/" + std::to_string(planned) + ": " +
                     portfolio[candidate].describe() + budget_words(portfolio[candidate], budget) + ": " +
                     result_.metric + " " + g4(t.score) + " in " + g4(t.seconds) + " s");
      if (on_trial) on_trial(result_.trials);
      return true;
    };

    bool going = next_trial(0, 0, 1.0);
    int top_rung = 0;
    for (std::size_t r = 0; going && r < schedule.size(); ++r) {
      std::vector<double> scores;
      std::vector<std::size_t> ran;
      for (std::size_t c : entrants) {
        if (!(going = next_trial(c, static_cast<int>(r), schedule[r].budget))) break;
        scores.push_back(result_.trials.back().score);
        ran.push_back(c);
      }
      if (!ran.empty()) top_rung = static_cast<int>(r);
      if (!going || r + 1 == schedule.size()) break;
      std::vector<std::size_t> survivors;
      for (std::size_t i : best_indices(scores, schedule[r + 1].entrants)) survivors.push_back(ran[i]);
      entrants = survivors;
    }
    result_.skipped = planned - result_.trials.size();
    if (result_.trials.empty())
      throw usage_error(std::string(result_.skipped_by == "time_budget" ? "time_budget" : "max_trials") + ": no trial ran");
    // The winner: the best of the highest rung reached, or the linear model.
    std::vector<std::size_t> pool;
    std::vector<double> pool_scores;
    for (std::size_t i = 0; i < result_.trials.size(); ++i)
      if (result_.trials[i].rung == top_rung || result_.trials[i].candidate == 0) {
        pool.push_back(i);
        pool_scores.push_back(result_.trials[i].score);
      }
    result_.winner = pool[best_indices(pool_scores, 1).front()];
    result_.seconds = std::chrono::duration<double>(Clock::now() - start).count() + resumed_seconds;
    return result_;
  }

  std::string scoring() const { return result_.scoring; }

 private:
  void make_splits() {
    const std::size_t n = data_.y_train.size();
    const int k = options_.folds;
    if (n < kCrossValidationRows) {
      if (n < static_cast<std::size_t>(2 * k))
        throw usage_error("layers = auto: " + data_.version.ref() + " has " + std::to_string(n) +
                                              " training rows, too few for folds = " + std::to_string(k));
      const std::vector<std::uint32_t> fold = assign_folds(data_.y_train, classes_, k, options_.seed);
      splits_.resize(static_cast<std::size_t>(k));
      for (std::size_t row = 0; row < n; ++row)
        for (std::size_t f = 0; f < splits_.size(); ++f) {
          Split& s = splits_[f];
          if (fold[row] == f) append_row(s.x_held, s.y_held, data_.x_train, data_.y_train, row, width_);
          else append_row(s.x_fit, s.y_fit, data_.x_train, data_.y_train, row, width_);
        }
      result_.scoring = std::to_string(k) + "-fold cross-validation";
    } else if (!data_.y_val.empty()) {
      splits_.push_back({data_.x_train, data_.y_train, data_.x_val, data_.y_val});
      result_.scoring = "validation split";
    } else {
      const std::vector<std::uint32_t> fold = assign_folds(data_.y_train, classes_, k, options_.seed);
      Split s;
      for (std::size_t row = 0; row < n; ++row) {
        if (fold[row] == 0) append_row(s.x_held, s.y_held, data_.x_train, data_.y_train, row, width_);
        else append_row(s.x_fit, s.y_fit, data_.x_train, data_.y_train, row, width_);
      }
      splits_.push_back(std::move(s));
      result_.scoring = "holdout fold (1 of " + std::to_string(k) + ")";
    }
  }

  static std::string budget_words(const Candidate& c, double budget) {
    switch (c.kind) {
      case ModelKindId::kTrees: return " (up to " + std::to_string(tree_rounds(budget)) + " rounds)";
      case ModelKindId::kNetwork: return " (up to " + std::to_string(network_epochs(budget)) + " epochs)";
      case ModelKindId::kLinear: break;
    }
    return "";
  }

  static int tree_rounds(double budget) {
    return std::max(1, static_cast<int>(std::lround(kSearchTreeRounds * budget)));
  }
  static int network_epochs(double budget) {
    return std::max(1, static_cast<int>(std::lround(kSearchNetworkEpochs * budget)));
  }

  std::vector<float> row_weights(const std::vector<float>& y) const {
    std::vector<float> w;
    if (data_.class_weights.empty()) return w;
    for (float label : y) w.push_back(data_.class_weights[static_cast<std::size_t>(label)]);
    return w;
  }

  FoldResult fit_linear_fold(const Split& s) const {
    const auto inputs = static_cast<std::int64_t>(width_);
    const LinearModel m = classes_ > 0
                              ? fit_logistic(s.x_fit, s.y_fit, inputs, classes_, config_.linear_l2, data_.class_weights)
                              : fit_ridge(s.x_fit, s.y_fit, inputs, config_.linear_l2);
    return {m.predict(s.x_held), classes_ > 0 ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError, 0};
  }

  FoldResult fit_tree_fold(const Candidate& c, double budget, const Split& s) const {
    const TreeObjective objective = classes_ == 0   ? TreeObjective::kSquaredError
                                    : classes_ == 2 ? TreeObjective::kBinaryLogistic
                                                    : TreeObjective::kMultiSoftmax;
    const auto width = static_cast<std::int64_t>(width_);
    const std::vector<float> w_fit = row_weights(s.y_fit), w_held = row_weights(s.y_held);
    const TreeRows fit{s.x_fit, s.y_fit, w_fit, static_cast<std::int64_t>(s.y_fit.size()), width};
    const TreeRows held{s.x_held, s.y_held, w_held, static_cast<std::int64_t>(s.y_held.size()), width};
    TreeParams p = config_.trees;
    p.max_depth = c.depth;
    p.learning_rate = c.learning_rate;
    p.max_rounds = tree_rounds(budget);
    p.early_stopping_rounds = kSearchTreePatience;
    p.seed = options_.seed;
    p.threads = options_.threads;
    const BoostedTrees trees = BoostedTrees::train(objective, classes_, fit, &held, p, nullptr, [&](const TreeRound&) {
      if (stop_.stop_requested()) throw failure("interrupted during the search");
    });
    const LossKind as = objective == TreeObjective::kSquaredError    ? LossKind::kMeanSquaredError
                        : objective == TreeObjective::kBinaryLogistic ? LossKind::kBinaryCrossEntropy
                                                                      : LossKind::kSoftmaxCrossEntropy;
    return {trees.predict(s.x_held, held.rows), as, trees.rounds()};
  }

  FoldResult fit_network_fold(const Candidate& c, double budget, const Split& s) {
    TrainerConfig tc = config_.trainer;
    const std::int64_t outputs = classes_ > 0 && data_.loss != LossKind::kBinaryCrossEntropy ? classes_ : 1;
    tc.layers = c.hidden + " dense(" + std::to_string(outputs) + ")";
    tc.loss = data_.loss;
    tc.classes = classes_;
    tc.class_weights = data_.class_weights;
    tc.optimizer = OptimizerConfig{};
    tc.optimizer.kind = OptimizerKind::kAdam;
    tc.optimizer.lr = static_cast<float>(c.learning_rate);
    tc.batch = kSearchNetworkBatch;
    tc.grad_accum = 1;
    tc.epochs = network_epochs(budget);
    tc.seed = options_.seed;
    tc.early_stop = EarlyStopMetric::kValLoss;
    tc.patience = kSearchNetworkPatience;
    tc.restore_best = true;
    tc.memory_limit = physical_memory();
    ArraySource fit(s.x_fit, s.y_fit, data_.input_shape);
    ArraySource held(s.x_held, s.y_held, data_.input_shape);
    NullReporter quiet;
    Trainer trainer(tc, backend_, fit, &held, quiet);
    while (!trainer.finished()) {
      if (stop_.stop_requested()) throw failure("interrupted during the search");
      trainer.train(static_cast<std::uint64_t>(std::max<std::int64_t>(trainer.steps_per_epoch(), 1)));
    }
    // The epoch restore_best kept: the lowest validation loss, the first of equals.
    std::int64_t best = 0;
    double best_loss = 0;
    for (const EpochMetrics& m : trainer.history())
      if (best == 0 || m.val_loss < best_loss) {
        best = m.epoch;
        best_loss = m.val_loss;
      }
    return {trainer.predict(std::span<const float>(s.x_held)), data_.loss, best};
  }

  Trial run_trial(const std::vector<Candidate>& portfolio, std::size_t candidate, int rung, double budget) {
    const auto start = Clock::now();
    const Candidate& c = portfolio[candidate];
    Trial t;
    t.candidate = candidate;
    t.rung = rung;
    t.budget = budget;
    double kept = 0;
    for (const Split& s : splits_) {
      if (stop_.stop_requested()) throw failure("interrupted during the search");
      FoldResult f = c.kind == ModelKindId::kLinear  ? fit_linear_fold(s)
                     : c.kind == ModelKindId::kTrees ? fit_tree_fold(c, budget, s)
                                                     : fit_network_fold(c, budget, s);
      const json scores = score("fold", f.as, data_.labels, f.predictions, s.y_held);
      const double v = scores.value("fold_" + result_.metric, std::nan(""));
      // A fold whose score is not a number (a constant target) counts as
      // the worst, so such a candidate is never preferred.
      t.fold_scores.push_back(std::isfinite(v) ? v : -1e300);
      kept += static_cast<double>(f.kept);
    }
    t.score = std::accumulate(t.fold_scores.begin(), t.fold_scores.end(), 0.0) / static_cast<double>(t.fold_scores.size());
    t.kept = std::llround(kept / static_cast<double>(splits_.size()));
    t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return t;
  }

  PreparedData& data_;
  const TrainConfig& config_;
  Backend& backend_;
  const SearchOptions& options_;
  Reporter& reporter_;
  const std::stop_token& stop_;
  std::size_t width_ = 0;
  std::int64_t classes_ = 0;
  std::vector<Split> splits_;
  SearchResult result_;
};

}  // namespace

std::vector<std::uint32_t> assign_folds(std::span<const float> labels, std::int64_t classes, int folds,
                                        std::uint64_t seed) {
  if (folds < 2 || labels.size() < static_cast<std::size_t>(folds))
    throw usage_error("folds = " + std::to_string(folds) + ": needs 2 or more folds and at least as "
                                      "many rows (" + std::to_string(labels.size()) + ")");
  // Rows by class (one group for regression), each group shuffled.
  std::vector<std::vector<std::uint32_t>> groups(static_cast<std::size_t>(std::max<std::int64_t>(classes, 1)));
  for (std::size_t row = 0; row < labels.size(); ++row) {
    std::size_t g = 0;
    if (classes > 0) {
      const float y = labels[row];
      if (!(y >= 0) || y >= static_cast<float>(classes))
        throw data_error("row " + std::to_string(row) + ": label " + g4(y) + " is not a class index");
      g = static_cast<std::size_t>(y);
    }
    groups[g].push_back(static_cast<std::uint32_t>(row));
  }
  SplitMix random(seed ^ 0x66F01D5ull);
  std::vector<std::uint32_t> fold(labels.size(), 0);
  // Dealt in turn, continuing across classes, so fold sizes stay within one.
  std::size_t next = 0;
  for (auto& group : groups) {
    for (std::size_t i = group.size(); i > 1; --i) std::swap(group[i - 1], group[random.below(i)]);
    for (std::uint32_t row : group) fold[row] = static_cast<std::uint32_t>(next++ % static_cast<std::size_t>(folds));
  }
  return fold;
}

std::vector<HalvingRung> halving_schedule(std::size_t candidates, int eta) {
  if (candidates == 0 || eta < 2) throw std::invalid_argument("halving_schedule: no candidates or eta < 2");
  std::vector<std::size_t> entrants = {candidates};
  while (entrants.back() > 1)
    entrants.push_back((entrants.back() + static_cast<std::size_t>(eta) - 1) / static_cast<std::size_t>(eta));
  std::vector<HalvingRung> out;
  for (std::size_t r = 0; r < entrants.size(); ++r)
    out.push_back({entrants[r], std::pow(static_cast<double>(eta), -static_cast<double>(entrants.size() - 1 - r))});
  return out;
}

std::vector<std::size_t> best_indices(std::span<const double> scores, std::size_t keep) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  order.resize(std::min(keep, order.size()));
  return order;
}

json Candidate::settings() const {
  switch (kind) {
    case ModelKindId::kLinear: return json::object();
    case ModelKindId::kTrees: return {{"tree_depth", depth}, {"tree_lr", learning_rate}};
    case ModelKindId::kNetwork: return {{"hidden", hidden}, {"lr", learning_rate}};
  }
  return json::object();
}

std::string Candidate::describe() const {
  switch (kind) {
    case ModelKindId::kLinear: return "linear";
    case ModelKindId::kTrees: return "trees depth " + std::to_string(depth) + " lr " + g4(learning_rate);
    case ModelKindId::kNetwork: return "network " + hidden + " lr " + g4(learning_rate);
  }
  return "";
}

std::vector<Candidate> search_portfolio() {
  std::vector<Candidate> out;
  out.push_back({ModelKindId::kLinear, 0, 0, ""});
  for (int depth : {4, 6, 8})
    for (double lr : {0.05, 0.1}) out.push_back({ModelKindId::kTrees, depth, lr, ""});
  out.push_back({ModelKindId::kNetwork, 0, 0.003, "dense(64) relu dense(64) relu"});
  out.push_back({ModelKindId::kNetwork, 0, 0.001, "dense(128) relu dense(128) relu"});
  out.push_back({ModelKindId::kNetwork, 0, 0.001, "dense(256) relu dense(256) relu"});
  return out;
}

json Trial::to_json(const std::vector<Candidate>& portfolio) const {
  const Candidate& c = portfolio.at(candidate);
  return {{"candidate", candidate},
          {"kind", std::string(model_kind(c.kind).name())},
          {"settings", c.settings()},
          {"rung", rung},
          {"budget", budget},
          {"score", score},
          {"fold_scores", fold_scores},
          {"kept", kept},
          {"seconds", seconds}};
}

Trial Trial::from_json(const json& j) {
  try {
    Trial t;
    t.candidate = j.at("candidate").get<std::size_t>();
    t.rung = j.at("rung").get<int>();
    t.budget = j.at("budget").get<double>();
    t.score = j.at("score").get<double>();
    t.fold_scores = j.at("fold_scores").get<std::vector<double>>();
    t.kept = j.at("kept").get<std::int64_t>();
    t.seconds = j.at("seconds").get<double>();
    if (t.candidate >= search_portfolio().size()) throw corrupt("candidate " + std::to_string(t.candidate) + " unknown");
    return t;
  } catch (const json::exception& e) {
    throw corrupt(std::string("a recorded search trial is malformed: ") + e.what());
  }
}

json SearchResult::to_json(const std::vector<Candidate>& portfolio, const SearchOptions& options) const {
  json out = {{"scoring", scoring},
              {"metric", metric},
              {"folds", options.folds},
              {"time_budget_s", options.time_budget ? json(*options.time_budget) : json(nullptr)},
              {"max_trials", options.max_trials ? json(*options.max_trials) : json(nullptr)},
              {"seconds", seconds},
              {"skipped", skipped},
              {"skipped_by", skipped_by.empty() ? json(nullptr) : json(skipped_by)},
              {"winner", winner}};
  json trials = json::array();
  for (std::size_t i = 0; i < this->trials.size(); ++i) {
    json t = this->trials[i].to_json(portfolio);
    t["trial"] = i + 1;
    trials.push_back(std::move(t));
  }
  out["trials"] = std::move(trials);
  return out;
}

SearchResult run_search(PreparedData& data, const TrainConfig& config, Backend& backend,
                        const SearchOptions& options, Reporter& reporter, const std::stop_token& stop,
                        const std::vector<Trial>& finished,
                        const std::function<void(const std::vector<Trial>&)>& on_trial) {
  return Search(data, config, backend, options, reporter, stop).run(finished, on_trial);
}

void apply_winner(const SearchResult& result, const std::vector<Candidate>& portfolio, std::int64_t outputs,
                  TrainConfig& config) {
  const Trial& t = result.trials.at(result.winner);
  const Candidate& c = portfolio.at(t.candidate);
  config.kind = c.kind;
  const bool validated = config.validation > 0;
  switch (c.kind) {
    case ModelKindId::kLinear:
      break;
    case ModelKindId::kTrees:
      config.trees.max_depth = c.depth;
      config.trees.learning_rate = c.learning_rate;
      config.trees.max_rounds = validated ? kSearchTreeRounds : static_cast<int>(std::max<std::int64_t>(t.kept, 1));
      config.trees.early_stopping_rounds = validated ? kSearchTreePatience : 0;
      break;
    case ModelKindId::kNetwork: {
      TrainerConfig& tc = config.trainer;
      tc.layers = c.hidden + " dense(" + std::to_string(outputs) + ")";
      tc.optimizer = OptimizerConfig{};
      tc.optimizer.kind = OptimizerKind::kAdam;
      tc.optimizer.lr = static_cast<float>(c.learning_rate);
      tc.batch = kSearchNetworkBatch;
      tc.grad_accum = 1;
      tc.epochs = validated ? kSearchNetworkEpochs : std::max<std::int64_t>(t.kept, 1);
      tc.early_stop = validated ? EarlyStopMetric::kValLoss : EarlyStopMetric::kNone;
      tc.patience = validated ? kSearchNetworkPatience : 0;
      tc.restore_best = true;
      break;
    }
  }
}

}  // namespace anneal::runs
