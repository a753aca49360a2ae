#include "output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "anneal/error.h"
#include "error_text.h"

namespace anneal::cli {

namespace {

void append_escaped_byte(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

// The length of the valid UTF-8 sequence at text[i] (shortest form, no
// surrogates, at most U+10FFFF), 0 when there is none, and its code point.
std::size_t utf8_sequence(std::string_view text, std::size_t i, char32_t& code) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  char32_t min = 0;
  if (lead >= 0xc2 && lead <= 0xdf) length = 2, min = 0x80, code = lead & 0x1f;
  else if (lead >= 0xe0 && lead <= 0xef) length = 3, min = 0x800, code = lead & 0x0f;
  else if (lead >= 0xf0 && lead <= 0xf4) length = 4, min = 0x10000, code = lead & 0x07;
  else return 0;
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

}  // namespace

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
      continue;
    }
    char32_t code = 0;
    const std::size_t length = c >= 0x80 ? utf8_sequence(text, i, code) : 0;
    const bool shown = length > 0 && !(code >= 0x80 && code <= 0x9f) && !(code >= 0x202a && code <= 0x202e) &&
                       !(code >= 0x2066 && code <= 0x2069);
    if (shown) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    // A control, or a byte that starts no valid sequence: each byte of it
    // escaped (a C1 control or an override, whole; a stray byte, alone).
    const std::size_t n = length > 0 ? length : 1;
    for (std::size_t k = 0; k < n; ++k) append_escaped_byte(out, static_cast<unsigned char>(text[i + k]));
    i += n;
  }
  return out;
}

void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& raw_rows) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& raw : raw_rows) {
    std::vector<std::string>& row = rows.emplace_back();
    for (const auto& cell : raw) row.push_back(terminal_text(cell));
  }
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

// JSON carries text as UTF-8 only: a byte that is not (a file name in
// Latin-1, recorded in the audit log) is printed as U+FFFD rather than
// failing the whole document; the text output shows it escaped, exactly.
void print_json(const nlohmann::json& document) {
  std::cout << document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

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
  else std::cerr << terminal_text(message) << "\n";
}

void TerminalReporter::suggest(std::string_view message, Remedy remedy, const std::string& argument) {
  note(std::string(message) + remedy_command(remedy, argument));
}

void TerminalReporter::progress(std::string_view stage, std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || format_ == LogFormat::kJson) return;
  std::lock_guard lock(mutex_);
  std::cerr << "\r" << terminal_text(stage) << " " << done;
  if (total) std::cerr << "/" << total;
  std::cerr << (done == total ? "\n" : "") << std::flush;
}

}  // namespace anneal::cli
