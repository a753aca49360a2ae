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
std::uint64_t RowContentKeys::key(std::uint64_t row) const {
  const Table& table = *table_;
  Hasher hasher;
  // Bytes gather here and go to the hasher a buffer at a time.
  std::array<char, 512> buffer;
  std::size_t used = 0;
  auto flush = [&] {
    hasher.update(std::string_view(buffer.data(), used));
    used = 0;
  };
  auto put_u32 = [&](std::uint32_t v) {
    if (used + 4 > buffer.size()) flush();
    buffer[used] = static_cast<char>(v);
    buffer[used + 1] = static_cast<char>(v >> 8);
    buffer[used + 2] = static_cast<char>(v >> 16);
    buffer[used + 3] = static_cast<char>(v >> 24);
    used += 4;
  };
  for (const Cells& column : cells_) {
    const ColumnSchema& schema = table.columns[column.column];
    const float* cells = column.label ? table.labels.data() + row
                                      : table.features.data() + row * row_width_ + column.offset;
    put_u32(column.label ? 0xffffffffu : static_cast<std::uint32_t>(column.width));
    for (std::size_t k = 0; k < column.width; ++k) {
      const float v = cells[k];
      if (std::isnan(v)) {
        put_u32(0x7fc00000u);
      } else if (column.categorical && v >= 0 && static_cast<std::size_t>(v) < schema.categories.size()) {
        const std::string& text = schema.categories[static_cast<std::size_t>(v)];
        put_u32(0x80000000u | static_cast<std::uint32_t>(text.size()));
        if (used + text.size() > buffer.size()) {
          flush();
          hasher.update(text);
        } else {
          std::memcpy(buffer.data() + used, text.data(), text.size());
          used += text.size();
        }
      } else {
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        put_u32(bits);
      }
    }
  }
  flush();
  const Digest d = hasher.finish();
  std::uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key |= std::uint64_t{d[static_cast<std::size_t>(i)]} << (8 * i);
  return key;
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
