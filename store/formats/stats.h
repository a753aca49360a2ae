// Column statistics over row-major float arrays, for the parsers that fill
// a Table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "anneal/table.h"

namespace anneal::formats {

// Merges the statistics of `count` rows of `width` floats (row-major, NaN =
// missing) into stats[0 .. width). The result depends only on the data and
// the order of calls, never on timing, so blocks parsed in parallel and
// merged in order give the same schema on any thread count.
void add_row_stats(const float* rows, std::size_t count, std::size_t width, ColumnStats* stats);
// The same over bytes (u8 IDX pixels): bit for bit the statistics of the
// same values converted to floats, without the float copy.
void add_row_stats(const std::uint8_t* rows, std::size_t count, std::size_t width, ColumnStats* stats);

}  // namespace anneal::formats
