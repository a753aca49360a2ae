// `anneal worker`: claims jobs and supervises one child process per job.
//
// The main thread owns the catalog connection and every decision: claims,
// lease renewals, timeouts, cancellation, recording outcomes. It also
// spawns the children, because a child's parent-death signal follows the
// thread that spawned it, and this thread lives as long as the worker. A
// oneTBB task per child blocks in waitpid and hands the exit status back
// through a queue, so the main thread never blocks on any one job.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/jobs.h"
#include "jobs/job_log.h"

extern char** environ;

namespace anneal {
namespace {

// The protocol's two variables (JobChildEnvironment in anneal/jobs.h).
constexpr char kWorkerPidVariable[] = "ANNEAL_WORKER_PID";
constexpr char kJobClaimVariable[] = "ANNEAL_JOB_CLAIM";

// `environ` less the protocol's variables, then the worker's pid (when
// `worker` is set) and the attempt's claim, as NAME=VALUE strings.
std::vector<std::string> job_child_environment(std::optional<pid_t> worker, std::int64_t claim) {
  std::vector<std::string> out;
  auto named = [](const char* entry, const char* name) {
    const std::size_t n = std::strlen(name);
    return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
  };
  for (char** e = environ; *e; ++e)
    if (!named(*e, kWorkerPidVariable) && !named(*e, kJobClaimVariable)) out.emplace_back(*e);
  if (worker) out.push_back(std::string(kWorkerPidVariable) + "=" + std::to_string(*worker));
  out.push_back(std::string(kJobClaimVariable) + "=" + std::to_string(claim));
  return out;
}

std::string seconds_text(double s) {
  if (s >= 1 && std::abs(s - std::round(s)) < 1e-9) return std::to_string(static_cast<long long>(std::round(s))) + "s";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3gs", s);
  return buffer;
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  std::string text = "killed by signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
  if (sig == SIGKILL) text += "; out of memory, or killed by hand";
  return text;
}

// What a failed job's log says went wrong (job_log.h): anneal's error, not
// the row of dashes mpirun ends its banner with.
std::string log_failure_line(const std::filesystem::path& log) {
  std::ifstream in(log, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return job_failure_line(text);
}

// The CPUs this process may run on, lowest first.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) throw failure(std::string("sched_getaffinity: ") + std::strerror(errno));
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

struct Child {
  JobRecord job;
  pid_t pid = -1;
  std::vector<int> cpus;
  double started = 0;
  bool cancel = false;           // cancel requested: SIGTERM sent
  bool released = false;         // the worker is stopping: SIGTERM sent, requeue
  bool lost = false;             // another worker took the job over: SIGKILL sent
  std::string forced_failure;    // why the worker stopped it: a timeout
  double kill_at = 0;            // SIGKILL after this unless it exits
};

struct ExitStatus {
  pid_t pid;
  int status;
};

// Sets the calling thread's affinity for the duration of a spawn: the
// child inherits it, and so does every thread the child starts.
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int>& cpus) {
    CPU_ZERO(&saved_);
    if (::sched_getaffinity(0, sizeof saved_, &saved_) != 0) throw failure("sched_getaffinity failed");
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
      throw failure(std::string("sched_setaffinity: ") + std::strerror(errno));
  }
  ~ScopedAffinity() { ::sched_setaffinity(0, sizeof saved_, &saved_); }
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;

 private:
  cpu_set_t saved_;
};

class SpawnActions {
 public:
  SpawnActions() { ::posix_spawn_file_actions_init(&actions_); }
  ~SpawnActions() { ::posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

// Writes the metrics textfile on its own thread, with its own catalog
// connection, whenever asked. A refresh stats every object file and may wait
// on a busy catalog; on the worker's main thread that delayed lease renewals
// past the lease, and another worker took the jobs over. Requests made
// while one is being written fold into one more write. The destructor
// writes once more if asked and waits for it.
class MetricsWriter {
 public:
  MetricsWriter(std::filesystem::path store_root, StoreAccess access, std::filesystem::path dir)
      : root_(std::move(store_root)), access_(std::move(access)), dir_(std::move(dir)),
        thread_([this](std::stop_token stop) { loop(stop); }) {}
  ~MetricsWriter() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
  }
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void request() {
    {
      std::lock_guard lock(mutex_);
      pending_ = true;
    }
    wake_.notify_one();
  }
  // The last write's error since the previous call, for the worker's log.
  std::string take_error() {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, std::string());
  }
  // Writes once more and waits for it; returns its error, if any.
  std::string flush() {
    request();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return !pending_ && !writing_; });
    return std::exchange(error_, std::string());
  }

 private:
  void loop(std::stop_token) {
    std::optional<Store> store;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return pending_ || stopping_; });
        if (!pending_) return;
        pending_ = false;
        writing_ = true;
      }
      std::string error;
      try {
        if (!store) store.emplace(Store::open(root_, access_));
        write_metrics_textfile(*store, dir_);
      } catch (const std::exception& e) {
        error = e.what();
      }
      {
        std::lock_guard lock(mutex_);
        writing_ = false;
        if (!error.empty()) error_ = error;
      }
      done_.notify_all();
    }
  }

  const std::filesystem::path root_;
  const StoreAccess access_;
  const std::filesystem::path dir_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool pending_ = false, writing_ = false, stopping_ = false;
  std::string error_;
  std::jthread thread_;  // last: joined first, while the members above live
};

class Worker {
 public:
  Worker(Store& store, const WorkerOptions& options, Reporter& reporter)
      : store_(store), options_(options), reporter_(reporter),
        id_(host_name() + ":" + std::to_string(::getpid())) {
    if (options_.job_command.empty()) throw failure("worker: no job command");
    if (options_.cores < 1) throw usage_error(Subject::kWorkerCores, "must be at least 1");
    if (options_.max_jobs < 0) throw usage_error(Subject::kWorkerMaxJobs, "must be at least 0");
    if (!(options_.lease_s > 0)) throw usage_error(Subject::kWorkerLease, "must be positive");
    std::vector<int> cpus = allowed_cpus();
    if (static_cast<std::int64_t>(cpus.size()) < options_.cores)
      throw usage_error(Subject::kWorkerCores, std::to_string(options_.cores) + ": this process may run on only " +
                                                   std::to_string(cpus.size()) + " CPUs");
    free_cpus_.assign(cpus.begin(), cpus.begin() + options_.cores);
    max_jobs_ = options_.max_jobs > 0 ? options_.max_jobs : options_.cores;
    make_private_dir(store_.root() / "logs");
    if (options_.metrics_textfile_dir) metrics_.emplace(store_.root(), store_.access(), *options_.metrics_textfile_dir);
  }

  void run(std::stop_token stop) {
    // One blocking waitpid per running job, on oneTBB threads: allow as
    // many threads as jobs, whatever the core count.
    tbb::global_control threads(tbb::global_control::max_allowed_parallelism,
                                static_cast<std::size_t>(max_jobs_) + 1);
    tbb::task_arena arena(static_cast<int>(max_jobs_) + 1);
    tbb::task_group waits;
    reporter_.note("worker " + id_ + ": " + std::to_string(options_.cores) + " cores, up to " +
                   std::to_string(max_jobs_) + " jobs at once" + (options_.drain ? ", until the queue is empty" : ""));
    refresh_metrics();
    double next_heartbeat = 0, next_metrics = unix_now() + 15;
    bool stopping = false;
    try {
      for (;;) {
        collect_exits();
        const double now = unix_now();
        if (now >= next_heartbeat) {
          heartbeat(now);
          next_heartbeat = now + options_.lease_s / 4;
        }
        enforce_timeouts(now);
        if (stop.stop_requested() && !stopping) {
          stopping = true;
          reporter_.note("worker " + id_ + ": stopping; running jobs checkpoint and go back to the queue");
          for (auto& [pid, child] : children_) {
            child.released = true;
            ::kill(pid, SIGTERM);
          }
        }
        if (stopping) {
          if (children_.empty()) break;
        } else {
          while (static_cast<std::int64_t>(children_.size()) < max_jobs_ && !free_cpus_.empty()) {
            auto job = claim_job(store_, id_, static_cast<std::int64_t>(free_cpus_.size()), unix_now(), options_.lease_s);
            if (!job) {
              if (children_.empty()) fault_point("worker.idle");
              break;
            }
            arena.execute([&] { start(*job, waits); });
          }
          if (options_.drain && children_.empty() && !work_left()) break;
        }
        if (now >= next_metrics) {
          refresh_metrics();
          next_metrics = now + 15;
        }
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return !exits_.empty(); });
      }
    } catch (...) {
      // Leave no child behind unsupervised: stop them and wait, then report.
      for (auto& [pid, child] : children_) ::kill(pid, SIGKILL);
      arena.execute([&] { waits.wait(); });
      throw;
    }
    arena.execute([&] { waits.wait(); });
    if (metrics_)
      if (std::string error = metrics_->flush(); !error.empty())
        throw failure("metrics textfile not written: " + error);
    reporter_.note("worker " + id_ + ": done");
  }

 private:
  // A queued job this worker could ever run (one needing more cores than
  // it has waits for another worker).
  bool work_left() {
    for (const JobRecord& j : list_jobs(store_)) {
      if (j.state == JobState::kQueued && j.spec.cores <= options_.cores) return true;
      if (j.state == JobState::kRunning && j.worker != id_ && j.lease_expires < unix_now() &&
          j.spec.cores <= options_.cores)
        return true;
    }
    return false;
  }

  void start(const JobRecord& job, tbb::task_group& waits) {
    Child child;
    child.job = job;
    child.cpus.assign(free_cpus_.begin(), free_cpus_.begin() + job.spec.cores);
    free_cpus_.erase(free_cpus_.begin(), free_cpus_.begin() + job.spec.cores);
    child.started = unix_now();
    const auto log = job_log_path(store_, job.id);
    try {
      child.pid = spawn(job, child.cpus, log);
    } catch (const std::exception& e) {
      free_cpus_.insert(free_cpus_.end(), child.cpus.begin(), child.cpus.end());
      std::sort(free_cpus_.begin(), free_cpus_.end());
      finish(job, JobState::kFailed, "", std::string("cannot start: ") + e.what());
      return;
    }
    std::string cpus;
    for (int c : child.cpus) {
      if (!cpus.empty()) cpus += ',';
      cpus += std::to_string(c);
    }
    reporter_.note(job.label() + " (" + job.spec.name + ") started: attempt " + std::to_string(job.attempts) + " of " +
                   std::to_string(job.max_attempts) + ", pid " + std::to_string(child.pid) + ", cpus " + cpus);
    const pid_t pid = child.pid;
    children_.emplace(pid, std::move(child));
    waits.run([this, pid] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      {
        std::lock_guard lock(mutex_);
        exits_.push_back({pid, status});
      }
      wake_.notify_one();
    });
  }

  pid_t spawn(const JobRecord& job, const std::vector<int>& cpus, const std::filesystem::path& log) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) throw failure(errno_message(log, "cannot open the job log"));
    std::string header = "--- " + job.label() + " attempt " + std::to_string(job.attempts) + " on worker " + id_ + "\n";
    ssize_t ignored = ::write(fd, header.data(), header.size());
    (void)ignored;
    SpawnActions actions;
    ::posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(actions.get(), fd, STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(actions.get(), fd, STDERR_FILENO);
    // A job of several ranks: mpirun starts them (each rank's parent is
    // mpirun or its daemon, so the parent-death check below is not theirs).
    const bool ranks = job.spec.ranks > 1;
    std::vector<std::string> args;
    if (ranks) {
      args = options_.mpirun;
      // Open MPI binds rank r to core r of its own choosing, ignoring the
      // CPUs it was started on, so a job's ranks would leave its cores for
      // another job's (or for each other's, across jobs). Unbound, the
      // local ranks inherit the job's CPUs below. Unless the operator's
      // ANNEAL_MPIRUN says how to bind.
      if (std::find(args.begin(), args.end(), "--bind-to") == args.end())
        args.insert(args.end(), {"--bind-to", "none"});
      args.insert(args.end(), {"-np", std::to_string(job.spec.ranks)});
      if (!job.spec.hostfile.empty()) args.insert(args.end(), {"--hostfile", job.spec.hostfile});
      args.insert(args.end(), {"-x", kJobClaimVariable});
    }
    args.insert(args.end(), options_.job_command.begin(), options_.job_command.end());
    args.push_back(job.label());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // A job of several ranks has mpirun between the worker and rank 0, so
    // only a one-rank child can check its parent is the worker.
    std::vector<std::string> environment =
        job_child_environment(ranks ? std::nullopt : std::optional<pid_t>(::getpid()), job.claim);
    std::vector<char*> envp;
    for (std::string& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    int rc = 0;
    {
      ScopedAffinity affinity(cpus);
      // mpirun is looked up in PATH; anneal is an absolute path.
      rc = ::posix_spawnp(&pid, argv[0], actions.get(), nullptr, argv.data(), envp.data());
    }
    ::close(fd);
    if (rc != 0) throw failure(std::string(argv[0]) + ": " + std::strerror(rc));
    return pid;
  }

  void collect_exits() {
    std::deque<ExitStatus> exits;
    {
      std::lock_guard lock(mutex_);
      exits.swap(exits_);
    }
    for (const ExitStatus& e : exits) {
      auto it = children_.find(e.pid);
      if (it == children_.end()) continue;
      Child child = std::move(it->second);
      children_.erase(it);
      free_cpus_.insert(free_cpus_.end(), child.cpus.begin(), child.cpus.end());
      std::sort(free_cpus_.begin(), free_cpus_.end());
      record_exit(child, e.status);
    }
  }

  void record_exit(const Child& child, int status) {
    const JobRecord& job = child.job;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (child.lost) {
      reporter_.note(job.label() + ": its lease was lost to another worker; the attempt here is stopped and "
                     "records nothing");
      return;
    }
    if (child.released && !ok) {
      release_job(store_, job.fence(), id_);
      reporter_.note(job.label() + " stopped with the worker; back in the queue");
      refresh_metrics();
      return;
    }
    if (ok) {
      std::string model;
      JobRecord now = find_job(store_, job.id);
      if (now.run) model = find_run(store_, *now.run).model;
      finish(job, JobState::kSucceeded, model, "");
      return;
    }
    if (!child.forced_failure.empty()) {
      finish(job, JobState::kFailed, "", child.forced_failure);
      return;
    }
    if (child.cancel) {
      finish(job, JobState::kCancelled, "", "cancelled");
      return;
    }
    std::string why;
    if (WIFSIGNALED(status)) {
      why = signal_text(WTERMSIG(status));
    } else {
      why = "exited with status " + std::to_string(WEXITSTATUS(status));
      std::string line = log_failure_line(job_log_path(store_, job.id));
      if (!line.empty()) why += ": " + line;
    }
    finish(job, JobState::kFailed, "", why);
  }

  void finish(const JobRecord& job, JobState outcome, const std::string& model, const std::string& error) {
    const double backoff = options_.backoff_s * std::pow(2.0, static_cast<double>(std::max<std::int64_t>(job.attempts - 1, 0)));
    auto after = finish_job(store_, job.fence(), id_, outcome, model, error, unix_now(), backoff);
    if (!after) {
      reporter_.note(job.label() + ": another worker took it over; leaving it alone");
    } else if (*after == JobState::kQueued) {
      reporter_.note(job.label() + " failed (attempt " + std::to_string(job.attempts) + " of " +
                     std::to_string(job.max_attempts) + "): " + error + "; retrying in " + seconds_text(backoff));
    } else {
      reporter_.note(job.label() + " " + job_state_name(*after) + (model.empty() ? "" : ": " + model) +
                     (error.empty() || *after == JobState::kCancelled ? "" : ": " + error));
    }
    refresh_metrics();
  }

  void heartbeat(double now) {
    std::vector<JobFence> held;
    for (const auto& [pid, child] : children_)
      if (!child.lost) held.push_back(child.job.fence());
    if (held.empty()) return;
    const LeaseRenewal renewal = renew_leases(store_, id_, held, now, options_.lease_s);
    for (auto& [pid, child] : children_) {
      const std::int64_t id = child.job.id;
      if (std::find(renewal.lost.begin(), renewal.lost.end(), id) != renewal.lost.end() && !child.lost) {
        // This worker stalled past its lease (stopped, or starved of CPU or
        // of the catalog) and another took the job over. Its writes are
        // fenced already; stop it at once so only one process trains.
        child.lost = true;
        reporter_.note(child.job.label() + ": lost its lease to another worker; stopping the attempt here");
        ::kill(pid, SIGKILL);
      } else if (std::find(renewal.cancelled.begin(), renewal.cancelled.end(), id) != renewal.cancelled.end() &&
                 !child.cancel) {
        child.cancel = true;
        reporter_.note(child.job.label() + ": cancelling at the next step");
        ::kill(pid, SIGTERM);
      }
    }
  }

  void enforce_timeouts(double now) {
    for (auto& [pid, child] : children_) {
      if (child.kill_at > 0 && now >= child.kill_at) {
        ::kill(pid, SIGKILL);
        child.kill_at = 0;
        continue;
      }
      const auto& timeout = child.job.spec.timeout_s;
      if (!timeout || !child.forced_failure.empty() || now - child.started < *timeout) continue;
      child.forced_failure = "timed out after " + seconds_text(*timeout);
      reporter_.note(child.job.label() + " " + child.forced_failure + "; stopping it");
      ::kill(pid, SIGTERM);
      child.kill_at = now + options_.term_grace_s;
    }
  }

  void refresh_metrics() {
    if (!metrics_) return;
    if (std::string error = metrics_->take_error(); !error.empty())
      reporter_.note("metrics textfile not written: " + error);
    metrics_->request();
  }

  Store& store_;
  const WorkerOptions& options_;
  Reporter& reporter_;
  const std::string id_;
  std::vector<int> free_cpus_;
  std::int64_t max_jobs_ = 1;
  std::map<pid_t, Child> children_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<ExitStatus> exits_;
  std::optional<MetricsWriter> metrics_;  // last: its final write sees every outcome recorded
};

}  // namespace

JobChildEnvironment attach_job_child() {
  JobChildEnvironment env;
  if (const char* parent = std::getenv(kWorkerPidVariable)) {
    // Asked first, checked second: a worker that dies between the two is
    // seen by the check; one that dies after it kills this child.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    env.attached = std::to_string(::getppid()) == parent;
  }
  if (const char* text = std::getenv(kJobClaimVariable)) {
    const std::string_view s(text);
    std::int64_t claim = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), claim);
    if (ec != std::errc() || end != s.data() + s.size())
      throw usage_error(std::string(kJobClaimVariable) + " '" + std::string(s) + "': expected a number");
    env.claim = claim;
  }
  return env;
}

std::filesystem::path job_log_path(const Store& store, std::int64_t job) {
  return store.root() / "logs" / ("job-" + std::to_string(job) + ".log");
}

void run_worker(Store& store, const WorkerOptions& options, Reporter& reporter, std::stop_token stop) {
  Worker worker(store, options, reporter);
  worker.run(stop);
}

}  // namespace anneal
