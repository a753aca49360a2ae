// Deterministic random numbers for weight initialisation, data shuffling and
// dropout: SplitMix64, a counter-based generator whose whole state is one
// integer, so checkpointing it is trivial and streams derived from (seed,
// purpose, index) never depend on the order in which anything ran.
//
// mix64 and DropoutRule are compiled for the GPU too (the CUDA kernels
// include this header): the one copy of the arithmetic both backends must
// apply bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ANNEAL_HOST_DEVICE __host__ __device__
#else
#define ANNEAL_HOST_DEVICE
#endif

namespace anneal::engine {

// SplitMix64's step: the golden-ratio increment, then its output mix.
ANNEAL_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stream seed for one purpose ("shuffle epoch 3", "init layer 2").
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t purpose, std::uint64_t index) {
  return mix64(mix64(seed ^ mix64(purpose)) + index);
}

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    const std::uint64_t z = mix64(state_);
    state_ += 0x9e3779b97f4a7c15ull;
    return z;
  }
  // Uniform in [0, 1) with 24 random bits (exact in float).
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n) (multiply-shift; bias below 2^-32 for n < 2^32).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  std::uint64_t state_;
};

// Dropout's keep/drop decision, a pure function of (p, seed, stream) and the
// element's index, so a mask is the same on every device, thread count and
// batch split: element i is kept, scaled by 1/(1−p), when the high 32 bits
// of mix64(key + i) reach p·2^32, and zeroed otherwise.
struct DropoutRule {
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;
  float scale = 0;

  static DropoutRule of(float p, std::uint64_t seed, std::uint64_t stream) {
    DropoutRule rule;
    rule.key = mix64(seed ^ mix64(stream));
    const double cut = double(p) * 4294967296.0;
    rule.threshold = static_cast<std::uint32_t>(cut < 4294967295.0 ? cut : 4294967295.0);
    rule.scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    return rule;
  }
  // What element i of the input is multiplied by: `scale` or 0.
  ANNEAL_HOST_DEVICE float factor(std::uint64_t i) const {
    return static_cast<std::uint32_t>(mix64(key + i) >> 32) >= threshold ? scale : 0.0f;
  }
};

}  // namespace anneal::engine
