// `anneal metrics`: the store as Prometheus text exposition format 0.0.4.
#include <cmath>
#include <map>
#include <sstream>

#include "anneal/fs.h"
#include "anneal/jobs.h"
#include "anneal/maintenance.h"

namespace anneal {

std::string prometheus_label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

// Metric names allow [a-zA-Z0-9_:]; a model metric key is used as a label
// value instead, so nothing needs mangling there.
class Exposition {
 public:
  void family(const std::string& name, const std::string& type, const std::string& help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void sample(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels, double value) {
    out_ << name;
    if (!labels.empty()) {
      out_ << "{";
      for (std::size_t i = 0; i < labels.size(); ++i)
        out_ << (i ? "," : "") << labels[i].first << "=\"" << prometheus_label_value(labels[i].second) << "\"";
      out_ << "}";
    }
    out_ << " ";
    if (std::isnan(value)) out_ << "NaN";
    else if (std::isinf(value)) out_ << (value > 0 ? "+Inf" : "-Inf");
    else out_ << value;
    out_ << "\n";
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_ = [] {
    std::ostringstream s;
    s.precision(17);
    return s;
  }();
};

}  // namespace

std::string prometheus_metrics(Store& store) {
  Exposition e;
  const std::vector<JobRecord> jobs = list_jobs(store);

  e.family("anneal_jobs", "gauge", "Jobs in the queue, by state.");
  std::map<std::string, int> by_state;
  for (JobState s : kAllJobStates) by_state[job_state_name(s)] = 0;
  for (const auto& j : jobs) ++by_state[job_state_name(j.state)];
  for (const auto& [state, count] : by_state) e.sample("anneal_jobs", {{"state", state}}, count);

  // Cumulative over every finished job the catalog holds: jobs are never
  // deleted, so these only grow, as a histogram must.
  static constexpr double kBuckets[] = {1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600};
  e.family("anneal_job_duration_seconds", "histogram", "Wall time of finished jobs' last attempt.");
  std::vector<std::uint64_t> counts(std::size(kBuckets), 0);
  std::uint64_t finished = 0;
  double sum = 0;
  std::int64_t retries = 0;
  for (const auto& j : jobs) {
    retries += std::max<std::int64_t>(j.attempts - 1, 0);
    const bool ended = j.state == JobState::kSucceeded || j.state == JobState::kFailed || j.state == JobState::kCancelled;
    if (!ended || j.started <= 0 || j.ended < j.started) continue;
    const double d = j.ended - j.started;
    ++finished;
    sum += d;
    for (std::size_t b = 0; b < std::size(kBuckets); ++b)
      if (d <= kBuckets[b]) ++counts[b];
  }
  for (std::size_t b = 0; b < std::size(kBuckets); ++b) {
    std::ostringstream le;
    le << kBuckets[b];
    e.sample("anneal_job_duration_seconds_bucket", {{"le", le.str()}}, static_cast<double>(counts[b]));
  }
  e.sample("anneal_job_duration_seconds_bucket", {{"le", "+Inf"}}, static_cast<double>(finished));
  e.sample("anneal_job_duration_seconds_sum", {}, sum);
  e.sample("anneal_job_duration_seconds_count", {}, static_cast<double>(finished));

  e.family("anneal_job_retries_total", "counter", "Job attempts beyond each job's first.");
  e.sample("anneal_job_retries_total", {}, static_cast<double>(retries));

  const std::vector<RetrainRecord> retrains = list_retrains(store);
  std::map<std::string, const RetrainRecord*> last_success, last_any;
  std::map<std::pair<std::string, std::string>, int> outcomes;
  for (const auto& r : retrains) {
    last_any[r.config] = &r;
    ++outcomes[{r.config, retrain_outcome_name(r.outcome)}];
    if (r.outcome != RetrainOutcome::kFailed) last_success[r.config] = &r;
  }
  e.family("anneal_retrain_last_success_timestamp_seconds", "gauge",
           "When the last retrain of each config ended without failing (trained, promoted, refused or skipped).");
  for (const auto& [config, r] : last_success)
    e.sample("anneal_retrain_last_success_timestamp_seconds", {{"config", config}}, r->ended);
  e.family("anneal_retrain_last_duration_seconds", "gauge", "Wall time of the last retrain of each config.");
  for (const auto& [config, r] : last_any)
    e.sample("anneal_retrain_last_duration_seconds", {{"config", config}}, r->ended - r->started);
  e.family("anneal_retrains_total", "counter", "Retrains of each config, by outcome.");
  for (const auto& [key, count] : outcomes)
    e.sample("anneal_retrains_total", {{"config", key.first}, {"outcome", key.second}}, count);

  // Each config's last data checks (retrain --max-drift): every check's
  // value per column, and how many failed, so an alert can fire on drift
  // before anyone reads a report.
  std::map<std::string, const RetrainRecord*> last_checks;
  for (const auto& r : retrains)
    if (r.data_checks.is_object() && r.data_checks.contains("columns")) last_checks[r.config] = &r;
  e.family("anneal_data_check_value", "gauge",
           "The last data checks of each config's retrain: each column's missing rate, population stability "
           "index (psi), Kolmogorov-Smirnov statistic (ks) and share of unseen levels (unseen), where computed.");
  for (const auto& [config, r] : last_checks)
    for (const nlohmann::json& c : r->data_checks["columns"])
      for (const char* check : {"missing", "psi", "ks", "unseen"})
        if (c.contains(check) && c[check].is_number())
          e.sample("anneal_data_check_value",
                   {{"config", config}, {"dataset", r->data_checks.value("candidate", "")},
                    {"column", c.value("column", "")}, {"check", check}},
                   c[check].get<double>());
  e.family("anneal_data_check_failures", "gauge",
           "The last data checks of each config's retrain: how many checks failed (0: the data passed).");
  for (const auto& [config, r] : last_checks) {
    double failures = 0;
    for (const nlohmann::json& c : r->data_checks["columns"]) failures += static_cast<double>(c.value("failures", nlohmann::json::array()).size());
    e.sample("anneal_data_check_failures", {{"config", config}, {"dataset", r->data_checks.value("candidate", "")}},
             failures);
  }

  // Each config's last gated promotion against an alias: both fresh scores
  // on the same held-out rows, how many rows, and the decision.
  std::map<std::string, const RetrainRecord*> last_gate;
  for (const auto& r : retrains)
    if (r.gate.is_object() && r.gate.contains("alias")) last_gate[r.config] = &r;
  auto gate_labels = [](const std::string& config, const nlohmann::json& g) {
    return std::vector<std::pair<std::string, std::string>>{
        {"config", config}, {"alias", g.value("alias", "")}, {"metric", g.value("metric", "")}};
  };
  e.family("anneal_gate_candidate_score", "gauge",
           "The last gated retrain of each config: the new model's score on the gate's held-out rows.");
  for (const auto& [config, r] : last_gate)
    if (r->gate["candidate"].is_number())
      e.sample("anneal_gate_candidate_score", gate_labels(config, r->gate), r->gate["candidate"].get<double>());
  e.family("anneal_gate_incumbent_score", "gauge",
           "The last gated retrain of each config: the alias holder's score on the same rows.");
  for (const auto& [config, r] : last_gate)
    if (r->gate["incumbent"].is_number())
      e.sample("anneal_gate_incumbent_score", gate_labels(config, r->gate), r->gate["incumbent"].get<double>());
  e.family("anneal_gate_rows", "gauge",
           "The last gated retrain of each config: held-out rows both models were scored on.");
  for (const auto& [config, r] : last_gate)
    e.sample("anneal_gate_rows", gate_labels(config, r->gate), r->gate.value("rows", 0.0));
  e.family("anneal_gate_excluded_rows", "gauge",
           "The last gated retrain of each config: test rows left out because either model trained on them.");
  for (const auto& [config, r] : last_gate)
    e.sample("anneal_gate_excluded_rows", gate_labels(config, r->gate), r->gate.value("excluded_rows", 0.0));
  e.family("anneal_gate_passed", "gauge", "The last gated retrain of each config: 1 promoted, 0 refused.");
  for (const auto& [config, r] : last_gate)
    e.sample("anneal_gate_passed", gate_labels(config, r->gate), r->gate.value("passed", false) ? 1 : 0);

  // The newest version of each model name, and what its aliases hold.
  std::map<std::string, ModelRecord> latest;
  for (auto& m : list_models(store)) latest[m.name] = m;
  e.family("anneal_model_latest_version", "gauge", "The newest version of each model.");
  for (const auto& [name, m] : latest) e.sample("anneal_model_latest_version", {{"model", name}}, m.version);
  e.family("anneal_model_metric", "gauge", "Metrics of each model's newest version (accuracy, F1, RMSE, ...).");
  for (const auto& [name, m] : latest)
    for (const auto& [key, value] : m.metrics.items())
      if (value.is_number())
        e.sample("anneal_model_metric", {{"model", name}, {"version", std::to_string(m.version)}, {"metric", key}},
                 value.get<double>());
  e.family("anneal_model_alias_version", "gauge", "The version each alias points at.");
  for (const auto& a : list_aliases(store))
    e.sample("anneal_model_alias_version", {{"model", a.name}, {"alias", a.alias}}, a.model.version);

  std::map<std::string, double> samples_per_s;
  for (const auto& r : list_runs(store))
    if (r.status == RunStatus::kSucceeded && r.summary.contains("samples_per_s") &&
        r.summary["samples_per_s"].is_number())
      samples_per_s[r.name] = r.summary["samples_per_s"].get<double>();
  e.family("anneal_training_samples_per_second", "gauge", "Training speed of each model's latest successful run.");
  for (const auto& [name, v] : samples_per_s) e.sample("anneal_training_samples_per_second", {{"model", name}}, v);

  const StoreUsage usage = store_usage(store);
  e.family("anneal_store_logical_bytes", "gauge", "Bytes of every stored blob at full size, before dedup and compression.");
  e.sample("anneal_store_logical_bytes", {}, static_cast<double>(usage.logical_bytes));
  e.family("anneal_store_unique_bytes", "gauge", "Bytes of the distinct chunks, uncompressed.");
  e.sample("anneal_store_unique_bytes", {}, static_cast<double>(usage.unique_bytes));
  e.family("anneal_store_disk_bytes", "gauge", "Bytes of the compressed object files on disk.");
  e.sample("anneal_store_disk_bytes", {}, static_cast<double>(usage.disk_bytes));
  e.family("anneal_store_objects", "gauge", "Objects in the store.");
  e.sample("anneal_store_objects", {}, static_cast<double>(usage.objects));
  e.family("anneal_store_dedup_ratio", "gauge", "Logical bytes per unique byte (1: nothing shared).");
  e.sample("anneal_store_dedup_ratio", {}, usage.dedup_ratio());
  return e.text();
}

void write_metrics_textfile(Store& store, const std::filesystem::path& dir) {
  // The temporary file must be in DIR itself: node_exporter reads only
  // *.prom, and the rename must not cross file systems.
  write_file_atomic(dir / "anneal.prom", prometheus_metrics(store), dir, true, true, 0644);
}

}  // namespace anneal
