#include "formats/stats.h"

#include <algorithm>
#include <limits>

namespace anneal::formats {

namespace {

// Rows per pass: about 64 KB of floats, so every column's pass over them
// reads from L1/L2 rather than memory; but at least kMinChunkRows, so very
// wide rows do not pay a merge for every value.
constexpr std::size_t kChunkFloats = 16 * 1024;
constexpr std::size_t kMinChunkRows = 256;
// Independent accumulators, so the adds are not one long dependency chain.
constexpr std::size_t kLanes = 4;

// Two passes (mean, then squared deviations) over one column of a chunk.
// Every value is read as a float, so bytes give bit for bit the statistics
// of the same values held as floats.
template <typename T>
ColumnStats column_stats(const T* first, std::size_t count, std::size_t stride) {
  double sum[kLanes] = {};
  float min[kLanes], max[kLanes];
  std::uint64_t seen[kLanes] = {};
  std::fill(min, min + kLanes, std::numeric_limits<float>::infinity());
  std::fill(max, max + kLanes, -std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  auto add = [&](std::size_t lane, float value) {
    if (value != value) return;  // NaN: missing
    sum[lane] += value;
    min[lane] = std::min(min[lane], value);
    max[lane] = std::max(max[lane], value);
    ++seen[lane];
  };
  for (; i + kLanes <= count; i += kLanes)
#pragma GCC unroll 4  // keeps the lanes in registers
    for (std::size_t lane = 0; lane < kLanes; ++lane) add(lane, static_cast<float>(first[(i + lane) * stride]));
  for (; i < count; ++i) add(0, static_cast<float>(first[i * stride]));

  ColumnStats stats;
  for (std::size_t lane = 0; lane < kLanes; ++lane) stats.count += seen[lane];
  stats.missing = count - stats.count;
  if (stats.count == 0) return stats;
  stats.min = *std::min_element(min, min + kLanes);
  stats.max = *std::max_element(max, max + kLanes);
  stats.mean = (sum[0] + sum[1] + sum[2] + sum[3]) / static_cast<double>(stats.count);
  double m2[kLanes] = {};
  auto add_square = [&](std::size_t lane, float value) {
    if (value != value) return;
    double deviation = value - stats.mean;
    m2[lane] += deviation * deviation;
  };
  for (i = 0; i + kLanes <= count; i += kLanes)
#pragma GCC unroll 4
    for (std::size_t lane = 0; lane < kLanes; ++lane) add_square(lane, static_cast<float>(first[(i + lane) * stride]));
  for (; i < count; ++i) add_square(0, static_cast<float>(first[i * stride]));
  stats.m2 = m2[0] + m2[1] + m2[2] + m2[3];
  return stats;
}

template <typename T>
void add_rows(const T* rows, std::size_t count, std::size_t width, ColumnStats* stats) {
  if (width == 0) return;
  const std::size_t chunk_rows = std::max(kMinChunkRows, kChunkFloats / width);
  for (std::size_t begin = 0; begin < count; begin += chunk_rows) {
    std::size_t n = std::min(chunk_rows, count - begin);
    for (std::size_t c = 0; c < width; ++c) stats[c].merge(column_stats(rows + begin * width + c, n, width));
  }
}

}  // namespace

void add_row_stats(const float* rows, std::size_t count, std::size_t width, ColumnStats* stats) {
  add_rows(rows, count, width, stats);
}

void add_row_stats(const std::uint8_t* rows, std::size_t count, std::size_t width, ColumnStats* stats) {
  add_rows(rows, count, width, stats);
}

}  // namespace anneal::formats
