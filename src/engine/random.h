// Deterministic random numbers for weight initialisation and data shuffling:
// SplitMix64, a counter-based generator whose whole state is one integer, so
// checkpointing it is trivial and streams derived from (seed, purpose, index)
// never depend on the order in which anything ran.
#pragma once

#include <cstdint>

namespace anneal::engine {

constexpr std::uint64_t mix64(std::uint64_t x) {
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
    state_ += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
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

}  // namespace anneal::engine
