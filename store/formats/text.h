// Shared pieces of the text parsers (CSV/TSV and LIBSVM): error positions,
// input validation and the block splitting that lets them parse in parallel.
//
// Parsers work on byte offsets into the whole input and only turn an offset
// into "NAME:LINE:COLUMN" when they report an error, so the hot loops never
// count lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anneal/error.h"

namespace anneal::formats {

// A malformed spot found while parsing part of a text. Block parsers throw it
// (or keep it) instead of anneal::Error so that parallel blocks can report the
// error that comes first in the file, not the one that was found first.
struct TextError {
  TextError(std::size_t offset, std::string what, Remedy remedy = Remedy::kNone, std::string remedy_argument = "")
      : offset(offset), what(std::move(what)), remedy(remedy), remedy_argument(std::move(remedy_argument)) {}
  std::size_t offset;           // byte offset into the whole text
  std::string what;             // "expected ..., found ..."
  Remedy remedy;                // what would let the text parse
  std::string remedy_argument;  // the column the remedy names, if any
};

// "NAME:LINE:COLUMN" of a byte offset: LINE counts every '\n' before it,
// COLUMN is the byte offset within that line; both 1-based.
std::string location(const std::string& name, std::string_view text, std::size_t offset);

// anneal::Error of kind kBadData: "NAME:LINE:COLUMN: WHAT".
[[noreturn]] void throw_text_error(const std::string& name, std::string_view text,
                                   const TextError& error);

// The first error (lowest offset) of several block results, if any.
const TextError* first_error(const std::vector<std::optional<TextError>>& errors);

// Renders a value for an error message: quoted with '...', control bytes
// escaped, long values cut, so the message stays one line.
std::string quote_for_message(std::string_view value);

// Throws kBadData at the first NUL byte or invalid UTF-8 sequence.
void check_utf8_text(std::string_view text, const std::string& name);
// The first NUL byte or invalid UTF-8 sequence of `text` (offsets into it),
// checked in parallel; `text` must start at a character boundary.
std::optional<TextError> first_utf8_error(std::string_view text);

// Whether the number of '"' in [p, p + n) is odd.
bool odd_quote_count(const char* p, std::size_t n);

// Offset just past the '\n' that ends the record containing `pos`, given
// whether `pos` lies inside a quoted field (split_records' cut); text.size()
// when none does within `text`.
std::size_t record_end_after(std::string_view text, std::size_t pos, bool in_quote);

// Offsets that cut [begin, text.size()) into pieces of roughly block_bytes,
// each cut just after a '\n' (or at the end). Returns the piece starts plus a
// final text.size(); a piece may be longer than block_bytes when lines are.
std::vector<std::size_t> split_after_newlines(std::string_view text, std::size_t begin,
                                              std::size_t block_bytes);

// Like split_after_newlines, but never cuts inside a double-quoted field:
// quote parity decides which '\n' end a record. Valid RFC 4180 text is cut
// exactly at record boundaries; on invalid text the pieces may be wrong after
// the first stray quote, which the block parser then reports.
std::vector<std::size_t> split_records(std::string_view text, std::size_t begin,
                                       std::size_t block_bytes);

// Lines in [begin, end) (a line starts at `begin`) that hold anything: each
// ends with '\n' or at `end`, and empty lines and lines of just "\r" do not
// count. For text without quotes this is its number of CSV records.
std::size_t count_nonempty_lines(std::string_view text, std::size_t begin, std::size_t end);

// Whether the (already trimmed) value means "missing": empty, NA, N/A or NaN
// in any case.
bool is_missing_value(std::string_view value);

// Target size of the blocks text parsers hand to parallel workers: large
// enough that per-block overhead vanishes, small enough to balance 2-16
// threads on inputs of a few MB.
inline constexpr std::size_t kParseBlockBytes = std::size_t{1} << 20;

}  // namespace anneal::formats
