// Reporter: the one channel from below cli/ to the person at the terminal.
//
// Library code never writes to stdout or stderr itself; it calls a Reporter
// handed in by the caller. cli/ implements it (plain lines, a progress bar on
// a terminal, JSON log lines); tests use NullReporter or a recording one.
// Implementations must be safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "anneal/error.h"

namespace anneal {

class Reporter {
 public:
  virtual ~Reporter() = default;
  // A human-readable line about what is happening ("imported 3 chunks").
  virtual void note(std::string_view message) = 0;
  // A line that ends with what the user can do about it (error.h): by
  // default `message` and the remedy in words; cli/ names the command.
  virtual void suggest(std::string_view message, Remedy remedy, const std::string& argument = "") {
    note(std::string(message) + remedy_text(remedy, argument));
  }
  // Progress of a long stage: `done` of `total` units (total 0: unknown).
  virtual void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) = 0;
};

class NullReporter final : public Reporter {
 public:
  void note(std::string_view) override {}
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {}
};

}  // namespace anneal
