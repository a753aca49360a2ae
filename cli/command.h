// The command table: every subcommand's name, help text, options and entry
// point. `anneal --help`, `anneal COMMAND --help` (and later the man page)
// are generated from this one table, so they cannot drift apart.
#pragma once

#include <boost/program_options.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "anneal/data_check.h"
#include "anneal/store.h"
#include "output.h"

namespace anneal::cli {

namespace po = boost::program_options;

// Settings shared by every command, from the global flags.
struct GlobalOptions {
  std::filesystem::path store;  // resolved: --store, $ANNEAL_HOME, $XDG_DATA_HOME/anneal
  bool json = false;
  LogFormat log_format = LogFormat::kText;  // --log-format
  StoreAccess access;  // the audit actor (this command line) and --key-file, for every Store::open
  // The umask anneal was started with (main() sets 077 for the store):
  // what the files it writes outside the store follow (outside_file_mode).
  unsigned user_umask = 022;
};

// The mode of a file written where the user asks (a report, an ONNX export):
// 0666 under the user's umask, as any program's output, but owner-only
// (0600 at most) when the store is encrypted, since what is derived from
// an encrypted store's data is as private as the store.
unsigned outside_file_mode(const GlobalOptions& global);

struct Invocation {
  GlobalOptions global;
  po::variables_map args;
};

struct Command {
  std::string name;       // "data import"
  std::string synopsis;   // "NAME FILE [options]"
  std::string summary;    // one line for the command list
  std::string details;    // paragraphs for COMMAND --help and the man page
  std::function<void(po::options_description&)> add_options;
  std::vector<std::string> positional;  // names of positional arguments in order; "..." suffix: many
  std::function<int(const Invocation&)> run;
  // Internal (the worker's child entry point): left out of --help, the man
  // page and completion.
  bool hidden = false;
};

// All commands, in the order --help lists them.
const std::vector<Command>& commands();

// Command groups: defined in data_commands.cc (init, data, fsck, gc).
void add_store_commands(std::vector<Command>& out);
// The data-check thresholds as flags (--max-psi, --max-ks,
// --max-missing-increase, --max-unseen), for data check and retrain, and
// their values over the defaults (kUsage for a negative or non-finite one).
void add_drift_options(po::options_description& o);
DriftThresholds drift_thresholds_of(const Invocation& inv);
// Defined in crypto_commands.cc (encrypt, rekey), and `init --encrypt`.
void add_crypto_commands(std::vector<Command>& out);
int run_init_encrypted(const Invocation& inv);
// Defined in train_commands.cc (train, runs, model, eval, predict).
void add_train_commands(std::vector<Command>& out);
// Defined in quantize_commands.cc (quantize, prune, bench).
void add_quantize_commands(std::vector<Command>& out);
// Defined in job_commands.cc (submit, worker, jobs, retrain, metrics, and
// model alias/promote/rollback).
void add_job_commands(std::vector<Command>& out);
// Defined in audit_commands.cc (audit log, audit verify).
void add_audit_commands(std::vector<Command>& out);
// Defined in serve_commands.cc (serve).
void add_serve_commands(std::vector<Command>& out);

}  // namespace anneal::cli
