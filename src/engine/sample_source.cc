#include "anneal/sample_source.h"

#include <cstring>
#include <functional>
#include <numeric>

#include "anneal/error.h"

namespace anneal {

ArraySource::ArraySource(std::span<const float> features, std::span<const float> labels,
                         std::vector<std::int64_t> sample_shape)
    : features_(features), labels_(labels), sample_shape_(std::move(sample_shape)),
      block_starts_{0, static_cast<std::int64_t>(labels.size())} {
  width_ = static_cast<std::size_t>(
      std::accumulate(sample_shape_.begin(), sample_shape_.end(), std::int64_t{1}, std::multiplies<>()));
  if (features_.size() != labels_.size() * width_)
    throw data_error("data has " + std::to_string(features_.size()) + " feature values for " +
                     std::to_string(labels_.size()) + " rows of " + std::to_string(width_));
}

void ArraySource::read(std::span<const std::uint32_t> rows, float* features, float* labels) {
  const auto n = static_cast<std::int64_t>(rows.size());
  for (std::uint32_t row : rows)
    if (row >= labels_.size()) throw failure("ArraySource: row " + std::to_string(row) + " out of range");
  // Split across the backend's OpenMP team (the trainer reads inside it)
  // when the batch is large: measured ~3% faster end to end for an MLP on
  // Fashion-MNIST than one thread copying; a prefetch thread was slower.
  constexpr std::size_t kParallelFloats = 1 << 16;
#pragma omp parallel for schedule(static) if (rows.size() * width_ >= kParallelFloats)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t row = rows[std::size_t(i)];
    std::memcpy(features + std::size_t(i) * width_, features_.data() + row * width_, width_ * sizeof(float));
    labels[i] = labels_[row];
  }
}

}  // namespace anneal
