// One job in its child process: make_job_spec (at submit) and execute_job.
#include <csignal>
#include <cstdlib>

#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/jobs.h"

namespace anneal {
namespace {

// Passes training progress on, and provokes the test fault once a step is
// done: a crash in the middle of training, after the run and (with
// checkpoint_every) a checkpoint exist.
class FaultingReporter final : public TrainingReporter {
 public:
  FaultingReporter(TrainingReporter& inner, const std::optional<TestFault>& fault) : inner_(inner), fault_(fault) {}
  void note(std::string_view message) override { inner_.note(message); }
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override {
    inner_.progress(stage, done, total);
  }
  void training(const TrainProgress& progress) override {
    inner_.training(progress);
    if (!fault_ || progress.step < 1) return;
    inner_.note("ANNEAL_TEST_FAULT: provoking " + fault_->kind + " at step " + std::to_string(progress.step));
    // The default action, whatever handler a sanitizer installed: the test
    // is of a process the kernel kills, not of a crash report.
    const int sig = fault_->kind == "segv" ? SIGSEGV : SIGABRT;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }

 private:
  TrainingReporter& inner_;
  const std::optional<TestFault>& fault_;
};

}  // namespace

JobSpec make_job_spec(const std::string& config_text, const std::string& config_source,
                      const std::vector<std::string>& overrides) {
  TrainConfig config = parse_train_config(config_text, config_source, overrides);
  validate_dataset_name(config.name);
  parse_dataset_ref(config.dataset, config_source + ": dataset");
  JobSpec spec;
  spec.name = config.name;
  // The resolved text (overrides folded in, every key explicit): the job
  // trains exactly what was checked here, whatever happens to the file.
  spec.config_text = config.to_text();
  spec.config_source = config_source;
  // A config that names its threads asks for that many cores; otherwise a
  // job takes one, so a worker runs as many small jobs side by side as it
  // has cores (`anneal submit --cores` overrides both).
  spec.cores = config.sources.count("threads") ? config.trainer.threads : 1;
  return spec;
}

std::optional<TestFault> parse_test_fault(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string s(text);
  const std::size_t a = s.find(':'), b = s.rfind(':');
  TestFault fault;
  if (a != std::string::npos && b > a) {
    fault.kind = s.substr(0, a);
    fault.job_name = s.substr(a + 1, b - a - 1);
    try {
      fault.attempts = std::stoll(s.substr(b + 1));
    } catch (const std::exception&) {
      fault.attempts = -1;
    }
  }
  if ((fault.kind != "segv" && fault.kind != "abort") || fault.job_name.empty() || fault.attempts < 0)
    throw usage_error("ANNEAL_TEST_FAULT '" + s + "': expected segv:NAME:N or abort:NAME:N");
  return fault;
}

TrainResult execute_job(Store& store, std::int64_t job_id, std::stop_token stop, TrainingReporter& reporter,
                        const std::optional<TestFault>& fault) {
  JobRecord job = find_job(store, job_id);
  TrainRequest request;
  request.stop = stop;
  if (job.run) {
    RunRecord run = find_run(store, *job.run);
    if (run.status == RunStatus::kSucceeded) {
      // An earlier attempt finished but its worker died before recording
      // it: the result is already there.
      reporter.note(job.label() + ": " + run.label() + " already succeeded");
      TrainResult done;
      done.run = run;
      if (!run.model.empty()) done.model = find_model(store, parse_model_ref(run.model));
      done.weights_hash = run.summary.value("weights_hash", "");
      done.samples_per_s = run.summary.value("samples_per_s", 0.0);
      done.metrics = run.summary.value("metrics", nlohmann::json::object());
      return done;
    }
    request.resume = run.id;
  } else {
    request.config_text = job.spec.config_text;
    request.config_source = job.spec.config_source;
    // The job's share of cores is its thread budget, whatever the file said.
    request.overrides = {"threads=" + std::to_string(job.spec.cores)};
    request.on_run_started = [&](const RunRecord& run) { set_job_run(store, job.id, run.id); };
  }
  std::optional<TestFault> armed;
  if (fault && fault->job_name == job.spec.name && job.attempts <= fault->attempts) armed = fault;
  FaultingReporter faulting(reporter, armed);
  reporter.note(job.label() + " attempt " + std::to_string(job.attempts) + " of " + std::to_string(job.max_attempts) +
                (request.resume ? ": resuming run-" + std::to_string(*request.resume) : ": starting"));
  return train_model(store, request, faulting);
}

}  // namespace anneal
