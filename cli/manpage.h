// The man page anneal(1) and the bash completion script, generated from the
// command table and the very text `anneal --help` prints, so that neither can
// drift from the binary. The build runs `anneal --help-man` and
// `anneal --completion bash` (packaging/CMakeLists.txt) and installs the output.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "command.h"

namespace anneal::cli {

// Everything main.cc prints for --help besides the command table itself.
struct HelpText {
  std::string usage;        // "anneal [--store DIR] [--json] COMMAND [ARGS...]"
  std::string description;  // one sentence: what anneal is
  po::options_description global;
  std::function<po::options_description(const Command&)> command_options;
  std::string exit_codes;   // "Exit codes:\n  0   success...\n", as --help prints it
};

// Writes anneal(1) in man(7) roff: every command with its synopsis, summary,
// details and options, the global options and the exit codes.
void write_manpage(std::ostream& out, const HelpText& help);

// Writes a bash completion script (for bash-completion's loader) that
// completes command words, each command's options, and file names where a
// command or option takes a file.
void write_bash_completion(std::ostream& out, const HelpText& help);

}  // namespace anneal::cli
