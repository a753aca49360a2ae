// LIBSVM / SVMlight sparse text, densified into a Table.
//
// Blocks of whole lines are parsed in parallel into sparse rows; once the
// widest index is known, each block scatters its rows into the dense
// features in parallel.
#include <tbb/parallel_for.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "formats/number.h"
#include "formats/stats.h"
#include "formats/text.h"

namespace anneal {

namespace {

using formats::TextError;

constexpr std::uint64_t kMaxIndex = (std::uint64_t{1} << 31) - 1;
// Densifying multiplies rows by the widest index, which a few hostile bytes
// ("1 16384:1" on every line) can make absurd: refuse above this many cells
// (64 MB of floats) unless the input itself is large. Honest sparse data
// with a dense-sized width stays far below 64 cells per input byte.
constexpr std::uint64_t kMinCellLimit = std::uint64_t{1} << 24;
constexpr std::uint64_t kCellsPerInputByte = 64;

struct SparseBlock {
  std::vector<float> labels;
  std::vector<std::size_t> row_ends;   // per row: end of its entries below
  std::vector<std::uint32_t> indices;  // 1-based feature indices
  std::vector<float> values;
  std::uint32_t max_index = 0;
  std::optional<TextError> error;
  std::vector<ColumnStats> stats;  // per column, filled while densifying
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Statistics of a block's densified columns from its entries alone: absent
// cells are zeros, so each column also holds (rows - entries) zeros. Reading
// the dense rows instead would cost two passes over mostly zeros.
std::vector<ColumnStats> sparse_column_stats(const SparseBlock& block, std::uint64_t width) {
  const std::uint64_t rows = block.labels.size();
  std::vector<std::uint64_t> present(width), missing(width);
  std::vector<double> sum(width);
  std::vector<float> min(width, std::numeric_limits<float>::infinity());
  std::vector<float> max(width, -std::numeric_limits<float>::infinity());
  for (std::size_t e = 0; e < block.indices.size(); ++e) {
    std::size_t f = block.indices[e] - 1;
    float value = block.values[e];
    if (std::isnan(value)) {
      ++missing[f];
      continue;
    }
    ++present[f];
    sum[f] += value;
    min[f] = std::min(min[f], value);
    max[f] = std::max(max[f], value);
  }
  std::vector<ColumnStats> stats(width);
  for (std::uint64_t f = 0; f < width; ++f) {
    ColumnStats& column = stats[f];
    column.missing = missing[f];
    column.count = rows - missing[f];
    if (column.count == 0) continue;
    std::uint64_t zeros = column.count - present[f];
    column.min = zeros > 0 ? std::min(min[f], 0.0f) : min[f];
    column.max = zeros > 0 ? std::max(max[f], 0.0f) : max[f];
    column.mean = sum[f] / static_cast<double>(column.count);
    column.m2 = static_cast<double>(zeros) * column.mean * column.mean;
  }
  for (std::size_t e = 0; e < block.indices.size(); ++e) {
    ColumnStats& column = stats[block.indices[e] - 1];
    float value = block.values[e];
    if (std::isnan(value)) continue;
    double deviation = value - column.mean;
    column.m2 += deviation * deviation;
  }
  return stats;
}

class LineParser {
 public:
  LineParser(std::string_view text, const ParseOptions& options)
      : text_(text),
        max_index_(options.libsvm_features ? static_cast<std::uint64_t>(std::max<std::int64_t>(0, *options.libsvm_features))
                                           : std::min(kMaxIndex, options.max_columns)),
        width_from_reference_(options.libsvm_features.has_value()),
        nonfinite_(options.nonfinite) {}

  void parse(std::size_t begin, std::size_t end, SparseBlock& block) const {
    const char* p = text_.data() + begin;
    const char* block_end = text_.data() + end;
    while (p < block_end) {
      const void* newline = std::memchr(p, '\n', static_cast<std::size_t>(block_end - p));
      const char* line_end = newline ? static_cast<const char*>(newline) : block_end;
      parse_line(p, line_end, block);
      p = line_end + (newline ? 1 : 0);
    }
  }

 private:
  void parse_line(const char* p, const char* line_end, SparseBlock& block) const {
    const void* comment = std::memchr(p, '#', static_cast<std::size_t>(line_end - p));
    const char* end = comment ? static_cast<const char*>(comment) : line_end;
    p = skip_spaces(p, end);
    if (p == end) return;  // blank or comment-only line
    const char* token_end = find_space(p, end);
    float label;
    if (!formats::parse_float_exactly(p, token_end, label))
      throw error_at(p, "expected a numeric label at the start of the line, found " + quoted(p, token_end));
    if (!std::isfinite(label))
      throw error_at(p, "expected a finite number as the label, found " + quoted(p, token_end));
    std::uint64_t previous = 0;
    for (p = skip_spaces(token_end, end); p < end; p = skip_spaces(token_end, end)) {
      token_end = find_space(p, end);
      const char* colon = static_cast<const char*>(std::memchr(p, ':', static_cast<std::size_t>(token_end - p)));
      std::uint64_t index = 0;
      auto [index_end, status] = std::from_chars(p, colon ? colon : p, index);
      if (colon == nullptr || status != std::errc() || index_end != colon)
        throw error_at(p, "expected INDEX:VALUE with a positive integer INDEX, found " + quoted(p, token_end));
      check_index(p, index, previous);
      float value;
      if (!formats::parse_float_exactly(colon + 1, token_end, end, value))
        throw error_at(colon + 1, "expected a number after '" + std::to_string(index) + ":', found " +
                                      quoted(colon + 1, token_end));
      // NaN spelled as a missing token (as in CSV) is missing; any other
      // non-finite value is bad input unless --nonfinite missing.
      bool missing_token = formats::is_missing_value(std::string_view(colon + 1, static_cast<std::size_t>(token_end - colon - 1)));
      if (!std::isfinite(value) && !missing_token) {
        if (nonfinite_ != NonFinite::kMissing)
          throw error_at(colon + 1, "expected a finite number, found " + quoted(colon + 1, token_end),
                         Remedy::kReadNonFiniteAsMissing);
        value = std::numeric_limits<float>::quiet_NaN();
      }
      block.indices.push_back(static_cast<std::uint32_t>(index));
      block.values.push_back(value);
      block.max_index = std::max(block.max_index, static_cast<std::uint32_t>(index));
      previous = index;
    }
    block.labels.push_back(label);
    block.row_ends.push_back(block.indices.size());
  }

  void check_index(const char* at, std::uint64_t index, std::uint64_t previous) const {
    if (index == 0) throw error_at(at, "expected an index of at least 1 (indices are 1-based), found 0");
    if (index <= previous)
      throw error_at(at, "expected an index above " + std::to_string(previous) + " (indices must ascend), found " +
                             std::to_string(index));
    if (index > max_index_)
      throw width_from_reference_
          ? error_at(at, "expected an index of at most " + std::to_string(max_index_) +
                             " (the train part's feature count), found " + std::to_string(index))
          : error_at(at, "expected an index of at most " + std::to_string(max_index_) + ", found " +
                             std::to_string(index),
                     Remedy::kRaiseColumnLimit);
  }

  static const char* skip_spaces(const char* p, const char* end) {
    while (p < end && is_space(*p)) ++p;
    return p;
  }
  static const char* find_space(const char* p, const char* end) {
    while (p < end && !is_space(*p)) ++p;
    return p;
  }
  static std::string quoted(const char* begin, const char* end) {
    return formats::quote_for_message(std::string_view(begin, static_cast<std::size_t>(end - begin)));
  }
  TextError error_at(const char* p, std::string what, Remedy remedy = Remedy::kNone) const {
    return TextError{static_cast<std::size_t>(p - text_.data()), std::move(what), remedy, ""};
  }

  std::string_view text_;
  std::uint64_t max_index_;
  bool width_from_reference_;
  NonFinite nonfinite_;
};

std::vector<SparseBlock> parse_blocks(std::string_view text, const ParseOptions& options) {
  std::vector<std::size_t> starts = formats::split_after_newlines(text, 0, formats::kParseBlockBytes);
  std::vector<SparseBlock> blocks(starts.size() - 1);
  LineParser parser(text, options);
  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) {
    try {
      parser.parse(starts[b], starts[b + 1], blocks[b]);
    } catch (TextError& error) {
      blocks[b].error = std::move(error);
    }
  });
  std::vector<std::optional<TextError>> errors;
  for (auto& block : blocks) errors.push_back(std::move(block.error));
  if (const TextError* error = formats::first_error(errors))
    formats::throw_text_error(options.display_name, text, *error);
  return blocks;
}

// An empty table of `rows` x `width` zeros with columns f1..fWIDTH, label.
Table dense_table(std::uint64_t rows, std::uint64_t width) {
  Table table;
  table.columns.resize(width + 1);
  for (std::uint64_t f = 0; f < width; ++f) {
    std::string& column_name = table.columns[f].name;
    column_name.assign(1, 'f');
    column_name += std::to_string(f + 1);
  }
  table.columns[width].name = "label";
  table.label_column = width;
  table.rows = rows;
  table.sample_shape = {static_cast<std::int64_t>(width)};
  table.features.resize(rows * width);
  table.labels.resize(rows);
  return table;
}

// Writes a block's entries and labels into its rows and takes its statistics.
void densify(SparseBlock& block, std::uint64_t first_row, Table& table) {
  const std::uint64_t width = table.label_column;
  float* dense = table.features.data() + first_row * width;
  std::size_t entry = 0;
  for (std::size_t r = 0; r < block.labels.size(); ++r) {
    for (; entry < block.row_ends[r]; ++entry) dense[r * width + block.indices[entry] - 1] = block.values[entry];
    table.labels[first_row + r] = block.labels[r];
  }
  block.stats = sparse_column_stats(block, width);
  block.stats.emplace_back();
  formats::add_row_stats(block.labels.data(), block.labels.size(), 1, &block.stats[width]);
}

}  // namespace

Table parse_libsvm(std::string_view text, const ParseOptions& options) {
  const std::string& name = options.display_name;
  formats::check_utf8_text(text, name);
  std::vector<SparseBlock> blocks = parse_blocks(text, options);

  std::vector<std::uint64_t> first_row(blocks.size() + 1, 0);
  std::uint64_t width = options.libsvm_features ? static_cast<std::uint64_t>(std::max<std::int64_t>(0, *options.libsvm_features)) : 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    first_row[b + 1] = first_row[b] + blocks[b].labels.size();
    width = std::max<std::uint64_t>(width, blocks[b].max_index);
  }
  const std::uint64_t rows = first_row.back();
  if (rows == 0)
    formats::throw_text_error(name, text, TextError{text.size(), "expected a line \"LABEL INDEX:VALUE ...\", found end of input"});
  if (width == 0) throw data_error(name + ": expected at least one INDEX:VALUE feature, found none");
  std::uint64_t cell_limit = std::max<std::uint64_t>(kMinCellLimit, kCellsPerInputByte * text.size());
  if (width > cell_limit / rows)
    throw data_error(name + ": expected at most " + std::to_string(cell_limit) + " cells once densified, found " +
                     std::to_string(rows) + " rows x " + std::to_string(width) + " features");

  Table table = dense_table(rows, width);
  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) { densify(blocks[b], first_row[b], table); });
  for (std::uint64_t c = 0; c <= width; ++c) {
    ColumnStats stats;
    for (const auto& block : blocks) stats.merge(block.stats[c]);
    stats.store_into(table.columns[c]);
  }
  return table;
}

}  // namespace anneal
