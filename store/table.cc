#include "anneal/table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "anneal/hash.h"

namespace anneal {

const char* column_type_name(ColumnType type) {
  switch (type) {
    case ColumnType::kNumeric: return "numeric";
    case ColumnType::kCategorical: return "categorical";
    case ColumnType::kDatetime: return "datetime";
  }
  return "numeric";
}

RowContentKeys::RowContentKeys(const Table& table, std::span<const std::size_t> columns)
    : table_(&table), row_width_(static_cast<std::size_t>(table.sample_width())) {
  // Where each column's cells sit in the row's feature block.
  std::vector<std::size_t> offsets(table.columns.size(), 0);
  std::size_t offset = 0;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (c == table.label_column) continue;
    offsets[c] = offset;
    offset += static_cast<std::size_t>(table.columns[c].width());
  }
  for (std::size_t c : columns) {
    const bool label = c == table.label_column;
    cells_.push_back({c, label, offsets[c], label ? 1 : static_cast<std::size_t>(table.columns[c].width()),
                      table.columns[c].type == ColumnType::kCategorical});
  }
}

RowContentKeys::RowContentKeys(const Table& table)
    : RowContentKeys(table, [&] {
        std::vector<std::size_t> all(table.columns.size());
        std::iota(all.begin(), all.end(), std::size_t{0});
        return all;
      }()) {}

// The hashed bytes, per listed column: its width as a u32 (0xffffffff for
// the label), then per cell a u32: the float32 bits (NaN as 0x7fc00000), or
// for a category 0x80000000 | its text's length followed by the text. All
// little-endian.
template <typename Out>
void RowContentKeys::encode(std::uint64_t row, Out& out) const {
  const Table& table = *table_;
  for (const Cells& column : cells_) {
    const ColumnSchema& schema = table.columns[column.column];
    const float* cells = column.label ? table.labels.data() + row
                                      : table.features.data() + row * row_width_ + column.offset;
    out.put_u32(column.label ? 0xffffffffu : static_cast<std::uint32_t>(column.width));
    for (std::size_t k = 0; k < column.width; ++k) {
      const float v = cells[k];
      if (std::isnan(v)) {
        out.put_u32(0x7fc00000u);
      } else if (column.categorical && v >= 0 && static_cast<std::size_t>(v) < schema.categories.size()) {
        const std::string& text = schema.categories[static_cast<std::size_t>(v)];
        out.put_u32(0x80000000u | static_cast<std::uint32_t>(text.size()));
        out.put_text(text);
      } else {
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        out.put_u32(bits);
      }
    }
  }
}

namespace {

void store_u32(char* at, std::uint32_t v) {
  at[0] = static_cast<char>(v);
  at[1] = static_cast<char>(v >> 8);
  at[2] = static_cast<char>(v >> 16);
  at[3] = static_cast<char>(v >> 24);
}

// Feeds BLAKE2b a buffer at a time: the digest does not depend on how the
// input is cut, and one update per cell would cost more than the hash.
class BufferedHasher {
 public:
  void put_u32(std::uint32_t v) {
    if (used_ + 4 > buffer_.size()) flush();
    store_u32(buffer_.data() + used_, v);
    used_ += 4;
  }
  void put_text(std::string_view text) {
    if (used_ + text.size() > buffer_.size()) {
      flush();
      hasher_.update(text);
    } else {
      std::memcpy(buffer_.data() + used_, text.data(), text.size());
      used_ += text.size();
    }
  }
  Digest finish() {
    flush();
    return hasher_.finish();
  }

 private:
  void flush() {
    hasher_.update(std::string_view(buffer_.data(), used_));
    used_ = 0;
  }
  Hasher hasher_;
  std::array<char, 512> buffer_;
  std::size_t used_ = 0;
};

// The row's bytes contiguous, as a one-shot hash needs them: on the stack
// for a row of up to 1 KiB, on the heap past that. The stack case is the
// hot one (a numeric table's row), kept to a bounds check and a store.
class RowBytes {
 public:
  void put_u32(std::uint32_t v) {
    if (spilled_.empty() && used_ + 4 <= inline_.size()) [[likely]] {
      store_u32(inline_.data() + used_, v);
      used_ += 4;
      return;
    }
    char bytes[4];
    store_u32(bytes, v);
    spill(std::string_view(bytes, 4));
  }
  void put_text(std::string_view text) {
    if (spilled_.empty() && used_ + text.size() <= inline_.size()) {
      if (!text.empty()) std::memcpy(inline_.data() + used_, text.data(), text.size());
      used_ += text.size();
      return;
    }
    spill(text);
  }
  std::string_view bytes() const {
    return spilled_.empty() ? std::string_view(inline_.data(), used_) : std::string_view(spilled_);
  }

 private:
  // Past the stack buffer: everything so far moves to the heap, and the
  // rest follows it there.
  void spill(std::string_view more) {
    if (spilled_.empty()) spilled_.assign(inline_.data(), used_);
    spilled_.append(more);
  }
  std::array<char, 1024> inline_;
  std::size_t used_ = 0;
  std::string spilled_;  // all of the bytes, once they outgrow inline_
};

}  // namespace

std::uint64_t RowContentKeys::key(std::uint64_t row) const {
  BufferedHasher hasher;
  encode(row, hasher);
  const Digest d = hasher.finish();
  std::uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key |= std::uint64_t{d[static_cast<std::size_t>(i)]} << (8 * i);
  return key;
}

std::uint64_t RowContentKeys::keyed_key(std::uint64_t row, const ShortHashKey& hash_key) const {
  RowBytes bytes;
  encode(row, bytes);
  return short_hash(bytes.bytes(), hash_key);
}

std::uint64_t row_content_key(const Table& table, std::uint64_t row, std::span<const std::size_t> columns) {
  return RowContentKeys(table, columns).key(row);
}

std::uint64_t row_content_key(const Table& table, std::uint64_t row) { return RowContentKeys(table).key(row); }

std::int64_t ColumnSchema::width() const {
  std::int64_t w = 1;
  for (std::int64_t d : shape) w *= d;
  return w;
}

std::int64_t Table::sample_width() const {
  std::int64_t w = 1;
  for (std::int64_t d : sample_shape) w *= d;
  return w;
}

void ColumnStats::add(double value) {
  if (std::isnan(value)) {
    ++missing;
    return;
  }
  if (count == 0) {
    min = max = value;
  } else {
    min = std::min(min, value);
    max = std::max(max, value);
  }
  ++count;
  // Welford's update keeps the variance exact enough for large counts.
  double delta = value - mean;
  mean += delta / static_cast<double>(count);
  m2 += delta * (value - mean);
}

void ColumnStats::merge(const ColumnStats& other) {
  missing += other.missing;
  if (other.count == 0) return;
  if (count == 0) {
    std::uint64_t keep_missing = missing;
    *this = other;
    missing = keep_missing;
    return;
  }
  double n_a = static_cast<double>(count), n_b = static_cast<double>(other.count);
  double delta = other.mean - mean;
  double n = n_a + n_b;
  mean += delta * n_b / n;
  m2 += other.m2 + delta * delta * n_a * n_b / n;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  count += other.count;
}

void ColumnStats::store_into(ColumnSchema& column) const {
  column.count = count;
  column.missing = missing;
  column.min = count ? min : 0;
  column.max = count ? max : 0;
  column.mean = count ? mean : 0;
  // Population standard deviation, as used for standardization.
  column.std = count ? std::sqrt(m2 / static_cast<double>(count)) : 0;
}

}  // namespace anneal
