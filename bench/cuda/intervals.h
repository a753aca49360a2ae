// The interval arithmetic of libanneal-kernel-time.so (kernel_time.cc), kept
// free of CUDA so tests/unit/kernel_time_intervals_test.cc can check it on a
// machine without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace anneal::bench {

// [start, end) in nanoseconds on CUPTI's clock.
struct Interval {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
};

// The length of the union of `intervals`: time covered by at least one of
// them, so work running concurrently on several streams counts once. Empty
// intervals (end <= start) cover nothing. Sorts `intervals` by start.
inline std::uint64_t union_length(std::vector<Interval>& intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::uint64_t total = 0;
  bool open = false;
  Interval run;  // the merged run being extended
  for (const Interval& i : intervals) {
    if (i.end <= i.start) continue;
    if (open && i.start <= run.end) {
      run.end = std::max(run.end, i.end);
      continue;
    }
    if (open) total += run.end - run.start;
    run = i;
    open = true;
  }
  if (open) total += run.end - run.start;
  return total;
}

}  // namespace anneal::bench
