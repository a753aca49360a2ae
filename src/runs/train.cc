// train_model: config -> prepared data -> trainer -> run record, the
// training loop with checkpoints, evaluation, the linear baseline and the
// registered model.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <cstdio>
#include <numeric>

#include "anneal/boosted_trees.h"
#include "anneal/calibration.h"
#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/linear.h"
#include "anneal/runs.h"
#include "anneal/trainer.h"
#include "anneal/version.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "anneal/scoring.h"
#include "runs/auto_search.h"
#include "runs/distributed.h"
#include "runs/model_kinds.h"
#include "runs/permutation_importance.h"
#include "runs/process_stats.h"
#include "runs/training_data.h"
#include "runs/warm_start.h"

namespace anneal {
using nlohmann::json;
using runs::PreparedData;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Hands the engine's per-epoch lines through to the user's reporter. The
// engine's own progress calls are dropped: the run loop reports richer
// progress (samples/s, ETA) itself through TrainingReporter::training().
class EngineReporter final : public Reporter {
 public:
  explicit EngineReporter(TrainingReporter& out) : out_(out) {}
  void note(std::string_view message) override { out_.note(message); }
  void suggest(std::string_view message, Remedy remedy, const std::string& argument) override {
    out_.suggest(message, remedy, argument);
  }
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {}

 private:
  TrainingReporter& out_;
};

EpochRecord epoch_record(const EpochMetrics& m, bool classification, bool loss_scaled, std::uint64_t rows) {
  EpochRecord r;
  r.epoch = m.epoch;
  r.values.emplace_back("steps", static_cast<double>(m.steps));
  r.values.emplace_back("train_loss", m.train_loss);
  if (classification) r.values.emplace_back("train_accuracy", m.train_accuracy);
  if (m.has_validation) {
    r.values.emplace_back("val_loss", m.val_loss);
    if (classification) r.values.emplace_back("val_accuracy", m.val_accuracy);
  }
  r.values.emplace_back("lr", m.lr);
  r.values.emplace_back("seconds", m.seconds);
  if (m.seconds > 0) r.values.emplace_back("samples_per_s", static_cast<double>(rows) / m.seconds);
  if (loss_scaled) {
    r.values.emplace_back("skipped_steps", static_cast<double>(m.skipped_steps));
    r.values.emplace_back("loss_scale", m.loss_scale);
  }
  return r;
}

std::optional<double> checkpoint_score(const Trainer& trainer) {
  if (trainer.history().empty()) return std::nullopt;
  const EpochMetrics& m = trainer.history().back();
  return m.has_validation ? m.val_loss : m.train_loss;
}

// Samples trained on so far: whole epochs plus the current one's batches.
double samples_done(const Trainer& trainer, std::uint64_t rows) {
  const TrainerConfig& c = trainer.config();
  std::int64_t in_epoch = trainer.step() - trainer.epoch() * trainer.steps_per_epoch();
  double partial = std::min<double>(static_cast<double>(in_epoch * c.batch * c.grad_accum), static_cast<double>(rows));
  return static_cast<double>(trainer.epoch()) * static_cast<double>(rows) + std::max(0.0, partial);
}

// [{"column": "order_id", "reason": "..."}]: the columns not among the features.
json excluded_columns_json(const FeatureTransform& features) {
  json out = json::array();
  for (const auto& e : features.excluded()) out.push_back({{"column", e.column}, {"reason", e.reason}});
  return out;
}

// {"no": 0.57, "yes": 4.0} by class name, or null when unweighted.
json class_weights_json(const PreparedData& data) {
  if (data.class_weights.empty()) return nullptr;
  json out = json::object();
  for (std::size_t c = 0; c < data.class_weights.size(); ++c)
    out[data.labels.class_names()[c]] = data.class_weights[c];
  return out;
}

// `config_text`: the config that trained the model (a searched run's: the
// winner's, so a retrain or warm start trains that kind again).
json lineage_json(const TrainConfig& config, const std::string& config_text, const PreparedData& data,
                  const RunRecord& run, const BackendCapabilities& backend, const std::vector<std::string>& hosts) {
  return {{"dataset", data.version.ref()},
          {"dataset_fingerprint", data.version.fingerprint},
          {"config", config_text},
          {"seed", config.trainer.seed},
          {"threads", config.threads},
          {"device", backend.device},
          {"deterministic", backend.deterministic},
          {"precision", precision_name(config.trainer.precision)},
          {"anneal_version", version()},
          {"anneal_commit", git_commit()},
          {"host", host_name()},
          // The processes that trained it: 1 and this host, or mpirun's N
          // ranks and each one's host, in rank order.
          {"ranks", hosts.size()},
          {"hosts", hosts},
          {"isa", backend.isa},
          {"run", run.label()},
          {"excluded_columns", excluded_columns_json(data.features)},
          {"class_weights", class_weights_json(data)}};
}

runs::ModelFile model_shell(const PreparedData& data) {
  runs::ModelFile m;
  m.features = data.features;
  m.labels = data.labels;
  m.loss = data.loss;
  m.input_shape = data.input_shape;
  m.outputs = data.labels.classification() ? (data.loss == LossKind::kBinaryCrossEntropy ? 1 : data.labels.classes()) : 1;
  m.dataset_columns = data.version.columns;
  m.label_column = data.version.label_column;
  m.dataset_format = data.version.format;
  return m;
}

LinearModel fit_linear(PreparedData& data, double l2) {
  runs::materialize(data);
  const std::int64_t inputs = data.features.output_width();
  if (data.labels.classification())
    return fit_logistic(data.x_train, data.y_train, inputs, data.labels.classes(), l2, data.class_weights);
  return fit_ridge(data.x_train, data.y_train, inputs, l2);
}

// Boosted trees on the materialized rows (anneal/boosted_trees.h): binary
// or multi-class logistic, or squared error on the standardized target, each
// row weighted by its class's weight; early stopping on the validation rows
// when there are some. `parent`, when not null, is a tree model whose
// boosting this run continues (a warm start: `data` went through its
// preprocessing). `stop` ends boosting between rounds (kFailure).
runs::TreeModel fit_trees(PreparedData& data, const TrainConfig& config, const runs::ModelFile* parent,
                          Reporter& reporter, const std::stop_token& stop) {
  runs::materialize(data);
  const std::int64_t width = data.features.output_width();
  const bool classification = data.labels.classification();
  const std::int64_t classes = classification ? data.labels.classes() : 0;
  const TreeObjective objective = runs::tree_objective(classes);
  const std::vector<float> w_train = runs::row_weights(data.class_weights, data.y_train),
                           w_val = runs::row_weights(data.class_weights, data.y_val);
  const TreeRows train{data.x_train, data.y_train, w_train, static_cast<std::int64_t>(data.y_train.size()), width};
  const TreeRows validation{data.x_val, data.y_val, w_val, static_cast<std::int64_t>(data.y_val.size()), width};
  TreeParams params = config.trees;
  params.seed = config.trainer.seed;
  params.threads = config.threads;
  const bool validated = !data.y_val.empty();
  std::optional<BoostedTrees> base;
  if (parent != nullptr) {
    const std::string& bytes = parent->trees.booster;
    base.emplace(BoostedTrees::load({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()},
                                    parent->trees.objective, parent->trees.classes, width, "the warm start's parent"));
  }
  BoostedTrees trees = BoostedTrees::train(
      objective, classes, train, validated ? &validation : nullptr, params, base ? &*base : nullptr,
      [&](const TreeRound& round) {
        fault_point("trees.round");
        if (stop.stop_requested()) throw failure("interrupted at boosting round " + std::to_string(round.round + 1));
        reporter.progress("boosting", static_cast<std::uint64_t>(round.round + 1),
                          static_cast<std::uint64_t>(params.max_rounds));
      });
  TreeParams took = params;
  if (!validated) took.early_stopping_rounds = 0;
  runs::TreeModel m = runs::tree_model_of(trees, objective, classes, took);
  reporter.note("boosted trees: " + std::to_string(m.rounds) + " rounds" +
                (base ? " (" + std::to_string(base->rounds()) + " of them the parent's)" : std::string()) +
                (validated && params.early_stopping_rounds > 0 && m.rounds < (base ? base->rounds() : 0) + params.max_rounds
                     ? " (the best on the validation rows; up to " + std::to_string(params.max_rounds) + ")"
                     : ""));
  return m;
}

// A classifier's accuracy on `split` beside always answering the most common
// class of the same rows (`labels`: their class indices): recorded as
// "<split>_majority_accuracy", with a warning when the model does no better,
// since on an imbalanced table a high accuracy can mean nothing was learnt.
// A binary model whose threshold was chosen for balanced accuracy or F1
// (`by_balance`) trades accuracy for the rare class on purpose: it is judged
// by its balanced accuracy against the majority answer's, 0.5.
void compare_with_majority(json& metrics, const std::string& split, const std::vector<float>& labels,
                           const LabelEncoding& encoding, Reporter& reporter, bool by_balance) {
  const std::string key = split + (by_balance ? "_balanced_accuracy" : "_accuracy");
  if (labels.empty() || !metrics.contains(key)) return;
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(encoding.classes()), 0);
  for (float y : labels)
    if (y >= 0 && static_cast<std::size_t>(y) < counts.size()) ++counts[static_cast<std::size_t>(y)];
  const auto most = std::max_element(counts.begin(), counts.end());
  const double majority = static_cast<double>(*most) / static_cast<double>(labels.size());
  metrics[split + "_majority_accuracy"] = majority;
  const double accuracy = metrics[key].get<double>();
  if (accuracy <= (by_balance ? 0.5 : majority)) {
    auto g4 = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%.4g", v);
      return std::string(text);
    };
    const std::string name = encoding.class_names()[static_cast<std::size_t>(most - counts.begin())];
    if (by_balance)
      reporter.note("warning: " + key + " " + g4(accuracy) + " is no better than always answering '" + name +
                    "' (0.5)");
    else
      reporter.note("warning: " + key + " " + g4(accuracy) + " is no better than always answering '" + name + "' (" +
                    g4(majority) + " of the " + split + " rows); see balanced_accuracy, and consider "
                    "class_weight = balanced");
  }
}

// Each feature column's share of the trees' split gain (`shares`: one per
// preprocessed input), summed over the inputs the column became (one-hot
// slots, datetime parts), the largest first (ties by column order);
// columns with no split are listed with 0.
json column_importance(const FeatureTransform& features, const std::vector<double>& shares) {
  std::vector<std::pair<std::string, double>> columns;
  std::size_t at = 0;
  for (const ColumnTransform& c : features.columns()) {
    double share = 0;
    for (std::int64_t k = 0; k < c.output_width() && at < shares.size(); ++k) share += shares[at++];
    columns.emplace_back(c.column, share);
  }
  std::stable_sort(columns.begin(), columns.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  json out = json::array();
  for (const auto& [column, share] : columns) out.push_back({{"column", column}, {"share", share}});
  return out;
}

// Given a model's predictions on the validation rows (read as `LossKind`),
// its decision threshold, or none (TrainingRun::decide_threshold).
using ThresholdDecider = std::function<std::optional<double>(LossKind, const std::vector<float>&)>;

// Given a model's predictions on the validation rows and on the test rows
// (null without them), both read as `LossKind`: calibrates them in place
// and records the model's temperature (TrainingRun::calibrate).
using Calibrator = std::function<void(LossKind, std::vector<float>&, std::vector<float>*)>;

// The scores of `model` (any kind) on the validation and test rows, as the
// registered model gives them (eval reproduces them), by its kind's
// predictor on `backend`. `calibrate` rescales the predictions (and sets
// the model's temperature), then `decide` sets a binary model's threshold
// from the validation predictions, before anything is scored.
json model_scores(runs::ModelFile& model, Backend& backend, const PreparedData& data, json& per_class,
                  json& confusion, const ThresholdDecider& decide, const Calibrator& calibrate) {
  const runs::ModelKind& kind = runs::model_kind(model);
  const LossKind as = kind.prediction_loss(model);
  const std::unique_ptr<runs::KindPredictor> predictor = kind.predictor(model, backend, 256);
  json out = json::object();
  auto add = [&](const std::string& split, const std::vector<float>& p, const std::vector<float>& y) {
    out.update(runs::score(split, as, data.labels, p, y, model.threshold));
    if (data.labels.classification()) {
      per_class[split] = runs::score_per_class(as, data.labels, p, y, model.threshold);
      confusion[split] = runs::score_confusion(as, data.labels, p, y, model.threshold);
    }
  };
  std::vector<float> p_val, p_test;
  if (!data.y_val.empty()) p_val = predictor->predict(data.x_val);
  if (!data.y_test.empty()) p_test = predictor->predict(data.x_test);
  calibrate(as, p_val, data.y_test.empty() ? nullptr : &p_test);
  if (!data.y_val.empty()) {
    model.threshold = decide(as, p_val);
    add("val", p_val, data.y_val);
  }
  if (!data.y_test.empty()) add("test", p_test, data.y_test);
  return out;
}

// The linear model's score on validation rows, else test rows, as
// "<prefix>_val_accuracy" etc.
// Per-class scores go to `per_class` as {"<prefix>val": {...}, ...}.
// With `confusion` (the linear model is the model), its confusion matrices too.
// With `decide` and `calibrate` (the linear model is the model), its
// predictions are calibrated, then its decision threshold is chosen on the
// validation predictions and applied; the baseline answers the most
// probable class of its uncalibrated probabilities.
json linear_scores(const std::string& prefix, const LinearModel& linear, const PreparedData& data, json& per_class,
                   json* confusion = nullptr, const ThresholdDecider& decide = {},
                   std::optional<double>* threshold = nullptr, const Calibrator& calibrate = {}) {
  // The linear model's outputs are already probabilities per class.
  LossKind as = data.labels.classification() ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
  json out = json::object();
  std::optional<double> t;
  auto add = [&](const std::string& split, const std::vector<float>& p, const std::vector<float>& y) {
    out.update(runs::score(prefix + split, as, data.labels, p, y, t));
    if (data.labels.classification()) per_class[prefix + split] = runs::score_per_class(as, data.labels, p, y, t);
    if (confusion && data.labels.classification()) (*confusion)[split] = runs::score_confusion(as, data.labels, p, y, t);
  };
  std::vector<float> p_val, p_test;
  if (!data.y_val.empty()) p_val = linear.predict(data.x_val);
  if (!data.y_test.empty()) p_test = linear.predict(data.x_test);
  if (calibrate) calibrate(as, p_val, data.y_test.empty() ? nullptr : &p_test);
  if (!data.y_val.empty()) {
    if (decide) t = decide(as, p_val);
    add("val", p_val, data.y_val);
  }
  if (!data.y_test.empty()) add("test", p_test, data.y_test);
  if (threshold) *threshold = t;
  return out;
}

// Each feature column's permutation importance (permutation_importance.h)
// for the run's summary and report: on a fixed-seed sample of the test rows,
// else the validation rows, of a table that fits the memory budget. Null
// for image data, without such rows, or when the rows stream (reading them
// again would go past the budget's windows; `eval --importance` reads a
// streamed version in bounded pieces).
json permutation_importance_summary(const runs::ModelFile& model, Backend& backend, const PreparedData& data,
                                    std::uint64_t seed, std::optional<double> seconds) {
  SampleSource* rows = data.rows->test ? data.rows->test.get() : data.rows->validation.get();
  if (!data.tabular || data.rows->streamed || !rows || rows->rows() == 0) return nullptr;
  ImportanceOptions options;
  options.seed = seed;
  options.seconds = seconds;
  const auto width = static_cast<std::size_t>(data.features.output_width());
  runs::RowSample sample(options.rows, width, options.seed);
  constexpr std::int64_t kChunk = 4096;
  std::vector<std::uint32_t> index;
  std::vector<float> x, y;
  for (std::int64_t start = 0; start < rows->rows(); start += kChunk) {
    const auto n = static_cast<std::size_t>(std::min(kChunk, rows->rows() - start));
    index.resize(n);
    std::iota(index.begin(), index.end(), static_cast<std::uint32_t>(start));
    x.resize(n * width);
    y.resize(n);
    rows->read(index, x.data(), y.data());
    sample.offer(x, y);
  }
  const runs::ModelKind& kind = runs::model_kind(model);
  runs::Predictor predictor(model, backend, 256);  // the model's probabilities, calibrated as it is
  double baseline = 0;
  int repeats = 0;
  const std::vector<ColumnImportance> columns = runs::permutation_importance(
      data.features, data.labels, kind.prediction_loss(model), sample.x(), sample.y(),
      [&](const std::vector<float>& in) { return predictor.predict(in); }, options, &baseline, &repeats);
  json out = {{"split", data.rows->test ? "test" : "val"},
              {"metric", data.labels.classification() ? "accuracy" : "r2"},
              {"baseline", baseline},
              {"rows", sample.rows()},
              {"repeats", repeats},
              {"seed", options.seed},
              {"columns", runs::importance_json(columns)}};
  if (repeats < options.repeats) out["cut_by"] = "time_budget";
  return out;
}

// {"load_s", "first_step_s" (null when no step was trained), "peak_rss_bytes",
// "memory_budget", "streamed", "data_peak_bytes"}, the peaks read now (the
// peaks so far) and kept in result.
json data_path_json(TrainResult& result, const PreparedData& data) {
  result.peak_rss_bytes = runs::peak_rss_bytes();
  result.data_peak_bytes = data.rows->memory.peak();
  return {{"load_s", result.load_seconds},
          {"first_step_s", result.first_step_seconds ? json(*result.first_step_seconds) : json(nullptr)},
          {"peak_rss_bytes", result.peak_rss_bytes},
          {"memory_budget", result.memory_budget},
          {"streamed", result.streamed},
          {"data_peak_bytes", result.data_peak_bytes}};
}

struct Setup {
  TrainConfig config;
  DatasetRef dataset;
  std::optional<RunRecord> resumed;
};

Setup resolve_setup(Store& store, const TrainRequest& request) {
  Setup s;
  if (request.resume) {
    if (!request.overrides.empty())
      throw usage_error(Subject::kConfigOverrides, ": a resumed run keeps its recorded config; start a new run to change it");
    if (request.warm_start)
      throw usage_error(Subject::kResumedRun, ": a resumed run keeps the parent it started from; start a new run "
                                              "to warm-start");
    if (request.memory_budget)
      throw usage_error(Subject::kMemoryBudget, ": a resumed run keeps its recorded budget (a streamed run's data "
                                                "order depends on it); start a new run to change it");
    RunRecord run = find_run(store, *request.resume);
    if (run.status == RunStatus::kSucceeded)
      throw usage_error(Subject::kResumedRun, run.label() + ": the run already succeeded" +
                        (run.model.empty() ? std::string() : " and registered " + run.model));
    s.config = parse_train_config(run.config_text, run.label() + " config", {});
    // A checkpoint is plain fp32 values on any device, so a run may go on
    // elsewhere (the GPU is gone, or was added). Only on the device it
    // started on does it end at an uninterrupted run's exact bits.
    if (request.device) {
      s.config.device = *request.device;
      s.config.sources["device"] = request.sources.device;
    }
    s.dataset = parse_dataset_ref(run.dataset, "dataset");
    s.resumed = std::move(run);
    return s;
  }
  s.config = parse_train_config(request.config_text, request.config_source, request.overrides, request.sources);
  if (request.device) {
    s.config.device = *request.device;
    s.config.sources["device"] = request.sources.device;
  }
  if (request.warm_start) {
    s.config.warm_start = parse_warm_start(*request.warm_start, s.config.name);
    s.config.sources["warm_start"] = request.sources.warm_start;
  }
  if (request.memory_budget) {
    try {
      s.config.memory_budget = parse_memory_budget(*request.memory_budget);
    } catch (const Error& e) {
      throw usage_error(Subject::kMemoryBudget, ": " + std::string(e.what()));
    }
    s.config.sources["memory_budget"] = request.sources.memory_budget;
  }
  validate_model_name(s.config.name);
  s.dataset = parse_dataset_ref(s.config.dataset, "dataset");
  // Record the exact version: a resume must not drift to a newer @latest.
  DatasetVersion v = find_dataset(store, s.dataset);
  s.dataset.version = v.version;
  s.config.dataset = v.ref();
  return s;
}

// One training run (`anneal train`, a job's attempt, rank 0 of mpirun),
// its phases in the order run() calls them:
//   resolve       the config (the file and overrides, or the resumed run's),
//                 the warm start's parent, the run's lock, the backend;
//   prepare_data  the dataset's rows as sources under the memory budget;
//   build         what the model's kind refuses, and a network's trainer;
//   open_run      the run's record, created or reopened;
//   fit           layers = auto: the search (auto_search.h) chooses the
//                 kind and its settings; then per kind: boost the trees,
//                 fit the linear model, or train the network
//                 (resume_checkpoint, train_loop); each scores the model it
//                 made on the validation and test rows;
//   finish        the summary and lineage, and the registered model.
// A failure once the run is open records it as failed (record_failure).
// Under mpirun the other ranks follow this one through leader_; a single
// process's leader does nothing.
class TrainingRun {
 public:
  TrainingRun(Store& store, const TrainRequest& request, TrainingReporter& reporter)
      : store_(store),
        request_(request),
        reporter_(reporter),
        fence_(request.fence ? &*request.fence : nullptr),
        leader_(request.communicator),
        engine_reporter_(reporter) {}

  TrainResult run() {
    resolve();
    prepare_data();
    build();
    // Interrupted while loading: nothing has started, so nothing to record.
    if (request_.stop.stop_requested()) throw failure("interrupted before training started");
    open_run();
    try {
      fit();
      if (result_.cancelled) return result_;
      return finish();
    } catch (const std::exception& e) {
      record_failure(e);
    }
  }

 private:
  const TrainConfig& config() const { return setup_.config; }
  PreparedData& data() { return *data_; }
  bool network() const { return config().kind == runs::ModelKindId::kNetwork; }

  // --- resolve -------------------------------------------------------------
  // Everything that can be checked without training, before a run exists.
  void resolve() {
    setup_ = resolve_setup(store_, request_);
    if (config().auto_search && config().warm_start) {
      auto where = config().sources.find("warm_start");
      throw usage_error((where != config().sources.end() ? where->second + ": " : std::string()) +
                        "warm_start: layers = auto searches from scratch; set layers to the parent's kind to "
                        "continue from it");
    }
    warm_ = runs::resolve_warm_start(store_, setup_.config, reporter_);
    lock_resumed_run();
    choose_backend();
  }

  // Held while this process trains the run, so two resumes cannot race.
  void lock_resumed_run() {
    if (!setup_.resumed) return;
    const std::int64_t id = setup_.resumed->id;
    if (request_.wait_for_run_lock && !try_lock_run(store_, id).held()) {
      reporter_.note("waiting for the process still training " + setup_.resumed->label() + " to stop");
      run_lock_.emplace(lock_run(store_, id));
    } else {
      run_lock_.emplace(try_lock_run(store_, id));
    }
    if (!run_lock_->held())
      throw Error(ErrorKind::kBusy, Subject::kResumedRun,
                  setup_.resumed->label() + ": another anneal process is training this run");
  }

  void choose_backend() {
    const bool trees = config().kind == runs::ModelKindId::kTrees;
    // XGBoost's booster is the CPU's: a GPU asked for by name is refused
    // rather than left idle (auto takes the CPU for trees).
    if (trees && config().device == Device::kCuda) {
      auto where = config().sources.find("device");
      throw usage_error((where != config().sources.end() ? where->second + ": " : std::string()) +
                        "device = cuda: layers = trees trains on the CPU (XGBoost's booster); use device = cpu or auto");
    }
    try {
      backend_ = make_backend({.device = trees ? Device::kCpu : config().device,
                               .threads = config().threads,
                               .deterministic = config().deterministic,
                               .tf32 = config().tf32});
    } catch (const Error& e) {
      // Name where the device was asked for: "fm.ini:7" or "--set device"
      // (as config.sources names it).
      auto where = config().sources.find("device");
      if (e.kind() != ErrorKind::kUsage || where == config().sources.end()) throw;
      throw usage_error(where->second + ": " + e.what());
    }
    if (config().device == Device::kAuto)
      for (const std::string& why : passed_over_by_auto())
        reporter_.note("device auto: training on the " + backend_->capabilities().device + " (" + why + ")");
    if (!backend_->capabilities().deterministic)
      reporter_.note("deterministic = false: the " + backend_->capabilities().device +
                     " backend may use algorithms whose results vary, so this run's weights will not repeat bit for bit");
  }

  // --- prepare_data --------------------------------------------------------
  void prepare_data() {
    reporter_.note("loading " + setup_.dataset.to_string());
    const auto load_start = Clock::now();
    const std::uint64_t budget = config().memory_budget.value_or(runs::default_memory_budget());
    data_.emplace(runs::prepare_run_data(store_, setup_.dataset, config(), warm_, budget, reporter_));
    result_.load_seconds = seconds_since(load_start);
    result_.memory_budget = budget;
    result_.streamed = data().rows->streamed;
    if (data().rows->streamed) {
      reporter_.note(data().version.ref() + " does not fit memory_budget = " + memory_budget_text(budget) +
                     ": streaming it in windows of " + std::to_string(data().rows->window) + " blocks of " +
                     std::to_string(data().rows->block_rows) + " rows");
      // The order depends on the budget: the run records the one it used,
      // so a resume (and a rerun of its config) streams the same windows.
      setup_.config.memory_budget = budget;
    }
    // A warm-started run keeps its parent's choice, made on the parent's rows.
    for (const ExcludedColumn& e : data().features.excluded())
      if (e.identifier)
        reporter_.note("column '" + e.column + "' left out of the features" +
                       (warm_.used ? " (as by " + warm_.parent->ref() + ")" : std::string()) + ": " + e.reason +
                       "; set features= or exclude= to choose");
  }

  // --- build ---------------------------------------------------------------
  void build() {
    check_calibrate();
    if (config().auto_search) return check_search();
    if (network()) return build_trainer();
    const bool trees = config().kind == runs::ModelKindId::kTrees;
    const std::string kind_words = trees ? "boosted trees" : "the linear model";
    const std::string layers_key = "layers = " + std::string(runs::model_kind(config().kind).name());
    if (leader_.communicator())
      throw usage_error(layers_key + ": " + kind_words + (trees ? " are trained" : " is fitted") +
                        " by one process; run it without mpirun (or with -np 1)");
    if (!data().tabular)
      throw usage_error(layers_key + ": " + kind_words + (trees ? " need" : " needs") + " tabular (CSV/TSV) data; " +
                        data().version.ref() + " is " + data().version.format);
    if (data().rows->streamed)
      throw usage_error(Subject::kMemoryBudget,
                        ": " + layers_key + " fits on every row at once; " + data().version.ref() +
                            " does not fit memory_budget = " + memory_budget_text(result_.memory_budget) +
                            "; raise it or train a network");
  }

  // layers = auto: what the search needs, checked before the run exists.
  void check_search() {
    auto where = config().sources.find("layers");
    const std::string at = where != config().sources.end() ? where->second + ": " : std::string();
    if (leader_.communicator())
      throw usage_error(at + "layers = auto: the search runs in one process; run it without mpirun (or with -np 1)");
    if (!data().tabular)
      throw usage_error(at + "layers = auto: the search chooses among models for tabular (CSV/TSV) data and " +
                        data().version.ref() + " is " + data().version.format + "; write a layer spec (layers = ...)");
    if (data().rows->streamed)
      throw usage_error(Subject::kMemoryBudget,
                        ": layers = auto fits its trials on every row at once; " + data().version.ref() +
                            " does not fit memory_budget = " + memory_budget_text(result_.memory_budget) +
                            "; raise it or write a layer spec");
  }

  void build_trainer() {
    tc_ = config().trainer;
    tc_.loss = data().loss;
    tc_.classes = data().labels.classification() ? data().labels.classes() : 0;
    tc_.class_weights = data().class_weights;
    tc_.memory_limit = runs::physical_memory();
    // Under mpirun rank 0's reads also answer the other ranks' (distributed.h).
    SampleSource& train = leader_.serve_train(*data().rows->train);
    SampleSource* validation = leader_.serve_validation(data().rows->validation.get());
    try {
      trainer_ = std::make_unique<Trainer>(tc_, *backend_, train, validation, engine_reporter_, leader_.communicator());
    } catch (const Error& e) {
      // The engine names the layer; add where the spec was written.
      auto where = config().sources.find("layers");
      const bool about_layers = std::string_view(e.what()).starts_with("layer");
      if (e.kind() != ErrorKind::kUsage || !about_layers || where == config().sources.end()) throw;
      throw usage_error(where->second + ": layers = " + config().trainer.layers + ": " + e.what());
    }
    // A resumed run's checkpoint replaces these weights; one that has none
    // left starts again from them.
    if (warm_.used) runs::load_parent_weights(*trainer_, warm_);
  }

  // --- open_run ------------------------------------------------------------
  void open_run() {
    if (setup_.resumed) {
      reopen_run(store_, setup_.resumed->id);
      run_ = find_run(store_, setup_.resumed->id);
    } else {
      run_ = create_run(store_, config().name, setup_.dataset, config().to_text(), host_name());
      run_lock_.emplace(try_lock_run(store_, run_.id));
    }
    if (request_.on_run_started) request_.on_run_started(run_);
    reporter_.note((setup_.resumed ? "resuming " : "started ") + run_.label() + ": " + config().name + " on " +
                   data().version.ref() + " (" + std::to_string(data().train_rows()) + " training rows" +
                   (data().y_val.empty() ? "" : ", " + std::to_string(data().y_val.size()) + " validation") + ")");
  }

  // --- fit -----------------------------------------------------------------
  void fit() {
    model_ = model_shell(data());
    if (config().auto_search) {
      search();
      if (network()) build_trainer();
    }
    if (data().tabular && config().baseline && data().rows->streamed)
      reporter_.note("baseline: not fitted, the linear model needs every row in memory and " + data().version.ref() +
                     " streams");
    else if (data().tabular && (config().baseline || config().kind == runs::ModelKindId::kLinear))
      linear_ = fit_linear(data(), config().linear_l2);
    switch (config().kind) {
      case runs::ModelKindId::kTrees:
        return fit_tree_model();
      case runs::ModelKindId::kLinear:
        return fit_linear_model();
      case runs::ModelKindId::kNetwork:
        return train_network();
      case runs::ModelKindId::kEnsemble:
        return fit_ensemble_model();
    }
  }

  // layers = auto: trains the portfolio's trials and makes the config the
  // winner's (setup_.config: the run's recorded config text stays auto).
  void search() {
    runs::SearchOptions options;
    options.folds = static_cast<int>(config().folds);
    options.metric = search_metric();
    options.ensemble = config().ensemble;
    options.time_budget = config().time_budget;
    options.max_trials = config().max_trials;
    options.seed = config().trainer.seed;
    options.threads = config().threads;
    // ensemble = false asks for one model: the single best trial's, fitted once.
    options.bags = config().ensemble ? static_cast<int>(config().bags) : 1;
    const std::vector<runs::Candidate> portfolio = runs::search_portfolio();
    const std::vector<runs::Trial> finished = setup_.resumed ? recorded_trials(portfolio) : std::vector<runs::Trial>{};
    if (!finished.empty())
      reporter_.note("the search's first " + std::to_string(finished.size()) + " trials finished before: " +
                     "taking their recorded scores");
    runs::SearchResult result = runs::run_search(
        data(), config(), *backend_, options, reporter_, request_.stop, finished,
        [&](const std::vector<runs::Trial>& trials) { record_trials(trials, portfolio); });
    if (result.skipped > 0)
      reporter_.note(result.skipped_by == "time_budget"
                         ? "time_budget = " + config().time_budget_text + ": " + std::to_string(result.skipped) +
                               (result.skipped == 1 ? " trial" : " trials") +
                               " not started; a search cut by time does not repeat run to run (set "
                               "max_trials for one that does)"
                         : "max_trials = " + std::to_string(*config().max_trials) + ": " +
                               std::to_string(result.skipped) + " trials of the portfolio not run");
    const runs::Trial& won = result.trials[result.winner];
    search_ = result.to_json(portfolio, options);
    if (options.time_budget)
      budget_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(*options.time_budget - result.seconds));
    // Whether the refit's networks train once per bag, and why fewer bags
    // than asked for when the budget cut them.
    std::string bagged;
    if (result.bags > 1) bagged = ", each network with " + std::to_string(result.bags) + " seeds (bags)";
    if (runs::refits_a_network(result, portfolio) && result.bags < options.bags)
      bagged += "; bags = " + std::to_string(options.bags) + ": " + std::to_string(result.bags) +
                (result.bags == 1 ? " seed fits" : " seeds fit") + " in what time_budget = " +
                config().time_budget_text + " leaves";
    if (result.ensemble_chosen) {
      reporter_.note("search: a weighted ensemble of " + std::to_string(result.ensemble.members.size()) +
                     " trials scored best (" + result.metric + " " + metric_text(result.ensemble_score) + " against " +
                     metric_text(won.score) + " for the best one, " + portfolio[won.candidate].describe() + ", " +
                     result.scoring + "); training its members on all " + std::to_string(data().train_rows()) +
                     " training rows" + bagged);
    } else {
      reporter_.note("search: " + portfolio[won.candidate].describe() + " scored best (" + result.metric + " " +
                     metric_text(won.score) + ", " + result.scoring + "); training it on all " +
                     std::to_string(data().train_rows()) + " training rows" + bagged);
    }
    if (runs::registers_ensemble(result, portfolio)) {
      setup_.config.kind = runs::ModelKindId::kEnsemble;
      search_result_ = std::move(result);
      return;
    }
    runs::apply_winner(result, portfolio, model_.outputs, setup_.config);
  }

  // What the search scores trials by: R² for regression; for a classifier
  // the metric threshold_metric names (auto: balanced accuracy when the
  // majority class holds more than 80% of the training rows, as the
  // threshold's rule; f1: the macro F1, defined for any number of classes).
  std::string search_metric() {
    if (!data().labels.classification()) return "r2";
    switch (config().threshold_metric) {
      case ThresholdMetric::kBalancedAccuracy: return "balanced_accuracy";
      case ThresholdMetric::kF1: return "macro_f1";
      case ThresholdMetric::kAccuracy:
      case ThresholdMetric::kNone: return "accuracy";
      case ThresholdMetric::kAuto: break;
    }
    runs::materialize(data());
    const std::vector<float>& y = data().y_train;
    std::vector<std::size_t> counts(static_cast<std::size_t>(data().labels.classes()), 0);
    for (float v : y)
      if (v >= 0 && static_cast<std::size_t>(v) < counts.size()) ++counts[static_cast<std::size_t>(v)];
    const std::size_t most = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    return !y.empty() && static_cast<double>(most) / static_cast<double>(y.size()) > 0.8 ? "balanced_accuracy"
                                                                                         : "accuracy";
  }

  // layers = auto chose an ensemble: its members trained on all training
  // rows, weighted as the search weighed them, scored as any model is.
  void fit_ensemble_model() {
    const std::vector<runs::Candidate> portfolio = runs::search_portfolio();
    model_.kind = runs::ModelKindId::kEnsemble;
    runs::FittedMembers fitted = runs::fit_ensemble_members(*search_result_, portfolio, data(), config(), *backend_,
                                                            model_, reporter_, request_.stop);
    model_.members = std::move(fitted.members);
    model_.member_weights = std::move(fitted.weights);
    model_.outputs = data().labels.classification() ? data().labels.classes() : 1;
    model_.weights_hash = runs::model_weights_hash(model_);
    metrics_.update(
        model_scores(model_, *backend_, data(), per_class_, confusion_, threshold_decider(), calibrator()));
    if (linear_) metrics_.update(linear_scores("baseline_", *linear_, data(), per_class_));
    ensemble_ = json::array();
    const runs::EnsembleWeights refit = runs::refit_members(*search_result_);
    for (std::size_t i = 0; i < refit.members.size(); ++i) {
      const runs::Trial& t = search_result_->trials[refit.members[i]];
      const runs::Candidate& c = portfolio[t.candidate];
      ensemble_.push_back({{"trial", refit.members[i] + 1},
                           {"kind", std::string(runs::model_kind(c.kind).name())},
                           {"settings", c.settings()},
                           {"weight", refit.weights[i]},
                           {"bags", runs::member_bags(*search_result_, c)}});
    }
  }

  // Records the search's trials so far as a checkpoint of the run (no
  // trainer state; step = the number of trials), so a killed search resumes
  // without repeating them. Each record holds every trial so far: the
  // released older ones lose nothing.
  void record_trials(const std::vector<runs::Trial>& trials, const std::vector<runs::Candidate>& portfolio) {
    search_trials_ = json::array();
    for (const runs::Trial& t : trials) search_trials_.push_back(t.to_json(portfolio));
    runs::Checkpoint c;
    c.header = preprocessing();
    const auto step = static_cast<std::int64_t>(trials.size());
    c.header["run"] = run_.id;
    c.header["step"] = step;
    c.header["search_trials"] = search_trials_;
    // Each candidate's latest trial's held-out predictions, f32 in trial
    // order, for the ensemble selection of a resumed search.
    json held = json::array();
    for (std::size_t i = 0; i < trials.size(); ++i) {
      const std::vector<float>& p = trials[i].held;
      if (p.empty()) continue;
      held.push_back({{"trial", i + 1}, {"count", p.size()}});
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(p.data());
      c.state.insert(c.state.end(), bytes, bytes + p.size() * sizeof(float));
    }
    c.header["search_predictions"] = std::move(held);
    SavedCheckpoint saved = anneal::save_checkpoint(store_, run_.id, step, runs::encode_checkpoint(c), std::nullopt,
                                                    config().keep_checkpoints, fence_);
    if (!saved.reclaim_error.empty())
      reporter_.suggest("search trial " + std::to_string(step) +
                            " recorded, but removing the released checkpoints failed: " + saved.reclaim_error,
                        Remedy::kCollectGarbage);
    fault_point("auto.trial");
  }

  // A resumed search's finished trials: those of the newest checkpoint of
  // the run that records them and verifies (a damaged one costs the trials
  // since the one before it).
  std::vector<runs::Trial> recorded_trials(const std::vector<runs::Candidate>& /*portfolio*/) {
    const json prep = preprocessing();
    auto checkpoints = run_checkpoints(store_, run_.id);
    for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
      const std::string owner = run_.label() + " checkpoint at step " + std::to_string(it->step);
      std::optional<runs::Checkpoint> c;
      try {
        c = runs::decode_checkpoint(read_checkpoint(store_, *it), owner);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kCorrupt) throw;
        reporter_.note(std::string(e.what()) + "; trying an earlier record of the search");
        continue;
      }
      if (!c->header.contains("search_trials")) continue;
      if (c->header.value("features", json()) != prep["features"] || c->header.value("labels", json()) != prep["labels"])
        throw corrupt(owner + ": its preprocessing differs from the one rebuilt from " + data().version.ref());
      std::vector<runs::Trial> trials;
      for (const json& t : c->header["search_trials"]) trials.push_back(runs::Trial::from_json(t));
      // The held-out predictions (record_trials); a network's checkpoint
      // has none: its search chose that network.
      std::size_t at = 0;
      for (const json& p : c->header.value("search_predictions", json::array())) {
        const auto trial = p.at("trial").get<std::size_t>(), count = p.at("count").get<std::size_t>();
        if (trial < 1 || trial > trials.size() || count > (c->state.size() - at) / sizeof(float))
          throw corrupt(owner + ": its record of the search's predictions does not fit its bytes");
        trials[trial - 1].held.resize(count);
        std::memcpy(trials[trial - 1].held.data(), c->state.data() + at, count * sizeof(float));
        at += count * sizeof(float);
      }
      if (at != c->state.size() && c->header.contains("search_predictions"))
        throw corrupt(owner + ": its record of the search holds bytes past its predictions");
      return trials;
    }
    return {};
  }

  ThresholdDecider threshold_decider() {
    return [this](LossKind as, const std::vector<float>& p) { return decide_threshold(as, p); };
  }

  // A binary classifier's decision threshold, chosen on the validation
  // predictions `p` (read as `as`) for threshold_metric; none for other
  // models, without validation rows, or with threshold_metric = none.
  // Recorded in the metrics ("decision_threshold") and the summary.
  std::optional<double> decide_threshold(LossKind as, const std::vector<float>& p) {
    if (!data().labels.classification() || data().labels.classes() != 2) return std::nullopt;
    ThresholdMetric metric = config().threshold_metric;
    if (metric == ThresholdMetric::kNone || data().y_val.empty()) return std::nullopt;
    std::string why;
    if (metric == ThresholdMetric::kAuto) {
      // The class balance of the training rows (the validation rows' where
      // the training rows were not materialized).
      const std::vector<float>& y = data().y_train.empty() ? data().y_val : data().y_train;
      const auto ones = static_cast<double>(std::count(y.begin(), y.end(), 1.0f));
      const double majority = std::max(ones, static_cast<double>(y.size()) - ones) / static_cast<double>(y.size());
      metric = majority > 0.8 ? ThresholdMetric::kBalancedAccuracy : ThresholdMetric::kAccuracy;
      why = " (threshold_metric = auto: the majority class holds " + metric_text(100 * majority) + "% of the rows)";
    }
    const std::vector<float> probs = runs::class_probabilities(as, p);
    std::vector<float> p1(data().y_val.size());
    for (std::size_t i = 0; i < p1.size(); ++i) p1[i] = probs[2 * i + 1];
    const ThresholdChoice choice = choose_threshold(p1, data().y_val, metric);
    const std::string name = threshold_metric_name(metric);
    metrics_["decision_threshold"] = choice.threshold;
    threshold_ = {{"threshold", choice.threshold},
                  {"metric", name},
                  {"val_score", choice.score},
                  {"val_score_at_0.5", choice.score_at_half}};
    reporter_.note("decision threshold " + metric_text(choice.threshold) + ": P(" + data().labels.class_names()[1] +
                   ") above it answers '" + data().labels.class_names()[1] + "'; chosen on the validation rows for " +
                   name + why + ": " + metric_text(choice.score) + ", against " + metric_text(choice.score_at_half) +
                   " at 0.5");
    return choice.threshold;
  }

  // calibrate = temperature: refused, naming where the key was set, for
  // a regression target or without validation rows to fit on (auto then
  // means none).
  void check_calibrate() {
    if (config().calibrate != runs::CalibrateMode::kTemperature) return;
    auto where = config().sources.find("calibrate");
    const std::string at = where != config().sources.end() ? where->second + ": " : std::string();
    if (!data().labels.classification())
      throw usage_error(at + "calibrate = temperature calibrates a classifier's probabilities; the label of " +
                        data().version.ref() + " is a regression target: use calibrate = none or auto");
    if (data().y_val.empty())
      throw usage_error(at + "calibrate = temperature is fitted on validation rows, and this run has none: set "
                             "validation (e.g. 0.1) or use calibrate = none");
  }

  // Whether the model made by fit() is calibrated (config `calibrate`):
  // auto calibrates a network classifier with validation rows.
  bool calibrating() {
    switch (config().calibrate) {
      case runs::CalibrateMode::kNone: return false;
      case runs::CalibrateMode::kTemperature: return true;
      case runs::CalibrateMode::kAuto: break;
    }
    return model_.kind == runs::ModelKindId::kNetwork && data().labels.classification() && !data().y_val.empty();
  }

  Calibrator calibrator() {
    return [this](LossKind as, std::vector<float>& p_val, std::vector<float>* p_test) { calibrate(as, p_val, p_test); };
  }

  // A classifier's predictions on the validation rows `p_val` and the test
  // rows `p_test` (null without them), read as `as`, rescaled in place by
  // the temperature fitted on the validation rows when calibrating(), as
  // the model's predictor rescales them (model_.temperature). Records,
  // with a temperature, "temperature" and each split's expected
  // calibration error before it ("*_ece_uncalibrated"; "val_ece" and
  // "test_ece" are scored with the other metrics), and the
  // reliability bins of the test rows (else the validation rows) before
  // and after, for the summary and the report. Before the decision
  // threshold: it is chosen on the calibrated probabilities.
  void calibrate(LossKind as, std::vector<float>& p_val, std::vector<float>* p_test) {
    if (!data().labels.classification() || !runs::calibratable(as)) return;
    const std::int64_t k = data().labels.classes();
    const bool has_val = !data().y_val.empty(), has_test = p_test && !data().y_test.empty();
    auto bins_of = [&](const std::vector<float>& p, const std::vector<float>& y) {
      return runs::reliability_bins(runs::class_probabilities(as, p), y, k);
    };
    std::vector<runs::ReliabilityBin> val_before, test_before;
    if (has_val) val_before = bins_of(p_val, data().y_val);
    if (has_test) test_before = bins_of(*p_test, data().y_test);
    bool fit = calibrating() && has_val;
    if (fit && !std::all_of(p_val.begin(), p_val.end(), [](float v) { return std::isfinite(v); })) {
      reporter_.note("calibration skipped: the model's validation predictions are not all finite numbers");
      fit = false;
    }
    const std::string split = has_test ? "test" : "val";  // the split of the report's diagram
    calibration_ = {{"method", fit ? "temperature" : "none"},
                    {"split", split},
                    {"bins", runs::kCalibrationBins},
                    {"uncalibrated", runs::reliability_json(has_test ? test_before : val_before)}};
    if (!has_val && !has_test) {
      calibration_ = nullptr;
      return;
    }
    if (!fit) return;  // "val_ece", "test_ece": scored with the other metrics (runs::score)
    const runs::TemperatureFit t = runs::fit_temperature(as, k, p_val, data().y_val);
    model_.temperature = t.temperature;
    runs::apply_temperature(as, k, t.temperature, p_val);
    if (has_test) runs::apply_temperature(as, k, t.temperature, *p_test);
    const std::vector<runs::ReliabilityBin> val_after = bins_of(p_val, data().y_val);
    metrics_["temperature"] = t.temperature;
    metrics_["val_ece_uncalibrated"] = runs::expected_calibration_error(val_before);
    std::vector<runs::ReliabilityBin> test_after;
    if (has_test) {
      test_after = bins_of(*p_test, data().y_test);
      metrics_["test_ece_uncalibrated"] = runs::expected_calibration_error(test_before);
    }
    const std::vector<runs::ReliabilityBin>& before = has_test ? test_before : val_before;
    const std::vector<runs::ReliabilityBin>& after = has_test ? test_after : val_after;
    calibration_["temperature"] = t.temperature;
    calibration_["val_nll_uncalibrated"] = t.nll_before;
    calibration_["val_nll"] = t.nll_after;
    calibration_["calibrated"] = runs::reliability_json(after);
    reporter_.note("calibrated: temperature " + metric_text(t.temperature) +
                   " fitted on the validation rows (negative log-likelihood " + metric_text(t.nll_before) + " -> " +
                   metric_text(t.nll_after) + "); " + split + " expected calibration error " +
                   metric_text(runs::expected_calibration_error(before)) + " -> " +
                   metric_text(runs::expected_calibration_error(after)));
  }

  static std::string metric_text(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v);
    return text;
  }

  void fit_tree_model() {
    model_.kind = runs::ModelKindId::kTrees;
    model_.trees = fit_trees(data(), config(), warm_.used ? &warm_.parent_model : nullptr, reporter_, request_.stop);
    model_.outputs = model_.trees.objective == TreeObjective::kMultiSoftmax ? model_.trees.classes : 1;
    model_.weights_hash = runs::model_weights_hash(model_);
    // Unprefixed val_*/test_* keys: the trees are the model.
    metrics_.update(
        model_scores(model_, *backend_, data(), per_class_, confusion_, threshold_decider(), calibrator()));
    if (linear_) metrics_.update(linear_scores("baseline_", *linear_, data(), per_class_));
    importance_ = column_importance(data().features, model_.trees.importance);
  }

  void fit_linear_model() {
    model_.kind = runs::ModelKindId::kLinear;
    model_.linear_model = *linear_;
    model_.weights_hash = runs::model_weights_hash(model_);
    // Unprefixed val_*/test_* keys: here the linear model is the model.
    metrics_.update(linear_scores("", *linear_, data(), per_class_, &confusion_, threshold_decider(), &model_.threshold,
                                  calibrator()));
  }

  void train_network() {
    if (setup_.resumed) resume_checkpoint();
    // The followers build the same trainer and data order from this, then
    // take this rank's state (fresh, warm-started or resumed).
    leader_.start(config().to_text(), tc_, *trainer_);
    if (leader_.communicator()) {
      std::string list;
      for (std::size_t r = 0; r < leader_.hosts().size(); ++r) list += (r ? ", " : "") + leader_.hosts()[r];
      reporter_.note("training on " + std::to_string(leader_.hosts().size()) + " ranks: " + list);
    }
    train_loop();
    if (result_.cancelled) {
      leader_.done();
      record_cancelled();
      return;
    }
    save_checkpoint(/*periodic=*/false);  // the end state: a finished run can be inspected like any other
    leader_.done();
    score_network();
  }

  // The preprocessing a checkpoint of this run must have been made with.
  json preprocessing() { return {{"features", data().features.to_json()}, {"labels", data().labels.to_json()}}; }

  // Loads the newest checkpoint that verifies: a damaged one (a bad disk
  // sector, a partial restore) costs the steps since the one before it,
  // not the run.
  void resume_checkpoint() {
    const json prep = preprocessing();
    auto checkpoints = run_checkpoints(store_, run_.id);
    for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
      std::string owner = run_.label() + " checkpoint at step " + std::to_string(it->step);
      std::optional<runs::Checkpoint> c;
      try {
        c = runs::decode_checkpoint(read_checkpoint(store_, *it), owner);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kCorrupt) throw;
        reporter_.note(std::string(e.what()) + "; " +
                       (std::next(it) != checkpoints.rend()
                            ? "trying the one at step " + std::to_string(std::next(it)->step)
                            : std::string("no earlier checkpoint: starting from step 0")));
        continue;
      }
      if (c->header.value("features", json()) != prep["features"] || c->header.value("labels", json()) != prep["labels"])
        throw corrupt(owner + ": its preprocessing differs from the one rebuilt from " + data().version.ref());
      // A record of the search's trials (record_trials), not the network's.
      if (c->state.empty() || c->header.contains("search_predictions")) continue;
      trainer_->load_state(c->state);
      last_saved_step_ = it->step;
      reporter_.note("continuing from step " + std::to_string(trainer_->step()) + " of " +
                     std::to_string(trainer_->total_steps()));
      return;
    }
  }

  // Saves a checkpoint of where the trainer is. A periodic one that fails
  // (a full disk) is a note, not the end of the run: the previous
  // checkpoint stays valid and training goes on. The end-of-run and cancel
  // saves throw: the run then stops, resumable.
  void save_checkpoint(bool periodic) {
    leader_.save();
    runs::Checkpoint c;
    c.header = preprocessing();
    c.header["run"] = run_.id;
    c.header["step"] = trainer_->step();
    // A searched run's network carries the search's trials, so a resume
    // after its records were released still skips the search.
    if (!search_trials_.is_null()) c.header["search_trials"] = search_trials_;
    c.state = trainer_->save_state();
    try {
      SavedCheckpoint saved = anneal::save_checkpoint(store_, run_.id, trainer_->step(), runs::encode_checkpoint(c),
                                                      checkpoint_score(*trainer_), config().keep_checkpoints, fence_);
      last_saved_step_ = trainer_->step();
      leader_.saved();
      if (!saved.reclaim_error.empty())
        reporter_.suggest("checkpoint at step " + std::to_string(trainer_->step()) +
                              " saved, but removing the released checkpoints failed: " + saved.reclaim_error,
                          Remedy::kCollectGarbage);
    } catch (const Error& e) {
      // A lost claim is no disk trouble: this attempt must stop.
      if (!periodic || (fence_ && !job_fence_holds(store_, *fence_))) throw;
      reporter_.note("checkpoint at step " + std::to_string(trainer_->step()) + " not saved: " + e.what() + "; " +
                     (last_saved_step_ ? "the one at step " + std::to_string(*last_saved_step_) + " stays"
                                       : std::string("there is no earlier one")) +
                     "; training goes on");
    }
  }

  // Trains until the trainer is finished or a stop is requested (then it
  // checkpoints and sets result_.cancelled), in slices of about a quarter
  // second between progress reports, stop checks and time-based
  // checkpoints, whatever the model's speed; each finished epoch recorded.
  void train_loop() {
    Trainer& trainer = *trainer_;
    const std::uint64_t rows = data().train_rows();
    const bool classification = data().labels.classification();
    const std::int64_t per_epoch = trainer.steps_per_epoch();
    std::int64_t recorded_epochs = 0;
    double step_seconds = 0;
    const double start_samples = samples_done(trainer, rows);
    double train_seconds = 0;
    auto last_checkpoint = Clock::now();
    while (!trainer.finished()) {
      if (request_.stop.stop_requested()) {
        save_checkpoint(/*periodic=*/false);
        result_.cancelled = true;
        break;
      }
      std::int64_t slice = step_seconds > 0 ? static_cast<std::int64_t>(0.25 / step_seconds) : 1;
      std::int64_t steps = std::min(std::max<std::int64_t>(slice, 1),
                                    per_epoch - (trainer.step() - trainer.epoch() * per_epoch));
      if (config().checkpoint_every.steps > 0)
        steps = std::min(steps, config().checkpoint_every.steps - trainer.step() % config().checkpoint_every.steps);
      auto t0 = Clock::now();
      const std::int64_t step_before = trainer.step();
      leader_.train(std::max<std::int64_t>(steps, 1));
      trainer.train(static_cast<std::uint64_t>(std::max<std::int64_t>(steps, 1)));
      const double took = seconds_since(t0);
      if (!result_.first_step_seconds && trainer.step() > step_before)
        result_.first_step_seconds = runs::process_uptime_seconds();
      train_seconds += took;
      if (trainer.step() > step_before) step_seconds = took / static_cast<double>(trainer.step() - step_before);
      for (std::size_t i = static_cast<std::size_t>(recorded_epochs); i < trainer.history().size(); ++i)
        record_epoch(store_, run_.id, epoch_record(trainer.history()[i], classification,
                                                   config().trainer.precision == Precision::kFp16, rows));
      recorded_epochs = static_cast<std::int64_t>(trainer.history().size());

      TrainProgress p;
      p.run = run_.label();
      p.epochs = tc_.epochs;
      p.epoch = std::min(trainer.epoch() + 1, tc_.epochs);
      p.step = trainer.step();
      p.total_steps = trainer.total_steps();
      p.steps_per_epoch = per_epoch;
      p.epoch_step = trainer.step() - trainer.epoch() * per_epoch;
      if (!trainer.history().empty()) p.loss = trainer.history().back().train_loss;
      double done = samples_done(trainer, rows);
      p.samples_per_s = train_seconds > 0 ? (done - start_samples) / train_seconds : 0;
      if (p.samples_per_s > 0)
        p.eta_seconds = (static_cast<double>(tc_.epochs) * static_cast<double>(rows) - done) / p.samples_per_s;
      result_.samples_per_s = p.samples_per_s;
      reporter_.training(p);

      bool due = (config().checkpoint_every.steps > 0 && trainer.step() % config().checkpoint_every.steps == 0) ||
                 (config().checkpoint_every.seconds > 0 &&
                  seconds_since(last_checkpoint) >= config().checkpoint_every.seconds);
      if (due && !trainer.finished()) {
        save_checkpoint(/*periodic=*/true);
        last_checkpoint = Clock::now();
      }
    }
  }

  // A stopped run: recorded cancelled at its checkpoint, resumable.
  void record_cancelled() {
    json summary = {{"step", trainer_->step()}, {"samples_per_s", result_.samples_per_s}};
    summary.update(data_path_json(result_, data()));
    end_run(store_, run_.id, RunStatus::kCancelled,
            "cancelled at step " + std::to_string(trainer_->step()) + remedy_text(Remedy::kResumeRun, run_.label()),
            summary, fence_);
    result_.run = find_run(store_, run_.id);
  }

  // The trained network as the model, scored by the trainer on the
  // validation and test sources (which may stream).
  void score_network() {
    Trainer& trainer = *trainer_;
    model_.layers = config().trainer.layers;
    model_.precision = config().trainer.precision;
    model_.tensors = runs::export_weights(trainer);
    model_.weights_hash = trainer.weights_hash();
    const bool classification = data().labels.classification();
    auto add = [&](const std::string& split, const std::vector<float>& p, const std::vector<float>& y) {
      if (split == "val") model_.threshold = decide_threshold(data().loss, p);
      metrics_.update(runs::score(split, data().loss, data().labels, p, y, model_.threshold));
      if (classification) {
        per_class_[split] = runs::score_per_class(data().loss, data().labels, p, y, model_.threshold);
        confusion_[split] = runs::score_confusion(data().loss, data().labels, p, y, model_.threshold);
      }
    };
    std::vector<float> p_val, p_test;
    if (data().rows->validation) p_val = trainer.predict(*data().rows->validation);
    if (data().rows->test) p_test = trainer.predict(*data().rows->test);
    calibrate(data().loss, p_val, data().rows->test ? &p_test : nullptr);
    if (data().rows->validation) {
      add("val", p_val, data().y_val);
      metrics_["val_loss"] = trainer.history().back().val_loss;
    }
    if (data().rows->test) add("test", p_test, data().y_test);
    if (linear_) metrics_.update(linear_scores("baseline_", *linear_, data(), per_class_));
    if (trainer.stopped_early()) metrics_["stopped_early_at_epoch"] = trainer.epoch();
  }

  // --- finish --------------------------------------------------------------
  TrainResult finish() {
    if (data().labels.classification()) {
      const bool by_balance = threshold_.is_object() && threshold_.value("metric", "") != "accuracy";
      compare_with_majority(metrics_, "val", data().y_val, data().labels, reporter_, by_balance);
      compare_with_majority(metrics_, "test", data().y_test, data().labels, reporter_, by_balance);
    }
    result_.weights_hash = model_.weights_hash;
    result_.metrics = metrics_;
    result_.per_class = per_class_;
    json summary = {{"samples_per_s", result_.samples_per_s}, {"weights_hash", result_.weights_hash},
                    {"metrics", metrics_}};
    if (!per_class_.empty()) summary["per_class"] = per_class_;
    if (!confusion_.empty()) summary["confusion"] = confusion_;
    if (!importance_.empty()) summary["importance"] = importance_;
    if (!search_.is_null()) summary["search"] = search_;
    if (!threshold_.is_null()) summary["threshold"] = threshold_;
    if (!calibration_.is_null()) summary["calibration"] = calibration_;
    if (trainer_) summary["steps"] = trainer_->step();
    // After the data path's peaks: those are the training's.
    summary.update(data_path_json(result_, data()));
    // Under a search's time budget, only in what the budget leaves.
    std::optional<double> importance_seconds;
    if (budget_deadline_)
      importance_seconds = std::max(0.0, std::chrono::duration<double>(*budget_deadline_ - Clock::now()).count());
    if (json permutation =
            permutation_importance_summary(model_, *backend_, data(), config().trainer.seed, importance_seconds);
        !permutation.is_null()) {
      if (permutation.contains("cut_by"))
        reporter_.note("permutation importance: " +
                       (permutation["repeats"] == 0
                            ? std::string("not measured")
                            : "measured with " + std::to_string(permutation["repeats"].get<int>()) + " of its " +
                                  std::to_string(ImportanceOptions{}.repeats) + " shuffles a column") +
                       " to end within time_budget = " + config().time_budget_text +
                       " (eval can measure it in full)");
      summary["permutation_importance"] = std::move(permutation);
    }
    // A searched run's model records the winner's config, so a retrain
    // trains that model again, and the search it came from beside it.
    // An ensemble has no one config: its lineage's is the search's, and
    // its members' settings and weights are beside it.
    TrainConfig trained = config();
    trained.auto_search = model_.kind == runs::ModelKindId::kEnsemble;
    json lineage = lineage_json(config(), trained.to_text(), data(), run_, backend_->capabilities(), leader_.hosts());
    if (!search_.is_null()) lineage["search_config"] = config().to_text();
    if (!ensemble_.is_null()) lineage["ensemble"] = ensemble_;
    lineage.update(runs::warm_start_lineage(warm_));
    result_.model = register_model(store_, run_.id, config().name, runs::encode_model(model_), lineage, metrics_,
                                   summary, fence_);
    result_.run = find_run(store_, run_.id);
    return result_;
  }

  // Called from run()'s handler: the run stays recorded as failed with the
  // reason, and the error goes on up. An I/O failure (a full disk at the
  // end-of-run save or at the model registration) leaves the run
  // resumable, and the message says how. An attempt that lost its job's
  // claim records nothing: the run is the new attempt's now.
  [[noreturn]] void record_failure(const std::exception& e) {
    if (fence_ && !job_fence_holds(store_, *fence_)) throw;
    const Error* error = dynamic_cast<const Error*>(&e);
    const bool resumable = error && (error->kind() == ErrorKind::kFailure || error->kind() == ErrorKind::kBusy);
    // Resumable: from the newest checkpoint, or from the start.
    const std::optional<Error> resume =
        resumable ? std::optional<Error>(Error(error->kind(), Subject::kNone,
                                              std::string(e.what()) +
                                                  (last_saved_step_ ? " (its newest checkpoint is at step " +
                                                                          std::to_string(*last_saved_step_) + ")"
                                                                    : std::string()),
                                              Remedy::kResumeRun, run_.label()))
                  : std::nullopt;
    const std::string message = resume ? resume->what() : e.what();
    try {
      end_run(store_, run_.id, RunStatus::kFailed, message, json::object(), fence_);
    } catch (const std::exception& second) {
      throw failure(message + " (and recording the failure failed: " + second.what() + ")");
    }
    if (resume) throw *resume;
    throw;
  }

  Store& store_;
  const TrainRequest& request_;
  TrainingReporter& reporter_;
  const JobFence* fence_;
  runs::Leader leader_;  // first: its hosts() is the collective the followers start with
  EngineReporter engine_reporter_;
  Setup setup_;
  runs::WarmStart warm_;
  std::optional<FileLock> run_lock_;
  std::unique_ptr<Backend> backend_;
  std::optional<PreparedData> data_;
  TrainerConfig tc_;
  std::unique_ptr<Trainer> trainer_;
  RunRecord run_;
  std::optional<std::int64_t> last_saved_step_;  // the newest checkpoint of this run that is recorded
  TrainResult result_;
  // What fit() made: the model, its scores, and the linear baseline.
  runs::ModelFile model_;
  std::optional<LinearModel> linear_;
  json metrics_ = json::object();
  json per_class_ = json::object();  // {"test": {"CLASS": {"recall", ...}}, ...}
  json confusion_ = json::object();  // {"test": {"classes", "matrix"}, ...}: for the run's report
  json importance_ = json::array();  // trees: [{"column", "share"}], the largest share first
  json search_;                      // layers = auto: the leaderboard (SearchResult::to_json), else null
  json search_trials_;               // layers = auto: the trials recorded so far (Trial::to_json), else null
  std::optional<runs::SearchResult> search_result_;  // layers = auto chose an ensemble: the search, else empty
  // layers = auto under a time_budget: when the budget, which began with
  // the search (its resumed trials' time included), runs out.
  std::optional<Clock::time_point> budget_deadline_;
  json ensemble_;                    // an ensemble's members: trial, kind, settings, weight; else null
  json threshold_;                   // a binary model's decision threshold and how it was chosen, else null
  json calibration_;                 // a classifier's reliability bins and temperature (calibrate()), else null
};

}  // namespace

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  return name;
}

TrainResult train_model(Store& store, const TrainRequest& request, TrainingReporter& reporter) {
  return TrainingRun(store, request, reporter).run();
}

}  // namespace anneal
