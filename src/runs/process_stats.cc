#include "runs/process_stats.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace anneal::runs {

double process_uptime_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces: count
  // fields from the last ')'. The first after it is field 3 (the state);
  // starttime is field 22, the 20th.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 0; i < 19 && fields >> field; ++i) {}
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return 0;
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (ticks_per_second <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const double since_boot = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
  const double started = static_cast<double>(start_ticks) / static_cast<double>(ticks_per_second);
  return since_boot > started ? since_boot - started : 0;
}

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace anneal::runs
