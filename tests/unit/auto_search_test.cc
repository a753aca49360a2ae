// layers = auto's pieces that decide which trials run: the folds of the
// cross-validation (deterministic, stratified) and the successive-halving
// schedule with its promotions (runs/auto_search.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "anneal/error.h"
#include "runs/auto_search.h"

namespace anneal::runs {
namespace {

std::vector<float> imbalanced_labels() {
  // 3 classes: 73, 25 and 3 rows, interleaved.
  std::vector<float> y;
  for (int i = 0; i < 101; ++i) y.push_back(i % 4 == 1 ? 1.0f : i < 12 && i % 4 == 3 ? 2.0f : 0.0f);
  return y;
}

TEST(AutoSearchFolds, AreStratifiedEvenAndDeterministic) {
  const std::vector<float> y = imbalanced_labels();
  std::map<float, int> total;
  for (float v : y) ++total[v];
  const auto fold = assign_folds(y, 3, 5, 7);
  ASSERT_EQ(fold.size(), y.size());
  EXPECT_EQ(fold, assign_folds(y, 3, 5, 7)) << "the same seed gives the same folds";
  EXPECT_NE(fold, assign_folds(y, 3, 5, 8)) << "another seed deals the rows differently";
  std::map<std::uint32_t, int> sizes;
  std::map<std::pair<std::uint32_t, float>, int> per_class;
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_LT(fold[i], 5u);
    ++sizes[fold[i]];
    ++per_class[{fold[i], y[i]}];
  }
  ASSERT_EQ(sizes.size(), 5u);
  for (const auto& [f, n] : sizes) EXPECT_TRUE(n == 20 || n == 21) << "fold " << f << " holds " << n;
  // Each class in each fold: its share of the rows, within one row.
  for (const auto& [label, n] : total)
    for (std::uint32_t f = 0; f < 5; ++f) {
      const int in_fold = per_class[{f, label}];
      EXPECT_LE(std::abs(in_fold * 5 - n), 5) << "class " << label << " fold " << f << ": " << in_fold << " of " << n;
    }
}

TEST(AutoSearchFolds, RegressionShufflesAndRefusesTooFewRows) {
  std::vector<float> y(23);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i) * 0.5f - 3;
  const auto fold = assign_folds(y, 0, 4, 1);
  std::map<std::uint32_t, int> sizes;
  for (auto f : fold) ++sizes[f];
  EXPECT_EQ(sizes.size(), 4u);
  for (const auto& [f, n] : sizes) EXPECT_TRUE(n == 5 || n == 6);
  EXPECT_FALSE(std::is_sorted(fold.begin(), fold.end())) << "rows are shuffled, not cut in order";
  std::vector<std::uint32_t> dealt_in_order(fold.size());
  for (std::size_t i = 0; i < fold.size(); ++i) dealt_in_order[i] = static_cast<std::uint32_t>(i % 4);
  EXPECT_NE(fold, dealt_in_order);

  EXPECT_THROW(assign_folds(std::vector<float>(3, 0.0f), 0, 5, 0), Error);
  EXPECT_THROW(assign_folds(y, 0, 1, 0), Error);
  EXPECT_THROW(assign_folds(std::vector<float>{0, 1, 2, 1, 0}, 2, 2, 0), Error) << "label 2 is not a class of 2";
}

TEST(AutoSearchHalving, KeepsTheBestThirdEachRungAtThreeTimesTheBudget) {
  const auto nine = halving_schedule(9);
  ASSERT_EQ(nine.size(), 3u);
  EXPECT_EQ(nine[0].entrants, 9u);
  EXPECT_EQ(nine[1].entrants, 3u);
  EXPECT_EQ(nine[2].entrants, 1u);
  EXPECT_DOUBLE_EQ(nine[0].budget, 1.0 / 9);
  EXPECT_DOUBLE_EQ(nine[1].budget, 1.0 / 3);
  EXPECT_DOUBLE_EQ(nine[2].budget, 1.0);

  const auto ten = halving_schedule(10);
  std::vector<std::size_t> entrants;
  for (const auto& r : ten) entrants.push_back(r.entrants);
  EXPECT_EQ(entrants, (std::vector<std::size_t>{10, 4, 2, 1}));
  EXPECT_DOUBLE_EQ(ten[0].budget, 1.0 / 27);
  EXPECT_DOUBLE_EQ(ten.back().budget, 1.0);

  const auto one = halving_schedule(1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].entrants, 1u);
  EXPECT_DOUBLE_EQ(one[0].budget, 1.0);

  const auto halves = halving_schedule(8, 2);
  ASSERT_EQ(halves.size(), 4u);
  EXPECT_DOUBLE_EQ(halves[0].budget, 1.0 / 8);
}

TEST(AutoSearchHalving, PromotesTheBestWithTiesToTheEarlierCandidate) {
  const std::vector<double> scores = {0.8, 0.9, 0.85, 0.9, 0.1};
  EXPECT_EQ(best_indices(scores, 2), (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(best_indices(scores, 3), (std::vector<std::size_t>{1, 3, 2}));
  EXPECT_EQ(best_indices(scores, 9).size(), 5u);
  EXPECT_TRUE(best_indices({}, 1).empty());
}

TEST(AutoSearchPortfolio, LinearFirstThenTreesThenNetworksAndTrialsRoundTrip) {
  const auto portfolio = search_portfolio();
  ASSERT_GE(portfolio.size(), 4u);
  EXPECT_EQ(portfolio[0].kind, ModelKindId::kLinear);
  std::set<std::string> seen;
  for (const auto& c : portfolio) EXPECT_TRUE(seen.insert(c.describe()).second) << "twice: " << c.describe();
  EXPECT_EQ(portfolio[1].kind, ModelKindId::kTrees);
  EXPECT_EQ(portfolio.back().kind, ModelKindId::kNetwork);
  // The networks cheapest first, for any table's width, so a time budget
  // that cuts the search drops the dearest.
  for (std::int64_t inputs : {4, 60, 700}) {
    for (std::size_t c = 2; c < portfolio.size(); ++c) {
      if (portfolio[c].kind != ModelKindId::kNetwork || portfolio[c - 1].kind != ModelKindId::kNetwork) continue;
      EXPECT_LT(candidate_work(portfolio[c - 1], inputs, 3), candidate_work(portfolio[c], inputs, 3))
          << portfolio[c - 1].describe() << " before " << portfolio[c].describe() << ", " << inputs << " inputs";
    }
  }

  Trial t;
  t.candidate = 2;
  t.rung = 1;
  t.budget = 1.0 / 3;
  t.score = 0.875;
  t.fold_scores = {0.85, 0.9};
  t.kept = 117;
  t.seconds = 0.25;
  const Trial back = Trial::from_json(t.to_json(portfolio));
  EXPECT_EQ(back.candidate, t.candidate);
  EXPECT_EQ(back.rung, t.rung);
  EXPECT_EQ(back.budget, t.budget);
  EXPECT_EQ(back.score, t.score);
  EXPECT_EQ(back.fold_scores, t.fold_scores);
  EXPECT_EQ(back.kept, t.kept);
  EXPECT_EQ(t.to_json(portfolio)["kind"], "trees");
  EXPECT_THROW(Trial::from_json({{"candidate", 2}}), Error);
  nlohmann::json unknown = t.to_json(portfolio);
  unknown["candidate"] = 999;
  EXPECT_THROW(Trial::from_json(unknown), Error);
  // A trial recorded when another candidate stood at its place (a search
  // space changed between versions): resuming it would mix two searches.
  nlohmann::json moved = t.to_json(portfolio);
  moved["settings"] = {{"hidden", "dense(128) relu dense(128) relu"}, {"lr", 0.001}};
  try {
    Trial::from_json(moved);
    ADD_FAILURE() << "a trial with another candidate's settings was resumed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("recorded trial of candidate 2 has settings"), std::string::npos) << e.what();
  }
  // TabM-mini is a candidate: an ensemble of 32 members.
  bool tabm = false;
  for (const auto& c : portfolio) tabm = tabm || c.hidden.rfind("ensemble(32) ", 0) == 0;
  EXPECT_TRUE(tabm);
}

// Ensemble selection: the best single model first, then whatever lowers
// the averaged loss; complementary models share the weight, a useless one
// gets none, and the choice is the same every time.
TEST(AutoSearchEnsemble, WeighsComplementaryModelsAndLeavesOutUselessOnes) {
  // 4 rows of 2 classes. Model 0 is sure and right on rows 0-1, unsure on
  // 2-3; model 1 the reverse; model 2 is wrong everywhere.
  const std::vector<float> labels = {0, 1, 0, 1};
  const std::vector<float> a = {0.95f, 0.05f, 0.05f, 0.95f, 0.45f, 0.55f, 0.55f, 0.45f};
  const std::vector<float> b = {0.45f, 0.55f, 0.55f, 0.45f, 0.95f, 0.05f, 0.05f, 0.95f};
  const std::vector<float> wrong = {0.1f, 0.9f, 0.9f, 0.1f, 0.1f, 0.9f, 0.9f, 0.1f};
  const std::vector<std::span<const float>> models = {wrong, a, b};
  const EnsembleWeights w = select_ensemble(models, labels, 2);
  EXPECT_EQ(w.members, (std::vector<std::size_t>{1, 2}));
  ASSERT_EQ(w.weights.size(), 2u);
  EXPECT_NEAR(w.weights[0] + w.weights[1], 1.0, 1e-12);
  EXPECT_NEAR(w.weights[0], 0.5, 0.1) << "symmetric models share the weight";
  const EnsembleWeights again = select_ensemble(models, labels, 2);
  EXPECT_EQ(again.members, w.members);
  EXPECT_EQ(again.weights, w.weights);

  // One clearly best model: it alone.
  const std::vector<float> right = {0.99f, 0.01f, 0.01f, 0.99f, 0.99f, 0.01f, 0.01f, 0.99f};
  const EnsembleWeights alone = select_ensemble({wrong, right, a}, labels, 2);
  EXPECT_EQ(alone.members, (std::vector<std::size_t>{1}));
  EXPECT_EQ(alone.weights, (std::vector<double>{1.0}));

  // Regression: two models off by +1 and -1 average to the truth.
  const std::vector<float> y = {0.5f, -1, 2};
  const std::vector<float> high = {1.5f, 0, 3}, low = {-0.5f, -2, 1}, far = {5, 5, 5};
  const EnsembleWeights r = select_ensemble({far, high, low}, y, 0, 10);
  EXPECT_EQ(r.members, (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(r.weights, (std::vector<double>{0.5, 0.5}));
  const std::vector<float> mixed = weighted_sum({high, low}, r.weights);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(mixed[i], y[i]);

  EXPECT_THROW(select_ensemble({}, labels, 2), std::invalid_argument);
  EXPECT_THROW(select_ensemble({a}, labels, 2, 0), std::invalid_argument);
  EXPECT_THROW(select_ensemble({a, std::span<const float>(b).first(6)}, labels, 2), std::invalid_argument);
  EXPECT_THROW(weighted_sum({a, b}, std::vector<double>{1.0}), std::invalid_argument);
}

// The time budget's projections: a trial from its candidate's last one
// scaled by the budgets (else from its kind's trials nearest in work,
// scaled by the work), the refit from the three best latest trials at one
// fit each.
TEST(AutoSearchBudget, ProjectsTrialsFromEarlierOnesAndTheRefitFromTheBestThree) {
  const auto portfolio = search_portfolio();
  auto trial = [](std::size_t candidate, double budget, double seconds, double score, bool latest) {
    Trial t;
    t.candidate = candidate;
    t.budget = budget;
    t.seconds = seconds;
    t.score = score;
    if (latest) t.held = {0.5f};
    return t;
  };
  // Candidates 1 and 2 are trees, the last three networks.
  ASSERT_EQ(portfolio[1].kind, ModelKindId::kTrees);
  ASSERT_EQ(portfolio[2].kind, ModelKindId::kTrees);
  const std::size_t net = portfolio.size() - 1;
  ASSERT_EQ(portfolio[net].kind, ModelKindId::kNetwork);
  ASSERT_EQ(portfolio[net - 2].kind, ModelKindId::kNetwork);
  // Work: 1 for every tree; the networks 1, 10 and 320 times a unit.
  std::vector<double> work(portfolio.size(), 1.0);
  work[net - 2] = 1000;
  work[net - 1] = 10000;
  work[net] = 320000;
  std::vector<Trial> trials = {trial(0, 1, 0.5, 0.70, true), trial(1, 1.0 / 9, 2, 0.80, true),
                               trial(2, 1.0 / 9, 4, 0.85, true)};
  EXPECT_DOUBLE_EQ(projected_trial_seconds(trials, portfolio, work, 1, 1.0 / 3), 6)
      << "its own trial, three times the budget";
  EXPECT_DOUBLE_EQ(projected_trial_seconds(trials, portfolio, work, 3, 1.0 / 9), 3)
      << "no trial of its own: its kind's nearest in work (every tree), their mean";
  EXPECT_DOUBLE_EQ(projected_trial_seconds(trials, portfolio, work, net, 1.0 / 9), 0) << "nothing of its kind yet";
  std::vector<Trial> nets = trials;
  nets.push_back(trial(net - 2, 1.0 / 9, 0.5, 0.8, true));
  EXPECT_DOUBLE_EQ(projected_trial_seconds(nets, portfolio, work, net, 1.0 / 9), 0.5 * 320)
      << "scaled by the work from the only network so far";
  EXPECT_DOUBLE_EQ(projected_trial_seconds(nets, portfolio, work, net, 1.0 / 3), 0.5 * 320 * 3);
  nets.push_back(trial(net - 1, 1.0 / 9, 2, 0.8, true));
  EXPECT_DOUBLE_EQ(projected_trial_seconds(nets, portfolio, work, net, 1.0 / 9), 2 * 32)
      << "from the network nearest in work, not the mean";
  EXPECT_DOUBLE_EQ(projected_trial_seconds(nets, portfolio, work, net - 2, 1.0 / 3), 1.5) << "its own trial";

  // Waiting to be projected: for an earlier trial of its kind nearer in
  // work than any that ended, while it has no trial of its own.
  EXPECT_TRUE(projection_waits_for(trials, portfolio, work, net - 1, net - 2)) << "no network ended yet";
  EXPECT_FALSE(projection_waits_for(trials, portfolio, work, net - 1, 2)) << "not its kind";
  std::vector<Trial> small = trials;
  small.push_back(trial(net - 2, 1.0 / 9, 0.5, 0.8, true));
  EXPECT_TRUE(projection_waits_for(small, portfolio, work, net, net - 1))
      << "TabM-mini waits for the width-256 MLP, 32 times cheaper, not the width-64 one, 320 times";
  EXPECT_FALSE(projection_waits_for(small, portfolio, work, net - 1, net - 2))
      << "a network as near as one that ended";
  EXPECT_FALSE(projection_waits_for(nets, portfolio, work, net, net - 1)) << "the nearest has ended";
  EXPECT_FALSE(projection_waits_for(trials, portfolio, work, 2, 1)) << "a tree of its own: no wait";
  EXPECT_TRUE(projection_waits_for({trials[0]}, portfolio, work, 2, 1)) << "the first tree: the second waits";
  EXPECT_FALSE(projection_waits_for({trials[0], trial(1, 1.0 / 9, 2, 0.8, true)}, portfolio, work, 3, 2))
      << "trees are all one work: one ended is as near as any";

  // timing_of keeps what the projections read, not the predictions.
  Trial big = trial(net, 1.0 / 9, 7, 0.9, true);
  big.held.assign(1000, 0.25f);
  big.fold_scores = {0.8, 1.0};
  const Trial light = timing_of(big);
  EXPECT_EQ(light.held.size(), 1u);
  EXPECT_EQ(light.seconds, 7);
  EXPECT_EQ(light.candidate, net);
  EXPECT_EQ(light.fold_scores, big.fold_scores);
  EXPECT_TRUE(timing_of(trial(1, 1, 1, 1, false)).held.empty());

  // Five folds: one fit on all rows is a quarter of a trial's time.
  EXPECT_DOUBLE_EQ(projected_refit_seconds(trials, 5), (0.5 + 2 + 4) / 4);
  trials.push_back(trial(net, 1.0 / 9, 8, 0.90, true));
  EXPECT_DOUBLE_EQ(projected_refit_seconds(trials, 5), (2 + 4 + 8) / 4.0) << "the three best only";
  EXPECT_DOUBLE_EQ(projected_refit_seconds(trials, 1), 2 + 4 + 8) << "one split: a trial is one fit";
  trials[2].held.clear();  // superseded: no longer the candidate's latest
  EXPECT_DOUBLE_EQ(projected_refit_seconds(trials, 1), 0.5 + 2 + 8);
  EXPECT_DOUBLE_EQ(projected_refit_seconds({}, 5), 0);
}

// Bagging takes what the budget leaves after the search: the most seeds
// whose refits (the other members' once, the networks' once per seed)
// still end within it, never fewer than one, all of them without a budget.
TEST(AutoSearch, BagsTakeWhatTheBudgetLeaves) {
  EXPECT_EQ(bags_within_budget(5, 10, 120, 2, 1), 5) << "room for 54 seeds: the 5 asked for";
  EXPECT_EQ(bags_within_budget(5, 100, 120, 6, 1), 3) << "19 s left: 3 fits of 6 s";
  EXPECT_EQ(bags_within_budget(5, 100, 120, 6, 1.0001), 3);
  EXPECT_EQ(bags_within_budget(5, 101, 120, 6, 1), 3) << "18 s left: exactly 3 fits";
  EXPECT_EQ(bags_within_budget(5, 110, 120, 6, 1), 1) << "9 s left: one fit";
  EXPECT_EQ(bags_within_budget(5, 130, 120, 6, 1), 1) << "past the budget: the one refit goes ahead";
  EXPECT_EQ(bags_within_budget(5, 1e9, std::nullopt, 6, 1), 5) << "no budget: as asked";
  EXPECT_EQ(bags_within_budget(1, 0, 120, 1, 0), 1) << "bags = 1: once";
  EXPECT_EQ(bags_within_budget(5, 0, 120, 0, 0), 5) << "a network refit projected at 0 s (no timing yet)";
}

// Bag 0 is the unbagged model's seed; the others are fixed by the seed
// alone and differ from it and from each other.
TEST(AutoSearch, BagSeeds) {
  for (std::uint64_t seed : {0ull, 1ull, 42ull, ~0ull}) {
    EXPECT_EQ(bag_seed(seed, 0), seed);
    std::set<std::uint64_t> seen{seed};
    for (int b = 1; b < 32; ++b) EXPECT_TRUE(seen.insert(bag_seed(seed, b)).second) << seed << " bag " << b;
  }
  EXPECT_EQ(bag_seed(1, 1), 0x910a2dec89025cc1ull) << "SplitMix64's first output for state 1";
}

// The refit's members, and when they make an ensemble model.
TEST(AutoSearch, RefitMembersAndWhenTheyRegisterAnEnsemble) {
  const std::vector<Candidate> portfolio = search_portfolio();
  const std::size_t net = portfolio.size() - 1, trees = 1;
  SearchResult r;
  r.trials.resize(3);
  r.trials[0].candidate = 0;  // linear
  r.trials[1].candidate = trees;
  r.trials[2].candidate = net;
  r.winner = 2;
  r.ensemble = {{1, 2}, {0.25, 0.75}};
  EXPECT_EQ(refit_members(r).members, std::vector<std::size_t>{2}) << "not chosen: the winner alone";
  EXPECT_EQ(refit_members(r).weights, std::vector<double>{1.0});
  EXPECT_FALSE(registers_ensemble(r, portfolio)) << "one network fitted once is a network";
  r.bags = 3;
  EXPECT_TRUE(registers_ensemble(r, portfolio)) << "a network in three bags is an ensemble of three";
  r.winner = 1;
  EXPECT_FALSE(registers_ensemble(r, portfolio)) << "trees are not bagged";
  r.ensemble_chosen = true;
  r.bags = 1;
  EXPECT_TRUE(registers_ensemble(r, portfolio));
  EXPECT_EQ(refit_members(r).members, (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(refit_members(r).weights, (std::vector<double>{0.25, 0.75}));
}

}  // namespace
}  // namespace anneal::runs
