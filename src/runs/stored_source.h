// Training data read from the store a block at a time, in the type it is
// stored in (u8 images stay bytes), and expanded per batch by the run's
// FeatureTransform: the whole transformed table never exists.
//
//   StoredBlocks   one parsed features stream cut into blocks of stream
//                  rows: what is read from the store at once. Counts what
//                  it holds against a DataMemory.
//   StoredSource   a SampleSource over some rows of those blocks (ascending
//                  stream rows, with their encoded labels; train,
//                  validation and test rows interleave in one stream): of
//                  each block it keeps only its own rows, holds the blocks
//                  of its current window and loads the next window ahead
//                  (on a prefetch thread when a core is free).
//
// Internal to src/runs/.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "anneal/dataset_rows.h"
#include "anneal/model_inputs.h"
#include "anneal/preprocess.h"
#include "anneal/sample_source.h"

namespace anneal::runs {

// Bytes of dataset rows held in memory by a run's sources, and the most
// held at once. Thread-safe.
class DataMemory {
 public:
  void add(std::uint64_t bytes);
  void release(std::uint64_t bytes);
  std::uint64_t held() const { return held_.load(); }
  std::uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<std::uint64_t> held_{0}, peak_{0};
};

// One parsed features stream cut into blocks of `block_rows` stream rows:
// the unit a source reads from the store.
class StoredBlocks {
 public:
  // The rows of one block a source keeps: only its own, back to back in
  // stored bytes (a validation source keeps a tenth of each block).
  struct Block {
    std::vector<std::byte> bytes;
    DataMemory* memory = nullptr;
    ~Block();
  };
  // `reader` must outlive this; `block_rows` >= 1 stream rows per block.
  StoredBlocks(const TensorRowReader& reader, std::uint64_t block_rows, DataMemory& memory);

  std::uint64_t block_rows() const { return block_rows_; }
  const TensorRowReader& reader() const { return reader_; }
  // Stream rows `rows` (ascending, all in stream block `b`), read and
  // verified now; the block's other rows are read too (a chunk is the unit
  // of storage) and let go before this returns. Thread-safe.
  std::shared_ptr<const Block> load(std::uint64_t b, std::span<const std::uint32_t> rows) const;

 private:
  const TensorRowReader& reader_;
  std::uint64_t block_rows_;
  DataMemory& memory_;
};

class StoredSource final : public SampleSource {
 public:
  // Rows `stream_rows` (ascending) of `blocks`' stream, with `labels` (one
  // encoded label each), holding at most `window` of this source's blocks
  // per window (two windows at once: the current and the next). With
  // `background_prefetch` the next window loads on a thread of its own
  // while the current one trains: for a process that leaves a core free.
  // Otherwise it loads when first read: on a machine whose every core
  // trains, a loading thread only takes turns with them (measured 6x
  // slower on 2 cores, the OpenMP team spinning while it ran).
  StoredSource(const StoredBlocks& blocks, std::vector<std::uint32_t> stream_rows, std::vector<float> labels,
               std::int64_t window, bool background_prefetch);
  void set_window(std::int64_t window) { window_ = std::max<std::int64_t>(window, 1); }
  // The most rows one of this source's blocks holds, and the fewest (the
  // last block aside, unless it is the only one).
  std::int64_t max_block_rows() const;
  std::int64_t min_block_rows() const;
  ~StoredSource() override;  // waits for a prefetch in flight
  StoredSource(const StoredSource&) = delete;
  StoredSource& operator=(const StoredSource&) = delete;

  // The transform read() applies (`offsets` from stored_offsets()), and the
  // sample shape it produces. With `alignment` (a warm start reading rows
  // through its parent's preprocessing) each stored row is first laid out
  // as the parent's columns, and `offsets` are the transform's
  // gathered_offsets(). Must be set before read(); `alignment` must
  // outlive this source.
  void set_transform(std::shared_ptr<const FeatureTransform> transform, std::vector<std::size_t> offsets,
                     std::vector<std::int64_t> sample_shape, const InputAlignment* alignment = nullptr);

  // Calls `visit` with every row of this source in order, as fp32 in the
  // stored layout: the scan FeatureTransform::fit takes. A source whose
  // window holds all its blocks keeps them for training; otherwise a block
  // at a time is held.
  void for_each_stored_row(const std::function<void(const float*)>& visit);

  std::int64_t rows() const override { return static_cast<std::int64_t>(stream_rows_.size()); }
  const std::vector<std::int64_t>& sample_shape() const override { return sample_shape_; }
  std::span<const std::int64_t> block_starts() const override { return block_starts_; }
  std::int64_t window_blocks() const override { return window_; }
  void will_read(std::span<const std::uint32_t> now, std::span<const std::uint32_t> next) override;
  void read(std::span<const std::uint32_t> rows, float* features, float* labels) override;

 private:
  using BlockMap = std::map<std::uint32_t, std::shared_ptr<const StoredBlocks::Block>>;
  // This source's block b, held after the call.
  const StoredBlocks::Block& block(std::uint32_t b);
  // This source's rows of its block b, read from the store now.
  std::shared_ptr<const StoredBlocks::Block> load(std::uint32_t b) const;
  // The blocks `wanted`, read in parallel on the calling arena.
  BlockMap load_blocks(const std::vector<std::uint32_t>& wanted) const;
  void finish_prefetch();

  const StoredBlocks& blocks_;
  std::vector<std::uint32_t> stream_rows_;
  std::vector<float> labels_;
  std::int64_t window_;
  std::vector<std::int64_t> block_starts_;    // this source's blocks over its rows
  std::vector<std::uint64_t> stream_block_;   // this source's block -> stream block
  BlockMap held_;
  bool background_prefetch_;
  std::future<BlockMap> prefetch_;            // the next window's blocks: loading, or deferred
  std::shared_ptr<const FeatureTransform> transform_;
  const InputAlignment* alignment_ = nullptr;
  std::vector<float> aligned_;                // a row laid out by alignment_
  std::vector<std::size_t> offsets_;
  std::vector<std::int64_t> sample_shape_;
  std::vector<float> row_f32_;                // a u8 row widened
  TransformCounts counts_;                    // apply_stored's tally; a run reports none (it never did)
};

}  // namespace anneal::runs
