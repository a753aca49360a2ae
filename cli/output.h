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

// How commands log on stderr: text for people, or (--log-format json) one
// JSON object per line for a log collector: {"time", "level", "message"}.
enum class LogFormat { kText, kJson };
LogFormat parse_log_format(const std::string& text);  // "text" | "json"; kUsage otherwise

// One JSON log line, newline included.
std::string json_log_line(std::string_view level, std::string_view message);

// Text: notes go to stderr, and only when stderr is a terminal, so scripts
// and cron see nothing but the command's result. JSON: every note is a log
// line on stderr, terminal or not; progress is not logged.
class TerminalReporter final : public Reporter {
 public:
  explicit TerminalReporter(LogFormat format = LogFormat::kText);
  void note(std::string_view message) override;
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override;

 private:
  LogFormat format_;
  bool enabled_;
  std::mutex mutex_;
};

}  // namespace anneal::cli
