// Parsers from the input formats anneal imports into a Table.
//
// All functions are pure: they take the input bytes (already decompressed)
// and return a Table, or throw anneal::Error of kind kBadData whose message is
// one line "NAME:LINE[:COLUMN]: expected ..., found ...". NAME is
// ParseOptions::display_name. Lines and columns are 1-based; the column is
// the byte offset within the line plus one. They are safe to call from several
// threads at once and may use oneTBB internally to parse in parallel; the
// result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/table.h"

namespace anneal {

enum class Format { kAuto, kCsv, kTsv, kIdx, kLibsvm };

const char* format_name(Format format);         // "csv", "tsv", "idx", "libsvm"
// Parses a --format value; throws kUsage naming the flag on anything else.
Format parse_format_name(std::string_view name);
// Guesses from the file name (ignoring a trailing .gz / .zst) and, failing
// that, from the first bytes of the decompressed content. Never returns kAuto.
Format detect_format(std::string_view file_name, std::string_view content);

struct ParseOptions {
  std::string display_name;           // used in error messages (the path as given)
  bool header = true;                 // CSV/TSV: first record names the columns
  // The label column: a name, or a 0-based index written as digits; empty
  // means the last column. CSV/TSV only (IDX and LIBSVM carry their labels).
  std::string label;
  // CSV/TSV: columns (names or 0-based indices) to treat as categorical even
  // when every value looks like a number.
  std::vector<std::string> categorical;
  // When set (parsing the test part of a version), column names and types
  // must match these; categorical dictionaries are extended with unseen
  // values, appended after the reference's codes so train codes stay valid.
  const std::vector<ColumnSchema>* reference = nullptr;
  // LIBSVM: feature count of the reference part, so test matches train width.
  std::optional<std::int64_t> libsvm_features;
};

// Sniffs gzip (1f 8b) or zstd (28 b5 2f fd) magic and returns the
// decompressed bytes; returns the input unchanged otherwise. Throws kBadData
// naming display_name on a truncated or corrupt stream.
std::string decompress_input(std::string_view bytes, const std::string& display_name);

// CSV (delimiter ',') and TSV (delimiter '\t'): RFC 4180 quoting including
// quoted newlines and doubled quotes, LF or CRLF line ends, an optional UTF-8
// BOM, and empty / NA / NaN (any case) as missing. A column's type is numeric
// when every non-missing value among its first 1000 data rows parses as a
// number, categorical otherwise (or when named in options.categorical); a
// later non-number in a numeric column is an error that names the column.
// Errors: empty input, header with no rows, ragged rows, unterminated quote,
// text that is not UTF-8 or holds NUL bytes, a label column that does not
// exist, a missing label value.
Table parse_delimited(std::string_view text, char delimiter, const ParseOptions& options);

// IDX (as used by MNIST and Fashion-MNIST): `images` holds N samples of any
// rank (N x H x W becomes sample_shape {1, H, W}; N x D becomes {D}); `labels`
// is a rank-1 IDX of N values. Element types u8, s8, i16, i32, f32, f64
// (big-endian). Columns: "image" (numeric, shape = sample_shape) and "label".
// Errors: bad magic, truncated data, sizes that do not match each other.
Table parse_idx(std::string_view images, std::string_view labels,
                const ParseOptions& options, const std::string& labels_display_name);

// LIBSVM sparse text: "LABEL INDEX:VALUE ..." per line, 1-based ascending
// indices, '#' comments. Densified to F = max index columns named f1..fF plus
// "label"; absent entries are 0.
Table parse_libsvm(std::string_view text, const ParseOptions& options);

// Whether decompress_input would decompress `bytes` (gzip or zstd magic).
// When it would not, parse the (mapped) bytes in place instead of calling
// decompress_input: copying a 200 MB input into a string costs about as much
// as parsing it.
bool is_compressed_input(std::string_view bytes);

}  // namespace anneal
