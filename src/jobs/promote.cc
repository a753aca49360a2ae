// Promotion gates and alias moves: parse_gate, evaluate_gate, promote_model.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/jobs.h"
#include "anneal/model_inputs.h"
#include "anneal/spelling.h"
#include "anneal/table.h"

namespace anneal {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool compare(double a, const std::string& op, double b) {
  if (op == ">=") return a >= b;
  if (op == ">") return a > b;
  if (op == "<=") return a <= b;
  if (op == "<") return a < b;
  if (op == "==") return a == b;
  return a != b;
}

std::string number_text(double v) {
  std::ostringstream out;
  out.precision(6);
  out << v;
  return out.str();
}

double metric_of(const ModelRecord& model, const std::string& metric, std::string_view what) {
  const auto& m = model.metrics;
  if (!m.contains(metric) || !m[metric].is_number()) {
    std::string known;
    for (const auto& [key, value] : m.items())
      if (value.is_number()) known += (known.empty() ? "" : ", ") + key;
    throw usage_error(std::string(what) + ": " + model.ref() + " has no metric '" + metric + "' (it has: " +
                      (known.empty() ? "none" : known) + ")");
  }
  return m[metric].get<double>();
}

// The eval metric an alias gate's METRIC names: a val_/test_/baseline_
// prefix stripped (the recorded metrics' names); it may be none of
// gate_known_metrics().
std::string bare_metric(const std::string& metric) {
  for (const char* prefix : {"val_", "test_", "baseline_"})
    if (metric.rfind(prefix, 0) == 0) return metric.substr(std::string_view(prefix).size());
  return metric;
}

// A held-out row set: the test rows of the gate's version that neither
// model trained on.
struct GateRows {
  Table table;              // the rows kept, in the test split's order
  std::uint64_t test_rows = 0, excluded = 0;
};

// (column in `a`, column in `b`) for every column both tables hold under
// the same name, type and width: only there does a cell's content mean the
// same in both, so only those take part in row identity. Leaving a column
// out can only make more rows equal, and so exclude more, never fewer.
std::vector<std::pair<std::size_t, std::size_t>> shared_columns(const Table& a, const Table& b) {
  std::map<std::string, std::size_t> in_b;
  for (std::size_t c = 0; c < b.columns.size(); ++c) in_b.emplace(b.columns[c].name, c);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t c = 0; c < a.columns.size(); ++c) {
    auto it = in_b.find(a.columns[c].name);
    if (it == in_b.end()) continue;
    const ColumnSchema& x = a.columns[c];
    const ColumnSchema& y = b.columns[it->second];
    if (x.type == y.type && x.width() == y.width()) out.emplace_back(c, it->second);
  }
  return out;
}

// Marks in `trained_on` each row of `test` whose content over the columns
// it shares with `train` is the content of some row of `train`.
void mark_trained_rows(const Table& test, const Table& train, std::vector<bool>& trained_on) {
  const auto shared = shared_columns(test, train);
  std::vector<std::size_t> test_columns, train_columns;
  for (const auto& [t, r] : shared) {
    test_columns.push_back(t);
    train_columns.push_back(r);
  }
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(train.rows);
  const RowContentKeys train_keys(train, train_columns), test_keys(test, test_columns);
  for (std::uint64_t r = 0; r < train.rows; ++r) seen.insert(train_keys.key(r));
  for (std::uint64_t r = 0; r < test.rows; ++r)
    if (seen.count(test_keys.key(r))) trained_on[r] = true;
}

// The rows `keep` marks of `table`, as a table of their own (the schema as
// it was: statistics describe the whole version, which scoring never reads).
Table select_rows(const Table& table, const std::vector<bool>& keep) {
  Table out;
  out.columns = table.columns;
  out.label_column = table.label_column;
  out.sample_shape = table.sample_shape;
  const auto width = static_cast<std::size_t>(table.sample_width());
  for (std::uint64_t r = 0; r < table.rows; ++r) {
    if (!keep[r]) continue;
    const float* row = table.features.data() + r * width;
    out.features.insert(out.features.end(), row, row + width);
    out.labels.push_back(table.labels[r]);
    ++out.rows;
  }
  return out;
}

// The dataset version a model trained on (its train split), per its
// lineage. kUsage when the lineage names none.
DatasetRef training_data_of(const ModelRecord& model) {
  const std::string text = model.lineage.is_object() ? model.lineage.value("dataset", "") : "";
  if (text.empty()) throw usage_error("its lineage names no training dataset version");
  return parse_dataset_ref(text, "the lineage's dataset");
}

// What eval prints for a model by default: any device, every core.
BackendOptions gate_compute() {
  BackendOptions compute;
  compute.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return compute;
}

// `metric` of an eval result; nullopt when it is not computed for that
// kind of model (roc_auc of a 10-class model, accuracy of a regression).
std::optional<double> metric_in(const EvalResult& r, const std::string& metric) {
  const nlohmann::json j = r.classification ? r.classification_metrics.to_json() : r.regression_metrics.to_json();
  if (!j.contains(metric) || !j[metric].is_number()) return std::nullopt;
  return j[metric].get<double>();
}

std::string computed_metrics(const EvalResult& r) {
  const nlohmann::json j = r.classification ? r.classification_metrics.to_json() : r.regression_metrics.to_json();
  std::string out;
  for (const std::string& m : gate_known_metrics())
    if (j.contains(m)) out += (out.empty() ? "" : ", ") + m;
  return out;
}

// The one line of an alias gate that could not compare, and the rule:
// production stays; promote by hand once the candidate is checked. In
// words: cli/ says the same with its commands (GateVerdict::uncompared).
std::string refusal(const GateComparison& c, const GateVerdict::Uncompared& u) {
  return u.cause + (u.version_unknown ? " (name the version to judge it on)" : "") + "; the gate refuses and " +
         c.alias + " stays on " + c.incumbent_model + ": check " + c.candidate_model + " (evaluate it on " +
         (c.on.empty() ? "the data" : c.on) + "), then promote it to " + c.alias + " by hand, without a gate";
}

// An alias gate whose alias is set: both models scored on the same rows.
GateVerdict compare_with_holder(Store& store, const Gate& gate, const ModelRecord& candidate,
                                const ModelRecord& holder, const std::optional<DatasetRef>& on) {
  GateVerdict verdict;
  verdict.expression = gate.text;
  GateComparison& c = verdict.comparison.emplace();
  c.alias = gate.rhs;
  c.metric = gate.scored_metric;
  c.candidate_model = candidate.ref();
  c.incumbent_model = holder.ref();
  auto refuse = [&](const std::string& why, bool version_unknown = false) {
    verdict.passed = false;
    verdict.uncompared = GateVerdict::Uncompared{why, version_unknown};
    verdict.reason = refusal(c, *verdict.uncompared);
    return verdict;
  };

  DatasetRef on_ref;
  if (on) {
    on_ref = *on;
  } else {
    try {
      on_ref = training_data_of(candidate);
    } catch (const Error& e) {
      return refuse("cannot tell which version to judge " + candidate.ref() + " on: " + e.what(), true);
    }
  }
  // Loaded once each: the gate's version is often the candidate's.
  std::map<std::string, LoadedDataset> loaded;
  auto load = [&](const DatasetRef& ref) -> const LoadedDataset& {
    DatasetVersion version = find_dataset(store, ref);
    auto it = loaded.find(version.ref());
    if (it == loaded.end()) it = loaded.emplace(version.ref(), load_dataset(store, ref)).first;
    return it->second;
  };
  const LoadedDataset& judged = load(on_ref);
  c.on = judged.version.ref();
  const Table& test = judged.test;
  c.test_rows = test.rows;
  if (test.rows == 0) return refuse(c.on + " has no test split to score both models on");

  std::vector<bool> trained_on(test.rows, false);
  for (const ModelRecord* model : {&candidate, &holder}) {
    try {
      mark_trained_rows(test, load(training_data_of(*model)).train, trained_on);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUsage && e.kind() != ErrorKind::kNotFound) throw;
      return refuse("cannot tell which rows of " + c.on + " " + model->ref() + " trained on: " + e.what());
    }
  }
  std::vector<bool> keep(test.rows);
  for (std::uint64_t r = 0; r < test.rows; ++r) keep[r] = !trained_on[r];
  const Table rows = select_rows(test, keep);
  c.rows = rows.rows;
  c.excluded_rows = test.rows - rows.rows;
  const std::string rows_text = std::to_string(c.rows) + " rows of " + c.on + "'s test split (" +
                                std::to_string(c.excluded_rows) + " of " + std::to_string(c.test_rows) +
                                " left out: trained on by either model)";
  if (rows.rows == 0)
    return refuse("no row of " + c.on + "'s test split is left that neither " + c.candidate_model + " nor " +
                  c.incumbent_model + " trained on");

  // A model that cannot take these rows (a column it needs is missing or
  // changed, a label it never saw) cannot be compared: kUsage or kBadData.
  const BackendOptions compute = gate_compute();
  auto score = [&](const ModelRecord& model) -> EvalResult {
    runs::ModelFile file = runs::load_model(store, model);
    return runs::evaluate_model_on(model, file, rows, c.on, "test", compute);
  };
  EvalResult scored;
  try {
    scored = score(candidate);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUsage && e.kind() != ErrorKind::kBadData) throw;
    return refuse("the candidate " + c.candidate_model + " cannot be scored on " + c.on + ": " + e.what());
  }
  c.candidate = metric_in(scored, c.metric);
  // A retrain has trained and registered the candidate by now: a metric
  // its kind of model lacks (roc_auc of 10 classes) refuses like any gate
  // that cannot compare, rather than failing the night as bad input.
  if (!c.candidate)
    return refuse(c.metric + " is not computed for " + c.candidate_model + " (it has: " + computed_metrics(scored) +
                  ")");
  try {
    scored = score(holder);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUsage && e.kind() != ErrorKind::kBadData) throw;
    return refuse(c.alias + " " + c.incumbent_model + " cannot be scored on " + c.on + ": " + e.what());
  }
  c.incumbent = metric_in(scored, c.metric);
  if (!c.incumbent)
    return refuse(c.alias + " " + c.incumbent_model + " has no " + c.metric + " on " + c.on + " (it has: " +
                  computed_metrics(scored) + ")");

  verdict.passed = compare(*c.candidate, gate.op, *c.incumbent);
  verdict.reason = c.metric + " " + number_text(*c.candidate) + (verdict.passed ? " " : " not ") + gate.op + " " +
                   number_text(*c.incumbent) + " (" + c.alias + ": " + c.incumbent_model + "), both on " + rows_text;
  return verdict;
}

}  // namespace

const std::vector<std::string>& gate_known_metrics() {
  static const std::vector<std::string> kKnown = {"accuracy", "macro_f1", "macro_precision", "macro_recall",
                                                  "roc_auc",  "rmse",     "mae",             "r2"};
  return kKnown;
}

nlohmann::json GateVerdict::to_json() const {
  nlohmann::json j = {{"expression", expression}, {"passed", passed}, {"reason", reason}};
  auto number = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  if (recorded) j["candidate"] = *recorded;
  if (comparison) {
    const GateComparison& c = *comparison;
    j["alias"] = c.alias;
    j["metric"] = c.metric;
    j["candidate"] = number(c.candidate);
    j["incumbent"] = number(c.incumbent);
    j["candidate_model"] = c.candidate_model;
    j["incumbent_model"] = c.incumbent_model;
    j["on"] = c.on.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.on);
    j["split"] = "test";
    j["rows"] = c.rows;
    j["test_rows"] = c.test_rows;
    j["excluded_rows"] = c.excluded_rows;
  }
  return j;
}

Gate parse_gate(std::string_view text, std::string_view what) {
  Gate gate;
  gate.text = trim(text);
  const std::string& s = gate.text;
  std::size_t at = s.find_first_of("<>=!");
  auto bad = [&](const std::string& why) {
    return usage_error(std::string(what) + " '" + s + "': " + why +
                       "; expected METRIC OP VALUE, OP one of >= > <= < == != and VALUE a number or an alias, "
                       "e.g. 'val_accuracy >= production'");
  };
  if (at == std::string::npos) throw bad("no comparison operator");
  std::size_t len = (at + 1 < s.size() && s[at + 1] == '=') ? 2 : 1;
  gate.op = s.substr(at, len);
  if (gate.op == "=" || gate.op == "!") throw bad("unknown operator '" + gate.op + "'");
  gate.metric = trim(std::string_view(s).substr(0, at));
  gate.rhs = trim(std::string_view(s).substr(at + len));
  if (gate.metric.empty()) throw bad("no metric before the operator");
  for (char c : gate.metric)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') throw bad("'" + gate.metric + "' is not a metric name");
  if (gate.rhs.empty()) throw bad("nothing after the operator");
  double value = 0;
  auto [end, ec] = std::from_chars(gate.rhs.data(), gate.rhs.data() + gate.rhs.size(), value);
  if (ec == std::errc() && end == gate.rhs.data() + gate.rhs.size() && std::isfinite(value)) {
    gate.constant = value;
  } else {
    try {
      validate_alias_name(gate.rhs);
    } catch (const Error&) {
      throw bad("'" + gate.rhs + "' is neither a number nor an alias");
    }
    const std::string scored = bare_metric(gate.metric);
    const auto& known = gate_known_metrics();
    if (std::find(known.begin(), known.end(), scored) == known.end()) {
      std::vector<std::string_view> spellings(known.begin(), known.end());
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw usage_error(std::string(what) + " '" + s + "': unknown metric '" + scored + "' for a gate against an " +
                        "alias" + did_you_mean(scored, spellings) + " (known: " + list +
                        ", each optionally prefixed val_, test_ or baseline_: both models are scored afresh)");
    }
    gate.scored_metric = scored;
  }
  return gate;
}

GateVerdict evaluate_gate(Store& store, const Gate& gate, const ModelRecord& candidate,
                          const std::optional<DatasetRef>& on) {
  if (gate.constant) {
    GateVerdict verdict;
    verdict.expression = gate.text;
    if (on) throw usage_error("the gate '" + gate.text + "' compares with a number, not an alias; the version "
                              "to judge on names the rows a gate against an alias scores both models on");
    const double value = metric_of(candidate, gate.metric, "gate");
    verdict.recorded = value;
    verdict.passed = compare(value, gate.op, *gate.constant);
    verdict.reason = gate.metric + " " + number_text(value) + (verdict.passed ? " " : " not ") + gate.op + " " +
                     number_text(*gate.constant);
    return verdict;
  }
  std::optional<ModelRecord> holder = find_alias(store, candidate.name, gate.rhs);
  if (!holder) {
    if (on) find_dataset(store, *on);  // a wrong version to judge on is still an error
    GateVerdict verdict;
    verdict.expression = gate.text;
    verdict.passed = true;
    verdict.reason = candidate.name + "@" + gate.rhs + " is not set, so there is nothing to beat";
    return verdict;
  }
  return compare_with_holder(store, gate, candidate, *holder, on);
}

std::string acting_user() {
  std::string user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name) user = pw->pw_name;
  else user = "uid " + std::to_string(::geteuid());
  return user + "@" + host_name();
}

GateVerdict promote_model(Store& store, const ModelRecord& model, const std::string& alias,
                          const std::optional<Gate>& gate, const std::string& reason,
                          const std::optional<DatasetRef>& on, RetrainRecord* retrain) {
  validate_alias_name(alias);
  if (on && !gate)
    throw usage_error("a version to judge on was given without a gate; it names the rows the gate scores both "
                      "models on");
  GateVerdict verdict;
  verdict.passed = true;
  if (gate) verdict = evaluate_gate(store, *gate, model, on);
  if (!verdict.passed) return verdict;
  std::string why = reason;
  if (why.empty()) why = gate ? "gate " + gate->text + ": " + verdict.reason : "promoted";
  if (retrain) {
    retrain->outcome = RetrainOutcome::kPromoted;
    retrain->detail = verdict.reason;
    if (gate) retrain->gate = verdict.to_json();
    retrain->ended = unix_now();
  }
  set_alias(store, model, alias, "promote", acting_user(), why, gate ? verdict.to_json() : nlohmann::json(nullptr),
            retrain);
  return verdict;
}

}  // namespace anneal
