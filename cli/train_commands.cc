// train, runs list/show, model list/show, eval, predict: parse arguments,
// call src/runs/, print the result as text or JSON.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <stop_token>
#include <thread>

#include "anneal/catalog_runs.h"
#include "anneal/communicator.h"
#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/onnx_export.h"
#include "anneal/run_report.h"
#include "anneal/runs.h"
#include "anneal/store.h"
#include "command.h"
#include "output.h"
#include "train_support.h"

namespace anneal::cli {
namespace {

using nlohmann::json;

std::string metric_text(const json& value) {
  if (value.is_number_float()) return format_double(value.get<double>(), 4);
  return value.dump();
}

// The per-class table: CLASS SUPPORT PRECISION RECALL, one row per class of
// {"CLASS": {"recall", "precision", "support"}}.
void print_per_class(const std::string& title, const json& per_class) {
  std::cout << "\n" << title << "\n";
  std::vector<std::vector<std::string>> rows = {{"  CLASS", "SUPPORT", "PRECISION", "RECALL"}};
  for (const auto& [name, s] : per_class.items())
    rows.push_back({"  " + name, std::to_string(s.at("support").get<std::uint64_t>()),
                    format_double(s.at("precision").get<double>(), 4), format_double(s.at("recall").get<double>(), 4)});
  print_table(std::cout, rows);
}


int train_on(const Invocation& inv, Communicator* comm) {
  const auto& a = inv.args;
  TrainRequest request;
  request.communicator = comm;
  request.sources = flag_sources();
  std::vector<std::string> configs;
  if (a.count("CONFIG")) configs = a["CONFIG"].as<std::vector<std::string>>();
  if (a.count("set")) request.overrides = a["set"].as<std::vector<std::string>>();
  // --device wins over the config key `device` and is recorded with the run.
  if (a.count("device")) request.device = compute_options_of(inv).device;
  if (a.count("memory-budget")) request.memory_budget = a["memory-budget"].as<std::string>();
  if (a.count("resume")) {
    if (!configs.empty()) throw usage_error("--resume: give either CONFIG or --resume RUN, not both");
    request.resume = parse_run_id(a["resume"].as<std::string>(), "--resume");
  } else {
    if (configs.size() != 1)
      throw usage_error("anneal train: expected one CONFIG file (usage: anneal train CONFIG [--set key=value ...])");
    request.config_source = configs[0];
    request.config_text = read_text_file(configs[0], "CONFIG");
  }
  Store store = Store::open(inv.global.store, inv.global.access);
  StopOnSignal stop;
  request.stop = stop.token();
  auto reporter_ptr = make_train_reporter(inv.global.log_format);
  TrainingReporter& reporter = *reporter_ptr;
  TrainResult result = train_model(store, request, reporter);
  if (inv.global.json) {
    json out = {{"run", result.run.label()},
                {"status", run_status_name(result.run.status)},
                {"model", result.model ? json(result.model->ref()) : json(nullptr)},
                {"samples_per_s", result.samples_per_s},
                {"weights_hash", result.weights_hash},
                {"load_s", result.load_seconds},
                {"first_step_s", result.first_step_seconds ? json(*result.first_step_seconds) : json(nullptr)},
                {"peak_rss_bytes", result.peak_rss_bytes},
                {"memory_budget", result.memory_budget},
                {"streamed", result.streamed},
                {"data_peak_bytes", result.data_peak_bytes},
                {"metrics", result.metrics}};
    if (!result.per_class.empty()) out["per_class"] = result.per_class;
    print_json(out);
  } else if (result.cancelled) {
    std::cout << result.run.label() << " cancelled; continue it with 'anneal train --resume "
              << result.run.label() << "'\n";
  } else {
    std::cout << result.run.label() << " succeeded: registered " << result.model->ref() << "\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& [key, value] : result.metrics.items()) rows.push_back({"  " + key, metric_text(value)});
    rows.push_back({"  samples_per_s", std::to_string(std::llround(result.samples_per_s))});
    rows.push_back({"  weights_hash", result.weights_hash});
    rows.push_back({"  load_s", format_double(result.load_seconds, 4)});
    if (result.first_step_seconds) rows.push_back({"  first_step_s", format_double(*result.first_step_seconds, 4)});
    rows.push_back({"  peak_rss", human_bytes(result.peak_rss_bytes)});
    rows.push_back({"  data_peak", human_bytes(result.data_peak_bytes) + " of a " + human_bytes(result.memory_budget) +
                                       " budget" + (result.streamed ? " (streamed)" : "")});
    print_table(std::cout, rows);
    // The held-out split the user will judge the model by: test, else val.
    for (const char* split : {"test", "val"})
      if (result.per_class.contains(split)) {
        print_per_class(std::string("per class (") + split + " split)", result.per_class[split]);
        break;
      }
  }
  return result.cancelled ? kExitInterrupted : kExitOk;
}

int run_train(const Invocation& inv) {
  // `mpirun -np N anneal train`: rank 0 trains the run as usual, driving
  // the other ranks.
  if (mpi_world_size() > 1) return run_on_ranks(inv, [&](Communicator& comm) { return train_on(inv, &comm); });
  return train_on(inv, nullptr);
}

json run_json(const RunRecord& r) {
  return {{"id", r.label()},       {"name", r.name},         {"dataset", r.dataset},
          {"status", run_status_name(r.status)}, {"started_at", r.started_at},
          {"ended_at", r.ended_at.empty() ? json(nullptr) : json(r.ended_at)},
          {"host", r.host},        {"model", r.model.empty() ? json(nullptr) : json(r.model)},
          {"error", r.error.empty() ? json(nullptr) : json(r.error)}, {"summary", r.summary}};
}

int run_runs_list(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  auto runs = list_runs(store);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& r : runs) out.push_back(run_json(r));
    print_json({{"runs", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"RUN", "NAME", "DATASET", "STATUS", "STARTED", "MODEL"}};
  for (const auto& r : runs)
    rows.push_back({r.label(), r.name, r.dataset, run_status_name(r.status), r.started_at, r.model});
  print_table(std::cout, rows);
  return kExitOk;
}

// layers = auto: the search's leaderboard (the run summary's "search"),
// every trial in the order it ran, the winner marked.
void print_leaderboard(const json& search) {
  const json trials = search.value("trials", json::array());
  std::cout << "\nsearch: " << terminal_text(search.value("scoring", "")) << ", " << terminal_text(search.value("metric", ""))
            << "; " << trials.size() << " trials in " << format_double(search.value("seconds", 0.0), 3) << " s";
  const json by = search.value("skipped_by", json());
  if (search.value("skipped", 0) > 0)
    std::cout << "; " << search.value("skipped", 0) << " not run (" << terminal_text(by.is_string() ? by.get<std::string>() : "")
              << ")";
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {{"  TRIAL", "KIND", "SETTINGS", "RUNG", "BUDGET", "SCORE", "SECONDS", ""}};
  const std::size_t winner = search.value("winner", std::size_t{0});
  const json ensemble = search.value("ensemble", json::object());
  const bool ensemble_chosen = ensemble.value("chosen", false);
  std::map<std::size_t, double> weight_of;  // trial (from 1) -> its weight in the ensemble
  for (const json& m : ensemble.value("members", json::array()))
    weight_of[m.value("trial", std::size_t{0})] = m.value("weight", 0.0);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const json& t = trials[i];
    std::string settings;
    const json named = t.value("settings", json::object());  // items() must not outlive it
    for (const auto& [key, value] : named.items())
      settings += (settings.empty() ? "" : " ") + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
    rows.push_back({"  " + std::to_string(i + 1), t.value("kind", ""), terminal_text(settings),
                    std::to_string(t.value("rung", 0)), format_double(t.value("budget", 0.0), 3),
                    format_double(t.value("score", 0.0), 4), format_double(t.value("seconds", 0.0), 3),
                    ensemble_chosen ? (weight_of.contains(i + 1) ? "<- ensemble " + format_double(weight_of[i + 1], 3) : "")
                                    : (i == winner ? "<- chosen" : "")});
  }
  print_table(std::cout, rows);
  if (!weight_of.empty())
    std::cout << "ensemble of " << weight_of.size() << " trials: score " << format_double(ensemble.value("score", 0.0), 4)
              << (ensemble_chosen ? " (chosen: above the best single trial)" : " (not above the best single trial)")
              << "\n";
  if (const int bags = search.value("bags", 1); bags > 1)
    std::cout << "each network of the model refit with " << bags << " seeds (bags), their predictions averaged\n";
}

int run_runs_show(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  RunRecord run = find_run(store, parse_run_id(inv.args["RUN"].as<std::string>()));
  auto epochs = run_epochs(store, run.id);
  auto checkpoints = run_checkpoints(store, run.id);
  // Metric columns: the usual ones in reading order, then any others.
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& e : epochs)
    for (const auto& [name, value] : e.values) seen.insert(name);
  for (const char* n : {"steps", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr", "seconds",
                        "samples_per_s"})
    if (seen.erase(n)) names.push_back(n);
  names.insert(names.end(), seen.begin(), seen.end());
  if (inv.global.json) {
    json j = run_json(run);
    j["config"] = run.config_text;
    json history = json::array();
    for (const auto& e : epochs) {
      json row = {{"epoch", e.epoch}};
      for (const auto& [name, value] : e.values) row[name] = value;
      history.push_back(row);
    }
    j["epochs"] = history;
    json cks = json::array();
    for (const auto& c : checkpoints)
      cks.push_back({{"step", c.step}, {"created_at", c.created_at}, {"blob", c.blob}, {"size", c.size},
                     {"score", c.score ? json(*c.score) : json(nullptr)}});
    j["checkpoints"] = cks;
    print_json(j);
    return kExitOk;
  }
  std::cout << run.label() << "  " << run_status_name(run.status) << "\n";
  std::vector<std::vector<std::string>> info = {{"  name", run.name}, {"  dataset", run.dataset},
                                                {"  started", run.started_at}, {"  host", run.host}};
  if (!run.ended_at.empty()) info.push_back({"  ended", run.ended_at});
  if (!run.model.empty()) info.push_back({"  model", run.model});
  if (!run.error.empty()) info.push_back({"  error", run.error});
  if (run.summary.contains("samples_per_s"))
    info.push_back({"  samples/s", std::to_string(std::llround(run.summary["samples_per_s"].get<double>()))});
  if (run.summary.contains("weights_hash")) info.push_back({"  weights", run.summary["weights_hash"].get<std::string>()});
  // Recorded by runs since the data-path figures exist; older runs lack them.
  if (run.summary.contains("load_s"))
    info.push_back({"  load", format_double(run.summary["load_s"].get<double>(), 4) + " s"});
  if (run.summary.contains("first_step_s") && run.summary["first_step_s"].is_number())
    info.push_back({"  first step", format_double(run.summary["first_step_s"].get<double>(), 4) +
                                        " s after the process started"});
  if (run.summary.contains("peak_rss_bytes"))
    info.push_back({"  peak memory", human_bytes(run.summary["peak_rss_bytes"].get<std::uint64_t>()) + " (peak RSS)"});
  if (run.summary.contains("data_peak_bytes"))
    info.push_back({"  data held", human_bytes(run.summary["data_peak_bytes"].get<std::uint64_t>()) + " at most, budget " +
                                       human_bytes(run.summary["memory_budget"].get<std::uint64_t>()) +
                                       (run.summary.value("streamed", false) ? ", streamed" : ", in memory")});
  info.push_back({"  checkpoints", std::to_string(checkpoints.size()) +
                                        (checkpoints.empty() ? "" : " (latest at step " + std::to_string(checkpoints.back().step) + ")")});
  print_table(std::cout, info);
  if (run.summary.contains("metrics") && !run.summary["metrics"].empty()) {
    std::cout << "\n";
    std::vector<std::vector<std::string>> m;
    for (const auto& [key, value] : run.summary["metrics"].items()) m.push_back({"  " + key, metric_text(value)});
    print_table(std::cout, m);
  }
  if (run.summary.contains("search")) print_leaderboard(run.summary["search"]);
  std::cout << "\nconfig:\n";
  std::istringstream config(run.config_text);
  for (std::string line; std::getline(config, line);) std::cout << "  " << terminal_text(line) << "\n";
  if (!epochs.empty()) {
    std::cout << "\n";
    std::vector<std::vector<std::string>> rows(1, {"EPOCH"});
    for (const auto& n : names) rows[0].push_back(n);
    for (const auto& e : epochs) {
      std::vector<std::string> row = {std::to_string(e.epoch)};
      for (const auto& n : names) {
        std::string cell;
        for (const auto& [name, value] : e.values)
          if (name == n)
            cell = n == "steps" || n == "samples_per_s" ? std::to_string(std::llround(value)) : format_double(value, 4);
        row.push_back(cell);
      }
      rows.push_back(row);
    }
    print_table(std::cout, rows);
  }
  return kExitOk;
}

// Writes the HTML report of `run` to -o (run_report.h) and says where.
int write_report(const Invocation& inv, Store& store, std::int64_t run) {
  if (!inv.args.count("output")) throw usage_error("-o: give the file to write the report to (-o report.html)");
  const std::string out = inv.args["output"].as<std::string>();
  write_run_report(store, run, out, inv.args["force"].as<bool>(), outside_file_mode(inv.global));
  if (inv.global.json) print_json({{"run", "run-" + std::to_string(run)}, {"report", out}});
  else std::cout << "wrote the report of run-" << run << " to " << terminal_text(out) << "\n";
  return kExitOk;
}

int run_runs_report(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  RunRecord run = find_run(store, parse_run_id(inv.args["RUN"].as<std::string>()));
  return write_report(inv, store, run.id);
}

void add_report_output_options(po::options_description& o) {
  o.add_options()("output,o", po::value<std::string>()->value_name("FILE"), "the HTML file to write")
      ("force", po::bool_switch(), "replace FILE if it exists");
}

json model_json(const ModelRecord& m) {
  return {{"ref", m.ref()},     {"name", m.name},         {"version", m.version},
          {"created_at", m.created_at}, {"run", "run-" + std::to_string(m.run)},
          {"blob", m.blob},     {"size", m.size},         {"lineage", m.lineage},
          {"metrics", m.metrics}};
}

std::string headline_metric(const json& metrics) {
  for (const char* key : {"test_accuracy", "test_rmse", "val_accuracy", "val_rmse"})
    if (metrics.contains(key)) return std::string(key) + " " + metric_text(metrics[key]);
  return "";
}

int run_model_list(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  auto models = list_models(store);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& m : models) out.push_back(model_json(m));
    print_json({{"models", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"MODEL", "RUN", "DATASET", "CREATED", "METRIC"}};
  for (const auto& m : models)
    rows.push_back({m.ref(), "run-" + std::to_string(m.run), m.lineage.value("dataset", ""), m.created_at,
                    headline_metric(m.metrics)});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_model_show(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  ModelRecord m = find_model(store, parse_model_ref(inv.args["REF"].as<std::string>(), "REF"));
  if (inv.args["report"].as<bool>()) return write_report(inv, store, m.run);
  if (inv.args.count("output") || inv.args["force"].as<bool>())
    throw usage_error("-o: model show writes a file only with --report (--report -o report.html)");
  if (inv.global.json) {
    print_json(model_json(m));
    return kExitOk;
  }
  std::cout << terminal_text(m.ref()) << "\n";
  std::vector<std::vector<std::string>> info = {{"  created", m.created_at},
                                                {"  run", "run-" + std::to_string(m.run)},
                                                {"  blob", m.blob + "  " + human_bytes(m.size)}};
  for (const auto& [key, value] : m.lineage.items())
    if (key != "config" && key != "run") info.push_back({"  " + key, value.is_string() ? value.get<std::string>() : value.dump()});
  print_table(std::cout, info);
  std::cout << "\nmetrics:\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : m.metrics.items()) rows.push_back({"  " + key, metric_text(value)});
  print_table(std::cout, rows);
  if (m.lineage.contains("config")) {
    std::cout << "\nconfig:\n";
    std::istringstream config(m.lineage["config"].get<std::string>());
    for (std::string line; std::getline(config, line);) std::cout << "  " << terminal_text(line) << "\n";
  }
  return kExitOk;
}

// [{"column", "drop", "spread"}] in the order given (the largest drop first).
json importance_columns_json(const std::vector<ColumnImportance>& importance) {
  json out = json::array();
  for (const ColumnImportance& c : importance) out.push_back({{"column", c.column}, {"drop", c.drop}, {"spread", c.spread}});
  return out;
}

int run_eval(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  ModelRef model = parse_model_ref(inv.args["MODEL"].as<std::string>(), "MODEL");
  DatasetRef data = parse_dataset_ref(inv.args["DATA"].as<std::string>(), "DATA");
  EvalSplit split = inv.args.count("split") ? parse_eval_split(inv.args["split"].as<std::string>()) : EvalSplit::kDefault;
  const BackendOptions compute = compute_options_of(inv);
  std::optional<ImportanceOptions> importance;
  if (inv.args["importance"].as<bool>()) {
    importance.emplace();
    if (inv.args.count("importance-rows")) {
      const std::int64_t rows = inv.args["importance-rows"].as<std::int64_t>();
      if (rows < 1 || rows > 10'000'000)
        throw usage_error("--importance-rows " + std::to_string(rows) + ": expected 1 to 10000000 rows");
      importance->rows = static_cast<std::uint64_t>(rows);
    }
  } else if (inv.args.count("importance-rows")) {
    throw usage_error("--importance-rows: give --importance too");
  }
  EvalResult r = evaluate_model(store, model, data, split, compute, importance);
  note_auto_device(compute);
  // The score the drops are measured in.
  const char* importance_metric = r.classification ? "accuracy" : "r2";
  if (inv.global.json) {
    json j = {{"model", r.model.ref()}, {"dataset", r.dataset}, {"split", r.split},
              {"missing_values", r.missing}, {"unseen_categories", r.unseen}};
    if (importance)
      j["importance"] = {{"metric", importance_metric},
                         {"baseline", r.importance_baseline},
                         {"rows", r.importance_rows},
                         {"repeats", importance->repeats},
                         {"seed", importance->seed},
                         {"columns", importance_columns_json(r.importance)}};
    if (r.classification) {
      j["metrics"] = r.classification_metrics.to_json();
      j["metrics"]["per_class"] = r.classification_metrics.per_class_json(r.class_names);
      j["classes"] = r.class_names;
    } else {
      j["metrics"] = r.regression_metrics.to_json();
    }
    print_json(j);
    return kExitOk;
  }
  std::cout << terminal_text(r.model.ref()) << " on " << terminal_text(r.dataset) << " (" << terminal_text(r.split) << " split)\n";
  if (r.classification) {
    const ClassificationMetrics& m = r.classification_metrics;
    std::vector<std::vector<std::string>> rows = {{"  rows", std::to_string(m.rows)},
                                                  {"  accuracy", format_double(m.accuracy, 4)},
                                                  {"  macro precision", format_double(m.macro_precision, 4)},
                                                  {"  macro recall", format_double(m.macro_recall, 4)},
                                                  {"  macro F1", format_double(m.macro_f1, 4)},
                                                  {"  balanced accuracy", format_double(m.balanced_accuracy, 4)}};
    if (m.roc_auc) rows.push_back({"  ROC AUC", format_double(*m.roc_auc, 4)});
    print_table(std::cout, rows);
    print_per_class("per class", m.per_class_json(r.class_names));
    std::cout << "\nconfusion matrix (rows: true class, columns: predicted)\n";
    std::vector<std::vector<std::string>> cm(1, {""});
    for (const auto& name : r.class_names) cm[0].push_back(name);
    for (std::size_t i = 0; i < m.confusion.size(); ++i) {
      std::vector<std::string> row = {r.class_names[i]};
      for (auto v : m.confusion[i]) row.push_back(std::to_string(v));
      cm.push_back(row);
    }
    print_table(std::cout, cm);
  } else {
    const RegressionMetrics& m = r.regression_metrics;
    print_table(std::cout, {{"  rows", std::to_string(m.rows)},
                            {"  RMSE", format_double(m.rmse, 5)},
                            {"  MAE", format_double(m.mae, 5)},
                            {"  R2", format_double(m.r2, 4)}});
  }
  if (importance) {
    std::cout << "\npermutation importance (drop in " << importance_metric << " from "
              << format_double(r.importance_baseline, 4) << " when the column is shuffled; " << r.importance_rows
              << " rows, " << importance->repeats << " shuffles each)\n";
    std::vector<std::vector<std::string>> rows = {{"  column", "drop", "spread"}};
    for (const ColumnImportance& c : r.importance)
      rows.push_back({"  " + terminal_text(c.column), format_double(c.drop, 4), format_double(c.spread, 4)});
    print_table(std::cout, rows);
  }
  if (r.missing || r.unseen)
    std::cout << "\n" << r.missing << " missing values imputed, " << r.unseen << " unseen categories\n";
  return kExitOk;
}

int run_predict(const Invocation& inv) {
  if (!inv.args.count("input")) throw usage_error("--input: predict needs an input file (--input FILE)");
  if (!inv.args.count("output")) throw usage_error("-o: predict needs an output file (-o OUT.csv)");
  Store store = Store::open(inv.global.store, inv.global.access);
  ModelRef model = parse_model_ref(inv.args["MODEL"].as<std::string>(), "MODEL");
  const BackendOptions compute = compute_options_of(inv);
  PredictResult r = predict_file(store, model, inv.args["input"].as<std::string>(),
                                 inv.args["output"].as<std::string>(), inv.args["force"].as<bool>(), compute);
  note_auto_device(compute);
  if (inv.global.json) {
    print_json({{"model", r.model.ref()}, {"rows", r.rows}, {"output", inv.args["output"].as<std::string>()},
                {"missing_values", r.missing}, {"unseen_categories", r.unseen}});
    return kExitOk;
  }
  std::cout << "wrote " << r.rows << " predictions of " << terminal_text(r.model.ref()) << " to "
            << terminal_text(inv.args["output"].as<std::string>()) << "\n";
  if (r.unseen) std::cout << r.unseen << " categorical values the model never saw were encoded as its column's 'other' level, or as all zeros "
                               "where the column has none\n";
  if (r.missing) std::cout << r.missing << " missing values were imputed with the training mean\n";
  return kExitOk;
}

int run_model_export(const Invocation& inv) {
  if (!inv.args.count("format")) throw usage_error("--format: model export needs a format (--format onnx)");
  const std::string format = inv.args["format"].as<std::string>();
  if (format != "onnx") throw usage_error("--format '" + format + "': expected onnx");
  if (!inv.args.count("output")) throw usage_error("-o: model export needs an output file (-o FILE.onnx)");
  const std::string out = inv.args["output"].as<std::string>();
  Store store = Store::open(inv.global.store, inv.global.access);
  const ModelRef ref = parse_model_ref(inv.args["REF"].as<std::string>(), "REF");
  const runs::ExportResult r = runs::export_model_onnx(store, ref, out, inv.args["force"].as<bool>(),
                                                           outside_file_mode(inv.global));
  if (inv.global.json) {
    print_json({{"model", r.model.ref()}, {"format", format}, {"output", out}, {"bytes", r.bytes}});
    return kExitOk;
  }
  std::cout << "wrote " << terminal_text(r.model.ref()) << " as ONNX to " << terminal_text(out) << " (" << human_bytes(r.bytes) << ")\n";
  return kExitOk;
}

std::string config_keys_help() {
  std::string out = "Config keys (INI, key = value; --set key=value overrides):\n";
  for (const auto& k : known_config_keys()) {
    std::string name = std::string("  ") + k.name;
    out += name + std::string(name.size() < 20 ? 20 - name.size() : 1, ' ') + k.help;
    if (*k.default_value) out += std::string(" [") + k.default_value + "]";
    out += "\n";
  }
  return out;
}

}  // namespace

void add_train_commands(std::vector<Command>& out) {
  out.push_back(
      {"train", "CONFIG [--set key=value ...] | --resume RUN", "train a model on a dataset version",
       "Reads the INI config, trains on the dataset's train split (holding out `validation`), writes "
       "checkpoints into the store and registers the model NAME@vN. Ctrl-C checkpoints and records the "
       "run cancelled; 'anneal train --resume RUN' continues a cancelled, failed or killed run and ends "
       "with the same weights as an uninterrupted one. Under `mpirun -np N` (N > 1) the run "
       "trains across the N processes, data parallel: rank 0 alone opens the store and sends each rank its "
       "share of every batch; --resume may use another N (docs/TRAINING.md).\n\n" +
           config_keys_help(),
       [](po::options_description& o) {
         o.add_options()("set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
                         "override a config key (repeatable)")
             ("resume", po::value<std::string>()->value_name("RUN"), "continue an unfinished run")
             ("memory-budget", po::value<std::string>()->value_name("BYTES"),
              "bytes of dataset rows held in memory (e.g. 2G); a larger version streams (config key memory_budget)");
         add_compute_options(o, false);
       },
       {"CONFIG..."}, run_train});
  out.push_back({"runs list", "", "list training runs and their status", "", nullptr, {}, run_runs_list});
  out.push_back({"runs show", "RUN", "show a run: config, status, metric history, checkpoints",
                 "RUN is run-N or N.", nullptr, {"RUN"}, run_runs_show});
  out.push_back({"runs report", "RUN -o FILE [--force]", "write a run's report as one HTML page",
                 "Writes one self-contained HTML file (no scripts, fonts or anything else it would fetch): the loss "
                 "and accuracy curves per epoch, train and validation, with the best checkpoint marked; the "
                 "confusion matrix as a heat map and per-class precision and recall; the metrics, the config, the "
                 "lineage (dataset version, parent model, anneal version and commit), the dataset's schema with "
                 "its statistics, the timings (load, training, samples/s) and, for a quantized or pruned model, "
                 "its scores and size beside its parent's. RUN is run-N or N. FILE is replaced only with --force.",
                 add_report_output_options, {"RUN"}, run_runs_report});
  out.push_back({"model list", "", "list registered model versions", "", nullptr, {}, run_model_list});
  out.push_back({"model show", "REF [--report -o FILE [--force]]", "show a model version: lineage and metrics",
                 "REF is NAME (the latest version), NAME@latest, NAME@vN or NAME@ALIAS (anneal model alias). "
                 "With --report, writes the HTML report of the run that registered the model to FILE instead "
                 "(see 'anneal runs report').",
                 [](po::options_description& o) {
                   o.add_options()("report", po::bool_switch(), "write the model's run report (HTML) to -o FILE");
                   add_report_output_options(o);
                 },
                 {"REF"}, run_model_show});
  out.push_back({"model export", "REF --format onnx -o FILE [--force]", "write a model as ONNX for other runtimes",
                 "The ONNX graph (opset 17, ai.onnx.ml 2) holds the model's preprocessing: it takes the raw "
                 "feature columns, one input each (numbers as float, categories as strings, dates as float "
                 "days since 1970-01-01, images as float N x C x H x W), and gives 'label' and "
                 "'probabilities' (classes) or 'value' (regression). INT8 models become QuantizeLinear/"
                 "DequantizeLinear graphs, pruned ones dense weights. FILE appears whole or not at all.",
                 [](po::options_description& o) {
                   o.add_options()("format", po::value<std::string>()->value_name("FORMAT"), "onnx")
                       ("output,o", po::value<std::string>()->value_name("FILE"), "where to write the model")
                       ("force", po::bool_switch(), "replace FILE if it exists");
                 },
                 {"REF"}, run_model_export});
  out.push_back({"eval", "MODEL DATA [--split train|test|all] [--importance]", "score a model on a dataset version",
                 "Classification: accuracy, macro precision/recall/F1, balanced accuracy, per-class "
                 "recall/precision/support, the confusion matrix and, for two "
                 "classes, ROC AUC. Regression: RMSE, MAE and R2. The default split is the version's test "
                 "split when it has one, else its train split. --importance adds each feature column's "
                 "permutation importance: the drop in accuracy (R2 for regression) when that column's values "
                 "are shuffled among the rows, a one-hot or date column counted once, averaged over 5 "
                 "shuffles of a fixed-seed sample of the split's rows (deterministic).",
                 [](po::options_description& o) {
                   o.add_options()("split", po::value<std::string>()->value_name("SPLIT"), "train, test or all")
                       ("importance", po::bool_switch(), "also each feature column's permutation importance")
                       ("importance-rows", po::value<std::int64_t>()->value_name("N"),
                        "rows sampled for --importance (default 2000)");
                   add_compute_options(o, false);
                 },
                 {"MODEL", "DATA"}, run_eval});
  out.push_back({"predict", "MODEL --input FILE -o OUT.csv [--force]", "apply a model to a CSV/TSV file",
                 "FILE's header must name every feature column the model was trained on (in any order; "
                 "other columns, and those the model left out, are ignored). The model's saved preprocessing is applied; unseen categories "
                 "and missing values are counted and reported. OUT gets the row number, the prediction and, "
                 "for classes, one probability column per class.",
                 [](po::options_description& o) {
                   o.add_options()("input", po::value<std::string>()->value_name("FILE"), "rows to predict")
                       ("output,o", po::value<std::string>()->value_name("OUT"), "where to write the predictions")
                       ("force", po::bool_switch(), "replace OUT if it exists");
                   add_compute_options(o, false);
                 },
                 {"MODEL"}, run_predict});
}

}  // namespace anneal::cli
