// CSV/TSV read from a file in windows, for imports of files larger than
// memory and predictions on them: the same parse as parse_delimited, in
// bounded memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/table.h"

namespace anneal {

// Bytes of text a scan reads and parses at a time, at least: the import
// takes a parse block (formats::kParseBlockBytes, 1 MiB) per thread when
// that is more, so every thread has a block to parse.
inline constexpr std::size_t kScanWindowBytes = std::size_t{4} << 20;

struct DelimitedScanCallbacks {
  // Every byte of the file, once, in order, as it is read (the import
  // hashes or stores the source from these). May be empty.
  std::function<void(std::string_view bytes)> on_bytes;
  // Each parsed batch of rows, in file order: features and labels as
  // parse_delimited would hold them for these rows, categorical codes
  // final. Its columns hold names and types only; the callee may replace
  // them (the scan never reads them again, and passes the same Table each
  // time) but must leave the rest alone. May be empty.
  std::function<void(Table& batch)> on_rows;
  // Before each on_rows, once per categorical column (`column` indexes
  // `batch`'s columns, which on_rows gets next) whose dictionary grew since
  // the last call: the values
  // it gained, in code order (the first call for a column starts with
  // options.reference's values when set). The values passed for a column
  // so far, in order, are the text of its codes so far, so a callee that
  // needs the text of the batch's codes (predict, mapping them into a
  // model's dictionary) keeps them; nothing else needs to. May be empty.
  std::function<void(const Table& batch, std::size_t column, std::span<const std::string> added)> on_categories;
};

// What a scan held at most, so tests can check the bound.
struct DelimitedScanPeak {
  std::size_t buffer_bytes = 0;  // text held at once
  std::size_t batch_rows = 0;    // rows parsed at once
};

// Parses the CSV (delimiter ',') or TSV ('\t') in `file` as parse_delimited
// parses the whole text: the same types, dictionaries, statistics and
// errors, with the same messages and NAME:LINE:COLUMN positions (a UTF-8
// error anywhere in the file still comes before any other error). Returns
// that Table without its rows: features and labels empty, rows the count.
// Reads about `window_bytes` at a time with pread (no mapping) and keeps at
// most about two windows of text and the rows parsed from them, plus what
// one record needs when a record is longer, plus the categorical
// dictionaries. On an error nothing is passed on after the batch that
// holds it. Throws what FileReader throws when the file changes size.
Table scan_delimited(const FileReader& file, char delimiter, const ParseOptions& options,
                     const DelimitedScanCallbacks& callbacks, std::size_t window_bytes = kScanWindowBytes,
                     DelimitedScanPeak* peak = nullptr);

}  // namespace anneal
