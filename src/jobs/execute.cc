// One job in its child process: make_job_spec (at submit) and execute_job.

#include "anneal/config.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/jobs.h"

namespace anneal {
namespace {

// Passes training progress on, through a fault point named after the job
// and attempt once a step is done: where a test crashes a job in the middle
// of training, after its run (and, with checkpoint_every, a checkpoint)
// exists.
class FaultingReporter final : public TrainingReporter {
 public:
  FaultingReporter(TrainingReporter& inner, std::string point) : inner_(inner), point_(std::move(point)) {}
  void note(std::string_view message) override { inner_.note(message); }
  void suggest(std::string_view message, Remedy remedy, const std::string& argument) override {
    inner_.suggest(message, remedy, argument);
  }
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override {
    inner_.progress(stage, done, total);
  }
  void training(const TrainProgress& progress) override {
    inner_.training(progress);
    if (progress.step >= 1) fault_point(point_);
  }

 private:
  TrainingReporter& inner_;
  const std::string point_;
};

}  // namespace

JobSpec make_job_spec(const std::string& config_text, const std::string& config_source,
                      const std::vector<std::string>& overrides, const SettingSources& named) {
  TrainConfig config = parse_train_config(config_text, config_source, overrides, named);
  validate_model_name(config.name);
  parse_dataset_ref(config.dataset, config_source + ": dataset");
  JobSpec spec;
  spec.name = config.name;
  // The resolved text (overrides folded in, every key explicit): the job
  // trains exactly what was checked here, whatever happens to the file.
  spec.config_text = config.to_text();
  // What the worker will parse must be what was checked here.
  if (parse_train_config(spec.config_text, config_source, {}).to_text() != spec.config_text)
    throw usage_error(config_source + ": the resolved config does not read back as written; a value holds "
                      "characters a config file cannot carry");
  spec.config_source = config_source;
  // A config that names its threads asks for that many cores; otherwise a
  // job takes one, so a worker runs as many small jobs side by side as it
  // has cores (`anneal submit --cores` overrides both).
  spec.cores = config.sources.count("threads") ? config.threads : 1;
  return spec;
}

TrainResult execute_job(Store& store, std::int64_t job_id, std::int64_t claim, std::stop_token stop,
                        TrainingReporter& reporter, Communicator* comm) {
  JobRecord job = find_job(store, job_id);
  const JobFence fence{job.id, claim};
  TrainRequest request;
  request.stop = stop;
  request.fence = fence;
  request.communicator = comm;
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
    request.wait_for_run_lock = true;
  } else {
    request.config_text = job.spec.config_text;
    request.config_source = job.spec.config_source;
    // The job's share of cores is its thread budget, whatever the file said.
    request.overrides = {"threads=" + std::to_string(job.spec.cores)};
    request.on_run_started = [&store, fence](const RunRecord& run) { set_job_run(store, fence, run.id); };
  }
  FaultingReporter faulting(reporter, "job." + job.spec.name + ".attempt-" + std::to_string(job.attempts) + ".trained");
  reporter.note(job.label() + " attempt " + std::to_string(job.attempts) + " of " + std::to_string(job.max_attempts) +
                (request.resume ? ": resuming run-" + std::to_string(*request.resume) : ": starting"));
  return train_model(store, request, faulting);
}

}  // namespace anneal
