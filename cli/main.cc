// anneal's entry point: global flags, command dispatch, help, and the one
// place where errors become messages and exit codes.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "anneal/audit.h"
#include "anneal/communicator.h"
#include "anneal/config.h"
#include "anneal/encryption.h"
#include "anneal/error.h"
#include "anneal/linear.h"
#include "anneal/spelling.h"
#include "anneal/version.h"
#include "command.h"
#include "error_text.h"
#include "manpage.h"

namespace anneal::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage = "anneal [--store DIR] [--key-file FILE] [--json] COMMAND [ARGS...]";
constexpr const char* kDescription =
    "Train machine-learning models on one server, from a versioned local store.";
// What each exit code means to someone running anneal, as --help and the
// man page list them. The codes are error.h's; the static_assert below
// keeps this list to exactly that table.
struct ExitCodeHelp {
  int code;
  const char* meaning;
};
constexpr ExitCodeHelp kExitCodeHelp[] = {
    {kExitOk, "success (also: nothing to do, e.g. an import of identical content)"},
    {kExitFailure, "failure (I/O, a damaged store, something not found)"},
    {kExitUsage, "bad command line: unknown command or flag, bad flag value"},
    {kExitDataCheckFailed, "data check: a check failed (the table and --json name it)"},
    {kExitGateRefused, "retrain / model promote: trained, but the gate refused the promotion"},
    {kExitBadData, "bad input data (the message gives file:line:column)"},
    {kExitBusy, "busy: a lock is held by another anneal process"},
    {kExitInterrupted, "training interrupted (SIGINT/SIGTERM) after writing a checkpoint"},
};

constexpr bool describes_every_exit_code() {
  if (std::size(kExitCodeHelp) != std::size(kExitCodes)) return false;
  for (std::size_t i = 0; i < std::size(kExitCodes); ++i)
    if (kExitCodeHelp[i].code != kExitCodes[i]) return false;
  return true;
}
static_assert(describes_every_exit_code(), "kExitCodeHelp must list error.h's kExitCodes, in order");

// "Exit codes:\n  0   success ...\n", the block --help ends with.
std::string exit_codes_help() {
  std::string out = "Exit codes:\n";
  for (const ExitCodeHelp& e : kExitCodeHelp) {
    const std::string code = std::to_string(e.code);
    out += "  " + code + std::string(code.size() < 4 ? 4 - code.size() : 1, ' ') + e.meaning + "\n";
  }
  return out;
}

po::options_description global_options() {
  po::options_description global("Global options");
  global.add_options()
      ("store", po::value<std::string>()->value_name("DIR"),
       "the store directory (default: $ANNEAL_HOME, else $XDG_DATA_HOME/anneal, "
       "else ~/.local/share/anneal)")
      ("key-file", po::value<std::string>()->value_name("FILE"),
       "the key of an encrypted store (default: $ANNEAL_KEY_FILE, else the systemd credential "
       "anneal-key); an owner-only file of 64 hex digits")
      ("json", po::bool_switch(), "print one JSON document instead of text")
      ("log-format", po::value<std::string>()->value_name("FORMAT")->default_value("text"),
       "how to log on stderr: text, or json (one JSON object per line)")
      ("help,h", po::bool_switch(), "show help (anneal COMMAND --help for a command)")
      ("version", po::bool_switch(), "show the version and the commit it was built from");
  return global;
}

fs::path default_store() {
  if (const char* home = std::getenv("ANNEAL_HOME"); home && *home) return home;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return fs::path(xdg) / "anneal";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".local" / "share" / "anneal";
  throw usage_error("--store: no store given and neither $ANNEAL_HOME nor $HOME is set");
}

void print_usage(std::ostream& out) {
  out << "usage: " << kUsage << "\n\n" << kDescription << "\n\nCommands:\n";
  std::vector<std::vector<std::string>> rows;
  std::size_t width = 0;
  for (const auto& c : commands()) width = std::max(width, c.name.size());
  for (const auto& c : commands())
    if (!c.hidden) out << "  " << c.name << std::string(width - c.name.size() + 2, ' ') << c.summary << "\n";
  out << "\n" << global_options() << "\n" << exit_codes_help();
}

po::options_description command_options(const Command& command) {
  po::options_description options("Options");
  if (command.add_options) command.add_options(options);
  options.add_options()("json", po::bool_switch(), "print one JSON document instead of text")
      ("store", po::value<std::string>()->value_name("DIR"), "the store directory")
      ("key-file", po::value<std::string>()->value_name("FILE"), "the key of an encrypted store")
      ("help,h", po::bool_switch(), "show this help");
  return options;
}

void print_command_help(std::ostream& out, const Command& command) {
  out << "usage: anneal " << command.name << " " << command.synopsis << "\n\n"
      << command.summary << "\n";
  if (!command.details.empty()) out << "\n" << command.details << "\n";
  out << "\n" << command_options(command) << "\n" << exit_codes_help();
}

// Finds the command named by the leading words of `words` ("data import").
const Command* find_command(const std::vector<std::string>& words, std::size_t& used) {
  const Command* best = nullptr;
  for (const auto& c : commands()) {
    std::istringstream parts(c.name);
    std::string part;
    std::size_t n = 0;
    bool match = true;
    while (parts >> part) {
      if (n >= words.size() || words[n] != part) {
        match = false;
        break;
      }
      ++n;
    }
    if (match && (!best || n > used)) {
      best = &c;
      used = n;
    }
  }
  return best;
}

[[noreturn]] void unknown_command(const std::vector<std::string>& words) {
  std::string given = words.empty() ? "" : words[0];
  if (words.size() > 1) given += " " + words[1];
  std::vector<std::string_view> names;
  for (const auto& c : commands())
    if (!c.hidden) names.push_back(c.name);
  // The two words as a two-word command ("data lst"), else the first as a
  // one-word command ("trian FILE").
  std::string hint = did_you_mean(given, names);
  if (hint.empty() && words.size() > 1) hint = did_you_mean(words[0], names);
  throw usage_error("unknown command '" + given + "'" + hint + " (see 'anneal --help')");
}

int run(int argc, char** argv, unsigned user_umask) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Hidden, for the build: the man page and the bash completion are printed
  // from the same text as --help (manpage.cc), so they cannot drift from it.
  if (args == std::vector<std::string>{"--help-man"} ||
      args == std::vector<std::string>{"--completion", "bash"}) {
    HelpText help{kUsage, kDescription, global_options(), command_options, exit_codes_help()};
    if (args[0] == "--help-man") write_manpage(std::cout, help);
    else write_bash_completion(std::cout, help);
    return kExitOk;
  }
  // Global flags come before the command, as in git; --json and --store are
  // also accepted after it.
  std::size_t first_word = 0;
  while (first_word < args.size() && args[first_word].starts_with("-")) {
    if (args[first_word] == "--store" || args[first_word] == "--log-format" || args[first_word] == "--key-file")
      ++first_word;
    ++first_word;
  }
  po::variables_map global;
  {
    std::vector<std::string> leading(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(
                                                        std::min(first_word, args.size())));
    po::store(po::command_line_parser(leading).options(global_options()).run(), global);
  }
  if (global["version"].as<bool>()) {
    std::cout << "anneal " << version() << " (commit " << git_commit() << ")\n";
    return kExitOk;
  }
  std::vector<std::string> words(args.begin() + static_cast<std::ptrdiff_t>(std::min(first_word, args.size())),
                                 args.end());
  if (words.empty()) {
    print_usage(global["help"].as<bool>() ? std::cout : std::cerr);
    return global["help"].as<bool>() ? kExitOk : kExitUsage;
  }
  std::size_t used = 0;
  const Command* command = find_command(words, used);
  if (!command) unknown_command(words);

  std::vector<std::string> rest(words.begin() + static_cast<std::ptrdiff_t>(used), words.end());
  po::options_description options = command_options(*command);
  po::positional_options_description positional;
  po::options_description hidden;
  for (const auto& name : command->positional) {
    bool many = name.ends_with("...");
    std::string key = many ? name.substr(0, name.size() - 3) : name;
    if (many) {
      hidden.add_options()(key.c_str(), po::value<std::vector<std::string>>());
      positional.add(key.c_str(), -1);
    } else {
      hidden.add_options()(key.c_str(), po::value<std::string>());
      positional.add(key.c_str(), 1);
    }
  }
  po::options_description all;
  all.add(options).add(hidden);
  Invocation invocation;
  po::store(po::command_line_parser(rest).options(all).positional(positional).run(), invocation.args);
  if (global["help"].as<bool>() || invocation.args["help"].as<bool>()) {
    print_command_help(std::cout, *command);
    return kExitOk;
  }
  po::notify(invocation.args);
  for (const auto& name : command->positional)
    if (!name.ends_with("...") && !invocation.args.count(name))
      throw usage_error("anneal " + command->name + ": missing argument " + name + " (usage: anneal " +
                        command->name + " " + command->synopsis + ")");

  invocation.global.json = global["json"].as<bool>() || invocation.args["json"].as<bool>();
  invocation.global.log_format = parse_log_format(global["log-format"].as<std::string>());
  invocation.global.user_umask = user_umask;
  if (invocation.args.count("store")) invocation.global.store = invocation.args["store"].as<std::string>();
  else if (global.count("store")) invocation.global.store = global["store"].as<std::string>();
  else invocation.global.store = default_store();
  // Every store this command opens records its changes as made by this
  // user on this host running this command line, and reads its key from
  // --key-file when given.
  StoreAccess& access = invocation.global.access;
  access.actor.command = audit_command_line(std::vector<std::string>(argv, argv + argc));
  access.key_file_source = "--key-file";
  if (invocation.args.count("key-file")) access.key_file = fs::absolute(invocation.args["key-file"].as<std::string>());
  else if (global.count("key-file")) access.key_file = fs::absolute(global["key-file"].as<std::string>());
  // Under mpirun every rank would run the command on the store at once (N
  // runs training side by side, N imports): refused, before anything is
  // touched, except for train (and job-exec, a queued train the worker
  // started through mpirun), whose ranks train one run together with rank 0
  // alone on the store.
  if (const int ranks = mpi_world_size(); ranks > 1 && command->name != "train" && command->name != "job-exec")
    throw usage_error("anneal " + command->name + " under mpirun with " + std::to_string(ranks) +
                      " ranks: only 'anneal train' runs across ranks; run it without mpirun (or with -np 1)");
  return command->run(invocation);
}

}  // namespace
}  // namespace anneal::cli

namespace {

// Whether the global flags ask for JSON logs: read straight from argv, since
// an error may come before (or from) the parse.
bool json_logs(int argc, char** argv) {
  for (int i = 1; i < argc && argv[i][0] == '-'; ++i) {
    const std::string_view a = argv[i];
    if (a == "--log-format=json" || (a == "--log-format" && i + 1 < argc && std::string_view(argv[i + 1]) == "json"))
      return true;
  }
  return false;
}

int report_error(bool json, const std::string& message, int code) {
  if (json) std::cerr << anneal::cli::json_log_line("error", message) << std::flush;
  // The message quotes paths, names and values as given: shown escaped.
  else std::cerr << "anneal: " << anneal::cli::terminal_text(message) << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything anneal creates in a store is owner-only. The user's own
  // umask still governs what anneal writes outside it (reports, exports:
  // GlobalOptions::user_umask).
  const mode_t user_umask = ::umask(077);
  anneal::run_blas_on_calling_threads();
  const bool json = json_logs(argc, argv);
  try {
    return anneal::cli::run(argc, argv, static_cast<unsigned>(user_umask));
  } catch (const anneal::Error& e) {
    return report_error(json, anneal::cli::error_text(e), anneal::exit_code(e.kind()));
  } catch (boost::program_options::error& e) {
    return report_error(json, anneal::option_error_text(e) + " (see 'anneal --help')", anneal::kExitUsage);
  } catch (const std::exception& e) {
    return report_error(json, std::string("internal error: ") + e.what(), anneal::kExitFailure);
  }
}
