// submit, worker, jobs, retrain, metrics, model alias/promote/rollback:
// parse arguments, call src/jobs/, print the result as text or JSON.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "anneal/catalog_jobs.h"
#include "anneal/encryption.h"
#include "anneal/error.h"
#include "anneal/jobs.h"
#include "anneal/run_report.h"
#include "anneal/store.h"
#include "command.h"
#include "error_text.h"
#include "output.h"
#include "train_support.h"

namespace anneal::cli {
namespace {

using nlohmann::json;

std::string time_text(double unix_seconds) {
  if (unix_seconds <= 0) return "";
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  ::gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// "90", "90s", "15m", "2h" -> seconds. kUsage naming `flag` otherwise.
double parse_duration(const std::string& text, const std::string& flag) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
  if (used == 0 || scale == 0 || !(value > 0) || !std::isfinite(value))
    throw usage_error(flag + " '" + text + "': expected a positive duration such as 90s, 15m or 2h");
  return value * scale;
}

std::int64_t int_arg(const Invocation& inv, const char* name, std::int64_t fallback) {
  return inv.args.count(name) ? inv.args[name].as<std::int64_t>() : fallback;
}

std::vector<std::string> overrides_of(const Invocation& inv) {
  return inv.args.count("set") ? inv.args["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

json job_json(const JobRecord& j) {
  auto time_or_null = [](double t) { return t > 0 ? json(time_text(t)) : json(nullptr); };
  return {{"id", j.label()},
          {"name", j.spec.name},
          {"state", job_state_name(j.state)},
          {"priority", j.spec.priority},
          {"cores", j.spec.cores},
          {"ranks", j.spec.ranks},
          {"hostfile", j.spec.hostfile.empty() ? json(nullptr) : json(j.spec.hostfile)},
          {"timeout_s", j.spec.timeout_s ? json(*j.spec.timeout_s) : json(nullptr)},
          {"attempts", j.attempts},
          {"max_attempts", j.max_attempts},
          {"cancel_requested", j.cancel_requested},
          {"submitted_at", time_or_null(j.submitted)},
          {"started_at", time_or_null(j.started)},
          {"ended_at", time_or_null(j.ended)},
          {"worker", j.worker.empty() ? json(nullptr) : json(j.worker)},
          {"run", j.run ? json("run-" + std::to_string(*j.run)) : json(nullptr)},
          {"model", j.model.empty() ? json(nullptr) : json(j.model)},
          {"error", j.error.empty() ? json(nullptr) : json(j.error)},
          {"config_source", j.spec.config_source}};
}

// --------------------------------------------------------------- the queue

int run_submit(const Invocation& inv) {
  const std::string path = inv.args["CONFIG"].as<std::string>();
  JobSpec spec = make_job_spec(read_text_file(path, "CONFIG"), path, overrides_of(inv), flag_sources());
  spec.priority = int_arg(inv, "priority", 0);
  spec.retries = int_arg(inv, "retries", 0);
  spec.cores = int_arg(inv, "cores", spec.cores);
  if (inv.args.count("timeout")) spec.timeout_s = parse_duration(inv.args["timeout"].as<std::string>(), "--timeout");
  spec.ranks = int_arg(inv, "ranks", 1);
  if (inv.args.count("hostfile")) {
    const std::string hostfile = inv.args["hostfile"].as<std::string>();
    read_text_file(hostfile, "--hostfile", TextSource::kReadAgainLater);  // there and readable now; mpirun reads it when the job starts
    spec.hostfile = std::filesystem::absolute(hostfile).lexically_normal().string();
  }
  Store store = Store::open(inv.global.store, inv.global.access);
  JobRecord job = submit_job(store, spec, unix_now());
  if (inv.global.json) print_json(job_json(job));
  else std::cout << job.label() << "\n";
  return kExitOk;
}

int run_worker_command(const Invocation& inv) {
  WorkerOptions options;
  options.cores = int_arg(inv, "cores", static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency())));
  options.max_jobs = int_arg(inv, "max-jobs", 0);
  options.drain = inv.args["drain"].as<bool>();
  if (inv.args.count("lease")) options.lease_s = parse_duration(inv.args["lease"].as<std::string>(), "--lease");
  if (inv.args.count("backoff")) options.backoff_s = parse_duration(inv.args["backoff"].as<std::string>(), "--backoff");
  if (inv.args.count("metrics-textfile")) options.metrics_textfile_dir = inv.args["metrics-textfile"].as<std::string>();
  // The children are this very binary, on the same store.
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw failure("cannot find this executable in /proc/self/exe: " + ec.message());
  options.job_command = {self.string(), "--store", inv.global.store.string(), "--log-format",
                         inv.global.log_format == LogFormat::kJson ? "json" : "text", "job-exec"};
  // Jobs of several ranks: $ANNEAL_MPIRUN, split on spaces, when set (e.g.
  // "mpirun --mca btl self,vader,tcp"), else mpirun from PATH.
  if (const char* mpirun = std::getenv("ANNEAL_MPIRUN"); mpirun && *mpirun) {
    options.mpirun.clear();
    std::istringstream words(mpirun);
    for (std::string w; words >> w;) options.mpirun.push_back(w);
  }
  // The key of an encrypted store, when given as a flag ($ANNEAL_KEY_FILE
  // and the systemd credential reach the children through the environment).
  if (const auto& key_file = inv.global.access.key_file)
    options.job_command.insert(options.job_command.end() - 1, {"--key-file", key_file->string()});
  Store store = Store::open(inv.global.store, inv.global.access);
  StopOnSignal stop;
  // A worker's notes are its log: always shown, terminal or not.
  class AlwaysNotes final : public Reporter {
   public:
    explicit AlwaysNotes(LogFormat f) : format_(f) {}
    void note(std::string_view m) override {
      if (format_ == LogFormat::kJson) std::cerr << json_log_line("info", m) << std::flush;
      else std::cerr << terminal_text(m) << std::endl;
    }
    void progress(std::string_view, std::uint64_t, std::uint64_t) override {}
    void suggest(std::string_view m, Remedy remedy, const std::string& argument) override {
      note(std::string(m) + remedy_command(remedy, argument));
    }

   private:
    LogFormat format_;
  } notes(inv.global.log_format);
  run_worker(store, options, notes, stop.token());
  return kExitOk;
}

int job_exec_on(const Invocation& inv, Communicator* comm) {
  const JobChildEnvironment env = attach_job_child();
  if (!env.attached) return kExitFailure;  // the worker that started it died already
  const std::int64_t id = parse_job_id(inv.args["JOB"].as<std::string>());
  Store store = Store::open(inv.global.store, inv.global.access);
  // The worker passes the claim it was given; run by hand, the job's own.
  const std::int64_t claim = env.claim ? *env.claim : find_job(store, id).claim;
  StopOnSignal stop;
  auto reporter = make_train_reporter(inv.global.log_format);
  TrainResult result = execute_job(store, id, claim, stop.token(), *reporter, comm);
  if (result.cancelled) return kExitInterrupted;
  reporter->note("registered " + (result.model ? result.model->ref() : std::string("nothing")) +
                 ", weights " + result.weights_hash);
  return kExitOk;
}

int run_job_exec(const Invocation& inv) {
  // A job of several ranks, which the worker started through mpirun.
  if (mpi_world_size() > 1) return run_on_ranks(inv, [&](Communicator& comm) { return job_exec_on(inv, &comm); });
  return job_exec_on(inv, nullptr);
}

int run_jobs_list(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  auto jobs = list_jobs(store);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& j : jobs) out.push_back(job_json(j));
    print_json({{"jobs", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"JOB", "NAME", "STATE", "PRIO", "CORES", "ATTEMPTS", "SUBMITTED", "MODEL"}};
  for (const auto& j : jobs)
    rows.push_back({j.label(), j.spec.name, job_state_name(j.state), std::to_string(j.spec.priority),
                    std::to_string(j.spec.cores), std::to_string(j.attempts) + "/" + std::to_string(j.max_attempts),
                    time_text(j.submitted), j.model});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_jobs_show(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  JobRecord j = find_job(store, parse_job_id(inv.args["JOB"].as<std::string>()));
  if (inv.global.json) {
    json out = job_json(j);
    out["config"] = j.spec.config_text;
    out["log"] = job_log_path(store, j.id).string();
    print_json(out);
    return kExitOk;
  }
  std::cout << j.label() << "  " << job_state_name(j.state) << (j.cancel_requested && j.state == JobState::kRunning ? " (cancelling)" : "") << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"  name", j.spec.name},
      {"  config", j.spec.config_source},
      {"  priority", std::to_string(j.spec.priority)},
      {"  cores", std::to_string(j.spec.cores)},
      {"  ranks", std::to_string(j.spec.ranks) + (j.spec.hostfile.empty() ? "" : " (hosts from " + j.spec.hostfile + ")")},
      {"  timeout", j.spec.timeout_s ? duration_text(*j.spec.timeout_s) : "none"},
      {"  attempts", std::to_string(j.attempts) + " of " + std::to_string(j.max_attempts)},
      {"  submitted", time_text(j.submitted)}};
  if (j.started > 0) rows.push_back({"  started", time_text(j.started)});
  if (j.ended > 0) rows.push_back({"  ended", time_text(j.ended)});
  if (!j.worker.empty()) rows.push_back({"  worker", j.worker});
  if (j.run) rows.push_back({"  run", "run-" + std::to_string(*j.run)});
  if (!j.model.empty()) rows.push_back({"  model", j.model});
  if (!j.error.empty()) rows.push_back({"  error", j.error});
  rows.push_back({"  log", job_log_path(store, j.id).string()});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_jobs_logs(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  const std::int64_t id = parse_job_id(inv.args["JOB"].as<std::string>());
  find_job(store, id);  // kNotFound for a job that does not exist
  const auto path = job_log_path(store, id);
  const bool follow = inv.args["follow"].as<bool>();
  std::ifstream in;
  std::streamoff offset = 0;
  // The log holds what the job's processes wrote (mpirun and the ranks
  // too): shown a whole line at a time, each escaped (terminal_text), so a
  // line is never cut inside a UTF-8 character; `pending` holds a line not
  // yet ended, shown once the job has ended.
  std::string pending;
  auto show = [&](bool all) {
    if (in.is_open()) {
      in.clear();
      in.seekg(offset);
      std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      offset += static_cast<std::streamoff>(chunk.size());
      pending += chunk;
    }
    std::size_t start = 0;
    for (std::size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1)
      std::cout << terminal_text(std::string_view(pending).substr(start, end - start)) << "\n";
    pending.erase(0, start);
    if (all && !pending.empty()) {
      std::cout << terminal_text(pending) << "\n";
      pending.clear();
    }
    std::cout << std::flush;
  };
  for (;;) {
    if (!in.is_open()) in.open(path, std::ios::binary);
    if (!follow) {
      show(true);
      break;
    }
    show(false);
    // Once the job has ended, print what the log gained meanwhile and stop.
    const JobState state = find_job(store, id).state;
    if (state != JobState::kQueued && state != JobState::kRunning) {
      show(true);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return kExitOk;
}

int run_jobs_cancel(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  const std::int64_t id = parse_job_id(inv.args["JOB"].as<std::string>());
  const JobState state = cancel_job(store, id, unix_now());
  const std::string label = "job-" + std::to_string(id);
  if (inv.global.json) {
    print_json({{"id", label}, {"state", job_state_name(state)}, {"cancel_requested", true}});
  } else if (state == JobState::kCancelled) {
    std::cout << label << " cancelled\n";
  } else {
    std::cout << label << " is running; its worker stops it at the next step and keeps a checkpoint\n";
  }
  return kExitOk;
}

int run_jobs_retry(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  const std::int64_t id = parse_job_id(inv.args["JOB"].as<std::string>());
  retry_job(store, id, unix_now());
  JobRecord j = find_job(store, id);
  if (inv.global.json) print_json(job_json(j));
  else std::cout << j.label() << " queued again" << (j.run ? "; it resumes run-" + std::to_string(*j.run) : "") << "\n";
  return kExitOk;
}

// --------------------------------------------------------------- cron path

// A gate's reason as the user reads it: a refusal by rule (the gate could
// not compare the two models) names the commands of its remedy, which the
// verdict says in words (GateVerdict::uncompared).
std::string gate_reason_text(const GateVerdict& verdict) {
  if (!verdict.uncompared || !verdict.comparison) return verdict.reason;
  const GateVerdict::Uncompared& u = *verdict.uncompared;
  const GateComparison& c = *verdict.comparison;
  return u.cause + (u.version_unknown ? " (name one with --on)" : "") + "; the gate refuses and " + c.alias +
         " stays on " + c.incumbent_model + ": check " + c.candidate_model + " (anneal eval " + c.candidate_model +
         " " + (c.on.empty() ? "DATA" : c.on) + "), then promote it with anneal model promote " + c.candidate_model +
         " --to " + c.alias + " (no --gate)";
}

// The "gate" object of --json output, its reason as gate_reason_text says it.
json gate_json(const GateVerdict& verdict) {
  json j = verdict.to_json();
  j["reason"] = gate_reason_text(verdict);
  return j;
}

// A retrain's reason, a refusing gate's part as gate_reason_text says it.
std::string retrain_reason_text(const RetrainResult& result) {
  if (!result.gate || !result.gate->uncompared || !result.reason.ends_with(result.gate->reason)) return result.reason;
  return result.reason.substr(0, result.reason.size() - result.gate->reason.size()) + gate_reason_text(*result.gate);
}

int run_retrain(const Invocation& inv) {
  RetrainRequest request;
  request.config_source = inv.args["CONFIG"].as<std::string>();
  request.config_text = read_text_file(request.config_source, "CONFIG");
  request.overrides = overrides_of(inv);
  request.sources = flag_sources();
  if (inv.args.count("data")) request.data = inv.args["data"].as<std::string>();
  request.if_changed = inv.args["if-changed"].as<bool>();
  if (inv.args.count("promote")) request.promote = inv.args["promote"].as<std::string>();
  if (inv.args.count("gate")) {
    if (!request.promote) throw usage_error("--gate: give --promote ALIAS too; the gate decides that promotion");
    request.gate = parse_gate(inv.args["gate"].as<std::string>(), "--gate");
  }
  if (inv.args["max-drift"].as<bool>()) {
    if (!request.promote)
      throw usage_error("--max-drift: give --promote ALIAS too; tonight's version is checked against the one "
                        "that alias's model trained on");
    request.drift = drift_thresholds_of(inv);
  } else if (inv.args.count("max-psi") || inv.args.count("max-ks") || inv.args.count("max-missing-increase") ||
             inv.args.count("max-unseen")) {
    throw usage_error("--max-psi, --max-ks, --max-missing-increase and --max-unseen: give --max-drift too");
  }
  request.warm_start = inv.args["warm-start"].as<bool>();
  if (request.warm_start && !request.promote)
    throw usage_error("--warm-start: give --promote ALIAS too; the new model starts from the one holding that alias");
  std::optional<std::filesystem::path> report_dir;
  if (inv.args.count("report-dir")) {
    // Checked before anything is imported or trained: a night's training
    // must not end in a report that has nowhere to go.
    report_dir = inv.args["report-dir"].as<std::string>();
    if (!std::filesystem::is_directory(*report_dir))
      throw usage_error("--report-dir " + report_dir->string() + ": not a directory");
  }
  Store store = Store::open(inv.global.store, inv.global.access);
  StopOnSignal stop;
  request.stop = stop.token();
  auto reporter = make_train_reporter(inv.global.log_format);
  RetrainResult result = retrain(store, request, *reporter);
  const int code = result.outcome == RetrainOutcome::kRefused ? kExitGateRefused : kExitOk;
  // One report per night that trained, refused promotions included: that is
  // when the operator most wants to see the curves.
  std::optional<std::filesystem::path> report;
  if (report_dir && result.train && result.train->model) {
    const ModelRecord& model = *result.train->model;
    report = *report_dir / (model.name + "-v" + std::to_string(model.version) + ".html");
    try {
      write_run_report(store, result.train->run.id, *report, /*replace=*/true, outside_file_mode(inv.global));
    } catch (const Error& e) {
      throw failure(result.train->run.label() + " registered " + model.ref() + " (" + retrain_outcome_name(result.outcome) +
                    "), but writing its report failed: " + e.what());
    }
  }
  if (inv.global.json) {
    json out = result.to_json();
    if (!result.reason.empty()) out["reason"] = retrain_reason_text(result);
    if (result.gate) out["gate"] = gate_json(*result.gate);
    out["exit_code"] = code;
    if (report) out["report"] = report->string();
    print_json(out);
    return code;
  }
  switch (result.outcome) {
    case RetrainOutcome::kSkipped: std::cout << "skipped: " << terminal_text(result.reason) << "\n"; break;
    case RetrainOutcome::kRefused:
      std::cout << "trained " << result.train->model->ref() << "; not promoted: "
                << terminal_text(retrain_reason_text(result)) << "\n";
      break;
    case RetrainOutcome::kPromoted:
      std::cout << "trained " << result.train->model->ref() << " and promoted it to " << result.train->model->name
                << "@" << *request.promote << " (" << terminal_text(result.gate->reason) << ")\n";
      break;
    default: std::cout << "trained " << result.train->model->ref() << " on " << terminal_text(result.dataset) << "\n";
  }
  if (report) std::cout << "report: " << terminal_text(report->string()) << "\n";
  return code;
}

int run_metrics(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  if (inv.args.count("textfile")) {
    const std::filesystem::path dir = inv.args["textfile"].as<std::string>();
    if (!std::filesystem::is_directory(dir)) throw usage_error("--textfile " + dir.string() + ": not a directory");
    write_metrics_textfile(store, dir);
    return kExitOk;
  }
  std::cout << prometheus_metrics(store);
  return kExitOk;
}

// ---------------------------------------------------------- model registry

std::string reason_of(const Invocation& inv, const std::string& fallback) {
  return inv.args.count("reason") ? inv.args["reason"].as<std::string>() : fallback;
}

int run_alias_set(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  ModelRecord model = find_model(store, parse_model_ref(inv.args["REF"].as<std::string>(), "REF"));
  const std::string alias = inv.args["ALIAS"].as<std::string>();
  set_alias(store, model, alias, "set", acting_user(), reason_of(inv, "set by hand"));
  if (inv.global.json) print_json({{"alias", model.name + "@" + alias}, {"model", model.ref()}});
  else std::cout << model.name << "@" << alias << " -> " << model.ref() << "\n";
  return kExitOk;
}

int run_alias_list(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  auto aliases = list_aliases(store);
  if (inv.global.json) {
    json out = json::array();
    for (const auto& a : aliases) out.push_back({{"name", a.name}, {"alias", a.alias}, {"model", a.model.ref()}});
    print_json({{"aliases", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"ALIAS", "MODEL"}};
  for (const auto& a : aliases) rows.push_back({a.name + "@" + a.alias, a.model.ref()});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_alias_history(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  const std::string name = inv.args["NAME"].as<std::string>();
  validate_model_name(name);
  auto events = alias_history(store, name);
  auto v = [&](const std::optional<int>& version) { return version ? name + "@v" + std::to_string(*version) : std::string("-"); };
  if (inv.global.json) {
    json out = json::array();
    for (const auto& e : events)
      out.push_back({{"alias", e.alias}, {"action", e.action}, {"model", e.version ? json(v(e.version)) : json(nullptr)},
                     {"previous", e.previous ? json(v(e.previous)) : json(nullptr)}, {"at", e.at}, {"by", e.by},
                     {"reason", e.reason}, {"gate", e.gate}});
    print_json({{"name", name}, {"history", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"WHEN", "ALIAS", "ACTION", "FROM", "TO", "WHO", "WHY"}};
  for (const auto& e : events) rows.push_back({e.at, e.alias, e.action, v(e.previous), v(e.version), e.by, e.reason});
  print_table(std::cout, rows);
  return kExitOk;
}

int run_promote(const Invocation& inv) {
  if (!inv.args.count("to")) throw usage_error("anneal model promote: --to ALIAS is required");
  std::optional<Gate> gate;
  if (inv.args.count("gate")) gate = parse_gate(inv.args["gate"].as<std::string>(), "--gate");
  std::optional<DatasetRef> on;
  if (inv.args.count("on")) {
    on = parse_dataset_ref(inv.args["on"].as<std::string>(), "--on");
    if (!gate) throw usage_error("--on: give --gate too; --on names the rows the gate scores both models on");
    if (gate->constant)
      throw usage_error("--on: the gate '" + gate->text + "' compares with a number, not an alias; --on names the "
                        "rows a gate against an alias scores both models on");
  }
  Store store = Store::open(inv.global.store, inv.global.access);
  ModelRecord model = find_model(store, parse_model_ref(inv.args["REF"].as<std::string>(), "REF"));
  const std::string alias = inv.args["to"].as<std::string>();
  GateVerdict verdict = promote_model(store, model, alias, gate, reason_of(inv, ""), on);
  const int code = verdict.passed ? kExitOk : kExitGateRefused;
  if (inv.global.json) {
    print_json({{"model", model.ref()}, {"alias", model.name + "@" + alias}, {"promoted", verdict.passed},
                {"reason", verdict.reason.empty() ? json(nullptr) : json(gate_reason_text(verdict))},
                {"gate", gate ? gate_json(verdict) : json(nullptr)}, {"exit_code", code}});
  } else if (verdict.passed) {
    std::cout << model.name << "@" << alias << " -> " << model.ref() << (verdict.reason.empty() ? "" : " (" + terminal_text(verdict.reason) + ")") << "\n";
  } else {
    std::cout << "not promoted: " << terminal_text(gate_reason_text(verdict)) << "\n";
  }
  return code;
}

int run_rollback(const Invocation& inv) {
  Store store = Store::open(inv.global.store, inv.global.access);
  const std::string name = inv.args["NAME"].as<std::string>();
  validate_model_name(name);
  const std::string alias = inv.args["ALIAS"].as<std::string>();
  ModelRecord now = rollback_alias(store, name, alias, acting_user(), reason_of(inv, "rollback"));
  if (inv.global.json) print_json({{"alias", name + "@" + alias}, {"model", now.ref()}});
  else std::cout << name << "@" << alias << " -> " << now.ref() << " (rolled back)\n";
  return kExitOk;
}

void add_set_option(po::options_description& o) {
  o.add_options()("set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
                  "override a config key (repeatable)");
}

}  // namespace

void add_job_commands(std::vector<Command>& out) {
  out.push_back({"submit", "CONFIG [--priority N] [--retries N] [--timeout DUR] [--cores N] [--ranks N [--hostfile FILE]]",
                 "queue a training job for a worker",
                 "Checks CONFIG as train would and queues it, frozen: later edits to the file do not change the "
                 "job. Prints the job id. Workers run higher priorities first, first in first out within one. "
                 "A failed attempt (a crash, a timeout, an error) is retried after 2s, 4s, 8s, ... up to "
                 "--retries times, resuming the run from its last checkpoint. --cores (default: the config's "
                 "`threads`, else 1) is the job's whole thread budget. --ranks N (N > 1) makes the worker start "
                 "the job as `mpirun --bind-to none -np N [--hostfile FILE] anneal job-exec JOB` ($ANNEAL_MPIRUN "
                 "replaces mpirun and its options; --bind-to none, which keeps the local ranks on the job's "
                 "cores, unless it binds itself): one run trained across N processes, with rank 0 on the "
                 "worker's store (see anneal train --help); FILE is read by mpirun when the job starts.",
                 [](po::options_description& o) {
                   o.add_options()("priority", po::value<std::int64_t>()->value_name("N"), "higher runs first (default 0)")
                       ("retries", po::value<std::int64_t>()->value_name("N"), "retries after a failure (default 0)")
                       ("timeout", po::value<std::string>()->value_name("DUR"), "fail an attempt running longer (90s, 15m, 2h)")
                       ("cores", po::value<std::int64_t>()->value_name("N"), "cores (threads) the job may use")
                       ("ranks", po::value<std::int64_t>()->value_name("N"), "processes the run trains on, through mpirun (default 1)")
                       ("hostfile", po::value<std::string>()->value_name("FILE"), "mpirun's hostfile for a job of several ranks");
                   add_set_option(o);
                 },
                 {"CONFIG"}, run_submit});
  out.push_back({"worker", "[--cores N] [--max-jobs K] [--drain]", "run queued jobs",
                 "Claims queued jobs and runs each in its own process, confined to its share of the cores "
                 "(CPU affinity), so the running jobs never use more than --cores (default: all) and a job that "
                 "crashes takes nothing else down. Several workers may share a store; a job runs on one at a "
                 "time, under a lease the worker renews. When a worker dies its jobs' leases expire (--lease, "
                 "default 30s) and a worker resumes them from their checkpoints. SIGTERM or Ctrl-C stops the "
                 "jobs at a checkpoint, puts them back in the queue and exits. --drain exits once no job is "
                 "left. Job output goes to the job's log (anneal jobs logs).",
                 [](po::options_description& o) {
                   o.add_options()("cores", po::value<std::int64_t>()->value_name("N"), "cores all jobs share (default: all)")
                       ("max-jobs", po::value<std::int64_t>()->value_name("K"), "jobs at once (default: as cores allow)")
                       ("drain", po::bool_switch(), "exit when the queue is empty")
                       ("lease", po::value<std::string>()->value_name("DUR"), "lease length (default 30s)")
                       ("backoff", po::value<std::string>()->value_name("DUR"), "first retry delay (default 2s)")
                       ("metrics-textfile", po::value<std::string>()->value_name("DIR"),
                        "keep DIR/anneal.prom current for node_exporter");
                 },
                 {}, run_worker_command});
  out.push_back({"jobs list", "", "list jobs and their state",
                 "States: queued, running, succeeded, failed, cancelled.", nullptr, {}, run_jobs_list});
  out.push_back({"jobs show", "JOB", "show a job: terms, attempts, run, model, error", "JOB is job-N or N.",
                 nullptr, {"JOB"}, run_jobs_show});
  out.push_back({"jobs logs", "JOB [--follow]", "print a job's log",
                 "Every attempt's output, in order. --follow keeps printing until the job ends.",
                 [](po::options_description& o) { o.add_options()("follow,f", po::bool_switch(), "follow until the job ends"); },
                 {"JOB"}, run_jobs_logs});
  out.push_back({"jobs cancel", "JOB", "cancel a job",
                 "A queued job is cancelled at once; a running one stops at its next step and keeps a "
                 "checkpoint (anneal jobs retry continues it).",
                 nullptr, {"JOB"}, run_jobs_cancel});
  out.push_back({"jobs retry", "JOB", "queue a failed or cancelled job again",
                 "The job gets one more attempt and resumes its run from the last checkpoint.", nullptr, {"JOB"},
                 run_jobs_retry});
  Command exec{"job-exec", "JOB", "run one job (the worker's child process)", "", nullptr, {"JOB"}, run_job_exec};
  exec.hidden = true;
  out.push_back(exec);
  out.push_back({"retrain",
                 "CONFIG [--data FILE] [--if-changed] [--promote ALIAS [--warm-start] [--max-drift]] [--gate EXPR]",
                 "retrain a model in the foreground, for cron",
                 "Under a lock per config (a second retrain of the same config exits 75 naming the holder), "
                 "optionally imports FILE as a new version of the config's dataset (nothing new when the bytes "
                 "are unchanged), skips with --if-changed when the dataset version and the config equal those "
                 "of this config's last retrain, trains, and with --promote moves NAME@ALIAS to the new model "
                 "when the gate holds. EXPR is 'METRIC OP VALUE' with OP one of >= > <= < == != and VALUE a "
                 "number or an alias, e.g. 'val_accuracy >= production'. Against a number the new model's "
                 "recorded METRIC is compared. Against an alias both the new model and the one holding the alias "
                 "are scored afresh, each with its own preprocessing, on the same rows: the test split of the "
                 "version just trained, less every row either model trained on; METRIC then names what eval "
                 "computes (accuracy, macro_f1, macro_precision, macro_recall, roc_auc, rmse, mae, r2), a val_, "
                 "test_ or baseline_ prefix ignored. An unset alias is beaten by anything. When the alias's "
                 "model cannot be scored on those rows (a column it uses is missing or changed, a label it never "
                 "saw) or no row is left, the gate refuses (exit 4) and says so in one line: the alias stays; "
                 "check the new model, then anneal model promote REF --to ALIAS without --gate. --warm-start "
                 "starts the new model from the weights and the fitted preprocessing of the model holding "
                 "NAME@ALIAS (the config key warm_start does the same for train) and trains the config's epochs "
                 "on the new data; when that model does not fit (other layers or loss, a column it used gone or "
                 "retyped, a class it never saw) one line says why and the run trains from scratch, as it does "
                 "while the alias is not set yet. The model's lineage names the parent. "
                 "--max-drift checks the version to train against the one the model holding NAME@ALIAS trained "
                 "on, column by column, before training (see 'anneal data check'; its --max-* thresholds apply): "
                 "when a check fails the model is trained but not promoted (exit 4), the failed checks named in "
                 "one line and in full in --json's data_checks, and each check's value is in 'anneal metrics'. "
                 "--report-dir DIR writes the HTML report of each night that trained (see 'anneal runs report') "
                 "to DIR/NAME-vN.html, a directory a web server can serve. Exit codes: "
                 "0 trained (and promoted when asked) or skipped, 4 trained but the gate or a data check refused "
                 "promotion, "
                 "65 bad data, 75 lock held, 1 any other failure.",
                 [](po::options_description& o) {
                   o.add_options()("data", po::value<std::string>()->value_name("FILE"), "import FILE first")
                       ("if-changed", po::bool_switch(), "skip when data and config are unchanged")
                       ("promote", po::value<std::string>()->value_name("ALIAS"), "move this alias to the new model")
                       ("warm-start", po::bool_switch(), "start from the model holding the --promote alias")
                       ("max-drift", po::bool_switch(), "refuse the promotion when a data check fails")
                       ("gate", po::value<std::string>()->value_name("EXPR"), "promote only when EXPR holds")
                       ("report-dir", po::value<std::string>()->value_name("DIR"),
                        "write the run's HTML report to DIR/NAME-vN.html when it trained");
                   add_drift_options(o);
                   add_set_option(o);
                 },
                 {"CONFIG"}, run_retrain});
  out.push_back({"metrics", "[--textfile DIR]", "print Prometheus metrics of the store",
                 "The Prometheus text format: jobs by state, job durations, retries, each config's last "
                 "retrain (success time, duration, outcomes) and last gate against an alias (both models' scores "
                 "on the same rows, the rows, the decision), the newest models' metrics and aliases, training "
                 "samples/s, store bytes and the dedup ratio. --textfile writes DIR/anneal.prom atomically for "
                 "node_exporter's textfile collector instead.",
                 [](po::options_description& o) {
                   o.add_options()("textfile", po::value<std::string>()->value_name("DIR"), "write DIR/anneal.prom");
                 },
                 {}, run_metrics});
  out.push_back({"model alias set", "REF ALIAS [--reason TEXT]", "point NAME@ALIAS at a model version",
                 "ALIAS is any name (production, staging, champion); NAME@ALIAS then works wherever a model is "
                 "named. The change is kept in the alias history with who, when and why.",
                 [](po::options_description& o) { o.add_options()("reason", po::value<std::string>()->value_name("TEXT"), "why"); },
                 {"REF", "ALIAS"}, run_alias_set});
  out.push_back({"model alias list", "", "list aliases and the versions they point at", "", nullptr, {}, run_alias_list});
  out.push_back({"model alias history", "NAME", "show who moved NAME's aliases, when and why", "", nullptr, {"NAME"},
                 run_alias_history});
  out.push_back({"model promote", "REF --to ALIAS [--gate EXPR [--on DATA]]",
                 "move an alias to a model version if a gate holds",
                 "Without --gate the alias moves unconditionally. With it, only when EXPR holds (see anneal "
                 "retrain --help); otherwise exit 4 and the alias stays where it was. A gate against an alias "
                 "scores REF and the alias's model on the test split of DATA (default: the version REF trained "
                 "on), less every row either trained on; when the alias's model cannot be scored there, or no "
                 "row is left, the gate refuses in one line (exit 4): check REF, then promote without --gate.",
                 [](po::options_description& o) {
                   o.add_options()("to", po::value<std::string>()->value_name("ALIAS"), "the alias to move")
                       ("gate", po::value<std::string>()->value_name("EXPR"), "promote only when EXPR holds")
                       ("on", po::value<std::string>()->value_name("DATA"),
                        "judge an alias gate on this dataset version's test split")
                       ("reason", po::value<std::string>()->value_name("TEXT"), "why");
                 },
                 {"REF"}, run_promote});
  out.push_back({"model rollback", "NAME ALIAS [--reason TEXT]", "move an alias back to its previous holder", "",
                 [](po::options_description& o) { o.add_options()("reason", po::value<std::string>()->value_name("TEXT"), "why"); },
                 {"NAME", "ALIAS"}, run_rollback});
}

}  // namespace anneal::cli
