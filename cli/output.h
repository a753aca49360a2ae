// Output helpers for cli/: plain-text tables, byte counts, and the Reporter
// that shows library progress on the terminal.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/report.h"

namespace anneal::cli {

// `text` made safe to show on a terminal: every byte that a terminal would
// act on rather than show is written as an escape, so that a string from a
// user or a file (a file name, a column name, a recorded command line, a job
// log) cannot move the cursor, erase what was printed or retitle the window,
// and one record cannot pose as two. Escaped: C0 controls (\n, \r and \t
// as such, the rest as \xNN: ESC is \x1b), DEL (\x7f), C1 controls (U+0080
// to U+009F, each byte as \xNN), the bidirectional overrides and isolates
// (U+202A-U+202E, U+2066-U+2069, which reorder what follows them) and every
// byte that is not part of valid UTF-8. Everything else, non-ASCII letters
// included, passes unchanged; so does a backslash (messages quote '\t' and
// the like), so an escape is told from a literal by context alone. For text
// output only: JSON output escapes by its own rules and stays exact.
std::string terminal_text(std::string_view text);

// Prints rows as left-aligned columns separated by two spaces. Every cell
// goes through terminal_text (a table's cells are data: names, paths).
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
  // The remedy as the command that does it (error_text.h).
  void suggest(std::string_view message, Remedy remedy, const std::string& argument) override;
  void progress(std::string_view stage, std::uint64_t done, std::uint64_t total) override;

 private:
  LogFormat format_;
  bool enabled_;
  std::mutex mutex_;
};

}  // namespace anneal::cli
