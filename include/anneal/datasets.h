// Datasets: named, immutable versions of imported data.
//
// `import_dataset` turns input files into version NAME@vN: the exact source
// bytes (chunked, so later versions share unchanged chunks), the schema, and
// the parsed form that training loads (float32 arrays; IDX images of unsigned
// bytes keep one byte per pixel, dtype u8). Versions are never modified.
// Every function here takes a Store used by one thread, throws anneal::Error
// and prints nothing (progress goes to the Reporter).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/formats.h"
#include "anneal/report.h"
#include "anneal/store.h"
#include "anneal/table.h"

namespace anneal {

// NAME (latest), NAME@latest or NAME@vN.
struct DatasetRef {
  std::string name;
  std::optional<int> version;  // nullopt: the latest
  std::string to_string() const;
};
// Throws kUsage naming `what` (e.g. "REF") when `text` is not a reference.
DatasetRef parse_dataset_ref(std::string_view text, std::string_view what = "dataset reference");
// Throws kUsage unless `name` is 1-128 of [A-Za-z0-9._-], starting with a letter or digit.
void validate_dataset_name(std::string_view name);

// One stored stream of a version: a source file or a parsed tensor.
//   roles: source, source.labels, test.source, test.source.labels (the files
//   as given), features, labels, split, test.features, test.labels (parsed).
struct DatasetStream {
  std::string role;
  std::string blob;       // BLAKE2b-256 of the stream's bytes
  std::uint64_t size = 0; // bytes
  std::string file_name;  // sources: the file's base name
  std::string dtype;      // tensors: "f32" or "u8"
  std::vector<std::int64_t> shape;
  std::uint64_t chunks = 0;
};

struct DatasetVersion {
  std::string name;
  int version = 0;
  std::string created_at;   // ISO 8601 UTC
  std::string fingerprint;  // identifies the content + import options
  std::string format;       // csv, tsv, idx, libsvm
  std::uint64_t rows = 0, train_rows = 0, test_rows = 0;
  std::string label_column;
  std::vector<ColumnSchema> columns;
  std::vector<std::int64_t> sample_shape;
  nlohmann::json options;   // the import options that shaped the parse
  std::vector<DatasetStream> streams;

  std::string ref() const { return name + "@v" + std::to_string(version); }
  const DatasetStream* stream(std::string_view role) const;
};

struct ImportRequest {
  std::string dataset;
  std::filesystem::path file;
  std::optional<std::filesystem::path> labels;       // IDX: the labels file
  std::optional<std::filesystem::path> test;         // a separate test split
  std::optional<std::filesystem::path> test_labels;  // IDX: its labels
  Format format = Format::kAuto;
  bool header = true;
  std::string label;                     // column name or 0-based index; "" = last
  std::vector<std::string> categorical;  // force these columns categorical
  // CSV/TSV: date formats (--date-format), see ParseOptions::date_formats.
  std::vector<DateFormatOption> date_formats;
  // Test fraction when no --test is given. Each row goes to the test split
  // when a hash of (seed, row_content_key of the row) falls below `split`
  // of the hash range: a row keeps its side in every version that holds it
  // (as an export grows nightly), equal rows share a side, and each class
  // gets about `split` of its rows (not exactly: no stratification).
  double split = 0.2;
  std::uint64_t seed = 0;
  NonFinite nonfinite = NonFinite::kError;           // --nonfinite
  std::uint64_t max_columns = kDefaultMaxColumns;    // --max-columns
  DecompressLimits decompress_limits;                // --max-decompressed-size, --max-decompression-ratio
};

// The largest schema_json row an import writes (column names, statistics and
// categorical values): every 'data list' and 'data show' reads it.
inline constexpr std::size_t kMaxSchemaBytes = std::size_t{64} << 20;

struct ImportResult {
  DatasetVersion version;
  // Columns left categorical that look like dates in an ambiguous form
  // (01/02/2024): a date format would read them as dates.
  std::vector<DateFormatHint> date_format_hints;
  bool created = false;           // false: identical content was already a version
  std::uint64_t bytes_added = 0;  // compressed bytes this import added to objects/
  std::uint64_t source_bytes = 0; // size of the input files
};

// Imports files as a new version of a dataset, or names the existing version
// with the same content and options. Bad input throws kBadData before
// anything is written; a failure at any moment leaves the catalog unchanged.
// Safe to run in several processes at once on one store.
ImportResult import_dataset(Store& store, const ImportRequest& request, Reporter& reporter);

struct DatasetSummary {
  std::string name;
  int versions = 0;
  DatasetVersion latest;
};
std::vector<DatasetSummary> list_datasets(Store& store);
// All versions of one dataset, oldest first. Throws kNotFound.
std::vector<DatasetVersion> dataset_versions(Store& store, std::string_view name);
// Throws kNotFound naming the dataset or version.
DatasetVersion find_dataset(Store& store, const DatasetRef& ref);

struct DatasetDiff {
  DatasetVersion from, to;
  std::vector<std::string> schema_changes;  // one human-readable line each
  std::uint64_t from_bytes = 0, to_bytes = 0;  // distinct chunk bytes per version
  std::uint64_t shared_bytes = 0;              // chunk bytes both versions hold
  std::uint64_t source_shared_bytes = 0;       // of which, in source streams
};
DatasetDiff diff_datasets(Store& store, const DatasetRef& from, const DatasetRef& to);

// Writes the stream `role` (default the source file) of a version to `out`,
// bit-identical to what was imported. Refuses (kUsage) to replace an
// existing file unless `force`.
void export_dataset(Store& store, const DatasetRef& ref, const std::string& role,
                    const std::filesystem::path& out, bool force);

// The parsed form of a version, split into train and test (empty when the
// version has none), for training and evaluation: float32 whatever each
// stream's stored dtype (u8 values become 0..255). Each stream is decoded
// straight into, or converted block by block into, the returned arrays, so
// no second whole copy is held. kCorrupt naming the version when a stream is
// missing, damaged or not whole rows. To read a version by row range
// instead, in its stored type, see TensorRowReader (dataset_rows.h).
struct LoadedDataset {
  DatasetVersion version;
  Table train, test;
};
LoadedDataset load_dataset(Store& store, const DatasetRef& ref);

// Schema <-> JSON, as stored in the catalog and printed by --json. A
// statistic that is not finite is written as null (JSON has no inf or NaN)
// and read back as NaN, so every row the writer produced can be read.
nlohmann::json columns_to_json(const std::vector<ColumnSchema>& columns);
std::vector<ColumnSchema> columns_from_json(const nlohmann::json& json);

}  // namespace anneal
