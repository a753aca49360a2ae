#include "runs/stored_source.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <chrono>

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

std::shared_ptr<const StoredBlocks::Block> StoredBlocks::load(std::uint64_t b, std::span<const std::uint32_t> rows) const {
  const std::uint64_t first = b * block_rows_;
  const std::uint64_t count = std::min(block_rows_, reader_.rows() - first);
  const std::size_t row_bytes = reader_.row_bytes();
  auto block = std::make_shared<Block>();
  memory_.add(rows.size() * row_bytes);
  block->memory = &memory_;  // from here the block releases what it added
  block->bytes.resize(rows.size() * row_bytes);
  if (rows.size() == count) {  // every row of the block: read in place
    reader_.read(first, count, block->bytes);
    return block;
  }
  memory_.add(count * row_bytes);
  struct Release {
    DataMemory& memory;
    std::uint64_t bytes;
    ~Release() { memory.release(bytes); }
  } release{memory_, count * row_bytes};
  std::vector<std::byte> whole(count * row_bytes);
  reader_.read(first, count, whole);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(block->bytes.data() + i * row_bytes, whole.data() + (rows[i] - first) * row_bytes, row_bytes);
  return block;
}

StoredSource::StoredSource(const StoredBlocks& blocks, std::vector<std::uint32_t> stream_rows, std::vector<float> labels,
                           std::int64_t window, bool background_prefetch)
    : blocks_(blocks), stream_rows_(std::move(stream_rows)), labels_(std::move(labels)),
      window_(std::max<std::int64_t>(window, 1)), background_prefetch_(background_prefetch) {
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

std::int64_t StoredSource::max_block_rows() const {
  std::int64_t most = 0;
  for (std::size_t b = 0; b + 1 < block_starts_.size(); ++b) most = std::max(most, block_starts_[b + 1] - block_starts_[b]);
  return most;
}

std::int64_t StoredSource::min_block_rows() const {
  if (block_starts_.size() <= 2) return block_starts_.back();
  std::int64_t fewest = block_starts_.back();
  for (std::size_t b = 0; b + 2 < block_starts_.size(); ++b) fewest = std::min(fewest, block_starts_[b + 1] - block_starts_[b]);
  return fewest;
}

std::shared_ptr<const StoredBlocks::Block> StoredSource::load(std::uint32_t b) const {
  const auto first = static_cast<std::size_t>(block_starts_[b]), last = static_cast<std::size_t>(block_starts_[b + 1]);
  return blocks_.load(stream_block_[b], std::span<const std::uint32_t>(stream_rows_).subspan(first, last - first));
}

StoredSource::BlockMap StoredSource::load_blocks(const std::vector<std::uint32_t>& wanted) const {
  std::vector<std::shared_ptr<const StoredBlocks::Block>> blocks(wanted.size());
  tbb::parallel_for(std::size_t(0), wanted.size(), [&](std::size_t i) { blocks[i] = load(wanted[i]); });
  BlockMap loaded;
  for (std::size_t i = 0; i < wanted.size(); ++i) loaded.emplace(wanted[i], std::move(blocks[i]));
  return loaded;
}

StoredSource::~StoredSource() {
  // A prefetch that failed loaded blocks nobody asked for yet: its error
  // would have reached the reader that needed them; here there is none.
  if (prefetch_.valid() && prefetch_.wait_for(std::chrono::seconds(0)) != std::future_status::deferred) prefetch_.wait();
}

void StoredSource::set_transform(std::shared_ptr<const FeatureTransform> transform, std::vector<std::size_t> offsets,
                                 std::vector<std::int64_t> sample_shape, const InputAlignment* alignment) {
  transform_ = std::move(transform);
  alignment_ = alignment;
  if (alignment_) aligned_.resize(alignment_->width());
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
  if (it == held_.end()) it = held_.emplace(b, load(b)).first;
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
  // The blocks needed now (a source that holds everything loads it here).
  std::vector<std::uint32_t> wanted_now;
  for (std::uint32_t b : now)
    if (!held_.count(b)) wanted_now.push_back(b);
  held_.merge(load_blocks(wanted_now));
  std::vector<std::uint32_t> missing;
  for (std::uint32_t b : next)
    if (!held_.count(b)) missing.push_back(b);
  if (missing.empty()) return;
  // A deferred load stops training while it runs, so it takes every core
  // training has; the background one's arena holds one thread.
  auto load_all = [this, missing] { return load_blocks(missing); };
  if (!background_prefetch_) {
    prefetch_ = std::async(std::launch::deferred, load_all);
    return;
  }
  // On the core training leaves free, one thread: the reader's own
  // parallelism would take the training's cores too.
  prefetch_ = std::async(std::launch::async, [load_all] {
    tbb::task_arena one(1);
    return one.execute(load_all);
  });
}

namespace {

// Row `index` of a block (its `index`-th kept row) as fp32: a pointer into
// the block for f32, else widened into `scratch`.
const float* stored_row(const StoredBlocks::Block& block, const TensorRowReader& reader, std::size_t index,
                        std::vector<float>& scratch) {
  const std::byte* row = block.bytes.data() + index * reader.row_bytes();
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
    const auto index = static_cast<std::uint32_t>(b);
    std::shared_ptr<const StoredBlocks::Block> passing = keep ? nullptr : load(index);
    const StoredBlocks::Block& data = keep ? block(index) : *passing;
    const std::int64_t rows = block_starts_[index + 1] - block_starts_[index];
    for (std::int64_t r = 0; r < rows; ++r) visit(stored_row(data, blocks_.reader(), static_cast<std::size_t>(r), row_f32_));
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
    const float* row = stored_row(data, blocks_.reader(), static_cast<std::size_t>(r - block_starts_[b]), row_f32_);
    if (alignment_) {
      alignment_->apply(row, aligned_.data());
      row = aligned_.data();
    }
    float* out = features + i * width;
    std::fill_n(out, width, 0.0f);
    transform_->apply_stored(row, offsets_, out, counts_);
    labels[i] = labels_[r];
  }
}

}  // namespace anneal::runs
