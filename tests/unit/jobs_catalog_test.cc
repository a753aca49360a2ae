// The job queue, aliases and retrain records in the catalog (store/jobs.cc),
// and promotion gates (src/jobs/promote.cc): claim order, leases and
// takeover, retries with backoff, cancel and retry, alias history and
// rollback, NAME@ALIAS resolution.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/jobs.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

class JobsCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override { test::init_store_with_dataset(root(), "iris", "iris.csv"); }
  fs::path root() const { return dir_.path() / "store"; }
  static JobSpec spec(const std::string& name, std::int64_t priority = 0, std::int64_t cores = 1,
                      std::int64_t retries = 0) {
    JobSpec s;
    s.name = name;
    s.config_text = "name = " + name + "\n";
    s.config_source = name + ".ini";
    s.priority = priority;
    s.cores = cores;
    s.retries = retries;
    return s;
  }
  ModelRecord model(Store& store, const std::string& name, double val_accuracy) {
    RunRecord run = create_run(store, name, {"iris", 1}, "name = " + name + "\n", "host");
    nlohmann::json metrics = {{"val_accuracy", val_accuracy}};
    return register_model(store, run.id, name, "weights of " + std::to_string(val_accuracy), {}, metrics, {});
  }
  test::TempDir dir_;
  NullReporter reporter_;
};

TEST_F(JobsCatalogTest, ClaimsByPriorityThenAgeWithinTheCores) {
  Store store = Store::open(root());
  submit_job(store, spec("a"), 100);
  submit_job(store, spec("b", 5), 101);
  submit_job(store, spec("c", 5), 102);
  submit_job(store, spec("big", 9, 4), 103);
  std::vector<std::string> order;
  while (auto j = claim_job(store, "w1", 2, 200, 30)) order.push_back(j->spec.name);
  // "big" needs 4 cores and never fits a 2-core claim.
  EXPECT_EQ(order, (std::vector<std::string>{"b", "c", "a"}));
  auto big = claim_job(store, "w2", 4, 200, 30);
  ASSERT_TRUE(big);
  EXPECT_EQ(big->spec.name, "big");
  EXPECT_EQ(big->state, JobState::kRunning);
  EXPECT_EQ(big->attempts, 1);
  EXPECT_EQ(big->worker, "w2");
}

TEST_F(JobsCatalogTest, ConcurrentClaimsTakeEachJobOnce) {
  {
    Store store = Store::open(root());
    for (int i = 0; i < 40; ++i) submit_job(store, spec(std::string("j").append(std::to_string(i))), 100);
  }
  std::vector<std::vector<std::int64_t>> taken(4);
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&, w] {
      Store store = Store::open(root());
      const std::string worker = std::string("w").append(std::to_string(w));
      while (auto j = claim_job(store, worker, 1, 200, 30)) taken[w].push_back(j->id);
    });
  for (auto& t : workers) t.join();
  std::set<std::int64_t> all;
  std::size_t count = 0;
  for (const auto& t : taken) {
    count += t.size();
    all.insert(t.begin(), t.end());
  }
  EXPECT_EQ(count, 40u);
  EXPECT_EQ(all.size(), 40u);
}

TEST_F(JobsCatalogTest, ExpiredLeaseIsTakenOverAsANewAttemptUnderANewClaim) {
  Store store = Store::open(root());
  JobRecord job = submit_job(store, spec("a", 0, 1, 1), 100);  // one retry
  auto first = claim_job(store, "stalled", 1, 100, 10);
  ASSERT_TRUE(first);
  EXPECT_FALSE(claim_job(store, "w2", 1, 105, 10));  // the lease still runs
  renew_leases(store, "stalled", {first->fence()}, 108, 10);  // renewed until 118
  EXPECT_FALSE(claim_job(store, "w2", 1, 115, 10));
  auto taken = claim_job(store, "w2", 1, 119, 10);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->worker, "w2");
  EXPECT_EQ(taken->attempts, 2);  // the stalled worker's attempt counts
  EXPECT_EQ(taken->claim, first->claim + 1);
  // The stalled worker comes back: its renewal finds the attempt lost, its
  // fenced writes and its late report are refused.
  LeaseRenewal late = renew_leases(store, "stalled", {first->fence()}, 120, 10);
  EXPECT_EQ(late.lost, std::vector<std::int64_t>{job.id});
  EXPECT_FALSE(job_fence_holds(store, first->fence()));
  EXPECT_TRUE(job_fence_holds(store, taken->fence()));
  EXPECT_THROW(set_job_run(store, first->fence(), 1), Error);
  EXPECT_FALSE(finish_job(store, first->fence(), "stalled", JobState::kSucceeded, "", "", 120, 0));
  EXPECT_EQ(finish_job(store, taken->fence(), "w2", JobState::kSucceeded, "", "", 121, 0), JobState::kSucceeded);
  EXPECT_EQ(find_job(store, job.id).state, JobState::kSucceeded);
}

// Regression (issue 12): a takeover did not count as an attempt, so a job
// that killed its worker every time was retried forever.
TEST_F(JobsCatalogTest, AJobWhoseWorkersKeepDyingEndsFailedAfterItsRetries) {
  Store store = Store::open(root());
  JobRecord job = submit_job(store, spec("oom", 0, 1, 1), 100);  // two attempts
  ASSERT_TRUE(claim_job(store, "w1", 1, 100, 10));
  auto second = claim_job(store, "w2", 1, 111, 10);  // w1 died
  ASSERT_TRUE(second);
  EXPECT_EQ(second->attempts, 2);
  EXPECT_FALSE(claim_job(store, "w3", 1, 122, 10));  // w2 died too: nothing left to run
  JobRecord ended = find_job(store, job.id);
  EXPECT_EQ(ended.state, JobState::kFailed);
  EXPECT_NE(ended.error.find("its worker w2 stopped"), std::string::npos) << ended.error;
  EXPECT_NE(ended.error.find("attempt 2 of 2"), std::string::npos) << ended.error;
  retry_job(store, job.id, 130);
  EXPECT_TRUE(claim_job(store, "w3", 1, 130, 10));
}

TEST_F(JobsCatalogTest, FailuresRetryAfterBackoffUntilAttemptsRunOut) {
  Store store = Store::open(root());
  JobRecord job = submit_job(store, spec("a", 0, 1, 1), 100);
  EXPECT_EQ(job.max_attempts, 2);
  auto first = claim_job(store, "w", 1, 100, 30);
  ASSERT_TRUE(first);
  EXPECT_EQ(finish_job(store, first->fence(), "w", JobState::kFailed, "", "killed by signal 11", 110, 4), JobState::kQueued);
  EXPECT_EQ(find_job(store, job.id).error, "killed by signal 11");
  EXPECT_FALSE(claim_job(store, "w", 1, 113, 30));  // backing off until 114
  auto again = claim_job(store, "w", 1, 114, 30);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->attempts, 2);
  EXPECT_EQ(finish_job(store, again->fence(), "w", JobState::kFailed, "", "again", 120, 8), JobState::kFailed);
  EXPECT_FALSE(claim_job(store, "w", 1, 1000, 30));
  retry_job(store, job.id, 1000);  // by hand: one more attempt
  auto third = claim_job(store, "w", 1, 1000, 30);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->attempts, 3);
  EXPECT_THROW(retry_job(store, job.id, 1001), Error);  // running: nothing to retry
}

TEST_F(JobsCatalogTest, CancelQueuedAtOnceAndRunningThroughItsWorker) {
  Store store = Store::open(root());
  JobRecord queued = submit_job(store, spec("q"), 100);
  JobRecord running = submit_job(store, spec("r", 9), 100);
  auto claimed = claim_job(store, "w", 1, 100, 30);
  ASSERT_EQ(claimed->id, running.id);
  EXPECT_EQ(cancel_job(store, queued.id, 101), JobState::kCancelled);
  EXPECT_FALSE(claim_job(store, "w", 1, 102, 30));
  EXPECT_EQ(cancel_job(store, running.id, 103), JobState::kRunning);
  EXPECT_EQ(renew_leases(store, "w", {claimed->fence()}, 104, 30).cancelled, std::vector<std::int64_t>{running.id});
  EXPECT_EQ(finish_job(store, claimed->fence(), "w", JobState::kCancelled, "", "cancelled", 105, 0), JobState::kCancelled);
  EXPECT_THROW(cancel_job(store, running.id, 106), Error);
  // A job cancelled while its worker died is closed by the next claim.
  JobRecord orphan = submit_job(store, spec("o"), 107);
  ASSERT_TRUE(claim_job(store, "dead", 1, 107, 5));
  cancel_job(store, orphan.id, 108);
  EXPECT_FALSE(claim_job(store, "w", 1, 200, 30));
  EXPECT_EQ(find_job(store, orphan.id).state, JobState::kCancelled);
}

TEST_F(JobsCatalogTest, ReleaseRequeuesWithoutSpendingTheAttempt) {
  Store store = Store::open(root());
  JobRecord job = submit_job(store, spec("a"), 100);
  auto claimed = claim_job(store, "w", 1, 100, 30);
  ASSERT_TRUE(claimed);
  release_job(store, claimed->fence(), "w");
  JobRecord back = find_job(store, job.id);
  EXPECT_EQ(back.state, JobState::kQueued);
  EXPECT_EQ(back.attempts, 0);
}

TEST_F(JobsCatalogTest, AliasesResolveKeepHistoryAndRollBack) {
  Store store = Store::open(root());
  ModelRecord v1 = model(store, "m", 0.80), v2 = model(store, "m", 0.90);
  EXPECT_THROW(find_model(store, parse_model_ref("m@production")), Error);
  set_alias(store, v1, "production", "set", "alice@host", "first");
  EXPECT_EQ(find_model(store, parse_model_ref("m@production")).version, 1);
  set_alias(store, v2, "production", "promote", "bob@host", "better");
  EXPECT_EQ(find_model(store, parse_model_ref("m@production")).version, 2);
  EXPECT_EQ(parse_model_ref("m@production").to_string(), "m@production");
  EXPECT_EQ(parse_model_ref("m@v2").version, 2);
  EXPECT_FALSE(parse_model_ref("m@latest").alias);
  EXPECT_THROW(parse_model_ref("m@1bad"), Error);
  auto history = alias_history(store, "m");
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].by, "bob@host");
  EXPECT_EQ(history[1].reason, "better");
  EXPECT_EQ(history[1].previous, 1);
  EXPECT_EQ(history[1].version, 2);
  EXPECT_EQ(rollback_alias(store, "m", "production", "carol@host", "regression").version, 1);
  EXPECT_EQ(find_model(store, parse_model_ref("m@production")).version, 1);
  EXPECT_EQ(alias_history(store, "m").back().action, "rollback");
  EXPECT_THROW(rollback_alias(store, "m", "staging", "x", "y"), Error);
  EXPECT_THROW(validate_alias_name("latest"), Error);
  EXPECT_THROW(validate_alias_name("v3"), Error);
}

TEST_F(JobsCatalogTest, GatesCompareWithAnAliasOrAConstant) {
  Store store = Store::open(root());
  ModelRecord v1 = model(store, "m", 0.80), v2 = model(store, "m", 0.90), v3 = model(store, "m", 0.85);
  Gate gate = parse_gate("val_accuracy >= production");
  EXPECT_EQ(gate.metric, "val_accuracy");
  EXPECT_EQ(gate.scored_metric, "accuracy");
  EXPECT_EQ(gate.op, ">=");
  EXPECT_FALSE(gate.constant);
  EXPECT_EQ(parse_gate("test_macro_f1 > staging").scored_metric, "macro_f1");
  EXPECT_EQ(parse_gate("rmse <= production").scored_metric, "rmse");
  // Unset alias: nothing to beat; the move records the gate's object.
  GateVerdict first = promote_model(store, v1, "production", gate, "");
  EXPECT_TRUE(first.passed);
  EXPECT_FALSE(first.comparison);
  EXPECT_EQ(alias_history(store, "m").back().gate["passed"], true);
  EXPECT_EQ(alias_history(store, "m").back().gate["expression"], "val_accuracy >= production");
  // Set: both models are scored afresh; these were registered without a
  // lineage, so which rows they trained on is unknown and the gate refuses
  // by its rule (never a silent pass), naming the remedy.
  GateVerdict refused = promote_model(store, v2, "production", gate, "");
  EXPECT_FALSE(refused.passed);
  EXPECT_NE(refused.reason.find("lineage"), std::string::npos) << refused.reason;
  EXPECT_NE(refused.reason.find("production stays on m@v1"), std::string::npos) << refused.reason;
  EXPECT_NE(refused.reason.find("check m@v2"), std::string::npos) << refused.reason;
  EXPECT_NE(refused.reason.find("then promote it to production by hand, without a gate"), std::string::npos)
      << refused.reason;
  // The parts cli/ words the remedy from, with its commands.
  ASSERT_TRUE(refused.uncompared);
  EXPECT_NE(refused.uncompared->cause.find("lineage"), std::string::npos) << refused.uncompared->cause;
  EXPECT_TRUE(refused.reason.starts_with(refused.uncompared->cause)) << refused.reason;
  ASSERT_TRUE(refused.comparison);
  EXPECT_FALSE(refused.comparison->incumbent);
  const nlohmann::json j = refused.to_json();
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["alias"], "production");
  EXPECT_EQ(j["metric"], "accuracy");
  EXPECT_EQ(j["candidate_model"], "m@v2");
  EXPECT_EQ(j["incumbent_model"], "m@v1");
  EXPECT_TRUE(j["incumbent"].is_null());
  EXPECT_EQ(find_model(store, parse_model_ref("m@production")).version, 1);  // unchanged
  EXPECT_EQ(alias_history(store, "m").size(), 1u);                          // a refusal moves nothing
  // A constant compares the recorded metric, as before.
  GateVerdict constant = evaluate_gate(store, parse_gate("val_accuracy>0.84"), v3);
  EXPECT_TRUE(constant.passed);
  EXPECT_EQ(constant.to_json()["candidate"], 0.85);
  EXPECT_FALSE(evaluate_gate(store, parse_gate("val_accuracy < 0.5"), v3).passed);
  EXPECT_THROW(evaluate_gate(store, parse_gate("test_rmse <= 1"), v3), Error);
  // --on belongs to alias gates and needs a gate.
  EXPECT_THROW(evaluate_gate(store, parse_gate("val_accuracy > 0.5"), v3, parse_dataset_ref("d@v1")), Error);
  EXPECT_THROW(promote_model(store, v3, "production", std::nullopt, "", parse_dataset_ref("d@v1")), Error);
  for (const char* bad : {"val_accuracy", "val_accuracy => 1", ">= 1", "val_accuracy >=", "val_accuracy >= @x",
                          "val accuracy >= 1", "loss >= production", "val_acuracy >= production"})
    EXPECT_THROW(parse_gate(bad), Error) << bad;
  try {
    parse_gate("val_acuracy >= production");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'accuracy'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("macro_f1"), std::string::npos) << e.what();
  }
}

TEST_F(JobsCatalogTest, RetrainRecordsFindTheLastTrainedOne) {
  Store store = Store::open(root());
  EXPECT_FALSE(last_trained_retrain(store, "m"));
  RetrainRecord r;
  r.config = "m";
  r.config_hash = "h1";
  r.dataset = "iris@v1";
  r.outcome = RetrainOutcome::kPromoted;
  r.started = 1;
  r.ended = 2;
  record_retrain(store, r);
  r.outcome = RetrainOutcome::kSkipped;
  r.config_hash = "h2";
  record_retrain(store, r);
  auto last = last_trained_retrain(store, "m");
  ASSERT_TRUE(last);
  EXPECT_EQ(last->config_hash, "h1");
  EXPECT_EQ(list_retrains(store).size(), 2u);
  EXPECT_TRUE(list_retrains(store)[0].gate.is_null());
  r.gate = {{"expression", "val_accuracy >= production"}, {"passed", false}, {"candidate", 0.5}};
  record_retrain(store, r);
  EXPECT_EQ(list_retrains(store).back().gate, r.gate);
}

// `anneal metrics` and serve's /metrics escape label values the one way the
// text format asks: backslash, double quote and line feed, nothing else.
TEST(PrometheusLabelValue, EscapesBackslashQuoteAndLineFeedOnly) {
  EXPECT_EQ(prometheus_label_value("plain name@v1"), "plain name@v1");
  EXPECT_EQ(prometheus_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(prometheus_label_value("tab\there\r"), "tab\there\r");
  EXPECT_EQ(prometheus_label_value(""), "");
}

}  // namespace
}  // namespace anneal
