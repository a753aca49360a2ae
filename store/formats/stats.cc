#include "formats/stats.h"

#include <algorithm>

namespace anneal::formats {

ColumnStats strided_stats(const float* first, std::size_t count, std::size_t stride) {
  ColumnStats stats;
  double sum = 0;
  float min = 0, max = 0;
  for (std::size_t i = 0; i < count; ++i) {
    float value = first[i * stride];
    if (value != value) continue;  // NaN: missing
    if (stats.count == 0) min = max = value;
    min = std::min(min, value);
    max = std::max(max, value);
    sum += value;
    ++stats.count;
  }
  stats.missing = count - stats.count;
  if (stats.count == 0) return stats;
  stats.min = min;
  stats.max = max;
  stats.mean = sum / static_cast<double>(stats.count);
  double m2 = 0;
  for (std::size_t i = 0; i < count; ++i) {
    float value = first[i * stride];
    if (value != value) continue;
    double deviation = value - stats.mean;
    m2 += deviation * deviation;
  }
  stats.m2 = m2;
  return stats;
}

}  // namespace anneal::formats
