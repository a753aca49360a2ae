// SampleSource: where the trainer reads its samples from, a batch at a time.
//
// The trainer never sees a whole dataset: it asks a source for the rows of
// each batch, by index, as fp32 features and labels. A source may hold every
// row in memory (ArraySource, over borrowed arrays), or keep its rows in a
// compact stored form and expand them per batch, or stream them from disk.
//
// Blocks and the window. A source groups its rows into blocks of
// consecutive indices that it loads together (block b holds the rows
// block_starts()[b] .. block_starts()[b + 1] - 1), and says how many blocks
// it can hold at once: window_blocks(). The trainer's data order follows it
// (see docs/TRAINING.md, "Memory budget"):
//   - window_blocks() >= blocks: every epoch is one full shuffle of all rows;
//   - otherwise each epoch shuffles the block order, cuts it into windows of
//     window_blocks() blocks, and shuffles the rows within each window.
// Before it reads from a new window the trainer calls will_read() with that
// window's blocks and the next window's, so a source can load the next one
// while the current one trains. A source must be able to serve reads from
// both at once (a batch can straddle two windows): it holds at most two
// windows.
//
// Thread-safety: the trainer calls a source from one thread at a time. A
// source may run its own threads (a prefetch), which it joins before its
// destructor returns.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace anneal {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  virtual std::int64_t rows() const = 0;
  // Per-sample feature shape: {F} or {C, H, W}.
  virtual const std::vector<std::int64_t>& sample_shape() const = 0;
  // blocks + 1 ascending offsets, from 0 to rows(); every block holds a row.
  virtual std::span<const std::int64_t> block_starts() const = 0;
  // Blocks the source can hold at once (>= 1).
  virtual std::int64_t window_blocks() const = 0;

  // The reads from now on come from the blocks `now`; after them, from
  // `next`. A source may drop every other block and start loading `next`.
  // Both empty: reading is over for now (a pass ended; training finished).
  // Reading a row of neither is allowed, but may load its block on the spot.
  virtual void will_read(std::span<const std::uint32_t> now, std::span<const std::uint32_t> next) = 0;

  // Writes sample rows[i] to features[i * width, (i + 1) * width) (width =
  // product of sample_shape()) and its label to labels[i]. Throws
  // anneal::Error: kBadData for a row that cannot be read as a sample,
  // kCorrupt or kFailure for storage that fails under it.
  virtual void read(std::span<const std::uint32_t> rows, float* features, float* labels) = 0;

  std::int64_t blocks() const { return static_cast<std::int64_t>(block_starts().size()) - 1; }
};

// A source over borrowed fp32 arrays (rows x width features, rows labels),
// all in memory: one block, so the trainer shuffles all rows each epoch.
// The arrays must outlive the source.
class ArraySource final : public SampleSource {
 public:
  ArraySource(std::span<const float> features, std::span<const float> labels, std::vector<std::int64_t> sample_shape);

  std::int64_t rows() const override { return static_cast<std::int64_t>(labels_.size()); }
  const std::vector<std::int64_t>& sample_shape() const override { return sample_shape_; }
  std::span<const std::int64_t> block_starts() const override { return block_starts_; }
  std::int64_t window_blocks() const override { return 1; }
  void will_read(std::span<const std::uint32_t>, std::span<const std::uint32_t>) override {}
  void read(std::span<const std::uint32_t> rows, float* features, float* labels) override;

  std::span<const float> features() const { return features_; }
  std::span<const float> labels() const { return labels_; }

 private:
  std::span<const float> features_, labels_;
  std::vector<std::int64_t> sample_shape_;
  std::vector<std::int64_t> block_starts_;
  std::size_t width_ = 0;
};

}  // namespace anneal
