// train_model: config -> prepared data -> trainer -> run record, the
// training loop with checkpoints, evaluation, the linear baseline and the
// registered model.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "anneal/boosted_trees.h"
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
#include "runs/distributed.h"
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

json lineage_json(const TrainConfig& config, const PreparedData& data, const RunRecord& run,
                  const BackendCapabilities& backend, const std::vector<std::string>& hosts) {
  return {{"dataset", data.version.ref()},
          {"dataset_fingerprint", data.version.fingerprint},
          {"config", config.to_text()},
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
  const TreeObjective objective = !classification ? TreeObjective::kSquaredError
                                  : classes == 2  ? TreeObjective::kBinaryLogistic
                                                  : TreeObjective::kMultiSoftmax;
  auto weights_of = [&](const std::vector<float>& y) {
    std::vector<float> w;
    if (data.class_weights.empty()) return w;
    for (float label : y) w.push_back(data.class_weights[static_cast<std::size_t>(label)]);
    return w;
  };
  const std::vector<float> w_train = weights_of(data.y_train), w_val = weights_of(data.y_val);
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
  runs::TreeModel m;
  m.objective = objective;
  m.classes = classes;
  const std::vector<std::uint8_t> bytes = trees.save();
  m.booster.assign(bytes.begin(), bytes.end());
  m.rounds = trees.rounds();
  m.params = {{"max_rounds", params.max_rounds},
              {"early_stopping_rounds", validated ? params.early_stopping_rounds : 0},
              {"max_depth", params.max_depth},
              {"learning_rate", params.learning_rate},
              {"min_child_weight", params.min_child_weight},
              {"subsample", params.subsample},
              {"colsample_bytree", params.colsample_bytree},
              {"l2", params.l2},
              {"seed", params.seed},
              {"threads", params.threads}};
  m.importance = trees.importance();
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
void compare_with_majority(json& metrics, const std::string& split, const std::vector<float>& labels,
                           const LabelEncoding& encoding, Reporter& reporter) {
  const std::string key = split + "_accuracy";
  if (labels.empty() || !metrics.contains(key)) return;
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(encoding.classes()), 0);
  for (float y : labels)
    if (y >= 0 && static_cast<std::size_t>(y) < counts.size()) ++counts[static_cast<std::size_t>(y)];
  const auto most = std::max_element(counts.begin(), counts.end());
  const double majority = static_cast<double>(*most) / static_cast<double>(labels.size());
  metrics[split + "_majority_accuracy"] = majority;
  const double accuracy = metrics[key].get<double>();
  if (accuracy <= majority) {
    auto g4 = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%.4g", v);
      return std::string(text);
    };
    const std::string name = encoding.class_names()[static_cast<std::size_t>(most - counts.begin())];
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

// The scores of `model` (any kind) on the validation and test rows, as the
// registered model gives them (eval reproduces them), by its kind's
// predictor on `backend`.
json model_scores(const runs::ModelFile& model, Backend& backend, const PreparedData& data, json& per_class,
                  json& confusion) {
  const runs::ModelKind& kind = runs::model_kind(model);
  const LossKind as = kind.prediction_loss(model);
  const std::unique_ptr<runs::KindPredictor> predictor = kind.predictor(model, backend, 256);
  json out = json::object();
  auto add = [&](const std::string& split, const std::vector<float>& x, const std::vector<float>& y) {
    const std::vector<float> p = predictor->predict(x);
    out.update(runs::score(split, as, data.labels, p, y));
    if (data.labels.classification()) {
      per_class[split] = runs::score_per_class(as, data.labels, p, y);
      confusion[split] = runs::score_confusion(as, data.labels, p, y);
    }
  };
  if (!data.y_val.empty()) add("val", data.x_val, data.y_val);
  if (!data.y_test.empty()) add("test", data.x_test, data.y_test);
  return out;
}

// The linear model's score on validation rows, else test rows, as
// "<prefix>_val_accuracy" etc.
// Per-class scores go to `per_class` as {"<prefix>val": {...}, ...}.
// With `confusion` (the linear model is the model), its confusion matrices too.
json linear_scores(const std::string& prefix, const LinearModel& linear, const PreparedData& data, json& per_class,
                   json* confusion = nullptr) {
  // The linear model's outputs are already probabilities per class.
  LossKind as = data.labels.classification() ? LossKind::kSoftmaxCrossEntropy : LossKind::kMeanSquaredError;
  json out = json::object();
  auto add = [&](const std::string& split, const std::vector<float>& x, const std::vector<float>& y) {
    std::vector<float> p = linear.predict(x);
    out.update(runs::score(prefix + split, as, data.labels, p, y));
    if (data.labels.classification()) per_class[prefix + split] = runs::score_per_class(as, data.labels, p, y);
    if (confusion && data.labels.classification()) (*confusion)[split] = runs::score_confusion(as, data.labels, p, y);
  };
  if (!data.y_val.empty()) add("val", data.x_val, data.y_val);
  if (!data.y_test.empty()) add("test", data.x_test, data.y_test);
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

Setup resolve(Store& store, const TrainRequest& request) {
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
      s.config.sources["device"] = "--device";
    }
    s.dataset = parse_dataset_ref(run.dataset, "dataset");
    s.resumed = std::move(run);
    return s;
  }
  s.config = parse_train_config(request.config_text, request.config_source, request.overrides);
  if (request.device) {
    s.config.device = *request.device;
    s.config.sources["device"] = "--device";
  }
  if (request.warm_start) {
    s.config.warm_start = *request.warm_start;
    s.config.sources["warm_start"] = "--warm-start";
  }
  if (request.memory_budget) {
    try {
      s.config.memory_budget = parse_memory_budget(*request.memory_budget);
    } catch (const Error& e) {
      throw usage_error(Subject::kMemoryBudget, ": " + std::string(e.what()));
    }
    s.config.sources["memory_budget"] = "--memory-budget";
  }
  validate_model_name(s.config.name);
  s.dataset = parse_dataset_ref(s.config.dataset, "dataset");
  // Record the exact version: a resume must not drift to a newer @latest.
  DatasetVersion v = find_dataset(store, s.dataset);
  s.dataset.version = v.version;
  s.config.dataset = v.ref();
  return s;
}

}  // namespace

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  return name;
}

TrainResult train_model(Store& store, const TrainRequest& request, TrainingReporter& reporter) {
  const JobFence* fence = request.fence ? &*request.fence : nullptr;
  // Several ranks: this is rank 0 (the others follow_training()).
  Communicator* comm =
      request.communicator && request.communicator->size() > 1 ? request.communicator : nullptr;
  if (comm && comm->rank() != 0)
    throw failure("train_model runs on rank 0 of " + std::to_string(comm->size()) + ", not rank " +
                  std::to_string(comm->rank()));
  // Every rank's host, gathered first (a collective the followers start with).
  const std::vector<std::string> hosts = comm ? comm->hosts() : std::vector<std::string>{host_name()};
  Setup setup = resolve(store, request);
  runs::WarmStart warm = runs::resolve_warm_start(store, setup.config, reporter);
  const TrainConfig& config = setup.config;

  // Everything that can be checked without training, before a run exists.
  // Held while this process trains the run, so two resumes cannot race.
  std::optional<FileLock> run_lock;
  if (setup.resumed && request.wait_for_run_lock && !try_lock_run(store, setup.resumed->id).held()) {
    reporter.note("waiting for the process still training " + setup.resumed->label() + " to stop");
    run_lock.emplace(lock_run(store, setup.resumed->id));
  } else if (setup.resumed) {
    run_lock.emplace(try_lock_run(store, setup.resumed->id));
  }
  if (run_lock && !run_lock->held())
    throw Error(ErrorKind::kBusy, Subject::kResumedRun,
                setup.resumed->label() + ": another anneal process is training this run");
  // XGBoost's booster is the CPU's: a GPU asked for by name is refused
  // rather than left idle (auto takes the CPU for trees).
  if (config.kind == runs::ModelKindId::kTrees && config.device == Device::kCuda) {
    auto where = config.sources.find("device");
    throw usage_error((where != config.sources.end() ? where->second + ": " : std::string()) +
                      "device = cuda: layers = trees trains on the CPU (XGBoost's booster); use device = cpu or auto");
  }
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend({.device = config.kind == runs::ModelKindId::kTrees ? Device::kCpu : config.device,
                            .threads = config.threads,
                            .deterministic = config.deterministic,
                            .tf32 = config.tf32});
  } catch (const Error& e) {
    // Name where the device was asked for: "fm.ini:7" or "--set device".
    auto where = config.sources.find("device");
    if (e.kind() != ErrorKind::kUsage || where == config.sources.end()) throw;
    throw usage_error(where->second + ": " + e.what());
  }
  if (config.device == Device::kAuto)
    for (const std::string& why : passed_over_by_auto())
      reporter.note("device auto: training on the " + backend->capabilities().device + " (" + why + ")");
  if (!backend->capabilities().deterministic)
    reporter.note("deterministic = false: the " + backend->capabilities().device +
                  " backend may use algorithms whose results vary, so this run's weights will not repeat bit for bit");
  reporter.note("loading " + setup.dataset.to_string());
  const auto load_start = Clock::now();
  const std::uint64_t budget = config.memory_budget.value_or(runs::default_memory_budget());
  PreparedData data = runs::prepare_run_data(store, setup.dataset, config, warm, budget, reporter);
  TrainResult result;
  result.load_seconds = seconds_since(load_start);
  result.memory_budget = budget;
  result.streamed = data.rows->streamed;
  if (data.rows->streamed) {
    reporter.note(data.version.ref() + " does not fit memory_budget = " + memory_budget_text(budget) +
                  ": streaming it in windows of " + std::to_string(data.rows->window) + " blocks of " +
                  std::to_string(data.rows->block_rows) + " rows");
    // The order depends on the budget: the run records the one it used,
    // so a resume (and a rerun of its config) streams the same windows.
    setup.config.memory_budget = budget;
  }
  TrainerConfig tc = config.trainer;
  tc.loss = data.loss;
  tc.classes = data.labels.classification() ? data.labels.classes() : 0;
  tc.class_weights = data.class_weights;
  tc.memory_limit = runs::physical_memory();
  // A warm-started run keeps its parent's choice, made on the parent's rows.
  for (const ExcludedColumn& e : data.features.excluded())
    if (e.identifier)
      reporter.note("column '" + e.column + "' left out of the features" +
                    (warm.used ? " (as by " + warm.parent->ref() + ")" : std::string()) + ": " + e.reason +
                    "; set features= or exclude= to choose");
  EngineReporter engine_reporter(reporter);
  std::unique_ptr<Trainer> trainer;
  // Rank 0's reads also answer the other ranks' (distributed.h).
  std::unique_ptr<runs::ServedSource> served_train, served_validation;
  const bool network = config.kind == runs::ModelKindId::kNetwork;
  const std::string kind_words = config.kind == runs::ModelKindId::kTrees ? "boosted trees" : "the linear model";
  const std::string layers_key = "layers = " + std::string(runs::model_kind(config.kind).name());
  if (comm && !network)
    throw usage_error(layers_key + ": " + kind_words + (config.kind == runs::ModelKindId::kTrees ? " are trained" : " is fitted") +
                      " by one process; run it without mpirun (or with -np 1)");
  if (comm) {
    served_train = std::make_unique<runs::ServedSource>(*data.rows->train, *comm);
    if (data.rows->validation)
      served_validation = std::make_unique<runs::ServedSource>(*data.rows->validation, *comm);
  }
  if (!network) {
    if (!data.tabular)
      throw usage_error(layers_key + ": " + kind_words + (network ? "" : config.kind == runs::ModelKindId::kTrees ? " need" : " needs") + " tabular (CSV/TSV) data; " + data.version.ref() +
                        " is " + data.version.format);
    if (data.rows->streamed)
      throw usage_error(Subject::kMemoryBudget, ": " + layers_key + " fits on every row at once; " + data.version.ref() +
                                                    " does not fit memory_budget = " + memory_budget_text(budget) +
                                                    "; raise it or train a network");
  } else {
    try {
      if (comm)
        trainer = std::make_unique<Trainer>(tc, *backend, *served_train, served_validation.get(), engine_reporter, comm);
      else
        trainer = std::make_unique<Trainer>(tc, *backend, *data.rows->train, data.rows->validation.get(),
                                            engine_reporter);
    } catch (const Error& e) {
      // The engine names the layer; add where the spec was written.
      auto where = config.sources.find("layers");
      const bool about_layers = std::string_view(e.what()).starts_with("layer");
      if (e.kind() != ErrorKind::kUsage || !about_layers || where == config.sources.end()) throw;
      throw usage_error(where->second + ": layers = " + config.trainer.layers + ": " + e.what());
    }
    // A resumed run's checkpoint replaces these weights; one that has none
    // left starts again from them.
    if (warm.used) runs::load_parent_weights(*trainer, warm);
  }

  // Interrupted while loading: nothing has started, so nothing to record.
  if (request.stop.stop_requested()) throw failure("interrupted before training started");
  RunRecord run;
  if (setup.resumed) {
    reopen_run(store, setup.resumed->id);
    run = find_run(store, setup.resumed->id);
  } else {
    run = create_run(store, config.name, setup.dataset, config.to_text(), host_name());
    run_lock.emplace(try_lock_run(store, run.id));
  }
  if (request.on_run_started) request.on_run_started(run);
  reporter.note((setup.resumed ? "resuming " : "started ") + run.label() + ": " + config.name + " on " +
                data.version.ref() + " (" + std::to_string(data.train_rows()) + " training rows" +
                (data.y_val.empty() ? "" : ", " + std::to_string(data.y_val.size()) + " validation") + ")");

  std::optional<std::int64_t> last_saved_step;  // the newest checkpoint of this run that is recorded
  try {
    json metrics = json::object();
    json per_class = json::object();  // {"test": {"CLASS": {"recall", ...}}, ...}
    json confusion = json::object();  // {"test": {"classes", "matrix"}, ...}: the network's, for its report
    json importance = json::array();  // trees: [{"column", "share"}], the largest share first
    runs::ModelFile model = model_shell(data);
    const bool classification = data.labels.classification();
    std::optional<LinearModel> linear;
    if (data.tabular && config.baseline && data.rows->streamed)
      reporter.note("baseline: not fitted, the linear model needs every row in memory and " + data.version.ref() +
                    " streams");
    else if (data.tabular && (config.baseline || config.kind == runs::ModelKindId::kLinear))
      linear = fit_linear(data, config.linear_l2);

    if (config.kind == runs::ModelKindId::kTrees) {
      model.kind = runs::ModelKindId::kTrees;
      model.trees = fit_trees(data, config, warm.used ? &warm.parent_model : nullptr, reporter, request.stop);
      model.outputs = model.trees.objective == TreeObjective::kMultiSoftmax ? model.trees.classes : 1;
      model.weights_hash = runs::model_weights_hash(model);
      // Unprefixed val_*/test_* keys: the trees are the model.
      metrics.update(model_scores(model, *backend, data, per_class, confusion));
      if (linear) metrics.update(linear_scores("baseline_", *linear, data, per_class));
      importance = column_importance(data.features, model.trees.importance);
    } else if (config.kind == runs::ModelKindId::kLinear) {
      model.kind = runs::ModelKindId::kLinear;
      model.linear_model = *linear;
      model.weights_hash = runs::model_weights_hash(model);
      // Unprefixed val_*/test_* keys: here the linear model is the model.
      metrics.update(linear_scores("", *linear, data, per_class, &confusion));
    } else {
      const json prep = {{"features", data.features.to_json()}, {"labels", data.labels.to_json()}};
      std::int64_t recorded_epochs = 0;
      if (setup.resumed) {
        // The newest checkpoint that verifies: a damaged one (a bad disk
        // sector, a partial restore) costs the steps since the one before
        // it, not the run.
        auto checkpoints = run_checkpoints(store, run.id);
        bool loaded = false;
        for (auto it = checkpoints.rbegin(); it != checkpoints.rend() && !loaded; ++it) {
          std::string owner = run.label() + " checkpoint at step " + std::to_string(it->step);
          std::optional<runs::Checkpoint> c;
          try {
            c = runs::decode_checkpoint(read_checkpoint(store, *it), owner);
          } catch (const Error& e) {
            if (e.kind() != ErrorKind::kCorrupt) throw;
            reporter.note(std::string(e.what()) + "; " +
                          (std::next(it) != checkpoints.rend()
                               ? "trying the one at step " + std::to_string(std::next(it)->step)
                               : std::string("no earlier checkpoint: starting from step 0")));
            continue;
          }
          if (c->header.value("features", json()) != prep["features"] || c->header.value("labels", json()) != prep["labels"])
            throw corrupt(owner + ": its preprocessing differs from the one rebuilt from " + data.version.ref());
          trainer->load_state(c->state);
          last_saved_step = it->step;
          loaded = true;
          reporter.note("continuing from step " + std::to_string(trainer->step()) + " of " +
                        std::to_string(trainer->total_steps()));
        }
      }
      const std::uint64_t rows = data.train_rows();
      if (comm) {
        // The followers build the same trainer and data order from this,
        // then take this rank's state (fresh, warm-started or resumed).
        const json plan = {{"config", config.to_text()},
                            {"loss", static_cast<int>(tc.loss)},
                            {"classes", tc.classes},
                            {"class_weights", tc.class_weights},
                            {"train", runs::source_shape_json(*served_train)},
                            {"validation", served_validation ? runs::source_shape_json(*served_validation) : json()}};
        const std::string text = plan.dump();
        std::vector<std::byte> blob(reinterpret_cast<const std::byte*>(text.data()),
                                    reinterpret_cast<const std::byte*>(text.data()) + text.size());
        runs::broadcast_blob(*comm, blob);
        const std::vector<std::uint8_t> state = trainer->save_state();
        std::vector<std::byte> state_blob(reinterpret_cast<const std::byte*>(state.data()),
                                          reinterpret_cast<const std::byte*>(state.data()) + state.size());
        runs::broadcast_blob(*comm, state_blob);
        reporter.note("training on " + std::to_string(comm->size()) + " ranks: " + [&] {
          std::string list;
          for (std::size_t r = 0; r < hosts.size(); ++r) list += (r ? ", " : "") + hosts[r];
          return list;
        }());
      }
      // Saves a checkpoint of where the trainer is. A periodic one that
      // fails (a full disk) is a note, not the end of the run: the previous
      // checkpoint stays valid and training goes on. The end-of-run and
      // cancel saves throw: the run then stops, resumable.
      auto save = [&](bool periodic) {
        if (comm) runs::send_command(*comm, runs::FollowerCommand::kSave);
        runs::Checkpoint c;
        c.header = prep;
        c.header["run"] = run.id;
        c.header["step"] = trainer->step();
        c.state = trainer->save_state();
        try {
          SavedCheckpoint saved = save_checkpoint(store, run.id, trainer->step(), runs::encode_checkpoint(c),
                                                  checkpoint_score(*trainer), config.keep_checkpoints, fence);
          last_saved_step = trainer->step();
          if (comm) runs::reached_checkpoint(*comm);
          if (!saved.reclaim_error.empty())
            reporter.note("checkpoint at step " + std::to_string(trainer->step()) +
                          " saved, but removing the released checkpoints failed: " + saved.reclaim_error +
                          "; 'anneal gc' removes them");
        } catch (const Error& e) {
          // A lost claim is no disk trouble: this attempt must stop.
          if (!periodic || (fence && !job_fence_holds(store, *fence))) throw;
          reporter.note("checkpoint at step " + std::to_string(trainer->step()) + " not saved: " + e.what() + "; " +
                        (last_saved_step ? "the one at step " + std::to_string(*last_saved_step) + " stays"
                                         : std::string("there is no earlier one")) +
                        "; training goes on");
        }
      };
      const std::int64_t per_epoch = trainer->steps_per_epoch();
      // Slices of about a quarter second between progress reports, stop
      // checks and time-based checkpoints, whatever the model's speed.
      double step_seconds = 0;
      const double start_samples = samples_done(*trainer, rows);
      double train_seconds = 0;
      auto last_checkpoint = Clock::now();
      while (!trainer->finished()) {
        if (request.stop.stop_requested()) {
          save(/*periodic=*/false);
          result.cancelled = true;
          break;
        }
        std::int64_t slice = step_seconds > 0 ? static_cast<std::int64_t>(0.25 / step_seconds) : 1;
        std::int64_t steps = std::min(std::max<std::int64_t>(slice, 1),
                                      per_epoch - (trainer->step() - trainer->epoch() * per_epoch));
        if (config.checkpoint_every.steps > 0)
          steps = std::min(steps, config.checkpoint_every.steps - trainer->step() % config.checkpoint_every.steps);
        auto t0 = Clock::now();
        const std::int64_t step_before = trainer->step();
        if (comm) runs::send_command(*comm, runs::FollowerCommand::kTrain, std::max<std::int64_t>(steps, 1));
        trainer->train(static_cast<std::uint64_t>(std::max<std::int64_t>(steps, 1)));
        const double took = seconds_since(t0);
        if (!result.first_step_seconds && trainer->step() > step_before)
          result.first_step_seconds = runs::process_uptime_seconds();
        train_seconds += took;
        if (trainer->step() > step_before) step_seconds = took / static_cast<double>(trainer->step() - step_before);
        for (std::size_t i = static_cast<std::size_t>(recorded_epochs); i < trainer->history().size(); ++i)
          record_epoch(store, run.id, epoch_record(trainer->history()[i], classification,
                                                  config.trainer.precision == Precision::kFp16, rows));
        recorded_epochs = static_cast<std::int64_t>(trainer->history().size());

        TrainProgress p;
        p.run = run.label();
        p.epochs = tc.epochs;
        p.epoch = std::min(trainer->epoch() + 1, tc.epochs);
        p.step = trainer->step();
        p.total_steps = trainer->total_steps();
        p.steps_per_epoch = per_epoch;
        p.epoch_step = trainer->step() - trainer->epoch() * per_epoch;
        if (!trainer->history().empty()) p.loss = trainer->history().back().train_loss;
        double done = samples_done(*trainer, rows);
        p.samples_per_s = train_seconds > 0 ? (done - start_samples) / train_seconds : 0;
        if (p.samples_per_s > 0)
          p.eta_seconds = (static_cast<double>(tc.epochs) * static_cast<double>(rows) - done) / p.samples_per_s;
        result.samples_per_s = p.samples_per_s;
        reporter.training(p);

        bool due = (config.checkpoint_every.steps > 0 && trainer->step() % config.checkpoint_every.steps == 0) ||
                   (config.checkpoint_every.seconds > 0 && seconds_since(last_checkpoint) >= config.checkpoint_every.seconds);
        if (due && !trainer->finished()) {
          save(/*periodic=*/true);
          last_checkpoint = Clock::now();
        }
      }
      // The followers are done; from here this rank reads alone.
      auto release_followers = [&] {
        if (!comm) return;
        runs::send_command(*comm, runs::FollowerCommand::kDone);
        served_train->stop_serving();
        if (served_validation) served_validation->stop_serving();
      };
      if (result.cancelled) {
        release_followers();
        json summary = {{"step", trainer->step()}, {"samples_per_s", result.samples_per_s}};
        summary.update(data_path_json(result, data));
        end_run(store, run.id, RunStatus::kCancelled, "cancelled at step " + std::to_string(trainer->step()) +
                                                          "; continue with --resume " + run.label(), summary, fence);
        result.run = find_run(store, run.id);
        return result;
      }
      save(/*periodic=*/false);  // the end state: a finished run can be inspected like any other
      release_followers();

      model.layers = config.trainer.layers;
      model.precision = config.trainer.precision;
      model.tensors = runs::export_weights(*trainer);
      model.weights_hash = trainer->weights_hash();
      auto add = [&](const std::string& split, SampleSource& rows, const std::vector<float>& y) {
        std::vector<float> p = trainer->predict(rows);
        metrics.update(runs::score(split, data.loss, data.labels, p, y));
        if (classification) {
          per_class[split] = runs::score_per_class(data.loss, data.labels, p, y);
          confusion[split] = runs::score_confusion(data.loss, data.labels, p, y);
        }
      };
      if (data.rows->validation) {
        add("val", *data.rows->validation, data.y_val);
        metrics["val_loss"] = trainer->history().back().val_loss;
      }
      if (data.rows->test) add("test", *data.rows->test, data.y_test);
      if (linear) metrics.update(linear_scores("baseline_", *linear, data, per_class));
      if (trainer->stopped_early()) metrics["stopped_early_at_epoch"] = trainer->epoch();
    }
    if (classification) {
      compare_with_majority(metrics, "val", data.y_val, data.labels, reporter);
      compare_with_majority(metrics, "test", data.y_test, data.labels, reporter);
    }
    result.weights_hash = model.weights_hash;
    result.metrics = metrics;
    result.per_class = per_class;
    json summary = {{"samples_per_s", result.samples_per_s}, {"weights_hash", result.weights_hash},
                    {"metrics", metrics}};
    if (!per_class.empty()) summary["per_class"] = per_class;
    if (!confusion.empty()) summary["confusion"] = confusion;
    if (!importance.empty()) summary["importance"] = importance;
    if (trainer) summary["steps"] = trainer->step();
    summary.update(data_path_json(result, data));
    json lineage = lineage_json(config, data, run, backend->capabilities(), hosts);
    lineage.update(runs::warm_start_lineage(warm));
    result.model = register_model(store, run.id, config.name, runs::encode_model(model), lineage, metrics, summary,
                                  fence);
    result.run = find_run(store, run.id);
    return result;
  } catch (const std::exception& e) {
    // The run stays recorded as failed with the reason; the error goes on
    // up. An I/O failure (a full disk at the end-of-run save or at the model
    // registration) leaves the run resumable, and the message says how.
    // An attempt that lost its job's claim records nothing: the run is the
    // new attempt's now.
    if (fence && !job_fence_holds(store, *fence)) throw;
    const Error* error = dynamic_cast<const Error*>(&e);
    const bool resumable = error && (error->kind() == ErrorKind::kFailure || error->kind() == ErrorKind::kBusy);
    const std::string message =
        resumable ? std::string(e.what()) + "; 'anneal train --resume " + run.label() + "' continues it" +
                        (last_saved_step ? " from step " + std::to_string(*last_saved_step) : std::string())
                  : std::string(e.what());
    try {
      end_run(store, run.id, RunStatus::kFailed, message, json::object(), fence);
    } catch (const std::exception& second) {
      throw failure(message + " (and recording the failure failed: " + second.what() + ")");
    }
    if (resumable) throw Error(error->kind(), message);
    throw;
  }
}

}  // namespace anneal
