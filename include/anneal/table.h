// Table: a dataset parsed into float32 arrays, plus the schema that says what
// each column was. This is what every format parser produces and what the
// store keeps as a version's parsed form.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "anneal/hash.h"

namespace anneal {

enum class ColumnType {
  kNumeric,      // values are numbers; missing values are NaN
  kCategorical,  // values are codes 0..categories.size()-1; missing is NaN
  // Dates and date-times. The value is days since 1970-01-01T00:00 of the
  // wall-clock time as written (a zone offset is kept in the source bytes
  // but not applied), the time of day as the fraction: exact for dates,
  // within 3 minutes for times between 1970 and 2149 (float32). Missing is
  // NaN. ColumnSchema::datetime_format says how the column is written.
  kDatetime,
};

const char* column_type_name(ColumnType type);  // "numeric" / "categorical" / "datetime"

// One column of the source. For image formats (IDX) a whole image is one
// column with a shape such as {1, 28, 28}; tabular columns have an empty shape
// (a scalar).
struct ColumnSchema {
  std::string name;
  ColumnType type = ColumnType::kNumeric;
  std::vector<std::int64_t> shape;       // empty: one scalar per row
  std::vector<std::string> categories;   // kCategorical: code -> string, first-seen order
  // kDatetime: the one format every value of the column is written in, in
  // the --date-format notation (e.g. "YYYY-MM-DD", "DD.MM.YYYY HH:MM").
  std::string datetime_format;
  bool has_time = false;                 // kDatetime: values carry a time of day
  std::uint64_t missing = 0;             // missing cells (empty, NA, NaN)
  std::uint64_t count = 0;               // non-missing scalar values seen
  // Over the non-missing values (numeric columns and image columns; for
  // datetime columns in days since 1970). For categorical columns these
  // describe the codes and are informational only.
  double min = 0, max = 0, mean = 0, std = 0;

  std::int64_t width() const;  // scalars per row: product of shape, 1 if empty
};

// A parsed dataset part (train or test). The label column is one of
// `columns`; `features` holds every other column, in source order.
struct Table {
  std::vector<ColumnSchema> columns;     // every source column, in source order
  std::size_t label_column = 0;          // index into columns
  std::uint64_t rows = 0;
  // Per-row feature shape: {F} for tabular data (F = sum of feature widths),
  // {C, H, W} for images.
  std::vector<std::int64_t> sample_shape;
  // rows x prod(sample_shape) floats, row-major (row i is contiguous).
  // Categorical features hold their code; missing cells hold NaN.
  std::vector<float> features;
  std::vector<float> labels;             // rows floats: the value or the category code
  // Set by a parser that read every feature value from an unsigned byte
  // (IDX images of element type 08): `features` then holds only the integers
  // 0..255, and the store keeps them as such (dtype u8), one byte a value
  // instead of four.
  bool byte_features = false;

  std::int64_t sample_width() const;     // prod(sample_shape)
};

// A 64-bit key for the content of row `row` of `table` over the columns
// `columns` (indices into table.columns; the label included when listed):
// numeric and datetime cells by their float32 bits (every NaN alike),
// categorical cells by their category text, so the key of a row does not
// depend on the version's dictionary order or on its position in the file.
// Equal rows have equal keys in every version of a dataset; a test split
// decided by it keeps a row on the same side as the data grows, and a
// promotion gate uses it to find the rows a model trained on. Pure.
std::uint64_t row_content_key(const Table& table, std::uint64_t row, std::span<const std::size_t> columns);
// row_content_key over every column, the label included.
std::uint64_t row_content_key(const Table& table, std::uint64_t row);

// row_content_key for many rows of one table: where each column's cells sit
// in a row is worked out once, and each row's bytes are hashed in one go
// rather than four at a time (the same digest: BLAKE2b does not depend on
// how its input is fed). Views `table`, which must outlive it and keep its
// columns. key() and keyed_key() are thread-safe.
class RowContentKeys {
 public:
  RowContentKeys(const Table& table, std::span<const std::size_t> columns);
  explicit RowContentKeys(const Table& table);  // every column, the label included
  // row_content_key: the first 8 bytes, little-endian, of the BLAKE2b-256
  // of the row's bytes (docs/STORE.md, "the split").
  std::uint64_t key(std::uint64_t row) const;
  // short_hash (SipHash-2-4) of the same bytes under `hash_key`: about a
  // fifth of key()'s cost on a row of a few dozen cells.
  std::uint64_t keyed_key(std::uint64_t row, const ShortHashKey& hash_key) const;

 private:
  // Hands the row's bytes to `out` (put_u32, put_text), in order.
  template <typename Out>
  void encode(std::uint64_t row, Out& out) const;

  struct Cells {
    std::size_t column;
    bool label;
    std::size_t offset;  // into the row's feature block
    std::size_t width;
    bool categorical;
  };
  const Table* table_;
  std::size_t row_width_;
  std::vector<Cells> cells_;
};

// Running statistics: merge() combines two parts with Chan et al.'s parallel
// update, so parsing blocks in parallel and merging gives the same schema.
struct ColumnStats {
  std::uint64_t count = 0, missing = 0;
  double min = 0, max = 0, mean = 0, m2 = 0;
  void add(double value);      // NaN counts as missing
  void merge(const ColumnStats& other);
  void store_into(ColumnSchema& column) const;  // fills count/missing/min/max/mean/std
};

}  // namespace anneal
