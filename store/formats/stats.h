// Column statistics over float arrays, for the parsers that fill a Table.
#pragma once

#include <cstddef>

#include "anneal/table.h"

namespace anneal::formats {

// Statistics of `count` floats starting at `first`, `stride` floats apart.
// Two passes (mean, then squared deviations) keep the variance accurate;
// blocks computed this way combine with ColumnStats::merge.
ColumnStats strided_stats(const float* first, std::size_t count, std::size_t stride);

}  // namespace anneal::formats
