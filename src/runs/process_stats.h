// What the data-path figures of a run are measured with: how long this
// process has existed and the most memory it has held. Internal to src/runs/.
#pragma once

#include <cstdint>

namespace anneal::runs {

// Seconds since the kernel started this process (exec, dynamic loading and
// static initialization included), from /proc/self/stat's start time against
// CLOCK_BOOTTIME: the kernel counts the start in clock ticks (10 ms here), so
// the figure is that coarse. 0 where /proc cannot be read.
double process_uptime_seconds();

// The process's peak resident set size in bytes (getrusage's ru_maxrss,
// which Linux keeps in KiB): the high-water mark, never lowered.
std::uint64_t peak_rss_bytes();

}  // namespace anneal::runs
