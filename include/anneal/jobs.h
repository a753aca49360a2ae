// Jobs: training queued in the catalog and run by workers, and the
// foreground nightly retrain.
//
// A job is a frozen config plus scheduling terms (priority, retries,
// timeout, cores). `run_worker` claims jobs (catalog_jobs.h: an atomic claim
// with a lease the worker keeps renewing) and runs each in a child process,
// `JOB_COMMAND job-N`, so a job that segfaults, aborts or runs out of memory
// takes nothing else down. The child runs `execute_job`, which trains the
// job's run (resuming it from its last checkpoint when an earlier attempt
// got that far). Each child is started with its CPU affinity set to a share
// of the worker's cores that no other running job holds, so every thread it
// starts (oneDNN's OpenMP team, oneTBB, OpenBLAS) is confined to that share,
// and its `threads` is set to the share's size.
//
// Every function takes a Store used by one thread, reports through the given
// Reporter only, and throws anneal::Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/catalog_jobs.h"
#include "anneal/data_check.h"
#include "anneal/report.h"
#include "anneal/runs.h"
#include "anneal/store.h"

namespace anneal {

// Reads CONFIG text, checks it (every key and value, as train would), and
// builds the spec `anneal submit` queues. Throws kUsage naming SOURCE:LINE
// or the override (as `named` names overrides).
JobSpec make_job_spec(const std::string& config_text, const std::string& config_source,
                      const std::vector<std::string>& overrides, const SettingSources& named = {});

// In the child: trains job `job` (resuming its run when it has one) and
// records the run on the job, as the attempt of claim generation `claim`
// (the worker's fencing token): every record it makes checks that claim, so
// once another worker has taken the job over it throws kBusy having
// recorded nothing. Resuming a run another process still trains (the
// attempt before a takeover) waits until that process stops. Returns
// train_model's result; a stop request checkpoints and returns cancelled.
// After each slice of training steps it passes the fault point
// "job.NAME.attempt-N.trained" (NAME the config's name, N the attempt),
// where the tests of worker isolation crash a job.
// With `comm` (a job of several ranks, started by the worker through
// mpirun): this is rank 0, and the run trains across the ranks (see
// TrainRequest::communicator); the other ranks run follow_training().
TrainResult execute_job(Store& store, std::int64_t job, std::int64_t claim, std::stop_token stop,
                        TrainingReporter& reporter, Communicator* comm = nullptr);

// The worker-to-child protocol, written and read here only (worker.cc):
// the worker starts each job's child with two variables in its
// environment. ANNEAL_JOB_CLAIM is the attempt's claim generation (its
// fencing token; mpirun passes it on to rank 0 on any host). For a job of
// one rank, ANNEAL_WORKER_PID is the worker's pid: the child asks to be
// killed when its parent dies and checks its parent is still that worker,
// so a worker killed with -9 leaves no training behind that another worker
// would run again once the lease expires.
struct JobChildEnvironment {
  std::optional<std::int64_t> claim;  // ANNEAL_JOB_CLAIM, when set
  bool attached = true;               // false: the worker that started it is gone
};
// In the child, first thing: reads the variables and, when
// ANNEAL_WORKER_PID is set, arranges to die with that worker (attached is
// false when it has died already: the child must exit at once). Run by
// hand, without them: no claim, attached. kUsage for a claim that is not a
// number.
JobChildEnvironment attach_job_child();

struct WorkerOptions {
  // argv that runs one job in a child, the job label ("job-7") appended:
  // {"/usr/bin/anneal", "--store", ROOT, "job-exec"}.
  std::vector<std::string> job_command;
  // How a job of several ranks is started: this argv, then "--bind-to
  // none" (unless it has a --bind-to: the local ranks keep the job's CPUs),
  // "-np N", "--hostfile FILE" when the job has one, "-x ANNEAL_JOB_CLAIM"
  // (the claim reaches rank 0 on any host), and job_command with the label.
  std::vector<std::string> mpirun = {"mpirun"};
  std::int64_t cores = 1;      // cores all running jobs share
  std::int64_t max_jobs = 0;   // jobs at once; 0: as many as the cores allow
  bool drain = false;          // exit once no job is queued or running here
  double lease_s = 30;         // a dead worker's jobs are taken over after this
  double backoff_s = 2;        // first retry delay; doubles per attempt
  double term_grace_s = 30;    // SIGTERM to SIGKILL for a timed-out job
  std::optional<std::filesystem::path> metrics_textfile_dir;  // refreshed as jobs change
};

// Runs jobs until `stop` is requested (then stops its children, which
// checkpoint, and puts their jobs back in the queue) or, with drain, until
// none is left. Job logs go to STORE/logs/job-N.log. Notes one line per job
// start and end.
void run_worker(Store& store, const WorkerOptions& options, Reporter& reporter, std::stop_token stop);

// Where a job's log is: STORE/logs/job-N.log (it may not exist yet).
std::filesystem::path job_log_path(const Store& store, std::int64_t job);

// ---- Promotion gates -------------------------------------------------------

// "METRIC OP RHS": OP one of >= > <= < == !=, RHS a number or an alias of
// the same model name. Against a number the candidate's recorded METRIC
// is compared. Against an alias the candidate and the model holding the
// alias now (the incumbent) are both scored afresh, each with its own
// preprocessing, on the same rows: the test split of the version the gate
// is judged on, less every row whose content either model trained on (the
// train split of the version its lineage names, rows compared by
// row_content_key over the columns both tables share by name and type).
// METRIC then names what eval computes, a val_/test_/baseline_ prefix
// stripped: val_accuracy compares accuracy. Throws kUsage naming `what`
// (the caller's name for the gate: cli/ passes its flag) and what was
// expected (an alias gate's unknown metric lists the known).
struct Gate {
  std::string metric, op, rhs;
  std::optional<double> constant;  // RHS is a number
  std::string text;
  std::string scored_metric;       // alias gates: the eval metric compared ("accuracy")
};
Gate parse_gate(std::string_view text, std::string_view what = "the gate");

// The eval metrics an alias gate can compare (gate_scored_metric's results).
const std::vector<std::string>& gate_known_metrics();

// What an alias gate compared: both fresh scores and the rows they were
// measured on. A score is absent when that model could not be scored.
struct GateComparison {
  std::string alias;                        // the alias the candidate must beat
  std::string metric;                       // as scored: "accuracy"
  std::string candidate_model, incumbent_model;  // NAME@vN
  std::optional<double> candidate, incumbent;
  std::string on;                           // NAME@vN whose test split the rows come from
  std::uint64_t test_rows = 0;              // rows of that test split
  std::uint64_t excluded_rows = 0;          // of them, trained on by either model
  std::uint64_t rows = 0;                   // scored: test_rows - excluded_rows
};

struct GateVerdict {
  bool passed = false;
  std::string reason;  // one line: "accuracy 0.975 >= 0.958 (production: digits@v1) on 180 rows of ..."
  std::string expression;                   // the gate as written
  std::optional<double> recorded;           // constant gates: the candidate's recorded metric
  std::optional<GateComparison> comparison; // alias gates whose alias is set
  // An alias gate that could not compare the two models refuses by its
  // rule (the alias stays; check the candidate, then promote it by hand
  // without a gate). `reason` says so with the remedy in words; these are
  // its parts, so that cli/ can say the remedy with its commands.
  struct Uncompared {
    std::string cause;             // why: "missing column 'x' ..."
    bool version_unknown = false;  // the version to judge on could not be told: naming one is the fix
  };
  std::optional<Uncompared> uncompared;
  // The "gate" object of --json output, the alias history and the retrain
  // record: expression, passed, reason, and for an alias gate alias,
  // metric, candidate, incumbent (scores or null), candidate_model,
  // incumbent_model, on, split ("test"), rows, test_rows, excluded_rows.
  nlohmann::json to_json() const;
};

// Evaluates the gate for `candidate`. An alias that is unset passes (there
// is nothing to beat) and says so. An alias gate is judged on the test
// split of `on` (default: the candidate's training data version); when
// either model cannot be scored on those rows (a column it needs is
// missing or changed, a label it never saw) or no row is left, the gate
// refuses in one line naming why and the remedy: check the candidate, then
// `anneal model promote REF --to ALIAS` without --gate. Scores as `anneal
// eval` does by default (device auto, every core). Throws kUsage when a
// constant gate's model lacks METRIC or an alias gate's metric is not
// computed for the model (roc_auc of a 10-class model), kNotFound for an
// unknown `on`.
GateVerdict evaluate_gate(Store& store, const Gate& gate, const ModelRecord& candidate,
                          const std::optional<DatasetRef>& on = std::nullopt);

// Who is acting, for the alias history: "user@host".
std::string acting_user();

// Moves NAME@ALIAS to `model` when `gate` (if any, judged on `on` as
// evaluate_gate does) holds; records who, when, why and the gate's object
// in the alias history. Returns the verdict (passed true when there was no
// gate). `retrain`, when given and the gate holds, is completed as promoted
// (outcome, the verdict's reason, the gate's object when there is a gate,
// the end time) and committed in the move's transaction (set_alias).
GateVerdict promote_model(Store& store, const ModelRecord& model, const std::string& alias,
                          const std::optional<Gate>& gate, const std::string& reason,
                          const std::optional<DatasetRef>& on = std::nullopt, RetrainRecord* retrain = nullptr);

// ---- Retrain -------------------------------------------------------------

struct RetrainRequest {
  std::string config_text, config_source;
  std::vector<std::string> overrides;
  SettingSources sources;  // how messages name the overrides and the warm start (cli/: its flags)
  std::optional<std::filesystem::path> data;  // import first as a new version of the config's dataset
  bool if_changed = false;
  std::optional<std::string> promote;  // alias
  bool warm_start = false;             // start from the model holding `promote` (which it needs)
  std::optional<Gate> gate;
  // Set: before training, the version to train is checked against the one
  // the model holding `promote` trained on (anneal/data_check.h); when a
  // check fails the model is still trained, but not promoted (kRefused).
  // Nothing to check while the alias is unset. Needs `promote`.
  std::optional<DriftThresholds> drift;
  std::stop_token stop;
};

struct RetrainResult {
  RetrainOutcome outcome = RetrainOutcome::kTrained;
  std::string reason;            // why skipped or refused; empty otherwise
  std::string dataset;           // NAME@vN
  bool imported = false;         // --data made a new version
  std::optional<TrainResult> train;
  std::optional<GateVerdict> gate;
  std::optional<DataCheckReport> data_checks;  // with RetrainRequest::drift, when there was a reference
  nlohmann::json to_json() const;
};

// The cron path: under a per-config lock (held by another live process:
// kBusy naming it; a killed holder's lock is taken over), optionally
// imports --data, skips with --if-changed when the dataset version and the
// config equal those of the last retrain that trained, trains in the
// foreground, and promotes through the gate. Records the outcome for
// `anneal metrics`. A cancelled training throws kFailure after the run is
// recorded cancelled.
RetrainResult retrain(Store& store, const RetrainRequest& request, TrainingReporter& reporter);

// ---- Telemetry -------------------------------------------------------------

// `value` as a Prometheus label value goes between its double quotes in the
// text exposition format: backslash, double quote and line feed escaped
// (\\, \", \n), everything else as is. The one escape of `anneal metrics`
// and of `anneal serve`'s /metrics, so the two cannot disagree.
std::string prometheus_label_value(std::string_view value);

// The Prometheus text exposition format (version 0.0.4) of the store: jobs
// by state, job durations, retries, last retrain success and duration per
// config, each config's last gated retrain against an alias (both scores,
// the rows, the decision), the latest model metrics, training samples/s,
// store bytes and the dedup ratio.
std::string prometheus_metrics(Store& store);

// Writes prometheus_metrics() to DIR/anneal.prom atomically, for
// node_exporter's textfile collector.
void write_metrics_textfile(Store& store, const std::filesystem::path& dir);

}  // namespace anneal
