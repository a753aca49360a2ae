#include "engine/data_order.h"

#include <algorithm>
#include <numeric>

#include "engine/random.h"

namespace anneal::engine {

namespace {

// Seed purposes. kRowShuffle is the trainer's historical one: with one
// window the order is exactly the full shuffle runs have always used.
constexpr std::uint64_t kRowShuffle = 0x5f1e;
constexpr std::uint64_t kBlockShuffle = 0xb10c;
constexpr std::uint64_t kWindowShuffle = 0x3d0;

template <typename T>
void fisher_yates(std::vector<T>& v, std::uint64_t seed) {
  SplitMix64 rng(seed);
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[std::size_t(rng.below(i))]);
}

}  // namespace

EpochOrder::EpochOrder(std::span<const std::int64_t> block_starts, std::int64_t window, std::uint64_t seed,
                       std::int64_t epoch)
    : block_starts_(block_starts.begin(), block_starts.end()), seed_(seed), epoch_(epoch),
      window_(std::max<std::int64_t>(window, 1)) {
  const auto blocks = block_starts_.size() - 1;
  block_order_.resize(blocks);
  std::iota(block_order_.begin(), block_order_.end(), 0u);
  if (std::size_t(window_) < blocks) fisher_yates(block_order_, derive_seed(seed_, kBlockShuffle, std::uint64_t(epoch_)));
  window_starts_.push_back(0);
  for (std::size_t b = 0; b < blocks; b += std::size_t(window_)) {
    std::int64_t rows = 0;
    for (std::size_t i = b; i < std::min(blocks, b + std::size_t(window_)); ++i)
      rows += block_starts_[block_order_[i] + 1] - block_starts_[block_order_[i]];
    window_starts_.push_back(window_starts_.back() + rows);
  }
}

std::int64_t EpochOrder::window_of(std::int64_t position) const {
  auto it = std::upper_bound(window_starts_.begin(), window_starts_.end(), position);
  return std::int64_t(it - window_starts_.begin()) - 1;
}

std::span<const std::uint32_t> EpochOrder::window_blocks(std::int64_t w) const {
  const auto first = std::size_t(w * window_);
  return std::span<const std::uint32_t>(block_order_).subspan(first, std::min(std::size_t(window_), block_order_.size() - first));
}

const std::vector<std::uint32_t>& EpochOrder::window_rows(std::int64_t w) {
  auto it = cache_.find(w);
  if (it != cache_.end()) return it->second;
  // Training walks forward: windows before the one asked for are done.
  cache_.erase(cache_.begin(), cache_.lower_bound(w - 1));
  std::vector<std::uint32_t> rows;
  rows.reserve(std::size_t(window_starts_[std::size_t(w) + 1] - window_starts_[std::size_t(w)]));
  for (std::uint32_t b : window_blocks(w))
    for (std::int64_t r = block_starts_[b]; r < block_starts_[b + 1]; ++r) rows.push_back(std::uint32_t(r));
  const std::uint64_t epoch_seed = derive_seed(seed_, kRowShuffle, std::uint64_t(epoch_));
  fisher_yates(rows, windows() == 1 ? epoch_seed : derive_seed(epoch_seed, kWindowShuffle, std::uint64_t(w)));
  return cache_.emplace(w, std::move(rows)).first->second;
}

void EpochOrder::rows(std::int64_t first, std::int64_t n, std::uint32_t* out) {
  while (n > 0) {
    const std::int64_t w = window_of(first);
    const std::vector<std::uint32_t>& rows = window_rows(w);
    const std::int64_t offset = first - window_starts_[std::size_t(w)];
    const std::int64_t take = std::min<std::int64_t>(n, std::int64_t(rows.size()) - offset);
    std::copy_n(rows.begin() + offset, take, out);
    out += take;
    first += take;
    n -= take;
  }
}

}  // namespace anneal::engine
