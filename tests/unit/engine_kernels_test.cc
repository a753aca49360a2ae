// The CPU backend's hand-written kernels against plain reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/cpu_gemm.h"
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

// On an AVX2 CPU (or any capped to it: the avx2.* run), adam_kernel is the
// AVX2 kernel, which must give the scalar loop's bits exactly, tails and
// zero second moments included; elsewhere it is the AVX-512 kernel or the
// loop itself and only the AVX2 case is checked.
TEST(AdamKernel, Avx2GivesTheScalarLoopsBitsForEveryLength) {
  if (kernel_isa() != KernelIsa::kAvx2)
    GTEST_SKIP() << "the kernels run " << kernel_isa_name(kernel_isa()) << " here, not avx2 (ONEDNN_MAX_CPU_ISA=AVX2 tests it)";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamKernelArgs args;
  args.grad_scale = 0.75f;
  args.l2 = 0.01f;
  args.beta1 = 0.9f;
  args.beta2 = 0.999f;
  args.decay = 0.9999f;
  args.step_size = 0.001f;
  args.inv_sqrt_bc2 = 1.3f;
  args.epsilon = 1e-8f;
  for (std::int64_t n = 0; n <= 70; ++n) {
    const auto size = static_cast<std::size_t>(n);
    std::vector<float> w(size), g(size), m(size), v(size);
    for (std::size_t i = 0; i < size; ++i) {
      w[i] = normal(rng), g[i] = i % 7 == 0 ? 0.0f : normal(rng);
      m[i] = 0.1f * normal(rng), v[i] = i % 5 == 0 ? 0.0f : std::fabs(normal(rng));
    }
    std::vector<float> w2 = w, m2 = m, v2 = v;
    for (int step = 0; step < 3; ++step) {
      adam_kernel(w.data(), g.data(), m.data(), v.data(), n, args);
      adam_kernel_scalar(w2.data(), g.data(), m2.data(), v2.data(), n, args);
    }
    if (size == 0) continue;  // nothing to compare (and memcmp takes no null pointer)
    ASSERT_EQ(std::memcmp(w.data(), w2.data(), 4 * size), 0) << "w differs for n " << n;
    ASSERT_EQ(std::memcmp(m.data(), m2.data(), 4 * size), 0) << "m differs for n " << n;
    ASSERT_EQ(std::memcmp(v.data(), v2.data(), 4 * size), 0) << "v differs for n " << n;
  }
}

}  // namespace
}  // namespace anneal::cpu
