// layers = auto: anneal chooses the model. A portfolio of candidates
// (the linear model; boosted trees at a few depths and learning rates;
// the MLP at a few widths and learning rates) is trained by successive
// halving: every candidate first with a small budget (boosting rounds,
// epochs), then the best third again with three times the budget, and so
// on until one is left at the full budget. Each trial is scored by k-fold
// cross-validation over the training rows on small tables, else on the
// validation split (or, without one, on one fold held out). Then ensemble
// selection (Caruana et al. 2004) weighs each candidate's latest trial by
// their held-out predictions; when the weighted ensemble scores better than
// the best single trial, the run trains its members on all training rows
// and registers the ensemble (model kind "ensemble"), else it trains the
// winner as an ordinary model of its kind (docs/TRAINING.md, "layers =
// auto").
//
// Determinism: the folds, the order of the trials and every trial's
// training depend on the data, the config and the seed alone, so with
// max_trials (and no time budget) a search gives the same trials and the
// same winner run to run. A time budget cuts the search where the clock
// says and is not reproducible.
//
// Internal to src/runs/. Not thread-safe: one search per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/backend.h"
#include "anneal/config.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "anneal/report.h"
#include "runs/training_data.h"

namespace anneal::runs {

// The fold (0..folds-1) of each of `labels.size()` rows. Classification
// (`classes` > 0, labels are class indices): each class's rows are shuffled
// by `seed` and dealt to the folds in turn, so every fold holds each class
// in proportion (stratified). Regression (`classes` == 0): the rows are
// shuffled and dealt the same way. Folds differ in size by at most one row
// per class. Deterministic and the same on every platform (its own
// generator, not std::shuffle). kUsage for folds < 2 or more folds than rows.
std::vector<std::uint32_t> assign_folds(std::span<const float> labels, std::int64_t classes, int folds,
                                        std::uint64_t seed);

// One rung of successive halving: how many candidates train in it and the
// fraction of the full budget each gets.
struct HalvingRung {
  std::size_t entrants = 0;
  double budget = 1;
};

// The rungs for `candidates` (>= 1) candidates keeping the best
// ceil(1 / eta) of each rung: entrants n, ceil(n/eta), ... down to 1, the
// last at budget 1 and each earlier one at 1/eta of the next. One
// candidate: one rung at the full budget.
std::vector<HalvingRung> halving_schedule(std::size_t candidates, int eta = 3);

// The indices of the `keep` best of `scores` (higher is better), best
// first; ties go to the lower index, so the choice is deterministic.
std::vector<std::size_t> best_indices(std::span<const double> scores, std::size_t keep);

// A candidate of the portfolio and the settings it trains with.
struct Candidate {
  ModelKindId kind = ModelKindId::kLinear;
  // Trees: depth and learning rate; network: hidden layers (without the
  // output layer) and learning rate.
  int depth = 0;
  double learning_rate = 0;
  std::string hidden;
  nlohmann::json settings() const;
  std::string describe() const;  // "trees depth 6 lr 0.1"
};

// The portfolio, in the order its trials run: the linear model (trained
// once, at rung 0; it takes part in the final choice), then the trees, then
// the networks, cheapest first.
std::vector<Candidate> search_portfolio();

// Full budgets: boosting rounds and network epochs at budget 1, and the
// patience of each kind's early stopping.
constexpr int kSearchTreeRounds = 1000;
constexpr int kSearchTreePatience = 50;
constexpr int kSearchNetworkEpochs = 100;
constexpr int kSearchNetworkPatience = 10;
constexpr std::int64_t kSearchNetworkBatch = 64;
// Tables with fewer training rows than this are scored by k-fold
// cross-validation, larger ones on the validation split.
constexpr std::uint64_t kCrossValidationRows = 5000;

// One trial: a candidate trained at one rung's budget and scored.
struct Trial {
  std::size_t candidate = 0;  // index into search_portfolio()
  int rung = 0;
  double budget = 1;          // fraction of the full budget
  double score = 0;           // mean of fold_scores; higher is better
  std::vector<double> fold_scores;
  double seconds = 0;         // wall time (not part of determinism)
  // Trees: the rounds, network: the epochs, each fold's model kept (its
  // best on the held-out rows), averaged over the folds and rounded; 0 for
  // the linear model. The refit trains this many when there is no
  // validation split to stop it.
  std::int64_t kept = 0;
  // The trial's predictions on the held-out rows of every fold, in fold
  // order (SearchResult::held_labels' order): rows x classes class
  // probabilities, or the standardized value. Kept for the candidate's
  // latest trial only (ensemble selection reads those); not in to_json()
  // (a search record keeps them as binary: train.cc). Empty when not kept
  // or not recorded.
  std::vector<float> held;
  nlohmann::json to_json(const std::vector<Candidate>& portfolio) const;
  static Trial from_json(const nlohmann::json& j);  // kCorrupt for a malformed record
};

// What a trial of candidate `c` costs a training row at the full budget,
// comparable only between candidates of one kind: a network's
// network_multiply_adds() (network.h) for `inputs` features and `outputs`
// outputs; 1 for the trees (their depths cost about the same) and the
// linear model. kUsage for a network the inputs cannot build.
double candidate_work(const Candidate& c, std::int64_t inputs, std::int64_t outputs);

// `t` without its held predictions (an empty stand-in when it has them):
// what the projections read, cheap to copy.
Trial timing_of(const Trial& t);

// The time budget's projections (docs/TRAINING.md, "The budget"), from the
// trials so far. projected_trial_seconds: the seconds a trial of
// `candidate` (an index into `portfolio`) at `budget` should take: its
// candidate's latest trial's, scaled by the budgets; else, from the trials
// of its kind whose `work` (candidate_work of each portfolio candidate) is
// nearest its own (as a factor), their mean scaled by the budgets and the
// work; 0 before any of its kind.
// projection_waits_for: whether a trial of `candidate` should wait to be
// projected until a running trial of candidate `earlier` ends: one of its
// kind, nearer in work than any of `trials`, while it has none of its own
// (TabM-mini, 32 times the width-256 MLP, waits for that one rather than
// be scaled 285 times from the width-64 one).
// projected_refit_seconds: the seconds the refit after the search should
// take: the three best latest trials (those that keep `held`; an
// ensemble's usual members, the winner among them), each fitted once on
// all training rows at its trial's budget. A trial scored on `splits`
// k-fold splits fitted k times on (k-1)/k of the rows, so one fit on all
// of them takes about its seconds / (k-1); with one split (a validation
// split or a holdout fold), its seconds.
double projected_trial_seconds(const std::vector<Trial>& trials, const std::vector<Candidate>& portfolio,
                               std::span<const double> work, std::size_t candidate, double budget);
bool projection_waits_for(const std::vector<Trial>& trials, const std::vector<Candidate>& portfolio,
                          std::span<const double> work, std::size_t candidate, std::size_t earlier);
double projected_refit_seconds(const std::vector<Trial>& trials, std::size_t splits);

// Ensemble selection (Caruana, Niculescu-Mizil, Crew and Ksikes 2004, as
// AutoGluon weighs its models): `rounds` times, with replacement, add the
// model whose addition gives the averaged predictions the lowest loss on
// the held-out rows (log loss of the true class for a classifier, squared
// error for regression; ties to the lower index). `predictions[i]`: model
// i's held-out predictions, rows x `classes` probabilities (`classes` >= 2)
// or one value a row (`classes` == 0), every model on the same `labels`.
// Returns the models picked at least once, in index order, each with its
// share of the rounds as weight (the weights sum to 1). Deterministic.
// std::invalid_argument for no models, rounds < 1, or predictions whose
// size does not fit the labels.
struct EnsembleWeights {
  std::vector<std::size_t> members;
  std::vector<double> weights;
};
EnsembleWeights select_ensemble(const std::vector<std::span<const float>>& predictions, std::span<const float> labels,
                                std::int64_t classes, int rounds = 25);

// The weighted sum of `predictions` (each rows x width) by `weights`,
// accumulated in float in member order: what the ensemble kind's
// predictor computes, so scores on it are the registered model's.
std::vector<float> weighted_sum(const std::vector<std::span<const float>>& predictions,
                                std::span<const double> weights);

struct SearchOptions {
  int folds = 5;
  // The most seeds each network of the registered model is refit with
  // (config `bags`); SearchResult::bags says how many the budget allowed.
  int bags = 1;
  // What the trials are scored by: "accuracy", "balanced_accuracy" or
  // "macro_f1" for a classifier, "r2" for regression (train.cc takes it
  // from threshold_metric).
  std::string metric = "accuracy";
  // Whether ensemble selection may choose an ensemble (config `ensemble`).
  bool ensemble = true;
  std::optional<double> time_budget;  // seconds; no new trial after it
  std::optional<std::int64_t> max_trials;
  std::uint64_t seed = 0;
  int threads = 1;
};

struct SearchResult {
  std::vector<Trial> trials;      // in the order they ran
  std::size_t winner = 0;         // index into trials
  std::size_t skipped = 0;        // trials not run (time budget, max_trials)
  std::string skipped_by;         // "time_budget", "max_trials" or ""
  std::string scoring;            // "5-fold cross-validation", "validation split", "holdout fold"
  std::string metric;             // SearchOptions::metric
  double seconds = 0;
  // The held-out rows' encoded labels, in fold order, and how many each
  // split holds: what Trial::held predicts.
  std::vector<float> held_labels;
  std::vector<std::size_t> held_sizes;
  // Ensemble selection over each candidate's latest trial: the trials it
  // weighs (indices into trials) and their weights, its fold scores and
  // score, and whether it beat the winner's score (then the run registers
  // it). `ensemble_note` says why no ensemble was weighed ("" when one was).
  EnsembleWeights ensemble;
  std::vector<double> ensemble_fold_scores;
  double ensemble_score = 0;
  bool ensemble_chosen = false;
  std::string ensemble_note;
  // The seeds each network of the registered model is refit with
  // (bags_within_budget), 1..SearchOptions::bags; 1 when it has none.
  int bags = 1;
  nlohmann::json to_json(const std::vector<Candidate>& portfolio, const SearchOptions& options) const;
};

// Runs the search on `data`'s training rows (materialized here), networks
// on `backend`, reporting a line per trial through `reporter`. `finished`
// holds trials of an interrupted search of the same run (from
// Trial::from_json): they are taken as they are instead of rerun, so a
// resumed search ends where an uninterrupted one would. `on_trial` is
// called after each new trial with every trial so far (to record them).
// kFailure when `stop` is requested between folds; kUsage when the table
// has too few rows for the folds; errors of the trainers pass through.
SearchResult run_search(PreparedData& data, const TrainConfig& config, Backend& backend,
                        const SearchOptions& options, Reporter& reporter, const std::stop_token& stop,
                        const std::vector<Trial>& finished,
                        const std::function<void(const std::vector<Trial>&)>& on_trial);

// `config` made into the winner's: its kind and settings, for the refit on
// all training rows. With a validation split the refit stops early on it,
// within the winner's trial's budget (the full one when the search ran to
// its last rung); without, it trains the rounds or epochs the winner's
// folds kept. `outputs`: the network's output width (the model's outputs).
void apply_winner(const SearchResult& result, const std::vector<Candidate>& portfolio, std::int64_t outputs,
                  TrainConfig& config);

// The refit's members: the ensemble's trials and weights when the search
// chose its ensemble, else the winner alone at weight 1.
EnsembleWeights refit_members(const SearchResult& result);

// Bagging (docs/TRAINING.md, "Bagging"): how many seeds, from 1 to
// `requested`, each network of the registered model is refit with so that
// the refit still ends within the time budget: the most b for which
// elapsed + other_refit + b * network_refit <= budget, at least 1 (the one
// refit goes ahead whatever the clock says), `requested` without a budget.
// network_refit: the projected seconds of one refit of every network
// member; other_refit: those of the other members. Pure.
int bags_within_budget(int requested, double elapsed, std::optional<double> budget, double network_refit,
                       double other_refit);

// The seed of bag `bag` (0-based) of a network refit with `seed`: bag 0
// trains with the run's seed itself (so bags = 1 is the unbagged model),
// bag b > 0 with SplitMix64's output for seed + b. Pure.
std::uint64_t bag_seed(std::uint64_t seed, int bag);

// How many times the refit fits a member of candidate `c`: result.bags
// for a network, once for the others.
int member_bags(const SearchResult& result, const Candidate& c);

// Whether refit_members(result) holds a network.
bool refits_a_network(const SearchResult& result, const std::vector<Candidate>& portfolio);

// Whether the search's model is registered as an ensemble: the search
// chose its ensemble, or the winner is a network refit with more than one
// seed.
bool registers_ensemble(const SearchResult& result, const std::vector<Candidate>& portfolio);

// The ensemble registers_ensemble() says the search registers: each of
// refit_members(result) trained on all of `data`'s training rows as
// apply_winner() trains a winner (early stopping on the validation split
// when there is one, else the rounds or epochs its folds kept, never past
// its trial's budget), a network once per bag (result.bags, seeds
// bag_seed), each bag a member with an equal share of its trial's weight:
// models of their kinds with `shell`'s common fields, for
// ModelFile::members, in refit_members' order and each network's bags in
// seed order; the weights sum to 1. kFailure when `stop` is requested.
struct FittedMembers {
  std::vector<ModelFile> members;
  std::vector<double> weights;
};
FittedMembers fit_ensemble_members(const SearchResult& result, const std::vector<Candidate>& portfolio,
                                   PreparedData& data, const TrainConfig& config, Backend& backend,
                                   const ModelFile& shell, Reporter& reporter, const std::stop_token& stop);

}  // namespace anneal::runs
