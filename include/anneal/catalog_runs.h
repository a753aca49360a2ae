// Catalog records of training: runs, their per-epoch metrics, checkpoints
// and registered model versions (catalog schema version 2, docs/STORE.md).
//
// This is store/: it keeps these as generic records and opaque blobs and
// knows nothing of what a checkpoint or a model holds (src/runs/ does).
// Blobs are written like an import writes its streams: chunked objects
// under the store's writer lock, recorded in the same transaction as the row
// that owns them, so gc never removes them and a crash leaves only
// unreferenced objects.
//
// Every function takes a Store used by one thread, throws anneal::Error
// (kNotFound for a run or model that does not exist) and prints nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/datasets.h"
#include "anneal/fs.h"
#include "anneal/maintenance.h"
#include "anneal/store.h"

namespace anneal {

enum class RunStatus { kRunning, kSucceeded, kFailed, kCancelled };
const char* run_status_name(RunStatus status);  // "running", "succeeded", ...

struct RunRecord {
  std::int64_t id = 0;
  std::string name;          // the model name the run registers
  std::string dataset;       // the dataset version it trains on: NAME@vN
  std::string config_text;   // the resolved configuration
  RunStatus status = RunStatus::kRunning;
  std::string started_at;    // ISO 8601 UTC
  std::string ended_at;      // empty while running
  std::string host;
  std::string error;         // failed: the error message
  nlohmann::json summary;    // the run's final figures; opaque to the store
  std::string model;         // NAME@vN once registered, else empty
  std::string label() const { return "run-" + std::to_string(id); }
};

// The fencing token of one attempt at a queued job (catalog_jobs.h): the
// job and the claim generation its worker was given. A write made for that
// attempt passes it, and the write's own transaction checks that the job is
// still running under that claim; otherwise it throws kBusy and writes
// nothing. So a process whose worker stalled past its lease, while another
// worker took the job over, can record no checkpoint, model or outcome.
struct JobFence {
  std::int64_t job = 0;
  std::int64_t claim = 0;
};
// Whether the job is still running under that claim (a read: a write
// checks it again in its own transaction).
bool job_fence_holds(Store& store, const JobFence& fence);

// "run-7" or "7" -> 7. Throws kUsage naming `what` otherwise.
std::int64_t parse_run_id(std::string_view text, std::string_view what = "RUN");

// Records a new run, status running, started now. `dataset` must name an
// existing version (NAME@vN); throws kNotFound otherwise.
RunRecord create_run(Store& store, const std::string& name, const DatasetRef& dataset,
                     const std::string& config_text, const std::string& host);

// Sets a run back to running (a resume) and clears its end and error.
void reopen_run(Store& store, std::int64_t run);

// Ends a run that registers no model: failed or cancelled (with `error`
// saying why), or succeeded. `summary` replaces the stored summary.
// With `fence`, only while that job attempt still holds its claim.
void end_run(Store& store, std::int64_t run, RunStatus status, const std::string& error,
             const nlohmann::json& summary, const JobFence* fence = nullptr);

RunRecord find_run(Store& store, std::int64_t run);  // throws kNotFound
std::vector<RunRecord> list_runs(Store& store);     // oldest first

// One epoch's named values (train_loss, val_accuracy, samples_per_s, ...).
struct EpochRecord {
  std::int64_t epoch = 0;
  std::vector<std::pair<std::string, double>> values;
};
// Records (or replaces: a resumed run recomputes an epoch) one epoch's values.
void record_epoch(Store& store, std::int64_t run, const EpochRecord& record);
std::vector<EpochRecord> run_epochs(Store& store, std::int64_t run);  // by epoch

struct CheckpointRecord {
  std::int64_t id = 0, run = 0, step = 0;
  std::string created_at;
  std::string blob;
  std::uint64_t size = 0;
  std::optional<double> score;  // lower is better; the best is never released
};

struct SavedCheckpoint {
  CheckpointRecord checkpoint;
  ReclaimReport reclaimed;    // the released checkpoints' blobs and objects removed
  std::string reclaim_error;  // why removing them failed (gc removes them later); empty when it did not
};

// Writes `bytes` as a blob and records it as checkpoint `step` of `run`
// (replacing one at the same step), then releases (deletes the rows of) the
// oldest checkpoints beyond the newest `keep`, never the one with the best
// score. Atomic: after a crash the checkpoint is either fully recorded or
// absent. After the commit, with the writer lock released, removes the blobs
// and objects only the released checkpoints held when the gc lock is free
// at once (reclaim_blobs; never waits, so training never blocks on gc or
// an import): keep bounds the disk a run uses. A failure there does not
// undo the saved checkpoint; it is returned in reclaim_error. Throws
// anneal::Error when the checkpoint cannot be saved (a full disk: kFailure);
// the run's previous checkpoints are then unchanged. With `fence`, only
// while that job attempt still holds its claim (kBusy otherwise).
SavedCheckpoint save_checkpoint(Store& store, std::int64_t run, std::int64_t step, std::string_view bytes,
                                std::optional<double> score, std::int64_t keep, const JobFence* fence = nullptr);
std::vector<CheckpointRecord> run_checkpoints(Store& store, std::int64_t run);  // by step
// The checkpoint's bytes, verified; kCorrupt when damaged.
std::string read_checkpoint(Store& store, const CheckpointRecord& checkpoint);

struct ModelRecord {
  std::int64_t id = 0;
  std::string name;
  int version = 0;
  std::string created_at;
  std::int64_t run = 0;
  std::string blob;
  std::uint64_t size = 0;
  nlohmann::json lineage;  // opaque to the store
  nlohmann::json metrics;  // opaque to the store
  std::string ref() const { return name + "@v" + std::to_string(version); }
};

// NAME, NAME@latest or NAME@vN as for datasets, or NAME@ALIAS: a name
// such as production that `anneal model alias set` points at a version
// (catalog_jobs.h).
struct ModelRef {
  std::string name;
  std::optional<int> version;
  std::optional<std::string> alias;
  std::string to_string() const;
};
ModelRef parse_model_ref(std::string_view text, std::string_view what = "MODEL");
// A model name follows a dataset name's rule (validate_dataset_name); a
// name that breaks it is kUsage "invalid model name '...': expected ...",
// so that the message says which kind of name it is about.
void validate_model_name(std::string_view name);

// In one transaction: writes `bytes` as the model blob, registers the next
// version NAME@vN of `name` owned by `run`, and marks the run succeeded with
// `summary`. Returns the new record.
// With `fence`, only while that job attempt still holds its claim.
ModelRecord register_model(Store& store, std::int64_t run, const std::string& name,
                           std::string_view bytes, const nlohmann::json& lineage,
                           const nlohmann::json& metrics, const nlohmann::json& summary,
                           const JobFence* fence = nullptr);
// Throws kNotFound, also for an alias that is not set.
ModelRecord find_model(Store& store, const ModelRef& ref);
std::vector<ModelRecord> list_models(Store& store);        // by name, then version
// The model's bytes, verified; kCorrupt when damaged.
std::string read_model(Store& store, const ModelRecord& model);

// What a run-level check (fsck_runs) reads, listed without interpreting any
// JSON column, so one damaged row cannot hide the others.
struct RunArtifact {
  enum class Kind { kModel, kCheckpoint } kind = Kind::kModel;
  std::string owner;          // "model iris@v2", "run-3 checkpoint at step 120"
  std::int64_t run = 0;
  std::int64_t step = 0;      // checkpoints
  std::string blob;
};
// Every model and checkpoint, models first (by name, version), then
// checkpoints (by run, step).
std::vector<RunArtifact> list_run_artifacts(Store& store);
// The artifact's bytes, verified; kCorrupt when damaged.
std::string read_run_artifact(Store& store, const RunArtifact& artifact);

// A training config the catalog keeps as text: each run's resolved config
// (owner "run-3") and each job's (owner "job 4").
struct StoredConfig {
  std::string owner;
  std::string text;
};
std::vector<StoredConfig> list_stored_configs(Store& store);

// The advisory lock a training process holds on its run for as long as it
// trains: try_lock fails (held() false) while another process trains it.
FileLock try_lock_run(const Store& store, std::int64_t run);
// The same lock, waiting until the process that holds it lets go.
FileLock lock_run(const Store& store, std::int64_t run);

}  // namespace anneal
