// Output helpers for cli/: plain-text tables, byte counts, and the Reporter
// that shows library progress on the terminal.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/report.h"

namespace anneal::cli {

// Prints rows as left-aligned columns separated by two spaces.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

std::string human_bytes(std::uint64_t bytes);  // "1.5 MiB"
std::string format_double(double value, int significant = 6);
std::string join(const std::vector<std::string>& parts, const std::string& sep);

// Prints one JSON document (pretty) to stdout.
void print_json(const nlohmann::json& document);

// Notes go to stderr, and only when stderr is a terminal, so scripts and cron
// see nothing but the command's result.
class TerminalReporter final : public Reporter {
 public:
  TerminalReporter();
  void note(std::string_view message) override;
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override;

 private:
  bool enabled_;
  std::mutex mutex_;
};

}  // namespace anneal::cli
