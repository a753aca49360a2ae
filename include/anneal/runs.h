// Runs: training a dataset version into a model version, and using models.
//
// train_model() resolves the config's dataset, preprocesses it (see
// preprocess.h), builds the network, records a run in the catalog, trains
// with checkpoints into the store, evaluates, and registers NAME@vN with its
// lineage. Every check that can fail without training (config keys and
// values, the dataset reference, the label, the layer spec and its shapes)
// runs before the run is recorded, so a bad config leaves no run behind.
// A run that fails or is cancelled after it started stays recorded as such;
// `resume` continues it from its latest checkpoint and finishes with weights
// bitwise identical to an uninterrupted run (same config, data, thread
// count).
// With `warm_start` in the config (or TrainRequest::warm_start) the run
// starts from a registered model's weights and fitted preprocessing when
// that model fits, and from scratch with a note saying why when it does not
// (docs/TRAINING.md, "Warm start"); the lineage records which.
//
// Every function takes a Store used by one thread, reports through the
// given Reporter only, and throws anneal::Error.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/catalog_runs.h"
#include "anneal/communicator.h"
#include "anneal/config.h"
#include "anneal/device.h"
#include "anneal/datasets.h"
#include "anneal/maintenance.h"
#include "anneal/model_metrics.h"
#include "anneal/report.h"
#include "anneal/store.h"

namespace anneal {

// Where a training run is, for a progress display.
struct TrainProgress {
  std::string run;                          // "run-7"
  std::int64_t epoch = 0, epochs = 0;       // epoch in progress (1-based)
  std::int64_t step = 0, total_steps = 0;   // optimizer steps done / planned
  std::int64_t epoch_step = 0, steps_per_epoch = 0;
  double loss = std::nan("");               // train loss of the last finished epoch
  double samples_per_s = 0;                 // since this process started training
  double eta_seconds = 0;                   // at that speed
};

// A Reporter that can also show training progress. Its notes are one line
// per epoch (and what the run is doing); training() is called a few times
// per epoch. Implementations must be thread-safe, as for Reporter.
class TrainingReporter : public Reporter {
 public:
  virtual void training(const TrainProgress& progress) = 0;
};

struct TrainRequest {
  std::string config_text;               // the INI text (empty with resume)
  std::string config_source;             // its name in errors: the path
  std::vector<std::string> overrides;    // --set key=value, winning over the file
  std::optional<Device> device;          // --device, winning over the config's `device`
  // --memory-budget as written ("2G"), winning over the config's memory_budget.
  std::optional<std::string> memory_budget;
  // An alias of the config's name to warm-start from, winning over the
  // config's `warm_start` (retrain --warm-start: the alias it promotes).
  std::optional<std::string> warm_start;
  std::optional<std::int64_t> resume;    // continue this run instead
  // How messages name the overrides, device, warm_start and memory_budget
  // above (cli/ gives its flags: "--set", "--device", ...).
  SettingSources sources;
  std::stop_token stop;                  // requested: checkpoint, record cancelled, return
  // Called once the run is recorded (created or reopened), before training.
  std::function<void(const RunRecord&)> on_run_started;
  // Set when training for a queued job: every checkpoint, the model and the
  // run's outcome are recorded only while this attempt holds its claim.
  std::optional<JobFence> fence;
  // With resume: wait for a process still training the run to stop,
  // instead of failing kBusy (a job taken over from a stalled worker).
  bool wait_for_run_lock = false;
  // Set under `mpirun -np N` with N > 1, on rank 0: the run trains on every
  // rank of it (data parallel), while this process alone reads the store,
  // serves each rank its share of every batch, writes the checkpoints and
  // registers the model; the other ranks run follow_training(). A run of
  // layers = linear is refused (kUsage): it trains on one process.
  Communicator* communicator = nullptr;
};

struct TrainResult {
  RunRecord run;                         // as recorded at the end
  std::optional<ModelRecord> model;      // unset when cancelled
  bool cancelled = false;
  double samples_per_s = 0;
  std::string weights_hash;
  // The data path of this process: seconds from the start of the dataset's
  // load until the training arrays were ready; seconds from the process's
  // start to the end of its first training step (unset when it trained no
  // step: a linear-only model, a run resumed at its end); the process's peak
  // resident memory when the run ended.
  double load_seconds = 0;
  std::optional<double> first_step_seconds;
  std::uint64_t peak_rss_bytes = 0;
  // The memory budget the run read its rows under, whether they streamed
  // (did not all fit), and the most bytes of rows, labels and row lists
  // held at once (what the budget bounds; peak_rss_bytes adds the process,
  // the network and the batches).
  std::uint64_t memory_budget = 0;
  bool streamed = false;
  std::uint64_t data_peak_bytes = 0;
  // test_accuracy / test_rmse (...) when the version has a test split,
  // val_* with a validation fraction, baseline_* for the linear baseline.
  nlohmann::json metrics;
  // Classification: per split scored ("val", "test", "baseline_test", ...)
  // {"CLASS": {"recall": r, "precision": p, "support": n}}; else empty.
  nlohmann::json per_class = nlohmann::json::object();
};

TrainResult train_model(Store& store, const TrainRequest& request, TrainingReporter& reporter);

// A rank other than 0 of `mpirun -np N anneal train`: trains the run that
// rank 0's train_model() drives, on the rows rank 0 sends it, until rank 0
// says it is done (src/runs/distributed.h has the protocol). Opens no store
// and reads no file. Throws anneal::Error; the caller must then end the
// job (Communicator::abort), since rank 0 would wait on this rank for ever.
void follow_training(Communicator& comm);

// The run-level half of `anneal fsck`, run after store's fsck (maintenance.h),
// which cannot know what a model or checkpoint holds: every model blob
// decodes as a model, every checkpoint blob as a checkpoint of its own run
// and step, and every config the catalog keeps (runs', jobs') parses. Adds
// one line per failure to `report.problems`, naming the model, "run-N
// checkpoint at step S", run or job; skips blobs `report` already lists as
// unreadable (reported once, by fsck). Holds the gc lock shared while it
// reads (lock_out_gc). An error in one item never stops the others.
void fsck_runs(Store& store, Reporter& reporter, FsckReport& report);

// This machine's name as runs, leases and locks record it ("localhost"
// when it has none).
std::string host_name();

// Which rows of a dataset version eval scores.
enum class EvalSplit { kDefault, kTrain, kTest, kAll };  // default: test when present, else train
EvalSplit parse_eval_split(std::string_view text);     // "train" | "test" | "all"; kUsage otherwise

// Permutation importance of one source column (a one-hot or date column
// counted once, as the user sees it): how much the model's score (accuracy,
// or R² for regression) drops when that column's values are shuffled among
// the scored rows; near 0 or below for a column the model does not use.
struct ColumnImportance {
  std::string column;
  double drop = 0;    // mean over the repeats
  double spread = 0;  // sample standard deviation over the repeats
};
// How permutation importance is measured: on at most `rows` rows of the
// split (a uniform sample chosen by `seed`), `repeats` shuffles per column
// (each drawn from `seed`): the same model, rows and options give the same
// figures on every machine. With `seconds` set (a run under a time
// budget: what the budget leaves), the repeats are cut to what fits in
// that time, projected from the unshuffled rows' prediction time (one
// prediction per column and repeat), and none run when one repeat does
// not fit: figures that then depend on the machine's speed.
struct ImportanceOptions {
  std::uint64_t rows = 2000;
  int repeats = 5;
  std::uint64_t seed = 0;
  std::optional<double> seconds;
};

struct EvalResult {
  ModelRecord model;
  std::string dataset;                   // NAME@vN
  std::string split;                     // "train", "test" or "all"
  bool classification = true;
  std::vector<std::string> class_names;  // classification
  ClassificationMetrics classification_metrics;
  RegressionMetrics regression_metrics;
  std::uint64_t missing = 0, unseen = 0; // cells imputed, unseen categories
  // With ImportanceOptions: every feature column's permutation importance,
  // the largest drop first (ties in column order), the score it is a drop
  // from, and the rows it used.
  std::vector<ColumnImportance> importance;
  double importance_baseline = 0;
  std::uint64_t importance_rows = 0;
};
// Scores a model on a dataset version with the model's own preprocessing,
// on the backend `compute` asks for; with `importance`, also each feature
// column's permutation importance (memory: options.rows rows besides the
// predictions). Throws kBadData when a row's label is not one of the
// model's classes and kUsage when the version's columns do not match the
// model's, the device is not usable here, or importance is asked of a model
// of image data (it has no table columns).
EvalResult evaluate_model(Store& store, const ModelRef& model, const DatasetRef& data, EvalSplit split,
                          const BackendOptions& compute,
                          const std::optional<ImportanceOptions>& importance = std::nullopt);

struct PredictResult {
  ModelRecord model;
  std::uint64_t rows = 0;
  std::uint64_t missing = 0;             // cells imputed
  std::uint64_t unseen = 0;              // categorical values the model never saw
};
// Reads a CSV/TSV file whose header names the model's feature columns (any
// order; extra columns are read past and never fail it; the label column may
// be absent), applies the saved preprocessing and writes OUT as CSV: the
// input row number, the prediction (the class name, or the value) and, for
// classes, one probability column per class. A missing feature column is
// kUsage; bad input kBadData (file:line:column). Refuses to replace `out`
// unless `force`.
// Memory: the file is read in windows and its predictions written as they
// are made, to a temporary file in out's directory renamed over `out` at
// the end, so memory does not grow with the rows (the dictionaries of the
// columns the model one-hot encodes aside). A gzip or zstd file is first
// inflated, within the default decompression limits
// (kDefaultMaxDecompressedBytes and ratio), into an unlinked scratch file
// in out's directory (disk, not memory). On any error `out` is untouched
// and nothing is left behind.
PredictResult predict_file(Store& store, const ModelRef& model, const std::filesystem::path& input,
                           const std::filesystem::path& out, bool force, const BackendOptions& compute);

}  // namespace anneal
