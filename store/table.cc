#include "anneal/table.h"

#include <algorithm>
#include <cmath>

namespace anneal {

const char* column_type_name(ColumnType type) {
  return type == ColumnType::kNumeric ? "numeric" : "categorical";
}

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
