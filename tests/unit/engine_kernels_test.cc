// The CPU backend's hand-written kernels against plain reference loops.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/cpu_kernels.h"

namespace anneal::cpu {
namespace {

// Every length from empty through several full vectors and every tail,
// unaligned offsets, and both flips: what im2col asks of it.
TEST(GatherDwords, MatchesByteCopiesForEveryLengthAndTail) {
  std::mt19937 rng(7);
  std::vector<std::uint8_t> src(301);
  for (auto& b : src) b = std::uint8_t(rng());
  for (const std::uint32_t flip : {0u, 0x80808080u}) {
    for (std::int64_t n = 0; n <= 50; ++n) {
      std::vector<std::int32_t> offsets(static_cast<std::size_t>(n));
      for (auto& o : offsets) o = std::int32_t(rng() % (src.size() - 3));
      // One guard byte past the end catches a store beyond 4·n bytes.
      std::vector<std::uint8_t> got(static_cast<std::size_t>(4 * n + 1), 0xA5);
      gather_dwords(src.data(), offsets.data(), n, flip, got.data());
      for (std::int64_t i = 0; i < n; ++i)
        for (int b = 0; b < 4; ++b)
          ASSERT_EQ(got[std::size_t(4 * i + b)], std::uint8_t(src[std::size_t(offsets[std::size_t(i)] + b)] ^ (flip >> (8 * b))))
              << "n " << n << " row " << i << " byte " << b;
      EXPECT_EQ(got.back(), 0xA5) << "wrote past 4·n bytes for n " << n;
    }
  }
}

}  // namespace
}  // namespace anneal::cpu
