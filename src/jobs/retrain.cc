// The cron path: `anneal retrain`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "anneal/config.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/hash.h"
#include "anneal/jobs.h"
#include "anneal/preprocess.h"
#include "anneal/version.h"

namespace anneal {
namespace {

using nlohmann::json;

std::string iso_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The version an import with the same options as the dataset's latest would
// make of FILE: the user points --data at a fresh export every night and
// expects it parsed the way the dataset always was.
ImportRequest import_like_latest(Store& store, const std::string& dataset, const std::filesystem::path& file,
                                 Reporter& reporter) {
  ImportRequest request;
  request.dataset = dataset;
  request.file = file;
  std::vector<DatasetVersion> versions;
  try {
    versions = dataset_versions(store, dataset);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;
  }
  if (versions.empty()) return request;
  const json& o = versions.back().options;
  if (o.value("test", false))
    throw usage_error(Subject::kRetrainData, ": " + versions.back().ref() +
                                                " was imported with a separate test file, which a retrain cannot "
                                                "repeat; import its new versions as a dataset instead");
  if (o.contains("format")) request.format = parse_format_name(o["format"].get<std::string>());
  if (o.contains("label")) request.label = o["label"].get<std::string>();
  if (o.contains("header")) request.header = o["header"].get<bool>();
  if (o.contains("categorical")) request.categorical = o["categorical"].get<std::vector<std::string>>();
  if (o.contains("date_formats")) {
    for (const auto& text : o["date_formats"]) request.date_formats.push_back(parse_date_format_option(text.get<std::string>()));
  } else if (versions.back().format == "csv" || versions.back().format == "tsv") {
    // Imported before anneal read dates: its text columns, dates among them,
    // were categorical. Read tonight's export the same way, or the nightly
    // model would meet a changed schema and its gate could never compare it
    // with the one in production.
    std::vector<std::string> text_columns;
    for (const ColumnSchema& c : versions.back().columns)
      if (c.type == ColumnType::kCategorical && c.name != versions.back().label_column &&
          std::find(request.categorical.begin(), request.categorical.end(), c.name) == request.categorical.end())
        text_columns.push_back(c.name);
    if (!text_columns.empty()) {
      request.categorical.insert(request.categorical.end(), text_columns.begin(), text_columns.end());
      reporter.suggest(versions.back().ref() + " was imported before dates were read as dates: its " +
                           std::to_string(text_columns.size()) + " text column(s) stay text",
                       Remedy::kImportNewVersion);
    }
  }
  if (o.contains("split")) request.split = o["split"].get<double>();
  if (o.contains("seed")) request.seed = o["seed"].get<std::uint64_t>();
  return request;
}

class NoteForwarder final : public Reporter {
 public:
  explicit NoteForwarder(Reporter& inner) : inner_(inner) {}
  void note(std::string_view message) override { inner_.note(message); }
  void suggest(std::string_view message, Remedy remedy, const std::string& argument) override {
    inner_.suggest(message, remedy, argument);
  }
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override {
    inner_.progress(stage, done, total);
  }

 private:
  Reporter& inner_;
};

}  // namespace

json RetrainResult::to_json() const {
  json j = {{"outcome", retrain_outcome_name(outcome)},
            {"reason", reason.empty() ? json(nullptr) : json(reason)},
            {"dataset", dataset.empty() ? json(nullptr) : json(dataset)},
            {"imported", imported}};
  if (train) {
    j["run"] = train->run.label();
    j["model"] = train->model ? json(train->model->ref()) : json(nullptr);
    // A warm start's parent (docs/TRAINING.md, "Warm start"), else null.
    const bool warm = train->model && train->model->lineage.contains("parent");
    j["parent"] = warm ? train->model->lineage["parent"] : json(nullptr);
    j["samples_per_s"] = train->samples_per_s;
    j["weights_hash"] = train->weights_hash;
    j["metrics"] = train->metrics;
  } else {
    j["run"] = nullptr;
    j["model"] = nullptr;
    j["parent"] = nullptr;
  }
  j["promoted"] = outcome == RetrainOutcome::kPromoted;
  if (gate) j["gate"] = gate->to_json();
  j["data_checks"] = data_checks ? data_checks->to_json() : json(nullptr);
  return j;
}

RetrainResult retrain(Store& store, const RetrainRequest& request, TrainingReporter& reporter) {
  // Everything about the config is checked before the lock or the store.
  TrainConfig config = parse_train_config(request.config_text, request.config_source, request.overrides, request.sources);
  validate_model_name(config.name);
  DatasetRef dataset_ref = parse_dataset_ref(config.dataset, request.config_source + ": dataset");
  if (request.promote) validate_alias_name(*request.promote);
  if (request.warm_start) {
    if (!request.promote)
      throw usage_error("warm start: name the alias to promote; the new model starts from the one holding it");
    // Part of what --if-changed compares: it changes what is trained.
    config.warm_start = parse_warm_start(*request.promote, config.name);
  }
  if (request.drift && !request.promote)
    throw usage_error("data checks: name the alias to promote; the version is checked against the one its model "
                      "trained on");
  if (request.data && dataset_ref.version)
    throw usage_error(Subject::kRetrainData, ": the config pins dataset " + dataset_ref.to_string() +
                      "; a new version would never be trained (use NAME or NAME@latest)");
  const std::string config_hash = to_hex(hash_bytes(config.to_text()));

  // One retrain per config at a time. flock dies with its process, so a
  // lock left by a killed retrain is simply taken.
  const std::filesystem::path lock_path = store.root() / "locks" / ("retrain-" + config.name + ".lock");
  FileLock lock = FileLock::try_lock(lock_path, FileLock::Mode::kExclusive);
  if (!lock.held()) {
    std::string holder = FileLock::holder(lock_path);
    throw busy("retrain " + config.name + ": another retrain of this config is running" +
               (holder.empty() ? "" : " (" + holder + ")") + "; lock " + lock_path.string());
  }
  lock.describe("pid " + std::to_string(::getpid()) + " on " + host_name() + " since " + iso_now());
  fault_point("retrain.locked");

  const double started = unix_now();
  RetrainRecord record;
  record.config = config.name;
  record.config_hash = config_hash;
  record.started = started;
  RetrainResult result;
  bool recorded = false;
  auto finish = [&](RetrainOutcome outcome, const std::string& detail) {
    recorded = true;
    record.outcome = outcome;
    record.detail = detail;
    record.ended = unix_now();
    record_retrain(store, record);
  };

  try {
    if (request.data) {
      NoteForwarder notes(reporter);
      ImportResult imported = import_dataset(store, import_like_latest(store, dataset_ref.name, *request.data, notes), notes);
      result.imported = imported.created;
      reporter.note(imported.created ? "imported " + request.data->string() + " as " + imported.version.ref()
                                     : request.data->string() + " is unchanged: " + imported.version.ref());
    }
    DatasetVersion version = find_dataset(store, dataset_ref);
    result.dataset = version.ref();
    record.dataset = version.ref();

    if (request.if_changed) {
      if (auto last = last_trained_retrain(store, config.name);
          last && last->dataset == version.ref() && last->config_hash == config_hash) {
        result.outcome = RetrainOutcome::kSkipped;
        result.reason = "unchanged since the last retrain: " + version.ref() + " and the same config" +
                        (last->model.empty() ? "" : " trained " + last->model);
        finish(RetrainOutcome::kSkipped, result.reason);
        return result;
      }
    }

    if (request.drift) {
      // Against what production learned from: the version the alias's
      // model trained on, per its lineage.
      const std::optional<ModelRecord> holder = find_alias(store, config.name, *request.promote);
      const std::string reference = holder && holder->lineage.is_object() ? holder->lineage.value("dataset", "") : "";
      if (reference.empty()) {
        reporter.note("data checks: " + config.name + "@" + *request.promote +
                      (holder ? " names no training version" : " is not set yet") + "; nothing to check against");
      } else {
        result.data_checks = check_data(store, parse_dataset_ref(version.ref(), "dataset"),
                                        parse_dataset_ref(reference, "the lineage's dataset"), *request.drift);
        record.data_checks = result.data_checks->to_json();
        reporter.note("data checks of " + version.ref() + " against " + reference + " (what " + holder->ref() +
                      " trained on): " +
                      (result.data_checks->passed() ? std::string("passed")
                                                     : "failed: " + result.data_checks->failure_line()));
      }
    }

    TrainRequest train;
    train.config_text = request.config_text;
    train.config_source = request.config_source;
    train.overrides = request.overrides;
    train.sources = request.sources;
    // Train exactly the version resolved above, even if an import lands
    // in between.
    train.overrides.push_back("dataset=" + version.ref());
    train.stop = request.stop;
    if (request.warm_start) train.warm_start = *request.promote;
    result.train = train_model(store, train, reporter);
    record.run = result.train->run.id;
    if (result.train->cancelled) {
      finish(RetrainOutcome::kFailed, "cancelled");
      throw failure("retrain " + config.name + ": interrupted; " + result.train->run.label() + " is recorded cancelled");
    }
    const ModelRecord& model = *result.train->model;
    record.model = model.ref();
    result.outcome = RetrainOutcome::kTrained;
    if (request.promote && result.data_checks && !result.data_checks->passed()) {
      // The model is there to inspect; production stays.
      result.outcome = RetrainOutcome::kRefused;
      result.reason = "data checks against " + result.data_checks->reference + " failed: " +
                      result.data_checks->failure_line() + "; " + config.name + "@" + *request.promote + " stays";
      finish(result.outcome, result.reason);
      return result;
    }
    if (request.promote) {
      // The gate is judged on the version just trained: its test split,
      // less the rows either model trained on. A promotion commits this
      // retrain's record with the alias move (one transaction), so the
      // next --if-changed never sees production moved and no record.
      result.gate = promote_model(store, model, *request.promote, request.gate,
                                  request.gate ? "" : "retrain " + config.name,
                                  request.gate && !request.gate->constant
                                      ? std::optional<DatasetRef>(parse_dataset_ref(version.ref(), "dataset"))
                                      : std::nullopt,
                                  &record);
      if (result.gate->passed) {
        recorded = true;
        // Killed here, the move and its record are both there (the crash
        // matrix checks that they always agree).
        fault_point("retrain.promoted");
        result.outcome = RetrainOutcome::kPromoted;
        return result;
      }
      if (request.gate) record.gate = result.gate->to_json();
      result.outcome = RetrainOutcome::kRefused;
      result.reason = "gate " + request.gate->text + " refused: " + result.gate->reason;
    }
    finish(result.outcome, result.gate ? result.gate->reason : "");
    return result;
  } catch (const Error& e) {
    // Bad input (usage, data, a missing dataset) leaves the store as it
    // was; a training that failed is a retrain that failed, for metrics.
    const bool bad_input = e.kind() == ErrorKind::kUsage || e.kind() == ErrorKind::kBadData ||
                           e.kind() == ErrorKind::kNotFound;
    if (!recorded && !bad_input) {
      try {
        finish(RetrainOutcome::kFailed, e.what());
      } catch (const std::exception&) {
        // The original error is the one to report; the catalog may be why.
      }
    }
    throw;
  }
}

}  // namespace anneal
