#include "import_pipeline.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "anneal/dataset_rows.h"
#include "anneal/delimited_scan.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/hash.h"
#include "formats/idx_scan.h"
#include "anneal/input_stream.h"
#include "formats/text.h"
#include "audit_trail.h"
#include "sqlite.h"
#include "streams.h"

namespace anneal::importing {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json shape_json(const std::vector<std::int64_t>& shape) { return json(shape); }

std::optional<int> version_with_fingerprint(sql::Database& db, const std::string& name,
                                            const std::string& fingerprint) {
  auto stmt = db.prepare(
      "SELECT v.version FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id "
      "WHERE d.name = ? AND v.fingerprint = ?");
  stmt.bind(1, name).bind(2, fingerprint);
  if (stmt.step()) return static_cast<int>(stmt.int64(0));
  return std::nullopt;
}

}  // namespace

// The byte values of a Table whose byte_features is set: each float is an
// integer 0..255 read from a byte, so the conversion is exact (checked: a
// value that is not is a parser bug, not bad input).
std::vector<std::uint8_t> features_as_bytes(const std::vector<float>& features) {
  std::vector<std::uint8_t> bytes(features.size());
  std::atomic<bool> exact{true};
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, features.size(), 1 << 16), [&](const auto& range) {
    bool ok = true;
    for (std::size_t i = range.begin(); i < range.end(); ++i) {
      const float value = features[i];
      ok = ok && value >= 0 && value <= 255;
      bytes[i] = ok ? static_cast<std::uint8_t>(value) : 0;
      ok = ok && static_cast<float>(bytes[i]) == value;
    }
    if (!ok) exact = false;
  });
  if (!exact) throw failure("internal: features marked as bytes hold a value that is not an integer 0..255");
  return bytes;
}

// Stats of two parts of one column (train and test files) combined.
ColumnSchema merge_column(const ColumnSchema& train, const ColumnSchema& test) {
  auto stats_of = [](const ColumnSchema& c) {
    ColumnStats s;
    s.count = c.count;
    s.missing = c.missing;
    s.min = c.min;
    s.max = c.max;
    s.mean = c.mean;
    s.m2 = c.std * c.std * static_cast<double>(c.count);
    return s;
  };
  ColumnStats merged = stats_of(train);
  merged.merge(stats_of(test));
  ColumnSchema out = test;  // the test part's dictionary extends the train one
  merged.store_into(out);
  return out;
}

const char* split_rule_name(SplitRule rule) {
  switch (rule) {
    case SplitRule::kRowContent: return "row-content";
    case SplitRule::kRowContentSipHash: return "row-content-siphash";
  }
  return "row-content";
}

SplitRule split_rule_for(Store& store, const std::string& dataset, Format format) {
  if (format == Format::kIdx) return SplitRule::kRowContent;
  auto stmt = store.db().prepare(
      "SELECT v.options_json FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id WHERE d.name = ?");
  stmt.bind(1, dataset);
  while (stmt.step()) {
    const json options = json::parse(stmt.text(0), nullptr, /*allow_exceptions=*/false);
    if (options.is_object() && options.value("split_rule", "") == split_rule_name(SplitRule::kRowContent))
      return SplitRule::kRowContent;
  }
  return SplitRule::kRowContentSipHash;
}

// The test split, decided row by row from the row's content: a row is a
// test row when a 64-bit hash of the row's bytes and the seed falls below
// `fraction` of the 64-bit range. A row therefore keeps its side in every
// version that holds it, wherever it sits in the file, and equal rows share
// a side, so no model trained on one version has seen the test rows of the
// next. Each class gets about `fraction` of its rows, not exactly (the
// price of deciding per row). Versions without a "split_rule" used the
// older per-class rule by row index.
//
// row-content: the BLAKE2b row key (row_content_key) mixed with the seed by
// SplitMix64's finalizer. row-content-siphash: SipHash-2-4 of the same
// bytes keyed by the seed (its 8 bytes little-endian, then 8 zero bytes),
// the same split's properties at a fifth of the cost on short rows, which
// is most of a numeric table's import.
std::vector<std::uint8_t> content_split(const Table& table, double fraction, std::uint64_t seed, SplitRule rule) {
  std::vector<std::uint8_t> split(table.rows, 0);
  if (fraction <= 0 || table.rows == 0) return split;
  // fraction < 1, so the threshold is below 2^64 (at most 2^64 - 2^11).
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(fraction, 64));
  const RowContentKeys keys(table);
  if (rule == SplitRule::kRowContentSipHash) {
    ShortHashKey key{};
    for (int i = 0; i < 8; ++i) key[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(seed >> (8 * i));
    tbb::parallel_for(std::uint64_t{0}, table.rows,
                      [&](std::uint64_t row) { split[row] = keys.keyed_key(row, key) < threshold; });
    return split;
  }
  tbb::parallel_for(std::uint64_t{0}, table.rows, [&](std::uint64_t row) {
    // splitmix64's finalizer over the key mixed with the seed: the seed
    // picks a different, equally sized split of the same rows.
    std::uint64_t z = keys.key(row) ^ (seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    split[row] = z < threshold;
  });
  return split;
}

// The parse options an import request sets, for the file `display_name`.
ParseOptions parse_options_of(const ImportRequest& request, std::string display_name) {
  ParseOptions options;
  options.display_name = std::move(display_name);
  options.header = request.header;
  options.label = request.label;
  options.categorical = request.categorical;
  options.date_formats = request.date_formats;
  options.nonfinite = request.nonfinite;
  options.max_columns = request.max_columns;
  return options;
}

std::string display_name(const fs::path& path) { return path.string(); }

// `feature_dtypes`: the dtype of each features stream (by role) that is not
// "f32". Versions stored before u8 features existed held their IDX pixels
// as f32 under the identity of options and sources alone: a u8 import of
// the same files is a new version, not theirs, while a CSV's identity (its
// features are f32) stays what it was.
ImportIdentity import_identity(const ImportRequest& request, Format format, const std::string& label,
                               const std::vector<std::pair<std::string, std::string>>& source_hashes,
                               const std::map<std::string, std::string>& feature_dtypes, SplitRule split_rule) {
  json options = {{"format", format_name(format)}, {"label", label}, {"test", static_cast<bool>(request.test)}};
  if (format == Format::kCsv || format == Format::kTsv) {
    options["header"] = request.header;
    options["categorical"] = request.categorical;
    // Always written: its presence also says the parse recognized dates,
    // which versions imported before it did not (their date columns are
    // categorical), so their fingerprints differ.
    json date_formats = json::array();
    for (const DateFormatOption& option : request.date_formats) date_formats.push_back(date_format_option_text(option));
    options["date_formats"] = date_formats;
  }
  // Only when it changed the parse, so earlier versions keep their identity.
  if (request.nonfinite == NonFinite::kMissing) options["nonfinite"] = "missing";
  if (!request.test) {
    options["split"] = request.split;
    options["seed"] = request.seed;
    options["split_rule"] = split_rule_name(split_rule);  // see content_split
  }
  json identity = {{"options", options}, {"sources", json::object()}};
  for (const auto& [role, hash] : source_hashes) identity["sources"][role] = hash;
  for (const auto& [role, dtype] : feature_dtypes) identity["dtypes"][role] = dtype;
  return {options, to_hex(hash_bytes(identity.dump()))};
}

// The schema row is read by every 'data list': bound it, whatever the
// columns and categories add up to.
std::string schema_text_of(const ImportRequest& request, const std::vector<ColumnSchema>& columns,
                           const std::vector<std::int64_t>& sample_shape) {
  std::string schema_text = json{{"columns", columns_to_json(columns)}, {"sample_shape", sample_shape}}.dump();
  if (schema_text.size() > kMaxSchemaBytes)
    throw data_error(request.file.string() + ": expected a schema (column names and categorical values) of at most " +
                     std::to_string(kMaxSchemaBytes) + " bytes, found " + std::to_string(schema_text.size()) +
                     " bytes for " + std::to_string(columns.size()) +
                     " columns; a column with that many distinct values is better read as numeric or dropped");
  return schema_text;
}

std::vector<std::int64_t> with_rows(std::uint64_t rows, const std::vector<std::int64_t>& sample) {
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(rows)};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return shape;
}

namespace {

// The version with this fingerprint, if the dataset has one.
std::optional<ImportResult> existing_version(Store& store, const ImportRequest& request, const std::string& fingerprint,
                                             const ImportResult& result) {
  if (auto v = version_with_fingerprint(store.db(), request.dataset, fingerprint)) {
    ImportResult same;
    same.version = find_dataset(store, {request.dataset, *v});
    same.created = false;
    same.source_bytes = result.source_bytes;
    same.date_format_hints = result.date_format_hints;
    same.bytes_added = result.bytes_added;  // what healing rewrote
    return same;
  }
  return std::nullopt;
}

}  // namespace

// Records the version in one catalog transaction, after its objects are
// written; the caller holds the writer lock. Returns the version with the
// same fingerprint instead when there is one (imported before, or by a
// concurrent import).
ImportResult record_version(Store& store, const ImportRequest& request, const VersionRow& row,
                            const std::vector<VersionStream>& streams, ImportResult result) {
  sql::Database& db = store.db();
  int version_number = 0;
  {
    sql::Transaction txn(db);
    if (auto same = existing_version(store, request, row.fingerprint, result)) return *same;
    std::string now = sql::timestamp_now();
    db.prepare("INSERT OR IGNORE INTO datasets(name, created_at) VALUES (?, ?)")
        .bind(1, request.dataset).bind(2, now).run();
    auto ds = db.prepare("SELECT id FROM datasets WHERE name = ?");
    ds.bind(1, request.dataset);
    ds.step();
    std::int64_t dataset_id = ds.int64(0);
    auto next = db.prepare("SELECT COALESCE(MAX(version), 0) + 1 FROM dataset_versions WHERE dataset_id = ?");
    next.bind(1, dataset_id);
    next.step();
    version_number = static_cast<int>(next.int64(0));
    db.prepare(
          "INSERT INTO dataset_versions(dataset_id, version, created_at, fingerprint, format, rows, "
          "train_rows, test_rows, label_column, schema_json, options_json) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(1, dataset_id)
        .bind(2, static_cast<std::int64_t>(version_number))
        .bind(3, now)
        .bind(4, row.fingerprint)
        .bind(5, format_name(row.format))
        .bind(6, static_cast<std::int64_t>(row.rows))
        .bind(7, static_cast<std::int64_t>(row.train_rows))
        .bind(8, static_cast<std::int64_t>(row.test_rows))
        .bind(9, row.label)
        .bind(10, row.schema_text)
        .bind(11, row.options.dump())
        .run();
    std::int64_t version_id = db.last_insert_id();
    auto insert_stream = db.prepare(
        "INSERT INTO dataset_streams(version_id, role, blob, file_name, dtype, shape) "
        "VALUES (?, ?, ?, ?, ?, ?)");
    for (const VersionStream& s : streams) {
      record_blob(db, s.chunks);
      insert_stream.reset();
      insert_stream.bind(1, version_id).bind(2, s.role).bind(3, s.chunks.hash);
      if (s.file_name) {
        insert_stream.bind(4, *s.file_name).bind_null(5).bind_null(6);
      } else {
        insert_stream.bind_null(4).bind(5, s.dtype).bind(6, shape_json(s.shape).dump());
      }
      insert_stream.run();
    }
    nlohmann::json streams_detail = nlohmann::json::object();
    for (const VersionStream& s : streams) streams_detail[s.role] = s.chunks.hash;
    append_audit(store, "dataset.import",
                 {{"dataset", request.dataset}, {"version", version_number}, {"version_id", version_id},
                  {"fingerprint", row.fingerprint}, {"streams", streams_detail}});
    fault_point("import.before-commit");
    txn.commit();
  }
  fault_point("import.committed");
  std::uint64_t added = result.bytes_added;
  result.version = find_dataset(store, {request.dataset, version_number});
  result.created = true;
  result.bytes_added = added;
  return result;
}

StreamChunks chunks_of(const PreparedStream& stream) {
  StreamChunks chunks{stream.hash, stream.size, {}};
  for (const auto& c : stream.chunks) chunks.chunks.emplace_back(c.id, c.raw.size());
  return chunks;
}

// Whether `file` starts with gzip or zstd magic.
bool compressed_file(const FileReader& file) {
  std::array<char, 4> magic{};
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(magic.size(), file.size()));
  file.read_at(0, std::span<char>(magic.data(), n));
  return is_compressed_input(std::string_view(magic.data(), n));
}

// Finishes `tensors`' streams, adding them to `streams`.
void finish_tensors(std::vector<BuiltTensor>& tensors, std::vector<VersionStream>& streams) {
  for (BuiltTensor& t : tensors) streams.push_back({t.role, t.builder.finish(), std::nullopt, t.dtype, t.shape});
}

}  // namespace anneal::importing
