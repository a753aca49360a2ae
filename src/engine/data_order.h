// The trainer's data order: which source row sits at each position of an
// epoch, a pure function of (seed, epoch, the source's blocks, the window),
// so a resumed run recomputes any position from the epoch number alone.
//
// With the window covering every block, the epoch is one Fisher–Yates
// shuffle of all rows seeded by (seed, epoch): a full shuffle. Otherwise
// (a source that streams) the block order is shuffled (seeded by (seed,
// epoch)), cut into windows of `window` blocks, and the rows of each window,
// taken block by block in that order, get their own Fisher–Yates shuffle
// seeded by (seed, epoch, window). Internal to src/engine.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace anneal::engine {

class EpochOrder {
 public:
  // `block_starts`: blocks + 1 ascending offsets from 0 to rows (copied).
  // `window` >= 1 blocks.
  EpochOrder(std::span<const std::int64_t> block_starts, std::int64_t window, std::uint64_t seed,
             std::int64_t epoch);

  std::int64_t epoch() const { return epoch_; }
  std::int64_t windows() const { return static_cast<std::int64_t>(window_starts_.size()) - 1; }
  // The window holding epoch position `position` (0 <= position < rows).
  std::int64_t window_of(std::int64_t position) const;
  // The blocks of window `w`, in the order the window takes them.
  std::span<const std::uint32_t> window_blocks(std::int64_t w) const;
  // Writes the source rows at positions [first, first + n) to `out`.
  void rows(std::int64_t first, std::int64_t n, std::uint32_t* out);

 private:
  const std::vector<std::uint32_t>& window_rows(std::int64_t w);

  std::vector<std::int64_t> block_starts_;
  std::uint64_t seed_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t window_ = 1;
  std::vector<std::uint32_t> block_order_;   // blocks in epoch order
  std::vector<std::int64_t> window_starts_;  // first position of each window, then rows
  // Materialized windows: at most the two a batch can straddle.
  std::map<std::int64_t, std::vector<std::uint32_t>> cache_;
};

}  // namespace anneal::engine
