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
// What the file name alone says (detect_format's first step): kAuto when it
// names no format.
Format format_from_name(std::string_view file_name);

// How the parsers read numbers that are not finite: inf, -inf, infinity, a
// nan spelled other than the missing tokens (-nan, nan(1)), values beyond
// float32's range (1e39) and, in IDX float data, inf and NaN elements. Such
// a value would make a column statistic infinite; by default it is bad input.
enum class NonFinite {
  kError,    // "NAME:LINE:COLUMN: expected a finite number, found ..."
  kMissing,  // read as a missing value (NaN), like an empty cell
};

// Parses a --nonfinite value ("error" or "missing"); throws kUsage otherwise.
NonFinite parse_nonfinite_name(std::string_view name);

// Limits that keep memory bounded whatever the input. Each names the flag
// that raises it in its error message.
//
// Columns: Excel stops at 16,384 columns, so no spreadsheet export is wider;
// a header of that many names costs a few MB of schema. LIBSVM feature
// indices count as columns (they become f1..fN). The hard ceiling keeps the
// catalog's schema row (about 100 bytes a column) within kMaxSchemaBytes.
inline constexpr std::uint64_t kDefaultMaxColumns = 16384;
inline constexpr std::uint64_t kCeilingMaxColumns = 1000000;
// Compressed input is inflated into memory: at most this many bytes, and at
// most this many times the compressed size. Real CSV compresses 3-20x (gzip
// cannot exceed about 1030x; zstd on a file of zeros reaches 10^4x and more).
inline constexpr std::uint64_t kDefaultMaxDecompressedBytes = std::uint64_t{4} << 30;
inline constexpr std::uint64_t kDefaultMaxDecompressionRatio = 200;
// Column names longer than this are refused: they end up in every catalog
// read of the version.
inline constexpr std::size_t kMaxColumnNameBytes = 1024;

// A date format an import is given (--date-format): FORMAT for every column
// whose values are all written in it and that would otherwise be
// categorical, or COLUMN=FORMAT to read that column as dates in FORMAT.
// FORMAT is the notation of ColumnSchema::datetime_format: YYYY, MM (the
// month; minutes right after HH), DD, HH, SS, a run of f (fractions of a
// second), Z (a zone: Z, +HH:MM, -HH:MM, +HHMM; not applied) and the
// separators space - / . : , _ T, e.g. "DD/MM/YYYY", "MM/DD/YYYY HH:MM".
struct DateFormatOption {
  std::string column;  // empty: any column it fits
  std::string format;
  // The format a model's training data had (predict input), not one the user
  // gave: an error then names the model, not the flag.
  bool as_trained = false;
};

// Parses "FORMAT" or "COLUMN=FORMAT" (split at the last '='; a format holds
// no '='). Throws kUsage (Subject::kDateFormat) naming the value when FORMAT
// is not a valid notation.
DateFormatOption parse_date_format_option(std::string_view text);
// The option as parse_date_format_option reads it: "FORMAT" or "COLUMN=FORMAT".
std::string date_format_option_text(const DateFormatOption& option);

// A column whose values all look like dates in a form that does not say
// which number is the day and which the month (01/02/2024): the import
// leaves it categorical and suggests the formats (one or both orders) in
// which every value of its first rows is a valid date.
struct DateFormatHint {
  std::string column;
  std::vector<std::string> formats;
};

// The text of a datetime cell or statistic (days since 1970-01-01) of
// `column`: "2024-03-01" for a date column, "2024-03-01 09:30" with a time
// of day (":SS" too when the column's format has seconds), rounded to that
// unit; "" for NaN and values beyond any 4-digit year.
std::string datetime_text(double days, const ColumnSchema& column);

struct DecompressLimits {
  std::uint64_t max_bytes = kDefaultMaxDecompressedBytes;  // --max-decompressed-size
  std::uint64_t max_ratio = kDefaultMaxDecompressionRatio;  // --max-decompression-ratio
};

struct ParseOptions {
  std::string display_name;           // used in error messages (the path as given)
  bool header = true;                 // CSV/TSV: first record names the columns
  // The label column: a name, or a 0-based index written as digits; empty
  // means the last column. CSV/TSV only (IDX and LIBSVM carry their labels).
  std::string label;
  // CSV/TSV: false for input that has no label column (the rows predict
  // reads for a model): every column is a feature, `label` is not read, the
  // Table's labels stay empty and its label_column is columns.size(). All
  // else (types, errors and their positions) is as with a label column.
  bool labelled = true;
  // CSV/TSV: columns (names or 0-based indices) to treat as categorical even
  // when every value looks like a number.
  std::vector<std::string> categorical;
  // When set (parsing the test part of a version), column names and types
  // must match these; categorical dictionaries are extended with unseen
  // values, appended after the reference's codes so train codes stay valid.
  const std::vector<ColumnSchema>* reference = nullptr;
  // LIBSVM: feature count of the reference part, so test matches train width.
  std::optional<std::int64_t> libsvm_features;
  NonFinite nonfinite = NonFinite::kError;
  // CSV/TSV: most columns (label included); LIBSVM: highest feature index.
  // Checked before anything per column is allocated (--max-columns).
  std::uint64_t max_columns = kDefaultMaxColumns;
  // CSV/TSV: date formats the user gave (parsed with
  // parse_date_format_option). Ignored with `reference`, which says which
  // columns are dates and how they are written.
  std::vector<DateFormatOption> date_formats;
  // CSV/TSV: when set (predict reading new rows for a model), only the
  // columns named here are typed as an import types them (numbers, dates);
  // every other column but the label is read as text, so a column the
  // model does not use can never fail the parse. Names the file lacks are
  // ignored: the caller reports the columns it needs. A date_formats entry
  // marked as_trained for a column the file lacks is ignored too.
  std::optional<std::vector<std::string>> typed_columns;
  // CSV/TSV: when set (predict), only the columns named here (and the
  // label) keep their values. Every other column's fields are read as
  // fields (quotes, field counts and encoding are checked as ever) but its
  // cells hold NaN and it gets no dictionary: a column the caller does not
  // use (an order id, unique per row) costs no memory per distinct value
  // and can never fail the parse. Such a column is categorical with no
  // categories and every cell missing. Names the file lacks are ignored;
  // not with `reference`.
  std::optional<std::vector<std::string>> read_columns;
  // CSV/TSV: when set, receives a hint for each column left categorical
  // whose values look like ambiguous dates (not with `reference`).
  std::vector<DateFormatHint>* date_format_hints = nullptr;
};

// Sniffs gzip (1f 8b) or zstd (28 b5 2f fd) magic and returns the
// decompressed bytes; returns the input unchanged otherwise. Throws kBadData
// naming display_name on a truncated or corrupt stream, and as soon as the
// output passes limits.max_bytes or limits.max_ratio times bytes.size()
// (the message names the limit and its flag): memory stays within about
// the limit however the stream claims to expand.
std::string decompress_input(std::string_view bytes, const std::string& display_name,
                             const DecompressLimits& limits = {});

// CSV (delimiter ',') and TSV (delimiter '\t'): RFC 4180 quoting including
// quoted newlines and doubled quotes, LF or CRLF line ends, an optional UTF-8
// BOM, and empty / NA / NaN (any case) as missing. A column's type is numeric
// when every non-missing value among its first 1000 data rows parses as a
// number; else datetime when the first of those values is written in one of
// the recognized forms (ISO 8601 YYYY-MM-DD with an optional time HH:MM,
// HH:MM:SS or HH:MM:SS.fff after 'T' or a space and an optional zone;
// YYYY/MM/DD and DD.MM.YYYY with an optional HH:MM or HH:MM:SS) and every
// other one is written in that form too, or in a format of
// options.date_formats given without a column; categorical otherwise (or
// when named in options.categorical). The label column is never datetime.
// A later non-number in a numeric column, or a value not written in a
// datetime column's format or naming no real date or time (2023-02-30,
// 25:00), is an error that names the column and its format.
// Errors: empty input, header with no rows, ragged rows, unterminated quote,
// text that is not UTF-8 or holds NUL bytes, a label column that does not
// exist, a missing label value, more than options.max_columns columns, a
// column name over kMaxColumnNameBytes, a non-finite number (unless
// options.nonfinite is kMissing). kUsage (Subject::kDateFormat): a
// date-format column that does not exist, is the label or is also declared
// categorical.
Table parse_delimited(std::string_view text, char delimiter, const ParseOptions& options);

// IDX (as used by MNIST and Fashion-MNIST): `images` holds N samples of any
// rank (N x H x W becomes sample_shape {1, H, W}; N x D becomes {D}); `labels`
// is a rank-1 IDX of N values. Element types u8, s8, i16, i32, f32, f64
// (big-endian). Columns: "image" (numeric, shape = sample_shape) and "label".
// Errors: bad magic, truncated data, sizes that do not match each other, a
// non-finite f32/f64 image element (unless options.nonfinite is kMissing:
// then it is missing) or label.
Table parse_idx(std::string_view images, std::string_view labels,
                const ParseOptions& options, const std::string& labels_display_name);

// LIBSVM sparse text: "LABEL INDEX:VALUE ..." per line, 1-based ascending
// indices, '#' comments. Densified to F = max index columns named f1..fF plus
// "label"; absent entries are 0. Errors: malformed lines, an index above
// options.max_columns, a non-finite label, a non-finite value (unless
// options.nonfinite is kMissing: then the entry is missing).
Table parse_libsvm(std::string_view text, const ParseOptions& options);

// Whether decompress_input would decompress `bytes` (gzip or zstd magic).
// When it would not, parse the (mapped) bytes in place instead of calling
// decompress_input: copying a 200 MB input into a string costs about as much
// as parsing it.
bool is_compressed_input(std::string_view bytes);

}  // namespace anneal
