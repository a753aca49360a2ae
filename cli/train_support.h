// What the commands that train share: the training progress display, the
// SIGINT/SIGTERM stop request, and reading a config file.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>

#include "anneal/device.h"
#include "anneal/runs.h"
#include "command.h"
#include "output.h"

namespace anneal::cli {

// Training output on stderr. Text on a terminal: a progress bar (epoch,
// step, loss, samples/s, ETA) redrawn in place, each epoch's line above it;
// text elsewhere: just the lines, one per epoch; JSON: each line as a JSON
// log line.
std::unique_ptr<TrainingReporter> make_train_reporter(LogFormat format);

// Turns SIGINT/SIGTERM into a stop request for the training loop, which
// checkpoints and records the run cancelled. A second signal exits at once.
// A signal ignored when anneal started (nohup, a background job of a
// script) stays ignored. One at a time per process.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  std::stop_token token() const { return source_.get_token(); }

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction previous_[2] {};
  std::stop_source source_;
  std::thread waiter_;
};

// A training command under `mpirun -np N` with N > 1 (train, job-exec):
// rank 0 runs `rank0` with the world communicator, the other ranks
// follow_training() (they open no store and read no file). A rank that
// fails prints "anneal: rank R of N: ERROR" and ends the job with the
// error's exit code: the other ranks would wait on it for ever.
int run_on_ranks(const Invocation& inv, const std::function<int(Communicator&)>& rank0);

// The whole file; kUsage naming `what` ("CONFIG path: cannot read the file").
// How a text file given on the command line is used: read once, now (a
// config: a pipe will do), or read again later by another program (a
// hostfile, which mpirun opens when the job starts: a regular file only).
enum class TextSource { kReadOnce, kReadAgainLater };
std::string read_text_file(const std::string& path, const std::string& what,
                           TextSource source = TextSource::kReadOnce);

// The flags that give the settings beside a config file (--set, --device,
// --warm-start, --memory-budget), for messages to name as the user typed.
SettingSources flag_sources();

// "42s", "3m5s", "1h2m".
std::string duration_text(double seconds);

// --device (and, with `threads`, --threads): which backend a command
// computes on. Shared by every command that runs a network.
void add_compute_options(po::options_description& o, bool threads);
// The backend the flags ask for: --device (default auto), --threads (default:
// every core). kUsage naming the flag for a bad value.
BackendOptions compute_options_of(const Invocation& inv);
// Says on stderr, one line per device, why `auto` runs on the CPU here
// (nothing when options name a device, or auto gets a GPU).
void note_auto_device(const BackendOptions& options);

}  // namespace anneal::cli
