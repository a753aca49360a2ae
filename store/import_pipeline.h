// The steps every dataset import shares (store/datasets.cc's whole-file
// import, store/formats/import_delimited.cc's streamed CSV/TSV and
// store/formats/import_idx.cc's streamed IDX): the split mask, the parse
// options, the version's identity, and recording the version in the
// catalog once its objects are published. Internal to store/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/report.h"
#include "anneal/store.h"
#include "anneal/table.h"
#include "streams.h"

namespace anneal::importing {

template <typename T>
std::string_view as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// The byte values of a Table whose byte_features is set: each float is an
// integer 0..255 read from a byte, so the conversion is exact (checked: a
// value that is not is a parser bug, not bad input).
std::vector<std::uint8_t> features_as_bytes(const std::vector<float>& features);

// Stats of two parts of one column (train and test files) combined.
ColumnSchema merge_column(const ColumnSchema& train, const ColumnSchema& test);

// How a version's test split was decided from its rows' content
// (docs/STORE.md, "The split"), recorded as its options' "split_rule".
enum class SplitRule {
  kRowContent,         // "row-content": BLAKE2b of the row's bytes, mixed with the seed
  kRowContentSipHash,  // "row-content-siphash": SipHash-2-4 of the same bytes, keyed by the seed
};
const char* split_rule_name(SplitRule rule);

// The rule an import into `dataset` splits by: row-content when any version
// of the dataset was split by it, so its rows keep their sides as the data
// grows, and for IDX images (BLAKE2b hashes a row of pixels as it streams
// by; SipHash would have to hold it); row-content-siphash otherwise.
SplitRule split_rule_for(Store& store, const std::string& dataset, Format format);

// The test split, decided row by row from the row's content under `rule`
// (see import_pipeline.cc): 1 for a test row.
std::vector<std::uint8_t> content_split(const Table& table, double fraction, std::uint64_t seed, SplitRule rule);

// The parse options an import request sets, for the file `display_name`.
ParseOptions parse_options_of(const ImportRequest& request, std::string display_name);
std::string display_name(const std::filesystem::path& path);

// The identity of an import: the source bytes (their stream hashes, by
// role), every option that shaped the parse and the type the features are
// stored in. The same fingerprint again means the same version.
struct ImportIdentity {
  nlohmann::json options;
  std::string fingerprint;
};

// `feature_dtypes`: the dtype of each features stream (by role) that is not
// "f32" (see import_pipeline.cc).
// `split_rule`: the rule a version without a test file was split by.
ImportIdentity import_identity(const ImportRequest& request, Format format, const std::string& label,
                               const std::vector<std::pair<std::string, std::string>>& source_hashes,
                               const std::map<std::string, std::string>& feature_dtypes, SplitRule split_rule);

// The version's schema row (columns and sample shape) as JSON text;
// kBadData when it would exceed kMaxSchemaBytes.
std::string schema_text_of(const ImportRequest& request, const std::vector<ColumnSchema>& columns,
                           const std::vector<std::int64_t>& sample_shape);

// {rows, sample...}
std::vector<std::int64_t> with_rows(std::uint64_t rows, const std::vector<std::int64_t>& sample);

// One stream of a version as the catalog records it: a source file (with
// its file name) or a tensor (with its dtype and shape).
struct VersionStream {
  std::string role;
  StreamChunks chunks;
  std::optional<std::string> file_name;  // sources
  std::string dtype;                      // tensors
  std::vector<std::int64_t> shape;        // tensors
};

// What the catalog row of a new version says besides its streams.
struct VersionRow {
  std::string fingerprint;
  Format format = Format::kAuto;
  std::uint64_t rows = 0, train_rows = 0, test_rows = 0;
  std::string label;
  std::string schema_text;
  nlohmann::json options;
};

// Records the version in one catalog transaction, after its objects are
// written; the caller holds the writer lock. Returns the version with the
// same fingerprint instead when there is one (imported before, or by a
// concurrent import).
ImportResult record_version(Store& store, const ImportRequest& request, const VersionRow& row,
                            const std::vector<VersionStream>& streams, ImportResult result);

StreamChunks chunks_of(const PreparedStream& stream);

// The file an import reads, opened; a missing one is a usage error naming
// the option that gave it.
template <typename Reader>
Reader open_input(const std::filesystem::path& path, Subject subject) {
  try {
    return Reader(path);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw usage_error(subject, ": " + path.string() + ": no such file");
    throw;
  }
}

// Whether `file` starts with gzip or zstd magic.
bool compressed_file(const FileReader& file);

// A tensor stream a streamed import builds chunk by chunk.
struct BuiltTensor {
  std::string role;
  std::string dtype;
  std::vector<std::int64_t> shape;
  StreamBuilder builder;
};

// Finishes `tensors`' streams, adding them to `streams`.
void finish_tensors(std::vector<BuiltTensor>& tensors, std::vector<VersionStream>& streams);

// The streamed pipelines. CSV/TSV (`format`) in bounded memory, in one pass
// (store/formats/import_delimited.cc).
ImportResult import_delimited_streamed(Store& store, const ImportRequest& request, Reporter& reporter, Format format);
// IDX images of element type u8 in bounded memory
// (store/formats/import_idx.cc); nullopt when the request is not of such
// images (the whole-file import then reads it and reports what is wrong).
std::optional<ImportResult> import_idx_streamed(Store& store, const ImportRequest& request, Reporter& reporter);

}  // namespace anneal::importing
