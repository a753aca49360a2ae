// union_length, the arithmetic behind bench/cuda/train.sh's kernel busy time
// (libanneal-kernel-time.so): time covered by at least one interval, with
// overlapping, nested and touching intervals counted once and empty ones not
// at all, whatever the input order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "../../bench/cuda/intervals.h"

namespace anneal::bench {
namespace {

std::uint64_t length(std::vector<Interval> v) { return union_length(v); }

TEST(KernelTimeIntervals, NoneCoverNothing) { EXPECT_EQ(length({}), 0u); }

TEST(KernelTimeIntervals, DisjointIntervalsAdd) { EXPECT_EQ(length({{20, 25}, {0, 10}, {100, 101}}), 16u); }

TEST(KernelTimeIntervals, OverlapsAndNestingCountOnce) {
  EXPECT_EQ(length({{0, 10}, {5, 15}, {6, 7}}), 15u);
  EXPECT_EQ(length({{0, 100}, {10, 20}, {30, 40}}), 100u);
  // A long interval first, then one starting inside it that ends earlier,
  // then one past both: the run must keep the longest end.
  EXPECT_EQ(length({{0, 50}, {10, 20}, {40, 60}, {70, 80}}), 70u);
}

TEST(KernelTimeIntervals, TouchingIntervalsJoin) { EXPECT_EQ(length({{10, 20}, {0, 10}}), 20u); }

TEST(KernelTimeIntervals, EmptyAndReversedIntervalsCoverNothing) {
  EXPECT_EQ(length({{30, 30}, {40, 35}}), 0u);
  EXPECT_EQ(length({{5, 5}, {0, 10}, {50, 45}, {20, 30}}), 20u);
}

TEST(KernelTimeIntervals, LargeTimestampsDoNotOverflow) {
  const std::uint64_t t = 1'700'000'000'000'000'000ull;  // CUPTI's ns since the epoch
  EXPECT_EQ(length({{t, t + 3}, {t + 1, t + 5}, {t + 9, t + 10}}), 6u);
}

// Random intervals on a small timeline against a count of the covered
// nanoseconds one by one.
TEST(KernelTimeIntervals, MatchesCoveredNanosecondsCountedOneByOne) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<Interval> v(rng() % 12);
    std::vector<bool> covered(70, false);
    for (Interval& i : v) {
      i.start = rng() % 60;
      const std::uint64_t span = rng() % 8;
      i.end = rng() % 6 == 0 ? i.start - std::min(i.start, span) : i.start + span;  // now and then reversed
      for (std::uint64_t t = i.start; t < i.end; ++t) covered[t] = true;
    }
    std::uint64_t expected = 0;
    for (bool c : covered) expected += c;
    ASSERT_EQ(union_length(v), expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace anneal::bench
