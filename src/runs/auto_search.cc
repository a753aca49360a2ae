// layers = auto: the portfolio, the folds, successive halving and the
// trials (auto_search.h).
#include "runs/auto_search.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>

#include "anneal/boosted_trees.h"
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/linear.h"
#include "anneal/network.h"
#include "anneal/sample_source.h"
#include "anneal/scoring.h"
#include "anneal/trainer.h"
#include "runs/model_kinds.h"

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

// The seconds one fit of trial `t`'s candidate on all training rows
// should take: a trial scored on k > 1 splits fitted k times on (k-1)/k
// of the rows, so about its seconds / (k-1); with one split, its seconds.
double refit_seconds(const Trial& t, std::size_t splits) {
  return splits > 1 ? t.seconds / static_cast<double>(splits - 1) : t.seconds;
}

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

// What a candidate fits on: rows to train on and held-out rows that stop
// it early and that it predicts (empty for a refit without validation).
struct FitRows {
  std::span<const float> x_fit, y_fit, x_held, y_held;
};

// How long a candidate trains: `units` boosting rounds or epochs, stopping
// early on the held-out rows when `early_stop`.
struct FitBudget {
  int units = 1;
  bool early_stop = true;
};

// A fitted candidate: its predictions on the held-out rows, what its
// early stopping kept, and (when asked for) the model itself.
struct Fitted {
  std::vector<float> predictions;
  LossKind as = LossKind::kSoftmaxCrossEntropy;  // how to read the predictions
  std::int64_t kept = 0;
  ModelFile model;  // kind and the kind's fields; the common ones are the caller's
};

// What every fit shares: the data's shape and the run's settings.
struct FitContext {
  const PreparedData& data;
  const TrainConfig& config;
  Backend& backend;
  std::int64_t classes = 0;  // 0: regression
  std::size_t width = 0;     // preprocessed inputs a row
  std::uint64_t seed = 0;
  int threads = 1;
  const std::stop_token& stop;
};

void check_stop(const FitContext& cx) {
  if (cx.stop.stop_requested()) throw failure("interrupted during the search");
}

Fitted fit_linear_on(const FitContext& cx, const FitRows& r) {
  const auto inputs = static_cast<std::int64_t>(cx.width);
  const std::vector<float> x(r.x_fit.begin(), r.x_fit.end()), y(r.y_fit.begin(), r.y_fit.end());
  Fitted f;
  f.model.kind = ModelKindId::kLinear;
  f.model.linear_model = cx.classes > 0 ? fit_logistic(x, y, inputs, cx.classes, cx.config.linear_l2, cx.data.class_weights)
                                        : fit_ridge(x, y, inputs, cx.config.linear_l2);
  if (!r.y_held.empty()) f.predictions = f.model.linear_model.predict(r.x_held);
  f.as = cx.classes > 0 ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
  return f;
}

Fitted fit_trees_on(const FitContext& cx, const Candidate& c, FitBudget budget, const FitRows& r, bool keep) {
  const TreeObjective objective = tree_objective(cx.classes);
  const auto width = static_cast<std::int64_t>(cx.width);
  const std::vector<float> w_fit = row_weights(cx.data.class_weights, r.y_fit),
                           w_held = row_weights(cx.data.class_weights, r.y_held);
  const TreeRows fit{r.x_fit, r.y_fit, w_fit, static_cast<std::int64_t>(r.y_fit.size()), width};
  const TreeRows held{r.x_held, r.y_held, w_held, static_cast<std::int64_t>(r.y_held.size()), width};
  const bool early = budget.early_stop && !r.y_held.empty();
  TreeParams p = cx.config.trees;
  p.max_depth = c.depth;
  p.learning_rate = c.learning_rate;
  p.max_rounds = budget.units;
  p.early_stopping_rounds = early ? kSearchTreePatience : 0;
  p.seed = cx.seed;
  p.threads = cx.threads;
  const BoostedTrees trees =
      BoostedTrees::train(objective, cx.classes, fit, early ? &held : nullptr, p, nullptr, [&](const TreeRound&) { check_stop(cx); });
  Fitted f;
  f.as = objective == TreeObjective::kSquaredError      ? LossKind::kMeanSquaredError
         : objective == TreeObjective::kBinaryLogistic ? LossKind::kBinaryCrossEntropy
                                                       : LossKind::kSoftmaxCrossEntropy;
  if (!r.y_held.empty()) f.predictions = trees.predict(r.x_held, held.rows);
  f.kept = trees.rounds();
  if (keep) {
    f.model.kind = ModelKindId::kTrees;
    f.model.trees = tree_model_of(trees, objective, cx.classes, p);
    f.model.outputs = objective == TreeObjective::kMultiSoftmax ? cx.classes : 1;
  }
  return f;
}

// A network candidate's output width: the classes of a softmax classifier,
// else 1 (bce's one logit, or the value).
std::int64_t network_outputs(const FitContext& cx) {
  return cx.classes > 0 && cx.data.loss != LossKind::kBinaryCrossEntropy ? cx.classes : 1;
}

Fitted fit_network_on(const FitContext& cx, const Candidate& c, FitBudget budget, const FitRows& r, bool keep) {
  const bool early = budget.early_stop && !r.y_held.empty();
  TrainerConfig tc = cx.config.trainer;
  tc.layers = c.hidden + " dense(" + std::to_string(network_outputs(cx)) + ")";
  tc.loss = cx.data.loss;
  tc.classes = cx.classes;
  tc.class_weights = cx.data.class_weights;
  tc.optimizer = OptimizerConfig{};
  tc.optimizer.kind = OptimizerKind::kAdam;
  tc.optimizer.lr = static_cast<float>(c.learning_rate);
  tc.batch = kSearchNetworkBatch;
  tc.grad_accum = 1;
  tc.epochs = budget.units;
  tc.seed = cx.seed;
  tc.early_stop = early ? EarlyStopMetric::kValLoss : EarlyStopMetric::kNone;
  tc.patience = early ? kSearchNetworkPatience : 0;
  tc.restore_best = true;
  tc.memory_limit = physical_memory();
  ArraySource fit(r.x_fit, r.y_fit, cx.data.input_shape);
  std::optional<ArraySource> held;
  if (!r.y_held.empty()) held.emplace(r.x_held, r.y_held, cx.data.input_shape);
  NullReporter quiet;
  Trainer trainer(tc, cx.backend, fit, held ? &*held : nullptr, quiet);
  while (!trainer.finished()) {
    check_stop(cx);
    trainer.train(static_cast<std::uint64_t>(std::max<std::int64_t>(trainer.steps_per_epoch(), 1)));
  }
  Fitted f;
  f.as = cx.data.loss;
  // The epoch restore_best kept: the lowest validation loss, the first of
  // equals; every epoch without early stopping.
  f.kept = early ? 0 : budget.units;
  double best_loss = 0;
  if (early)
    for (const EpochMetrics& m : trainer.history())
      if (f.kept == 0 || m.val_loss < best_loss) {
        f.kept = m.epoch;
        best_loss = m.val_loss;
      }
  if (!r.y_held.empty()) f.predictions = trainer.predict(r.x_held);
  if (keep) {
    f.model.kind = ModelKindId::kNetwork;
    f.model.layers = tc.layers;
    f.model.precision = tc.precision;
    f.model.outputs = network_outputs(cx);
    f.model.tensors = export_weights(trainer);
  }
  return f;
}

// Fits candidate `c` on `r` for `budget`.
Fitted fit_candidate(const FitContext& cx, const Candidate& c, FitBudget budget, const FitRows& r, bool keep) {
  switch (c.kind) {
    case ModelKindId::kLinear: return fit_linear_on(cx, r);
    case ModelKindId::kTrees: return fit_trees_on(cx, c, budget, r, keep);
    case ModelKindId::kNetwork: return fit_network_on(cx, c, budget, r, keep);
    case ModelKindId::kEnsemble: break;
  }
  throw std::logic_error("fit_candidate: an ensemble is not a candidate");
}

int tree_rounds(double budget) { return std::max(1, static_cast<int>(std::lround(kSearchTreeRounds * budget))); }
int network_epochs(double budget) {
  return std::max(1, static_cast<int>(std::lround(kSearchNetworkEpochs * budget)));
}

// A trial's budget in the candidate's units.
int budget_units(const Candidate& c, double budget) {
  return c.kind == ModelKindId::kTrees ? tree_rounds(budget) : network_epochs(budget);
}

// The search metric's value in runs::score()'s output for `prefix`.
double metric_value(const json& scores, const std::string& prefix, const std::string& metric) {
  return scores.value(prefix + "_" + metric, std::nan(""));
}

class Search {
 public:
  Search(PreparedData& data, const TrainConfig& config, Backend& backend, const SearchOptions& options,
         Reporter& reporter, const std::stop_token& stop)
      : data_(data), options_(options), reporter_(reporter), cx_{data, config, backend, 0, 0, options.seed, options.threads, stop} {}

  SearchResult run(const std::vector<Trial>& finished, const std::function<void(const std::vector<Trial>&)>& on_trial) {
    const auto start = Clock::now();
    materialize(data_);
    cx_.width = static_cast<std::size_t>(data_.features.output_width());
    cx_.classes = data_.labels.classification() ? data_.labels.classes() : 0;
    make_splits();
    result_.metric = options_.metric;
    const std::vector<Candidate> portfolio = search_portfolio();
    work_.clear();
    for (const Candidate& c : portfolio)
      work_.push_back(candidate_work(c, static_cast<std::int64_t>(cx_.width), network_outputs(cx_)));
    // Candidate 0 is the linear model; the others halve.
    std::vector<std::size_t> entrants(portfolio.size() - 1);
    std::iota(entrants.begin(), entrants.end(), std::size_t{1});
    const std::vector<HalvingRung> schedule = halving_schedule(entrants.size());
    std::size_t planned = 1;
    for (const HalvingRung& r : schedule) planned += r.entrants;

    double resumed_seconds = 0;
    for (const Trial& t : finished) resumed_seconds += t.seconds;
    const auto elapsed = [&] {
      return std::chrono::duration<double>(Clock::now() - start).count() + resumed_seconds;
    };
    // A trial that finished: appended, reported and recorded, in order.
    const auto finish_trial = [&](Trial t, const Candidate& c) {
      const std::size_t index = result_.trials.size();
      add_trial(std::move(t));
      const Trial& done = result_.trials.back();
      reporter_.note("trial " + std::to_string(index + 1) + "/" + std::to_string(planned) + ": " + c.describe() +
                     budget_words(c, done.budget) + ": " + result_.metric + " " + g4(done.score) + " in " +
                     g4(done.seconds) + " s");
      if (on_trial) on_trial(result_.trials);
    };
    // Runs (or takes from `finished`) the trials of `candidates` at rung
    // `rung`, in order, and says whether the search goes on: not after
    // max_trials, nor when none of the rung ran. A trial the time budget
    // cuts ends its rung (none after it starts) and the next rung goes on
    // with the best of those that ran: a dear candidate (TabM-mini on a
    // large table) is left out instead of ending the search.
    const auto run_rung = [&](const std::vector<std::size_t>& candidates, int rung, double budget) {
      std::vector<std::size_t> fresh;
      const std::size_t first = result_.trials.size();
      for (std::size_t c : candidates) {
        const std::size_t index = result_.trials.size() + fresh.size();
        if (fresh.empty() && index < finished.size()) {
          const Trial& done = finished[index];
          // The search that recorded it cut this rung here by time.
          if (done.rung > rung && index > first) {
            result_.skipped_by = "time_budget";
            return true;
          }
          if (done.candidate != c || done.rung != rung)
            throw corrupt("the search's recorded trial " + std::to_string(index + 1) +
                          " is not the one this search would run next; the run's records do not match its config");
          add_trial(done);
          continue;
        }
        if (options_.max_trials && static_cast<std::int64_t>(index) >= *options_.max_trials) {
          result_.skipped_by = "max_trials";
          break;
        }
        fresh.push_back(c);
      }
      // Whether trial i of `fresh`, about to start, would end past the time
      // budget with the refit after the search, projected from the trials
      // `known` so far (docs/TRAINING.md, "The budget").
      const auto over_budget = [&](std::size_t i, const std::vector<Trial>& known) {
        return options_.time_budget &&
               elapsed() + projected_trial_seconds(known, portfolio, work_, fresh[i], budget) +
                       projected_refit_seconds(known, splits_.size()) >=
                   *options_.time_budget;
      };
      const std::size_t ran = run_fresh(portfolio, fresh, rung, budget, over_budget, finish_trial);
      if (ran < fresh.size()) result_.skipped_by = "time_budget";
      return result_.skipped_by != "max_trials" && result_.trials.size() > first;
    };

    if (parallel() > 1)
      reporter_.note("search: trials run " + std::to_string(parallel()) + " at a time (threads = " +
                     std::to_string(options_.threads) + "), each on one thread");
    bool going = run_rung({0}, 0, 1.0);
    int top_rung = 0;
    for (std::size_t r = 0; going && r < schedule.size(); ++r) {
      const std::size_t before = result_.trials.size();
      going = run_rung(entrants, static_cast<int>(r), schedule[r].budget);
      std::vector<double> scores;
      std::vector<std::size_t> ran;
      for (std::size_t i = before; i < result_.trials.size(); ++i) {
        scores.push_back(result_.trials[i].score);
        ran.push_back(result_.trials[i].candidate);
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
    weigh_ensemble();
    choose_bags(portfolio, elapsed());
    result_.seconds = std::chrono::duration<double>(Clock::now() - start).count() + resumed_seconds;
    return result_;
  }

 private:
  // Appends `t`; only each candidate's latest trial keeps its held-out
  // predictions (ensemble selection weighs those).
  void add_trial(Trial t) {
    for (Trial& earlier : result_.trials)
      if (earlier.candidate == t.candidate) std::vector<float>().swap(earlier.held);
    result_.trials.push_back(std::move(t));
  }

  void make_splits() {
    const std::size_t n = data_.y_train.size();
    const int k = options_.folds;
    const std::size_t width = cx_.width;
    if (n < kCrossValidationRows) {
      if (n < static_cast<std::size_t>(2 * k))
        throw usage_error("layers = auto: " + data_.version.ref() + " has " + std::to_string(n) +
                                              " training rows, too few for folds = " + std::to_string(k));
      const std::vector<std::uint32_t> fold = assign_folds(data_.y_train, cx_.classes, k, options_.seed);
      splits_.resize(static_cast<std::size_t>(k));
      for (std::size_t row = 0; row < n; ++row)
        for (std::size_t f = 0; f < splits_.size(); ++f) {
          Split& s = splits_[f];
          if (fold[row] == f) append_row(s.x_held, s.y_held, data_.x_train, data_.y_train, row, width);
          else append_row(s.x_fit, s.y_fit, data_.x_train, data_.y_train, row, width);
        }
      result_.scoring = std::to_string(k) + "-fold cross-validation";
    } else if (!data_.y_val.empty()) {
      splits_.push_back({data_.x_train, data_.y_train, data_.x_val, data_.y_val});
      result_.scoring = "validation split";
    } else {
      const std::vector<std::uint32_t> fold = assign_folds(data_.y_train, cx_.classes, k, options_.seed);
      Split s;
      for (std::size_t row = 0; row < n; ++row) {
        if (fold[row] == 0) append_row(s.x_held, s.y_held, data_.x_train, data_.y_train, row, width);
        else append_row(s.x_fit, s.y_fit, data_.x_train, data_.y_train, row, width);
      }
      splits_.push_back(std::move(s));
      result_.scoring = "holdout fold (1 of " + std::to_string(k) + ")";
    }
    for (const Split& s : splits_) {
      result_.held_labels.insert(result_.held_labels.end(), s.y_held.begin(), s.y_held.end());
      result_.held_sizes.push_back(s.y_held.size());
    }
  }

  static std::string budget_words(const Candidate& c, double budget) {
    switch (c.kind) {
      case ModelKindId::kTrees: return " (up to " + std::to_string(tree_rounds(budget)) + " rounds)";
      case ModelKindId::kNetwork: return " (up to " + std::to_string(network_epochs(budget)) + " epochs)";
      case ModelKindId::kLinear:
      case ModelKindId::kEnsemble: break;
    }
    return "";
  }

  // The search metric of predictions `p` (read as `as`) on held labels `y`;
  // one that is not a number (a constant target) counts as the worst, so
  // such a candidate is never preferred.
  double fold_score(LossKind as, std::span<const float> p, std::span<const float> y) const {
    const double v = metric_value(score("fold", as, data_.labels, p, y), "fold", result_.metric);
    return std::isfinite(v) ? v : -1e300;
  }

  // Runs the trials of `fresh` at rung `rung`, none starting once
  // `over_budget(i, known)` says trial i would pass the time budget (known:
  // the trials finished so far), nor any after it, and hands each to
  // `finish` in order; returns how many ran (a prefix of `fresh`). With
  // parallel() > 1 the trials run that many at a time, each on one thread
  // of its own CPU backend (so each trial's result is the same whatever ran
  // beside it); else one after another on the run's backend. Under a time
  // budget, a trial waits to be projected until the earlier trials its
  // projection would rather scale from have ended (projection_waits_for).
  // An error of a trial is thrown once the trials before it are handed
  // on, after the running ones end.
  template <typename OverBudget, typename Finish>
  std::size_t run_fresh(const std::vector<Candidate>& portfolio, const std::vector<std::size_t>& fresh, int rung,
                        double budget, const OverBudget& over_budget, const Finish& finish) {
    if (fresh.empty()) return 0;
    if (parallel() <= 1) {
      for (std::size_t i = 0; i < fresh.size(); ++i) {
        if (over_budget(i, result_.trials)) return i;
        finish(run_trial(cx_, portfolio, fresh[i], rung, budget), portfolio[fresh[i]]);
      }
      return fresh.size();
    }
    struct Slot {
      std::optional<Trial> trial;
      std::exception_ptr error;
      bool skipped = false;
    };
    std::vector<Slot> slots(fresh.size());
    // What the projections read, under `mutex`: the trials before this
    // rung and each fresh trial's time once it ended (held predictions
    // left out), and which fresh trials have ended, run or not.
    std::vector<Trial> before;
    for (const Trial& t : result_.trials) before.push_back(timing_of(t));
    std::vector<std::optional<Trial>> timings(fresh.size());
    std::vector<bool> ended(fresh.size(), false);
    std::mutex mutex;
    std::condition_variable ready;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> halt{false};
    const auto known = [&] {
      std::vector<Trial> k = before;
      for (const std::optional<Trial>& t : timings)
        if (t) k.push_back(*t);
      return k;
    };
    // Under a time budget: waits (holding `lock`) until trial i can be
    // projected, then whether it would pass the budget.
    const auto skip = [&](std::size_t i, std::unique_lock<std::mutex>& lock) {
      if (!options_.time_budget) return false;
      ready.wait(lock, [&] {
        if (halt) return true;
        const std::vector<Trial> k = known();
        for (std::size_t j = 0; j < i; ++j)
          if (!ended[j] && projection_waits_for(k, portfolio, work_, fresh[i], fresh[j])) return false;
        return true;
      });
      return halt || over_budget(i, known());
    };
    const auto work = [&] {
      std::unique_ptr<Backend> backend;
      std::exception_ptr setup;
      try {
        backend = make_backend({.device = Device::kCpu, .threads = 1, .deterministic = cx_.config.deterministic});
      } catch (...) {
        setup = std::current_exception();
      }
      for (;;) {
        const std::size_t i = next++;
        if (i >= fresh.size()) return;
        Slot got;
        bool skipped = halt;
        if (!skipped) {
          std::unique_lock lock(mutex);
          skipped = skip(i, lock);
        }
        if (skipped) {
          got.skipped = true;
        } else if (setup) {
          got.error = setup;
        } else {
          try {
            FitContext cx{cx_.data, cx_.config, *backend, cx_.classes, cx_.width, cx_.seed, 1, cx_.stop};
            got.trial = run_trial(cx, portfolio, fresh[i], rung, budget);
          } catch (...) {
            got.error = std::current_exception();
          }
        }
        {
          const std::lock_guard lock(mutex);
          // A skipped trial ends the rung: no later one starts (the trials
          // that ran stay a prefix of the portfolio's order).
          if (got.error || got.skipped) halt = true;
          if (got.trial) timings[i] = timing_of(*got.trial);
          ended[i] = true;
          slots[i] = std::move(got);
        }
        ready.notify_all();
      }
    };
    std::size_t ran = 0;
    {
      std::vector<std::jthread> pool;
      // Stops the workers taking more trials however this scope ends (and
      // wakes one waiting to be projected); the pool's destructors then
      // wait for the running ones.
      struct Halt {
        std::atomic<bool>& halt;
        std::mutex& mutex;
        std::condition_variable& ready;
        ~Halt() {
          {
            const std::lock_guard lock(mutex);
            halt = true;
          }
          ready.notify_all();
        }
      } stop_on_exit{halt, mutex, ready};
      for (std::size_t w = 0; w < std::min(parallel(), fresh.size()); ++w) pool.emplace_back(work);
      for (; ran < fresh.size(); ++ran) {
        Slot slot;
        {
          std::unique_lock lock(mutex);
          ready.wait(lock, [&] { return slots[ran].trial || slots[ran].error || slots[ran].skipped; });
          slot = std::move(slots[ran]);
        }
        if (slot.error) std::rethrow_exception(slot.error);
        if (slot.skipped) break;
        finish(std::move(*slot.trial), portfolio[fresh[ran]]);
      }
    }
    return ran;
  }


  // How many trials run at once: the run's threads on the CPU (each trial
  // then on one thread), one on another device.
  std::size_t parallel() const {
    return cx_.backend.capabilities().device == "cpu" ? static_cast<std::size_t>(std::max(options_.threads, 1)) : 1;
  }

  Trial run_trial(const FitContext& cx, const std::vector<Candidate>& portfolio, std::size_t candidate, int rung,
                  double budget) const {
    const auto start = Clock::now();
    const Candidate& c = portfolio[candidate];
    Trial t;
    t.candidate = candidate;
    t.rung = rung;
    t.budget = budget;
    double kept = 0;
    for (const Split& s : splits_) {
      check_stop(cx);
      const Fitted f = fit_candidate(cx, c, {budget_units(c, budget), true}, {s.x_fit, s.y_fit, s.x_held, s.y_held},
                                     /*keep=*/false);
      t.fold_scores.push_back(fold_score(f.as, f.predictions, s.y_held));
      // Held-out predictions as the ensemble adds them: class probabilities.
      const std::vector<float> p = cx.classes > 0 ? class_probabilities(f.as, f.predictions) : f.predictions;
      t.held.insert(t.held.end(), p.begin(), p.end());
      kept += static_cast<double>(f.kept);
    }
    t.score = std::accumulate(t.fold_scores.begin(), t.fold_scores.end(), 0.0) / static_cast<double>(t.fold_scores.size());
    t.kept = std::llround(kept / static_cast<double>(splits_.size()));
    // Inside the trial's time: a test holding a trial here makes it as
    // slow as it likes, whatever the machine's speed (the budget's tests).
    fault_point("auto.trial-fitted");
    t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return t;
  }

  // Ensemble selection over each candidate's latest trial; chosen when it
  // scores above the winner.
  void weigh_ensemble() {
    if (!options_.ensemble) {
      result_.ensemble_note = "ensemble = none";
      return;
    }
    std::vector<std::size_t> latest;  // trial indices, one per candidate, in trial order
    for (std::size_t i = 0; i < result_.trials.size(); ++i)
      if (!result_.trials[i].held.empty()) latest.push_back(i);
    std::set<std::size_t> candidates;
    for (const Trial& t : result_.trials) candidates.insert(t.candidate);
    if (latest.size() != candidates.size()) {
      result_.ensemble_note = "the held-out predictions of trials resumed from records without them are not kept";
      return;
    }
    if (latest.size() < 2) {
      result_.ensemble_note = "one candidate ran";
      return;
    }
    const std::size_t width = cx_.classes > 0 ? static_cast<std::size_t>(cx_.classes) : 1;
    std::vector<std::span<const float>> predictions;
    for (std::size_t i : latest) {
      if (result_.trials[i].held.size() != result_.held_labels.size() * width)
        throw corrupt("the search's trial " + std::to_string(i + 1) + " holds " +
                      std::to_string(result_.trials[i].held.size()) + " held-out predictions, not " +
                      std::to_string(result_.held_labels.size() * width));
      predictions.emplace_back(result_.trials[i].held);
    }
    const EnsembleWeights chosen = select_ensemble(predictions, result_.held_labels, cx_.classes);
    for (std::size_t m : chosen.members) result_.ensemble.members.push_back(latest[m]);
    result_.ensemble.weights = chosen.weights;
    std::vector<std::span<const float>> picked;
    for (std::size_t m : chosen.members) picked.push_back(predictions[m]);
    const std::vector<float> mixed = weighted_sum(picked, chosen.weights);
    const LossKind as = cx_.classes > 0 ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
    std::size_t at = 0;
    for (std::size_t rows : result_.held_sizes) {
      const std::span<const float> p(mixed.data() + at * width, rows * width);
      const std::span<const float> y(result_.held_labels.data() + at, rows);
      result_.ensemble_fold_scores.push_back(fold_score(as, p, y));
      at += rows;
    }
    result_.ensemble_score = std::accumulate(result_.ensemble_fold_scores.begin(), result_.ensemble_fold_scores.end(), 0.0) /
                             static_cast<double>(result_.ensemble_fold_scores.size());
    result_.ensemble_chosen =
        result_.ensemble.members.size() > 1 && result_.ensemble_score > result_.trials[result_.winner].score;
  }

  // How many seeds each network of the registered model is refit with:
  // as many as requested that the time budget leaves room for, projected
  // from the members' trials (one fit on all rows each); 1 when the refit
  // has no network.
  void choose_bags(const std::vector<Candidate>& portfolio, double elapsed) {
    double network = 0, other = 0;
    for (std::size_t i : refit_members(result_).members)
      (portfolio[result_.trials[i].candidate].kind == ModelKindId::kNetwork ? network : other) +=
          refit_seconds(result_.trials[i], splits_.size());
    // Without a network to refit there is nothing to bag.
    result_.bags = refits_a_network(result_, portfolio)
                       ? bags_within_budget(options_.bags, elapsed, options_.time_budget, network, other)
                       : 1;
  }

  PreparedData& data_;
  const SearchOptions& options_;
  Reporter& reporter_;
  FitContext cx_;
  std::vector<Split> splits_;
  std::vector<double> work_;  // candidate_work() of each portfolio candidate
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
    case ModelKindId::kEnsemble: break;
  }
  return json::object();
}

std::string Candidate::describe() const {
  switch (kind) {
    case ModelKindId::kLinear: return "linear";
    case ModelKindId::kTrees: return "trees depth " + std::to_string(depth) + " lr " + g4(learning_rate);
    case ModelKindId::kNetwork: return "network " + hidden + " lr " + g4(learning_rate);
    case ModelKindId::kEnsemble: break;
  }
  return "";
}

std::vector<Candidate> search_portfolio() {
  std::vector<Candidate> out;
  out.push_back({ModelKindId::kLinear, 0, 0, ""});
  for (int depth : {4, 6, 8})
    for (double lr : {0.05, 0.1}) out.push_back({ModelKindId::kTrees, depth, lr, ""});
  // The networks cheapest first (candidate_work), so a time budget that
  // cuts the search drops the dearest: TabM-mini (docs/TRAINING.md,
  // "ensemble(K)"), 32 members sharing two hidden layers of 256, each with
  // its own output layer, costs 32 times the plain width-256 MLP.
  out.push_back({ModelKindId::kNetwork, 0, 0.003, "dense(64) relu dense(64) relu"});
  out.push_back({ModelKindId::kNetwork, 0, 0.001, "dense(256) relu dense(256) relu"});
  out.push_back({ModelKindId::kNetwork, 0, 0.002, "ensemble(32) dense(256) relu dense(256) relu"});
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
    const std::vector<Candidate> portfolio = search_portfolio();
    if (t.candidate >= portfolio.size()) throw corrupt("candidate " + std::to_string(t.candidate) + " unknown");
    // A trial recorded by an anneal whose search space differed (another
    // candidate at this place): resuming would mix two searches.
    if (j.contains("settings") && j.at("settings") != portfolio[t.candidate].settings())
      throw corrupt("recorded trial of candidate " + std::to_string(t.candidate) + " has settings " +
                    j.at("settings").dump() + ", this anneal's candidate " + portfolio[t.candidate].settings().dump());
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
              {"winner", winner},
              {"bags", bags}};
  json trials = json::array();
  for (std::size_t i = 0; i < this->trials.size(); ++i) {
    json t = this->trials[i].to_json(portfolio);
    t["trial"] = i + 1;
    trials.push_back(std::move(t));
  }
  out["trials"] = std::move(trials);
  if (!ensemble.members.empty()) {
    json members = json::array();
    for (std::size_t i = 0; i < ensemble.members.size(); ++i)
      members.push_back({{"trial", ensemble.members[i] + 1}, {"weight", ensemble.weights[i]}});
    out["ensemble"] = {{"members", members},
                       {"score", ensemble_score},
                       {"fold_scores", ensemble_fold_scores},
                       {"chosen", ensemble_chosen}};
  } else {
    out["ensemble"] = {{"chosen", false}, {"note", ensemble_note}};
  }
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
      config.trees.max_rounds = validated ? tree_rounds(t.budget) : static_cast<int>(std::max<std::int64_t>(t.kept, 1));
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
      tc.epochs = validated ? network_epochs(t.budget) : std::max<std::int64_t>(t.kept, 1);
      tc.early_stop = validated ? EarlyStopMetric::kValLoss : EarlyStopMetric::kNone;
      tc.patience = validated ? kSearchNetworkPatience : 0;
      tc.restore_best = true;
      break;
    }
    case ModelKindId::kEnsemble: break;
  }
}

double candidate_work(const Candidate& c, std::int64_t inputs, std::int64_t outputs) {
  if (c.kind != ModelKindId::kNetwork) return 1;
  return std::max(network_multiply_adds(c.hidden + " dense(" + std::to_string(outputs) + ")", Dims{inputs}), 1.0);
}

Trial timing_of(const Trial& t) {
  // One copy of the held predictions, dropped at once: a trial's fits cost
  // far more. An empty stand-in stays for a trial that keeps them
  // (projected_refit_seconds asks only whether it does).
  Trial out = t;
  out.held.assign(t.held.empty() ? 0 : 1, 0.0f);
  out.held.shrink_to_fit();
  return out;
}

namespace {

// How far apart two candidates' work is, as a factor: |log(a / b)|.
double work_distance(std::span<const double> work, std::size_t a, std::size_t b) {
  return std::abs(std::log(work[a] / work[b]));
}

// The work distance from `candidate` to the nearest trial of its kind in
// `trials`; infinity for none.
double nearest_work(const std::vector<Trial>& trials, const std::vector<Candidate>& portfolio,
                    std::span<const double> work, std::size_t candidate) {
  double nearest = std::numeric_limits<double>::infinity();
  for (const Trial& t : trials)
    if (portfolio.at(t.candidate).kind == portfolio.at(candidate).kind)
      nearest = std::min(nearest, work_distance(work, candidate, t.candidate));
  return nearest;
}

bool has_own_trial(const std::vector<Trial>& trials, std::size_t candidate) {
  return std::any_of(trials.begin(), trials.end(), [&](const Trial& t) { return t.candidate == candidate; });
}

}  // namespace

double projected_trial_seconds(const std::vector<Trial>& trials, const std::vector<Candidate>& portfolio,
                               std::span<const double> work, std::size_t candidate, double budget) {
  for (auto t = trials.rbegin(); t != trials.rend(); ++t)
    if (t->candidate == candidate) return t->seconds * budget / t->budget;
  const double nearest = nearest_work(trials, portfolio, work, candidate);
  double total = 0;
  int n = 0;
  for (const Trial& t : trials)
    if (portfolio.at(t.candidate).kind == portfolio.at(candidate).kind &&
        work_distance(work, candidate, t.candidate) == nearest) {
      total += t.seconds * budget / t.budget * work[candidate] / work[t.candidate];
      ++n;
    }
  return n ? total / n : 0;
}

bool projection_waits_for(const std::vector<Trial>& trials, const std::vector<Candidate>& portfolio,
                          std::span<const double> work, std::size_t candidate, std::size_t earlier) {
  return portfolio.at(earlier).kind == portfolio.at(candidate).kind && !has_own_trial(trials, candidate) &&
         work_distance(work, candidate, earlier) < nearest_work(trials, portfolio, work, candidate);
}

double projected_refit_seconds(const std::vector<Trial>& trials, std::size_t splits) {
  std::vector<double> seconds, scores;
  for (const Trial& t : trials)
    if (!t.held.empty()) {
      seconds.push_back(t.seconds);
      scores.push_back(t.score);
    }
  const double per_fit = splits > 1 ? 1.0 / static_cast<double>(splits - 1) : 1.0;
  double total = 0;
  for (std::size_t i : best_indices(scores, 3)) total += seconds[i] * per_fit;
  return total;
}

EnsembleWeights refit_members(const SearchResult& result) {
  if (result.ensemble_chosen) return result.ensemble;
  return {{result.winner}, {1.0}};
}

int bags_within_budget(int requested, double elapsed, std::optional<double> budget, double network_refit,
                       double other_refit) {
  requested = std::max(requested, 1);
  if (!budget || network_refit <= 0) return requested;
  const double room = (*budget - elapsed - other_refit) / network_refit;
  if (!(room >= 1)) return 1;
  return room >= requested ? requested : static_cast<int>(room);
}

std::uint64_t bag_seed(std::uint64_t seed, int bag) {
  if (bag <= 0) return seed;
  return SplitMix(seed + static_cast<std::uint64_t>(bag) - 1).next();
}

int member_bags(const SearchResult& result, const Candidate& c) {
  return c.kind == ModelKindId::kNetwork ? std::max(result.bags, 1) : 1;
}

bool refits_a_network(const SearchResult& result, const std::vector<Candidate>& portfolio) {
  const std::vector<std::size_t> members = refit_members(result).members;
  return std::any_of(members.begin(), members.end(), [&](std::size_t trial) {
    return portfolio.at(result.trials.at(trial).candidate).kind == ModelKindId::kNetwork;
  });
}

bool registers_ensemble(const SearchResult& result, const std::vector<Candidate>& portfolio) {
  return result.ensemble_chosen || (result.bags > 1 && refits_a_network(result, portfolio));
}

EnsembleWeights select_ensemble(const std::vector<std::span<const float>>& predictions, std::span<const float> labels,
                                std::int64_t classes, int rounds) {
  const std::size_t width = classes > 0 ? static_cast<std::size_t>(classes) : 1, rows = labels.size();
  if (predictions.empty() || rounds < 1) throw std::invalid_argument("select_ensemble: no models or rounds < 1");
  for (const auto& p : predictions)
    if (p.size() != rows * width) throw std::invalid_argument("select_ensemble: predictions do not fit the labels");
  // The loss of the running sum plus model m, the sum holding `picked`
  // models: the mean log loss of the true class, or the mean squared error.
  std::vector<double> sum(rows * width, 0.0);
  auto loss_with = [&](const std::span<const float>& p, int picked) {
    const double n = picked + 1;
    double total = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      if (classes > 0) {
        const std::size_t at = r * width + static_cast<std::size_t>(labels[r]);
        total -= std::log(std::max((sum[at] + p[at]) / n, 1e-15));
      } else {
        const double e = (sum[r] + p[r]) / n - labels[r];
        total += e * e;
      }
    }
    return total / static_cast<double>(std::max<std::size_t>(rows, 1));
  };
  std::vector<int> counts(predictions.size(), 0);
  for (int round = 0; round < rounds; ++round) {
    std::size_t best = 0;
    double best_loss = 0;
    for (std::size_t m = 0; m < predictions.size(); ++m) {
      const double l = loss_with(predictions[m], round);
      if (m == 0 || l < best_loss) {
        best = m;
        best_loss = l;
      }
    }
    ++counts[best];
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += predictions[best][i];
  }
  EnsembleWeights out;
  for (std::size_t m = 0; m < counts.size(); ++m)
    if (counts[m] > 0) {
      out.members.push_back(m);
      out.weights.push_back(static_cast<double>(counts[m]) / rounds);
    }
  return out;
}

std::vector<float> weighted_sum(const std::vector<std::span<const float>>& predictions,
                                std::span<const double> weights) {
  if (predictions.empty() || predictions.size() != weights.size())
    throw std::invalid_argument("weighted_sum: no predictions or not one weight each");
  std::vector<float> out(predictions.front().size(), 0.0f);
  for (std::size_t m = 0; m < predictions.size(); ++m) {
    if (predictions[m].size() != out.size()) throw std::invalid_argument("weighted_sum: predictions differ in size");
    const auto w = static_cast<float>(weights[m]);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += w * predictions[m][i];
  }
  return out;
}

FittedMembers fit_ensemble_members(const SearchResult& result, const std::vector<Candidate>& portfolio,
                                   PreparedData& data, const TrainConfig& config, Backend& backend,
                                   const ModelFile& shell, Reporter& reporter, const std::stop_token& stop) {
  materialize(data);
  const FitContext cx{data,
                      config,
                      backend,
                      data.labels.classification() ? data.labels.classes() : 0,
                      static_cast<std::size_t>(data.features.output_width()),
                      config.trainer.seed,
                      config.threads,
                      stop};
  const bool validated = !data.y_val.empty();
  const EnsembleWeights refit = refit_members(result);
  std::size_t fits = 0;
  for (std::size_t trial : refit.members)
    fits += static_cast<std::size_t>(member_bags(result, portfolio.at(result.trials.at(trial).candidate)));
  FittedMembers out;
  for (std::size_t i = 0; i < refit.members.size(); ++i) {
    const Trial& t = result.trials.at(refit.members[i]);
    const Candidate& c = portfolio.at(t.candidate);
    // As apply_winner() trains a winner, within the trial's own budget.
    const int units = c.kind == ModelKindId::kLinear ? 0
                      : validated                     ? budget_units(c, t.budget)
                                                      : static_cast<int>(std::max<std::int64_t>(t.kept, 1));
    const int bags = member_bags(result, c);
    for (int bag = 0; bag < bags; ++bag) {
      const double weight = refit.weights[i] / bags;
      reporter.note("ensemble member " + std::to_string(out.members.size() + 1) + "/" + std::to_string(fits) +
                    " (weight " + g4(weight) + "): " + c.describe() +
                    (bags > 1 ? ", seed " + std::to_string(bag + 1) + " of " + std::to_string(bags) : "") +
                    ", trained on all " + std::to_string(data.y_train.size()) + " training rows");
      FitContext bagged = cx;
      bagged.seed = bag_seed(cx.seed, bag);
      Fitted f = fit_candidate(bagged, c, {units, validated}, {data.x_train, data.y_train, data.x_val, data.y_val},
                               /*keep=*/true);
      ModelFile m = shell;
      m.kind = f.model.kind;
      m.linear_model = std::move(f.model.linear_model);
      m.trees = std::move(f.model.trees);
      m.layers = std::move(f.model.layers);
      m.precision = f.model.precision;
      m.tensors = std::move(f.model.tensors);
      if (f.model.outputs > 0) m.outputs = f.model.outputs;
      m.weights_hash.clear();
      out.members.push_back(std::move(m));
      out.weights.push_back(weight);
      fault_point("auto.member");
    }
  }
  return out;
}

}  // namespace anneal::runs
