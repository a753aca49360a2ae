#include "jobs/job_log.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

namespace anneal {
namespace {

std::string_view trim_end(std::string_view line) {
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
  return line;
}

std::string_view trim_start(std::string_view line) {
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
  return line;
}

bool meaningful(std::string_view line) {
  return std::any_of(line.begin(), line.end(), [](unsigned char c) { return std::isalnum(c) != 0; });
}

// Punctuation and whitespace only, and not empty: the rules Open MPI draws
// above and below each help message.
bool rule(std::string_view line) {
  line = trim_start(line);
  return line.size() >= 3 && std::all_of(line.begin(), line.end(), [](unsigned char c) {
           return std::ispunct(c) != 0 || std::isspace(c) != 0;
         });
}

// The worker's header of an attempt (worker.cc writes it before each spawn).
bool attempt_header(std::string_view line) {
  return line.starts_with("--- job-") && line.find(" attempt ") != std::string_view::npos;
}

// Open MPI's aggregated-help notice, "[host:12345] 1 more process has sent
// help message ...", and mpirun's own remarks outside banners.
bool mpirun_notice(std::string_view line) {
  line = trim_start(line);
  if (line.starts_with("mpirun ") || line.starts_with("mpiexec ") || line.starts_with("prterun ")) return true;
  if (!line.starts_with("[")) return false;
  const std::size_t close = line.find(']');
  return close != std::string_view::npos && line.substr(0, close).find(':') != std::string_view::npos;
}

// The first line of a banner mpirun prints whenever a rank exits non-zero:
// it says no more than the exit status the worker records anyway. Other
// banners say what went wrong (a rank killed by a signal, an executable
// mpirun could not start, a host it could not reach).
bool generic_banner(std::string_view first_line) {
  return first_line.starts_with("Primary job") ||
         first_line.starts_with("mpirun detected that one or more processes exited with non-zero status") ||
         first_line.starts_with("MPI_ABORT was invoked");
}

// The message of a JSON log line at level "error" (json_log_line), if it is one.
std::optional<std::string> json_error(std::string_view line) {
  if (!line.starts_with("{")) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto level = j.find("level");
  auto message = j.find("message");
  if (level == j.end() || message == j.end() || !level->is_string() || !message->is_string() || *level != "error")
    return std::nullopt;
  return message->get<std::string>();
}

}  // namespace

std::string job_failure_line(std::string_view log) {
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos < log.size();) {
    std::size_t end = log.find('\n', pos);
    if (end == std::string_view::npos) end = log.size();
    std::string_view line = trim_end(log.substr(pos, end - pos));
    if (attempt_header(line)) lines.clear();  // an earlier attempt's lines say nothing of this one
    else lines.push_back(line);
    pos = end + 1;
  }
  for (std::string_view line : lines) {
    if (line.starts_with("anneal: ") && meaningful(line.substr(8))) return std::string(line);
    if (auto message = json_error(line); message && meaningful(*message)) return *message;
  }
  // The rest: what lies outside mpirun's banners, and each banner's first
  // meaningful line (its message starts there; the lines after continue it).
  std::optional<std::string_view> outside, specific_banner, any_banner;
  bool banner = false, banner_started = false;
  for (std::string_view line : lines) {
    if (rule(line)) {
      banner = !banner;
      banner_started = false;
      continue;
    }
    if (!meaningful(line)) continue;
    line = trim_start(line);
    if (!banner) {
      if (!outside && !mpirun_notice(line)) outside = line;
      continue;
    }
    if (banner_started) continue;
    banner_started = true;
    if (!any_banner) any_banner = line;
    if (!specific_banner && !generic_banner(line)) specific_banner = line;
  }
  for (const auto& pick : {specific_banner, outside, any_banner})
    if (pick) return std::string(*pick);
  return "";
}

}  // namespace anneal
