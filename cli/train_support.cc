#include "train_support.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "anneal/communicator.h"
#include "anneal/error.h"
#include "error_text.h"

namespace anneal::cli {

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

namespace {

// Training output on stderr. On a terminal: a progress bar (epoch, step,
// loss, samples/s, ETA) redrawn in place, with each epoch's line printed
// above it. Otherwise: just the lines, one per epoch.
class TrainReporter final : public TrainingReporter {
 public:
  explicit TrainReporter(LogFormat format)
      : json_(format == LogFormat::kJson), terminal_(!json_ && ::isatty(STDERR_FILENO) == 1) {}
  ~TrainReporter() override {
    if (bar_shown_) std::cerr << "\r\x1b[K" << std::flush;
  }

  void note(std::string_view message) override {
    std::lock_guard lock(mutex_);
    if (json_) {
      std::cerr << json_log_line("info", message) << std::flush;
      return;
    }
    if (bar_shown_) std::cerr << "\r\x1b[K";
    std::cerr << terminal_text(message) << "\n";
    if (bar_shown_) std::cerr << bar_ << std::flush;
  }

  void suggest(std::string_view message, Remedy remedy, const std::string& argument) override {
    note(std::string(message) + remedy_command(remedy, argument));
  }

  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override {
    if (!terminal_) return;
    std::lock_guard lock(mutex_);
    std::cerr << "\r\x1b[K" << terminal_text(stage) << " " << done;
    if (total) std::cerr << "/" << total;
    std::cerr << (done == total ? "\n" : "") << std::flush;
  }

  void training(const TrainProgress& p) override {
    if (!terminal_) return;
    auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    // Redrawing more than ~10 times a second only costs time.
    if (bar_shown_ && now - last_draw_ < std::chrono::milliseconds(100) && p.step < p.total_steps) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    double fraction = p.steps_per_epoch ? static_cast<double>(p.epoch_step) / static_cast<double>(p.steps_per_epoch) : 0;
    int filled = static_cast<int>(fraction * kWidth);
    std::ostringstream line;
    line << "epoch " << p.epoch << "/" << p.epochs << " [" << std::string(static_cast<std::size_t>(filled), '#')
         << std::string(static_cast<std::size_t>(kWidth - filled), '.') << "] step " << p.step << "/"
         << p.total_steps;
    if (!std::isnan(p.loss)) line << "  loss " << format_double(p.loss, 4);
    line << "  " << static_cast<long long>(p.samples_per_s) << " samples/s  ETA " << duration_text(p.eta_seconds);
    bar_ = line.str();
    bar_shown_ = true;
    std::cerr << "\r\x1b[K" << bar_ << std::flush;
  }

 private:
  bool json_;
  bool terminal_;
  bool bar_shown_ = false;
  std::string bar_;
  std::chrono::steady_clock::time_point last_draw_{};
  std::mutex mutex_;
};

// The write end of the pipe the signal handler below reports through. This
// is anneal's one piece of global mutable state, and it has to be: a signal
// handler can reach nothing else, and a handler is needed because libraries
// (OpenBLAS) start threads before main() that would otherwise take the
// signal with its default action. Set only while a StopOnSignal exists.
std::atomic<int> g_signal_pipe{-1};
std::atomic<int> g_signals_seen{0};

extern "C" void on_stop_signal(int sig) {
  // Async-signal-safe only: a second signal exits at once (the store
  // survives that like any crash); the first wakes the waiting thread.
  if (g_signals_seen.fetch_add(1) > 0) _exit(128 + sig);
  int fd = g_signal_pipe.load();
  if (fd >= 0) {
    char byte = static_cast<char>(sig);
    ssize_t ignored = ::write(fd, &byte, 1);
    (void)ignored;
  }
}

}  // namespace

std::unique_ptr<TrainingReporter> make_train_reporter(LogFormat format) {
  return std::make_unique<TrainReporter>(format);
}

StopOnSignal::StopOnSignal() {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) throw failure("cannot create a pipe for signal handling");
  g_signal_pipe.store(pipe_[1]);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(sig, nullptr, &previous_[sig == SIGINT ? 0 : 1]);
    if (previous_[sig == SIGINT ? 0 : 1].sa_handler != SIG_IGN) sigaction(sig, &action, nullptr);
  }
  waiter_ = std::thread([this] {
    char byte = 0;
    while (::read(pipe_[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (byte != 0) source_.request_stop();  // 0: the destructor's wake-up
  });
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &previous_[0], nullptr);
  sigaction(SIGTERM, &previous_[1], nullptr);
  g_signal_pipe.store(-1);
  char zero = 0;
  ssize_t ignored = ::write(pipe_[1], &zero, 1);
  (void)ignored;
  waiter_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

std::string read_text_file(const std::string& path, const std::string& what, TextSource source) {
  // A directory opens and reads as nothing (an empty config, a hostfile
  // mpirun would reject only when the job starts): never a text file. A
  // pipe is one read once (`anneal train <(...)`, /dev/stdin), fine for
  // what is read now, not for a file that is read again later.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  const auto type = status.type();
  const bool ok = type == std::filesystem::file_type::regular ||
                  (source == TextSource::kReadOnce && (type == std::filesystem::file_type::fifo ||
                                                       type == std::filesystem::file_type::character));
  if (!ec && !ok)
    throw usage_error(what + " " + path + ": not a regular file" +
                      (type == std::filesystem::file_type::directory ? " (a directory)" : "") +
                      "; expected a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(what + " " + path + ": cannot read the file");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void add_compute_options(po::options_description& o, bool threads) {
  o.add_options()("device", po::value<std::string>()->value_name("DEVICE"),
                  "auto (default: a usable GPU, else the CPU), cpu or cuda");
  if (threads) o.add_options()("threads", po::value<int>()->value_name("N"), "threads (default: all cores)");
}

SettingSources flag_sources() {
  return {.overrides = "--set", .device = "--device", .warm_start = "--warm-start", .memory_budget = "--memory-budget"};
}

BackendOptions compute_options_of(const Invocation& inv) {
  BackendOptions options;
  options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (inv.args.count("device")) {
    try {
      options.device = parse_device(inv.args["device"].as<std::string>());
    } catch (const Error& e) {
      throw usage_error(std::string("--device: ") + e.what());
    }
  }
  if (inv.args.count("threads")) {
    options.threads = inv.args["threads"].as<int>();
    if (options.threads < 1 || options.threads > 1024)
      throw usage_error("--threads must be in 1..1024, not " + std::to_string(options.threads));
  }
  return options;
}

void note_auto_device(const BackendOptions& options) {
  if (options.device != Device::kAuto) return;
  for (const std::string& why : passed_over_by_auto())
    std::cerr << "device auto: running on the cpu (" << terminal_text(why) << ")\n";
}

}  // namespace anneal::cli

namespace anneal::cli {

int run_on_ranks(const Invocation& inv, const std::function<int(Communicator&)>& rank0) {
  std::unique_ptr<Communicator> comm = make_communicator();
  auto fail_job = [&](const std::string& message, int code) {
    const std::string line = "rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                             ": " + message;
    if (inv.global.log_format == LogFormat::kJson) std::cerr << json_log_line("error", line) << std::flush;
    else std::cerr << "anneal: " << terminal_text(line) << "\n" << std::flush;
    comm->abort(code);
  };
  try {
    if (comm->rank() == 0) return rank0(*comm);
    // Rank 0 decides when to stop (a signal reaches it too); a signal here
    // must not end this rank first.
    StopOnSignal ignore_stop;
    follow_training(*comm);
    return kExitOk;
  } catch (const Error& e) {
    fail_job(error_text(e), exit_code(e.kind()));
  } catch (const std::exception& e) {
    fail_job(std::string("internal error: ") + e.what(), kExitFailure);
  }
  return kExitFailure;  // not reached: fail_job ends the process
}

}  // namespace anneal::cli
