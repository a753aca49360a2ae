// Catalog records of queued training jobs, of model aliases and of nightly
// retrains (catalog schema version 3, docs/STORE.md).
//
// This is store/: generic records and the atomic state changes the queue
// needs (claim with a lease, heartbeat, finish, retry with backoff). Which
// process runs a job and how it trains is src/jobs/'s business.
//
// Times that order or expire things (leases, backoff, durations) are Unix
// seconds as doubles, taken by the caller, so tests can drive the clock;
// every record also keeps ISO 8601 text for people.
//
// Every function takes a Store used by one thread, throws anneal::Error
// (kNotFound for a job, model or alias that does not exist; kUsage for a
// state change the record's state forbids) and prints nothing. Each state
// change is one SQLite transaction, so several workers and commands on one
// store see each job in exactly one state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/catalog_runs.h"
#include "anneal/store.h"

namespace anneal {

// ---- Jobs --------------------------------------------------------------

enum class JobState { kQueued, kRunning, kSucceeded, kFailed, kCancelled };
const char* job_state_name(JobState state);  // "queued", "running", ...
inline constexpr JobState kAllJobStates[] = {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                                             JobState::kFailed, JobState::kCancelled};

struct JobSpec {
  std::string name;           // the config's model name
  std::string config_text;    // the whole INI text, frozen at submit time
  std::string config_source;  // the path it came from, for messages
  std::int64_t priority = 0;  // higher runs first
  std::int64_t retries = 0;   // extra attempts after a failure
  std::optional<double> timeout_s;
  std::int64_t cores = 1;     // threads the job may use, all of them
  // > 1: the worker starts the job under `mpirun -np ranks` (a training run
  // across processes, docs/TRAINING.md), with `--hostfile hostfile` unless
  // empty (an absolute path, read by mpirun on the worker's host).
  std::int64_t ranks = 1;
  std::string hostfile;
};
// The most ranks a job may ask for: mpirun starts every one of them (a
// process each, with its own copy of the network and a share of the data),
// so a mistyped count (100000) would fork until the hosts give out before
// the job could fail. 4096 is well above any cluster a queue of this kind
// serves; submit_job refuses more (kUsage naming --ranks and the limit).
inline constexpr std::int64_t kMaxJobRanks = 4096;

struct JobRecord {
  std::int64_t id = 0;
  JobSpec spec;
  JobState state = JobState::kQueued;
  std::int64_t attempts = 0;      // started so far
  std::int64_t max_attempts = 1;  // 1 + retries (+ one per manual retry)
  bool cancel_requested = false;
  double submitted = 0, started = 0, ended = 0;  // Unix seconds; 0: not yet
  double not_before = 0;          // backoff: not claimed before this
  std::string worker;             // "host:pid" of the holder while running
  double lease_expires = 0;
  std::optional<std::int64_t> run;  // the training run, once started
  std::string model;              // NAME@vN it registered, else empty
  std::string error;              // why the last attempt failed
  std::int64_t claim = 0;         // claim generation: +1 on every claim, takeovers too
  std::string label() const { return "job-" + std::to_string(id); }
  // The fencing token of the attempt this record was claimed for.
  JobFence fence() const { return {id, claim}; }
};

// Now, in the Unix seconds the queue's times are kept in.
double unix_now();

// "job-7" or "7" -> 7. Throws kUsage naming `what` otherwise.
std::int64_t parse_job_id(std::string_view text, std::string_view what = "JOB");

// Queues a job; returns its record.
JobRecord submit_job(Store& store, const JobSpec& spec, double now);

JobRecord find_job(Store& store, std::int64_t job);  // throws kNotFound
std::vector<JobRecord> list_jobs(Store& store);     // oldest first

// Atomically takes the next job for `worker`: the highest priority, then the
// oldest, among queued jobs whose backoff has passed and running jobs whose
// lease expired (their worker died), that needs at most `max_cores`. Marks
// it running with a lease until now + lease_s, increments its claim
// generation (the new attempt's fencing token) and its attempt count: a
// takeover from a dead worker counts too, so a job that kills its worker
// every time ends. A taken-over job with no attempts left is failed instead
// (saying its worker stopped) and the next candidate claimed. Returns
// nothing when no job fits.
std::optional<JobRecord> claim_job(Store& store, const std::string& worker, std::int64_t max_cores,
                                   double now, double lease_s);

struct LeaseRenewal {
  std::vector<std::int64_t> cancelled;  // renewed, and cancellation was requested
  std::vector<std::int64_t> lost;       // no longer held under that claim: stop them
};
// Extends to now + lease_s the lease of each job attempt in `held` that
// `worker` still holds under that claim. A worker that stalled past its lease
// (stopped, starved) finds here the attempts another worker took over.
LeaseRenewal renew_leases(Store& store, const std::string& worker, const std::vector<JobFence>& held, double now,
                          double lease_s);

// Records the run a running job trains, so a retry resumes it; kBusy when
// the attempt `fence` names lost its claim.
void set_job_run(Store& store, const JobFence& fence, std::int64_t run);

// Ends a running job held by `worker`: succeeded (with the model it
// registered), cancelled, or failed with `error`. A failure with attempts
// left goes back to the queue, claimable after now + backoff_s; the return
// value is the state the job is in afterwards. A job no longer held by
// `worker` under that claim (its lease expired and another took it) is left
// alone and std::nullopt returned.
std::optional<JobState> finish_job(Store& store, const JobFence& fence, const std::string& worker, JobState outcome,
                                   const std::string& model, const std::string& error, double now,
                                   double backoff_s);

// Puts a running job held by `worker` back in the queue without counting
// the attempt: the worker is shutting down, not the job failing.
void release_job(Store& store, const JobFence& fence, const std::string& worker);

// Cancels a job: a queued one at once (returns kCancelled); a running one is
// flagged for its worker, which stops it at the next step (returns
// kRunning). Throws kUsage for a job that already ended.
JobState cancel_job(Store& store, std::int64_t job, double now);

// Queues a failed or cancelled job again with one more attempt allowed
// (throws kUsage for any other state). It resumes its run's checkpoint.
void retry_job(Store& store, std::int64_t job, double now);

// ---- Model aliases ------------------------------------------------------

struct AliasRecord {
  std::string name, alias;
  ModelRecord model;
};

struct AliasEvent {
  std::string name, alias;
  std::string action;                // "set", "promote", "rollback"
  std::optional<int> version;        // the holder afterwards
  std::optional<int> previous;       // the holder before
  std::string at, by, reason;
  nlohmann::json gate;               // the promotion gate that allowed it (GateVerdict::to_json), or null
};

// Alias names: letters, digits, '_', '-', '.', starting with a letter; not
// "latest" and not of the form vN (those are versions). Throws kUsage.
void validate_alias_name(std::string_view alias);

struct RetrainRecord;

// Points NAME@ALIAS at `model` (any version of NAME), recording who, when,
// why, the previous holder and the gate that allowed it (null: none) in the
// alias history. `retrain`, when given, is the record of the retrain that
// moves the alias: it commits in the same transaction, so a crash leaves
// both or neither.
void set_alias(Store& store, const ModelRecord& model, const std::string& alias, const std::string& action,
               const std::string& by, const std::string& reason, const nlohmann::json& gate = nullptr,
               const RetrainRecord* retrain = nullptr);

// The model NAME@ALIAS points at; std::nullopt when the alias is unset.
std::optional<ModelRecord> find_alias(Store& store, const std::string& name, const std::string& alias);
std::vector<AliasRecord> list_aliases(Store& store);  // by name, then alias
std::vector<AliasEvent> alias_history(Store& store, const std::string& name);  // oldest first

// Moves NAME@ALIAS back to the holder it had before its last change.
// Throws kUsage when there is none. Returns the model it points at now.
ModelRecord rollback_alias(Store& store, const std::string& name, const std::string& alias, const std::string& by,
                           const std::string& reason);

// ---- Retrains ------------------------------------------------------------

enum class RetrainOutcome { kTrained, kPromoted, kRefused, kSkipped, kFailed };
const char* retrain_outcome_name(RetrainOutcome outcome);

struct RetrainRecord {
  std::int64_t id = 0;
  std::string config;        // the config's model name
  std::string config_hash;   // BLAKE2b of the resolved config text
  std::string dataset;       // NAME@vN trained on, empty when none resolved
  RetrainOutcome outcome = RetrainOutcome::kTrained;
  double started = 0, ended = 0;
  std::optional<std::int64_t> run;
  std::string model;         // NAME@vN, empty when none
  std::string detail;        // the reason for a skip, refusal or failure
  nlohmann::json gate;       // the promotion gate's object (GateVerdict::to_json), or null
  nlohmann::json data_checks;  // the data checks' report (DataCheckReport::to_json), or null
};

void record_retrain(Store& store, const RetrainRecord& record);
// The latest retrain of `config` that trained a model (trained, promoted or
// refused), if any.
std::optional<RetrainRecord> last_trained_retrain(Store& store, const std::string& config);
std::vector<RetrainRecord> list_retrains(Store& store);  // oldest first

}  // namespace anneal
