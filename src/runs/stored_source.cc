#include "runs/stored_source.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <numeric>
#include <cstring>
#include <set>

#include "anneal/error.h"

namespace anneal::runs {

void DataMemory::add(std::uint64_t bytes) {
  const std::uint64_t now = held_.fetch_add(bytes) + bytes;
  std::uint64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void DataMemory::release(std::uint64_t bytes) { held_.fetch_sub(bytes); }

StoredBlocks::Block::~Block() {
  if (memory) memory->release(bytes.size());
}

StoredBlocks::StoredBlocks(const TensorRowReader& reader, std::uint64_t block_rows, DataMemory& memory)
    : reader_(reader), block_rows_(std::max<std::uint64_t>(block_rows, 1)), memory_(memory) {}

std::shared_ptr<const StoredBlocks::Block> StoredBlocks::get(std::uint64_t b) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = held_.find(b); it != held_.end())
      if (auto held = it->second.lock()) return held;
  }
  const std::uint64_t first = b * block_rows_;
  const std::uint64_t count = std::min(block_rows_, reader_.rows() - first);
  auto block = std::make_shared<Block>();
  memory_.add(count * reader_.row_bytes());
  block->memory = &memory_;  // from here the block releases what it added
  block->bytes.resize(count * reader_.row_bytes());
  reader_.read(first, count, block->bytes);
  std::lock_guard lock(mutex_);
  std::erase_if(held_, [](const auto& entry) { return entry.second.expired(); });
  held_[b] = block;
  return block;
}

StoredSource::StoredSource(StoredBlocks& blocks, std::vector<std::uint32_t> stream_rows, std::vector<float> labels,
                           std::int64_t window)
    : blocks_(blocks), stream_rows_(std::move(stream_rows)), labels_(std::move(labels)),
      window_(std::max<std::int64_t>(window, 1)) {
  if (labels_.size() != stream_rows_.size())
    throw failure("stored source: " + std::to_string(labels_.size()) + " labels for " +
                  std::to_string(stream_rows_.size()) + " rows");
  // This source's blocks: the stream blocks that hold one of its rows.
  for (std::size_t r = 0; r < stream_rows_.size(); ++r) {
    if (stream_rows_[r] >= blocks_.reader().rows() || (r > 0 && stream_rows_[r] <= stream_rows_[r - 1]))
      throw failure("stored source: rows must ascend within the stream");
    const std::uint64_t b = stream_rows_[r] / blocks_.block_rows();
    if (stream_block_.empty() || stream_block_.back() != b) {
      stream_block_.push_back(b);
      block_starts_.push_back(static_cast<std::int64_t>(r));
    }
  }
  block_starts_.push_back(static_cast<std::int64_t>(stream_rows_.size()));
}

StoredSource::~StoredSource() {
  // A prefetch that failed loaded blocks nobody asked for yet: its error
  // would have reached the reader that needed them; here there is none.
  if (prefetch_.valid()) prefetch_.wait();
}

void StoredSource::set_transform(const FeatureTransform& transform, std::vector<std::size_t> offsets,
                                 std::vector<std::int64_t> sample_shape) {
  transform_ = &transform;
  offsets_ = std::move(offsets);
  sample_shape_ = std::move(sample_shape);
}

void StoredSource::finish_prefetch() {
  if (!prefetch_.valid()) return;
  BlockMap loaded = prefetch_.get();  // rethrows what the prefetch threw
  held_.merge(loaded);
}

const StoredBlocks::Block& StoredSource::block(std::uint32_t b) {
  auto it = held_.find(b);
  if (it == held_.end()) {
    finish_prefetch();
    it = held_.find(b);
  }
  if (it == held_.end()) it = held_.emplace(b, blocks_.get(stream_block_[b])).first;
  return *it->second;
}

void StoredSource::will_read(std::span<const std::uint32_t> now, std::span<const std::uint32_t> next) {
  finish_prefetch();
  const std::set<std::uint32_t> wanted = [&] {
    std::set<std::uint32_t> w(now.begin(), now.end());
    w.insert(next.begin(), next.end());
    return w;
  }();
  std::erase_if(held_, [&](const auto& entry) { return !wanted.count(entry.first); });
  // The blocks needed now, read in parallel (each read also decodes its
  // chunks in parallel): a source that holds everything loads it here.
  std::vector<std::uint32_t> load;
  for (std::uint32_t b : now)
    if (!held_.count(b)) load.push_back(b);
  std::vector<std::shared_ptr<const StoredBlocks::Block>> loaded(load.size());
  tbb::parallel_for(std::size_t(0), load.size(), [&](std::size_t i) { loaded[i] = blocks_.get(stream_block_[load[i]]); });
  for (std::size_t i = 0; i < load.size(); ++i) held_.emplace(load[i], std::move(loaded[i]));
  std::vector<std::uint64_t> missing;
  std::vector<std::uint32_t> missing_blocks;
  for (std::uint32_t b : next)
    if (!held_.count(b)) {
      missing_blocks.push_back(b);
      missing.push_back(stream_block_[b]);
    }
  if (missing.empty()) return;
  prefetch_ = std::async(std::launch::async, [this, missing, missing_blocks] {
    BlockMap loaded;
    for (std::size_t i = 0; i < missing.size(); ++i) loaded.emplace(missing_blocks[i], blocks_.get(missing[i]));
    return loaded;
  });
}

namespace {

// Row `stream_row` of `block` (holding stream rows from `first_row`) as fp32:
// a pointer into the block for f32, else widened into `scratch`.
const float* stored_row(const StoredBlocks::Block& block, const TensorRowReader& reader, std::uint64_t first_row,
                        std::uint64_t stream_row, std::vector<float>& scratch) {
  const std::byte* row = block.bytes.data() + (stream_row - first_row) * reader.row_bytes();
  if (reader.type() == StoredType::kF32) return reinterpret_cast<const float*>(row);
  scratch.resize(static_cast<std::size_t>(reader.row_width()));
  for (std::size_t k = 0; k < scratch.size(); ++k) scratch[k] = static_cast<float>(std::to_integer<std::uint8_t>(row[k]));
  return scratch.data();
}

}  // namespace

void StoredSource::for_each_stored_row(const std::function<void(const float*)>& visit) {
  const bool keep = window_ >= blocks();
  if (keep) {
    std::vector<std::uint32_t> all(static_cast<std::size_t>(blocks()));
    std::iota(all.begin(), all.end(), 0u);
    will_read(all, {});
  }
  for (std::int64_t b = 0; b < blocks(); ++b) {
    std::shared_ptr<const StoredBlocks::Block> held =
        keep ? nullptr : blocks_.get(stream_block_[static_cast<std::size_t>(b)]);
    const StoredBlocks::Block& data = keep ? block(static_cast<std::uint32_t>(b)) : *held;
    const std::uint64_t first = stream_block_[static_cast<std::size_t>(b)] * blocks_.block_rows();
    for (std::int64_t r = block_starts_[static_cast<std::size_t>(b)]; r < block_starts_[static_cast<std::size_t>(b) + 1]; ++r)
      visit(stored_row(data, blocks_.reader(), first, stream_rows_[static_cast<std::size_t>(r)], row_f32_));
  }
}

void StoredSource::read(std::span<const std::uint32_t> rows, float* features, float* labels) {
  if (transform_ == nullptr) throw failure("stored source: read before set_transform");
  const auto width = static_cast<std::size_t>(transform_->output_width());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::uint32_t r = rows[i];
    if (r >= stream_rows_.size()) throw failure("stored source: row " + std::to_string(r) + " out of range");
    const auto b = static_cast<std::uint32_t>(
        std::upper_bound(block_starts_.begin(), block_starts_.end(), static_cast<std::int64_t>(r)) - block_starts_.begin() - 1);
    const StoredBlocks::Block& data = block(b);
    const float* row = stored_row(data, blocks_.reader(), stream_block_[b] * blocks_.block_rows(), stream_rows_[r], row_f32_);
    float* out = features + i * width;
    std::fill_n(out, width, 0.0f);
    transform_->apply_stored(row, offsets_, out, counts_);
    labels[i] = labels_[r];
  }
}

}  // namespace anneal::runs
