// engine/random.h against answers computed outside anneal (SplitMix64 as
// published; the dropout rule as docs/ENGINE.md states it): the shuffles,
// initial weights and dropout masks of every run recorded so far depend on
// these bits, on every device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/random.h"

namespace anneal::engine {
namespace {

TEST(SplitMix64, GivesThePublishedSequence) {
  // SplitMix64 seeded with 0: its first output is the reference value.
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafull);
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.next(), mix64(0x9e3779b97f4a7c15ull));
}

// Keep/drop of the first 32 elements for p = 0.25, seed 42, stream 7,
// computed from the rule (key = mix64(seed ^ mix64(stream)), element i
// kept when the high half of mix64(key + i) is at least p * 2^32).
TEST(DropoutRule, KeepsAndScalesTheElementsTheRuleSays) {
  const DropoutRule rule = DropoutRule::of(0.25f, 42, 7);
  EXPECT_EQ(rule.key, 0x6eab8625df268fbcull);
  EXPECT_EQ(rule.threshold, 1073741824u);
  EXPECT_FLOAT_EQ(rule.scale, 1.0f / 0.75f);
  std::string kept;
  for (std::uint64_t i = 0; i < 32; ++i) {
    const float f = rule.factor(i);
    ASSERT_TRUE(f == 0.0f || f == rule.scale) << i;
    kept += f == 0.0f ? '0' : '1';
  }
  EXPECT_EQ(kept, "01101111101011101011010010111111");
  // p = 1 drops everything; p = 0 keeps everything at scale 1.
  EXPECT_EQ(DropoutRule::of(1.0f, 42, 7).factor(3), 0.0f);
  EXPECT_EQ(DropoutRule::of(0.0f, 42, 7).factor(3), 1.0f);
}

}  // namespace
}  // namespace anneal::engine
