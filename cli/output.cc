#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "anneal/error.h"

namespace anneal::cli {

void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
}

std::string human_bytes(std::uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream out;
  if (unit == 0) out << bytes << " B";
  else out << std::fixed << std::setprecision(1) << value << " " << kUnits[unit];
  return out.str();
}

std::string format_double(double value, int significant) {
  std::ostringstream out;
  out << std::setprecision(significant) << value;
  return out.str();
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

void print_json(const nlohmann::json& document) { std::cout << document.dump(2) << "\n"; }

LogFormat parse_log_format(const std::string& text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  throw usage_error("--log-format '" + text + "': expected text or json");
}

std::string json_log_line(std::string_view level, std::string_view message) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char time[32];
  std::strftime(time, sizeof time, "%Y-%m-%dT%H:%M:%SZ", &utc);
  nlohmann::json line = {{"time", time}, {"level", level}, {"message", message}, {"pid", ::getpid()}};
  // Replace, not throw, on bad UTF-8 (a file name from the user, say).
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

TerminalReporter::TerminalReporter(LogFormat format)
    : format_(format), enabled_(format == LogFormat::kJson || ::isatty(STDERR_FILENO) == 1) {}

void TerminalReporter::note(std::string_view message) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (format_ == LogFormat::kJson) std::cerr << json_log_line("info", message) << std::flush;
  else std::cerr << message << "\n";
}

void TerminalReporter::progress(std::string_view stage, std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || format_ == LogFormat::kJson) return;
  std::lock_guard lock(mutex_);
  std::cerr << "\r" << stage << " " << done;
  if (total) std::cerr << "/" << total;
  std::cerr << (done == total ? "\n" : "") << std::flush;
}

}  // namespace anneal::cli
