#include "anneal/datasets.h"

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

namespace anneal {
namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "tensor streams are stored little-endian; add byte swapping for this host");

// ---------------------------------------------------------------- references

std::string DatasetRef::to_string() const {
  return version ? name + "@v" + std::to_string(*version) : name + "@latest";
}

void validate_dataset_name(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 128 && std::isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok)
    throw usage_error("invalid dataset name '" + std::string(name) +
                      "': expected 1-128 letters, digits, '.', '_' or '-', starting with a letter "
                      "or digit");
}

DatasetRef parse_dataset_ref(std::string_view text, std::string_view what) {
  DatasetRef ref;
  std::size_t at = text.find('@');
  ref.name = std::string(text.substr(0, at));
  try {
    validate_dataset_name(ref.name);
  } catch (const Error&) {
    throw usage_error(std::string(what) + " '" + std::string(text) +
                      "': expected NAME, NAME@latest or NAME@vN");
  }
  if (at == std::string_view::npos) return ref;
  std::string_view tag = text.substr(at + 1);
  if (tag == "latest") return ref;
  int number = 0;
  bool ok = tag.size() >= 2 && tag.size() <= 10 && tag[0] == 'v';
  for (std::size_t i = 1; ok && i < tag.size(); ++i) {
    ok = std::isdigit(static_cast<unsigned char>(tag[i]));
    if (ok) number = number * 10 + (tag[i] - '0');
  }
  if (!ok || number < 1)
    throw usage_error(std::string(what) + " '" + std::string(text) +
                      "': expected NAME, NAME@latest or NAME@vN with N >= 1");
  ref.version = number;
  return ref;
}

const DatasetStream* DatasetVersion::stream(std::string_view role) const {
  for (const auto& s : streams)
    if (s.role == role) return &s;
  return nullptr;
}

// -------------------------------------------------------------- schema JSON

json columns_to_json(const std::vector<ColumnSchema>& columns) {
  json out = json::array();
  for (const auto& c : columns) {
    json j = {{"name", c.name},       {"type", column_type_name(c.type)},
              {"missing", c.missing}, {"count", c.count},
              {"min", c.min},         {"max", c.max},
              {"mean", c.mean},       {"std", c.std}};
    if (!c.shape.empty()) j["shape"] = c.shape;
    if (c.type == ColumnType::kCategorical) j["categories"] = c.categories;
    if (c.type == ColumnType::kDatetime) {
      j["datetime_format"] = c.datetime_format;
      j["has_time"] = c.has_time;
    }
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

// JSON has no inf or NaN: nlohmann writes them as null. A statistic read
// back as null is NaN, so a row written with one stays readable.
double statistic_from_json(const json& column, const char* key) {
  const json& value = column.at(key);
  return value.is_number() ? value.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::vector<ColumnSchema> columns_from_json(const json& array) {
  std::vector<ColumnSchema> columns;
  for (const auto& j : array) {
    ColumnSchema c;
    c.name = j.at("name").get<std::string>();
    const std::string type = j.at("type").get<std::string>();
    if (type == "numeric") c.type = ColumnType::kNumeric;
    else if (type == "categorical") c.type = ColumnType::kCategorical;
    else if (type == "datetime") c.type = ColumnType::kDatetime;
    else throw corrupt("column '" + c.name + "' has unknown type '" + type + "'");
    c.missing = j.at("missing").get<std::uint64_t>();
    c.count = j.at("count").get<std::uint64_t>();
    c.min = statistic_from_json(j, "min");
    c.max = statistic_from_json(j, "max");
    c.mean = statistic_from_json(j, "mean");
    c.std = statistic_from_json(j, "std");
    if (j.contains("shape")) c.shape = j["shape"].get<std::vector<std::int64_t>>();
    if (j.contains("categories")) c.categories = j["categories"].get<std::vector<std::string>>();
    if (c.type == ColumnType::kDatetime) {
      c.datetime_format = j.at("datetime_format").get<std::string>();
      c.has_time = j.at("has_time").get<bool>();
    }
    columns.push_back(std::move(c));
  }
  return columns;
}

namespace {


template <typename T>
std::string_view as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

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

// The test split, decided row by row from the row's content: a row is a
// test row when a hash of (seed, row_content_key) falls below `fraction` of
// the 64-bit range. A row therefore keeps its side in every version that
// holds it, wherever it sits in the file, and equal rows share a side, so
// no model trained on one version has seen the test rows of the next.
// Each class gets about `fraction` of its rows, not exactly (the price of
// deciding per row). Recorded as "split_rule": "row-content" in a
// version's options; versions without the key used the older per-class
// rule by row index.
std::vector<std::uint8_t> content_split(const Table& table, double fraction, std::uint64_t seed) {
  std::vector<std::uint8_t> split(table.rows, 0);
  if (fraction <= 0 || table.rows == 0) return split;
  // fraction < 1, so the threshold is below 2^64 (at most 2^64 - 2^11).
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(fraction, 64));
  const RowContentKeys keys(table);
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

struct SourceFile {
  std::string role;
  fs::path path;
  FileSnapshot contents;  // read once: the parse and the stored source see the same bytes
};

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

// Decompresses and parses every input into train (and test) tables.
// Hints about ambiguous date columns of the train part go to `hints`.
void parse_inputs(const ImportRequest& request, const std::vector<SourceFile>& sources,
                  Format& format, Table& train, Table& test, std::vector<DateFormatHint>& hints) {
  auto bytes_of = [&](const std::string& role) -> std::string_view {
    for (const auto& s : sources)
      if (s.role == role) return s.contents.bytes();
    return {};
  };
  auto path_of = [&](const std::string& role) {
    for (const auto& s : sources)
      if (s.role == role) return display_name(s.path);
    return std::string();
  };
  // Plain input is parsed straight from the file's snapshot; only
  // compressed input is decompressed, within the request's limits.
  auto text_of = [&](const std::string& role, std::string& owned) -> std::string_view {
    std::string_view bytes = bytes_of(role);
    if (!is_compressed_input(bytes)) return bytes;
    owned = decompress_input(bytes, path_of(role), request.decompress_limits);
    return owned;
  };
  std::string main_owned;
  std::string_view main_text = text_of("source", main_owned);
  format = request.format == Format::kAuto ? detect_format(request.file.filename().string(), main_text)
                                           : request.format;
  const bool idx = format == Format::kIdx;
  if (idx && !request.labels)
    throw usage_error(Subject::kLabelsFile, ": IDX images need their labels file");
  if (!idx && (request.labels || request.test_labels))
    throw usage_error(request.labels ? Subject::kLabelsFile : Subject::kTestLabelsFile,
                      std::string(": only IDX data takes a separate labels file; this input is ") +
                          format_name(format));
  if (!request.date_formats.empty() && format != Format::kCsv && format != Format::kTsv)
    throw usage_error(Subject::kDateFormat, std::string(": only CSV/TSV data has date columns; this input is ") +
                                                format_name(format));
  if (idx && request.test && !request.test_labels)
    throw usage_error(Subject::kTestLabelsFile, ": the IDX test images need their labels file");

  auto parse_part = [&](const std::string& prefix, std::string_view text,
                        const Table* reference) {
    ParseOptions options = parse_options_of(request, path_of(prefix + "source"));
    if (reference) {
      options.reference = &reference->columns;
      if (format == Format::kLibsvm) options.libsvm_features = reference->sample_width();
    } else {
      options.date_format_hints = &hints;
    }
    switch (format) {
      case Format::kCsv: return parse_delimited(text, ',', options);
      case Format::kTsv: return parse_delimited(text, '\t', options);
      case Format::kLibsvm: return parse_libsvm(text, options);
      case Format::kIdx: {
        std::string labels_name = path_of(prefix + "source.labels");
        std::string labels_owned;
        std::string_view labels = text_of(prefix + "source.labels", labels_owned);
        return parse_idx(text, labels, options, labels_name);
      }
      case Format::kAuto: break;
    }
    throw failure("unreachable: format not resolved");
  };
  train = parse_part("", main_text, nullptr);
  main_owned = std::string();  // release memory before the test part
  if (request.test) {
    std::string test_owned;
    test = parse_part("test.", text_of("test.source", test_owned), &train);
  }
}

json shape_json(const std::vector<std::int64_t>& shape) { return json(shape); }

DatasetVersion read_version_row(sql::Statement& row, const std::string& name) {
  DatasetVersion v;
  v.name = name;
  v.version = static_cast<int>(row.int64(1));
  v.created_at = row.text(2);
  v.fingerprint = row.text(3);
  v.format = row.text(4);
  v.rows = static_cast<std::uint64_t>(row.int64(5));
  v.train_rows = static_cast<std::uint64_t>(row.int64(6));
  v.test_rows = static_cast<std::uint64_t>(row.int64(7));
  v.label_column = row.text(8);
  json schema = json::parse(row.text(9));
  v.columns = columns_from_json(schema.at("columns"));
  v.sample_shape = schema.at("sample_shape").get<std::vector<std::int64_t>>();
  v.options = json::parse(row.text(10));
  return v;
}

constexpr const char* kVersionColumns =
    "v.id, v.version, v.created_at, v.fingerprint, v.format, v.rows, v.train_rows, "
    "v.test_rows, v.label_column, v.schema_json, v.options_json";

void load_streams(sql::Database& db, std::int64_t version_id, DatasetVersion& v) {
  auto stmt = db.prepare(
      "SELECT s.role, s.blob, b.size, s.file_name, s.dtype, s.shape, "
      "(SELECT count(*) FROM blob_chunks c WHERE c.blob = s.blob) "
      "FROM dataset_streams s JOIN blobs b ON b.hash = s.blob WHERE s.version_id = ? "
      "ORDER BY s.role");
  stmt.bind(1, version_id);
  while (stmt.step()) {
    DatasetStream s;
    s.role = stmt.text(0);
    s.blob = stmt.text(1);
    s.size = static_cast<std::uint64_t>(stmt.int64(2));
    s.file_name = stmt.text(3);
    s.dtype = stmt.text(4);
    if (!stmt.is_null(5)) s.shape = json::parse(stmt.text(5)).get<std::vector<std::int64_t>>();
    s.chunks = static_cast<std::uint64_t>(stmt.int64(6));
    v.streams.push_back(std::move(s));
  }
}

// Finds a version's row id; throws kNotFound naming what is missing.
std::pair<std::int64_t, DatasetVersion> lookup(sql::Database& db, const DatasetRef& ref) {
  auto ds = db.prepare("SELECT id FROM datasets WHERE name = ?");
  ds.bind(1, ref.name);
  if (!ds.step()) throw not_found("no dataset named '" + ref.name + "'").with(Remedy::kListDatasets);
  std::int64_t dataset_id = ds.int64(0);
  std::string sql = std::string("SELECT ") + kVersionColumns +
                    " FROM dataset_versions v WHERE v.dataset_id = ? " +
                    (ref.version ? "AND v.version = ?" : "ORDER BY v.version DESC LIMIT 1");
  auto stmt = db.prepare(sql);
  stmt.bind(1, dataset_id);
  if (ref.version) stmt.bind(2, static_cast<std::int64_t>(*ref.version));
  if (!stmt.step())
    throw not_found("dataset '" + ref.name + "' has no version " +
                    (ref.version ? "v" + std::to_string(*ref.version) : std::string("yet")));
  std::int64_t id = stmt.int64(0);
  DatasetVersion v = read_version_row(stmt, ref.name);
  load_streams(db, id, v);
  return {id, std::move(v)};
}

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

// ------------------------------------------------------------------- import

namespace {

// The identity of an import: the source bytes (their stream hashes, by
// role), every option that shaped the parse and the type the features are
// stored in. The same fingerprint again means the same version.
struct ImportIdentity {
  json options;
  std::string fingerprint;
};

// `feature_dtypes`: the dtype of each features stream (by role) that is not
// "f32". Versions stored before u8 features existed held their IDX pixels
// as f32 under the identity of options and sources alone: a u8 import of
// the same files is a new version, not theirs, while a CSV's identity (its
// features are f32) stays what it was.
ImportIdentity import_identity(const ImportRequest& request, Format format, const std::string& label,
                               const std::vector<std::pair<std::string, std::string>>& source_hashes,
                               const std::map<std::string, std::string>& feature_dtypes) {
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
    options["split_rule"] = "row-content";  // see content_split
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
  json options;
};

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

// The file an import reads, opened; a missing one is a usage error naming
// the option that gave it.
template <typename Reader>
Reader open_input(const fs::path& path, Subject subject) {
  try {
    return Reader(path);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw usage_error(subject, ": " + path.string() + ": no such file");
    throw;
  }
}

// Whether the import can read its input in bounded memory: CSV/TSV, plain
// or gzip/zstd-compressed, that --format or the file name says is CSV/TSV
// (the content sniffing of other names, IDX and LIBSVM read the whole
// file). Returns the format then.
std::optional<Format> streamable_format(const ImportRequest& request) {
  if (request.labels || request.test_labels) return std::nullopt;
  const Format format = request.format == Format::kAuto ? format_from_name(request.file.string()) : request.format;
  if (format != Format::kCsv && format != Format::kTsv) return std::nullopt;
  std::vector<fs::path> files{request.file};
  if (request.test) files.push_back(*request.test);
  for (const fs::path& path : files) {
    // A file that cannot be opened is reported by the whole-file path, as before.
    try {
      FileReader file(path);
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  return format;
}

// Whether `file` starts with gzip or zstd magic.
bool compressed_file(const FileReader& file) {
  std::array<char, 4> magic{};
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(magic.size(), file.size()));
  file.read_at(0, std::span<char>(magic.data(), n));
  return is_compressed_input(std::string_view(magic.data(), n));
}

// A tensor stream a streamed import builds chunk by chunk.
struct BuiltTensor {
  std::string role;
  std::string dtype;
  std::vector<std::int64_t> shape;
  StreamBuilder builder;
};

// Finishes `tensors`' streams, adding them to `streams`.
void finish_tensors(std::vector<BuiltTensor>& tensors, std::vector<VersionStream>& streams) {
  for (BuiltTensor& t : tensors) streams.push_back({t.role, t.builder.finish(), std::nullopt, t.dtype, t.shape});
}

// CSV/TSV in bounded memory, in one pass over each file (train, then
// test), under the writer lock. The scan checks the encoding, infers the
// types from the first rows, parses every record and hands on batches of
// rows; the source, features, labels and split mask stream through
// StreamBuilders that stage each chunk as soon as it is cut (compressed
// into tmp/, nothing under objects/). Only once every file has been read
// without error are the objects published and the version recorded, so
// bad input, wherever it is in the file, leaves the store as it was. The
// chunks, hashes, fingerprint and version are those of the whole-file
// import. Held in memory besides a window of text and its rows: the
// dictionaries, the chunk lists (about 100 bytes a chunk), the staged
// objects' names (about 200 bytes a chunk) and nothing per row.
ImportResult import_delimited_streamed(Store& store, const ImportRequest& request, Reporter& reporter,
                                       Format format) {
  const ObjectStore& objects = store.objects();
  const char delimiter = format == Format::kTsv ? '\t' : ',';
  const std::size_t window_bytes =
      std::max(kScanWindowBytes,
               static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()) * formats::kParseBlockBytes);
  struct Part {
    std::string role;  // of its source stream
    fs::path path;
    FileReader file;
    Table schema;  // the scan's result: columns, rows; no row data
    // Compressed input: its text, decompressed once into a scratch file
    // that the scan reads; the source stream is the file as it is.
    std::unique_ptr<ScratchFile> scratch;
    std::optional<FileReader> decompressed;
    const FileReader& text() const { return decompressed ? *decompressed : file; }
  };
  std::vector<Part> parts;
  parts.push_back({"source", request.file, open_input<FileReader>(request.file, Subject::kDataFile), {}, {}, {}});
  if (request.test)
    parts.push_back({"test.source", *request.test, open_input<FileReader>(*request.test, Subject::kTestFile), {}, {}, {}});

  ImportResult result;
  for (const Part& part : parts) result.source_bytes += part.file.size();
  reporter.note("reading " + std::to_string(result.source_bytes) + " bytes");
  fault_point("import.prepared");

  // From the first object staged until the catalog commit, hold the writer
  // lock so a concurrent gc cannot take staged files or objects that are
  // not yet referenced. An import of bytes already stored goes through all
  // the same: staging verifies every object and rewrites any that is
  // missing or damaged, so importing the same file again heals the store.
  FileLock writer = store.writer_lock();
  ObjectStaging staging(objects);
  std::vector<BuiltTensor> tensors;
  auto tensor = [&](const std::string& role, const std::string& dtype) {
    tensors.push_back({role, dtype, {}, StreamBuilder(objects, kTensorChunking, &staging)});
    return tensors.size() - 1;
  };
  const std::size_t features = tensor("features", "f32");
  const std::size_t labels = tensor("labels", "f32");
  std::optional<std::size_t> test_features, test_labels, split;
  if (request.test) {
    test_features = tensor("test.features", "f32");
    test_labels = tensor("test.labels", "f32");
  } else if (request.split > 0) {
    split = tensor("split", "u8");
  }
  std::uint64_t test_rows_in_split = 0;
  std::vector<VersionStream> streams;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Part& part = parts[i];
    StreamBuilder source(objects, kSourceChunking, &staging);
    if (compressed_file(part.file)) {
      part.scratch = std::make_unique<ScratchFile>(store.root() / "tmp");
      DecompressingReader text(part.file, display_name(part.path), request.decompress_limits,
                               [&](std::string_view bytes) { source.append(bytes); });
      std::string piece(std::size_t{1} << 20, '\0');
      for (std::size_t n; (n = text.read(piece)) > 0;) part.scratch->append(std::string_view(piece.data(), n));
      part.decompressed.emplace(part.scratch->reader(part.path));
    }
    BuiltTensor& part_features = tensors[i == 0 ? features : *test_features];
    BuiltTensor& part_labels = tensors[i == 0 ? labels : *test_labels];
    // The split's row key reads categorical values by their text: the
    // values each batch added (on_categories) join the dictionaries kept in
    // the batch's own columns, which the scan never reads and hands on the
    // same each time, so a batch's codes always have their text.
    std::vector<std::vector<std::string>> added_categories;
    DelimitedScanCallbacks callbacks;
    if (!part.decompressed) callbacks.on_bytes = [&source](std::string_view bytes) { source.append(bytes); };
    if (i == 0 && split)
      callbacks.on_categories = [&](const Table& batch, std::size_t column, std::span<const std::string> added) {
        added_categories.resize(batch.columns.size());
        added_categories[column].insert(added_categories[column].end(), added.begin(), added.end());
      };
    callbacks.on_rows = [&](Table& batch) {
      part_features.builder.append(as_bytes(batch.features));
      part_labels.builder.append(as_bytes(batch.labels));
      if (i != 0 || !split) return;
      for (std::size_t c = 0; c < added_categories.size(); ++c) {
        std::vector<std::string>& dictionary = batch.columns[c].categories;
        dictionary.insert(dictionary.end(), std::make_move_iterator(added_categories[c].begin()),
                          std::make_move_iterator(added_categories[c].end()));
        added_categories[c].clear();
      }
      std::vector<std::uint8_t> mask = content_split(batch, request.split, request.seed);
      test_rows_in_split += static_cast<std::uint64_t>(std::count(mask.begin(), mask.end(), 1));
      tensors[*split].builder.append(as_bytes(mask));
    };
    ParseOptions options = parse_options_of(request, display_name(part.path));
    if (i > 0) options.reference = &parts[0].schema.columns;
    if (i == 0) options.date_format_hints = &result.date_format_hints;
    part.schema = scan_delimited(part.text(), delimiter, options, callbacks, window_bytes);
    streams.push_back({part.role, source.finish(), part.path.filename().string(), {}, {}});
  }
  const Table& train = parts[0].schema;
  tensors[features].shape = with_rows(train.rows, train.sample_shape);
  tensors[labels].shape = {static_cast<std::int64_t>(train.rows)};
  if (request.test) {
    const Table& test = parts[1].schema;
    tensors[*test_features].shape = with_rows(test.rows, test.sample_shape);
    tensors[*test_labels].shape = {static_cast<std::int64_t>(test.rows)};
  } else if (split) {
    tensors[*split].shape = {static_cast<std::int64_t>(train.rows)};
  }
  const std::string label = train.columns[train.label_column].name;
  std::vector<std::pair<std::string, std::string>> source_hashes;
  for (std::size_t i = 0; i < parts.size(); ++i) source_hashes.emplace_back(parts[i].role, streams[i].chunks.hash);
  const ImportIdentity identity = import_identity(request, format, label, source_hashes, {});
  std::vector<ColumnSchema> columns = train.columns;
  if (request.test)
    for (std::size_t c = 0; c < columns.size(); ++c) columns[c] = merge_column(train.columns[c], parts[1].schema.columns[c]);
  const std::string schema_text = schema_text_of(request, columns, train.sample_shape);
  finish_tensors(tensors, streams);
  result.bytes_added = staging.publish();
  fault_point("import.objects-written");

  VersionRow row;
  row.fingerprint = identity.fingerprint;
  row.format = format;
  row.rows = train.rows + (request.test ? parts[1].schema.rows : 0);
  row.train_rows = request.test ? train.rows : train.rows - test_rows_in_split;
  row.test_rows = request.test ? parts[1].schema.rows : test_rows_in_split;
  row.label = label;
  row.schema_text = schema_text;
  row.options = identity.options;
  return record_version(store, request, row, streams, result);
}

// The split mask of rows whose u8 features arrive in pieces of any length,
// row by row as content_split decides it from the float form of the same
// rows: row_content_key over the image column (its width, then each
// pixel's float32 bits) and the label column (0xffffffff, then the label's
// bits, NaN as 0x7fc00000), IDX's two numeric columns. A row cut by a
// piece's end is hashed on from where it stopped, so no row is ever held.
class ByteRowSplit {
 public:
  ByteRowSplit(std::uint64_t row_width, std::span<const float> labels, double fraction, std::uint64_t seed)
      : row_width_(row_width), labels_(labels), seed_(seed),
        threshold_(fraction > 0 ? static_cast<std::uint64_t>(std::ldexp(fraction, 64)) : 0) {
    for (std::size_t v = 0; v < float_bits_.size(); ++v) {
      const float value = static_cast<float>(v);
      std::memcpy(&float_bits_[v], &value, 4);
    }
  }

  // Appends to `mask` the side of every row the pixels complete.
  void append(std::string_view pixels, std::vector<std::uint8_t>& mask) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(pixels.data());
    std::size_t at = 0;
    // The row the last piece left open.
    if (cells_done_ > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(row_width_ - cells_done_, pixels.size()));
      hash_cells(partial_, bytes, n);
      cells_done_ += n;
      at = n;
      if (cells_done_ < row_width_) return;
      mask.push_back(finish_row(partial_, next_row_++));
      cells_done_ = 0;
    }
    // Whole rows, in parallel.
    const std::uint64_t whole = (pixels.size() - at) / row_width_;
    const std::size_t first_mask = mask.size();
    mask.resize(first_mask + static_cast<std::size_t>(whole));
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, whole), [&](const auto& range) {
      for (std::uint64_t r = range.begin(); r < range.end(); ++r) {
        Hasher hasher = start_row();
        hash_cells(hasher, bytes + at + r * row_width_, static_cast<std::size_t>(row_width_));
        mask[first_mask + static_cast<std::size_t>(r)] = finish_row(hasher, next_row_ + r);
      }
    });
    next_row_ += whole;
    at += static_cast<std::size_t>(whole * row_width_);
    // The start of a row the next piece goes on with.
    if (at < pixels.size()) {
      partial_ = start_row();
      hash_cells(partial_, bytes + at, pixels.size() - at);
      cells_done_ = pixels.size() - at;
    }
  }

 private:
  static void put_u32(std::uint8_t* out, std::uint32_t v) {
    out[0] = static_cast<std::uint8_t>(v);
    out[1] = static_cast<std::uint8_t>(v >> 8);
    out[2] = static_cast<std::uint8_t>(v >> 16);
    out[3] = static_cast<std::uint8_t>(v >> 24);
  }
  Hasher start_row() const {
    Hasher hasher;
    std::uint8_t width[4];
    put_u32(width, static_cast<std::uint32_t>(row_width_));
    hasher.update(std::string_view(reinterpret_cast<const char*>(width), 4));
    return hasher;
  }
  // Hashes the float32 bits of `count` pixels, a block at a time.
  void hash_cells(Hasher& hasher, const std::uint8_t* pixels, std::size_t count) const {
    std::array<std::uint8_t, 4096> block;
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min(count - done, block.size() / 4);
      for (std::size_t i = 0; i < n; ++i) put_u32(block.data() + 4 * i, float_bits_[pixels[done + i]]);
      hasher.update(std::string_view(reinterpret_cast<const char*>(block.data()), 4 * n));
      done += n;
    }
  }
  // The label's part of the key, then content_split's test of it.
  std::uint8_t finish_row(Hasher& hasher, std::uint64_t row) const {
    const float label = labels_[static_cast<std::size_t>(row)];
    std::uint32_t bits = 0x7fc00000u;
    if (!std::isnan(label)) std::memcpy(&bits, &label, 4);
    std::uint8_t tail[8];
    put_u32(tail, 0xffffffffu);
    put_u32(tail + 4, bits);
    hasher.update(std::string_view(reinterpret_cast<const char*>(tail), 8));
    const Digest d = hasher.finish();
    std::uint64_t key = 0;
    for (int i = 0; i < 8; ++i) key |= std::uint64_t{d[static_cast<std::size_t>(i)]} << (8 * i);
    std::uint64_t z = key ^ (seed_ * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z < threshold_;
  }

  std::uint64_t row_width_;
  std::span<const float> labels_;
  std::uint64_t seed_;
  std::uint64_t threshold_;
  std::array<std::uint32_t, 256> float_bits_{};
  Hasher partial_;
  std::uint64_t cells_done_ = 0;  // of the row open in partial_
  std::uint64_t next_row_ = 0;    // the next row to finish
};

// Bytes of a source stream appended to a StreamBuilder at a time.
constexpr std::size_t kSourcePieceBytes = std::size_t{8} << 20;

// One file of a streamed IDX import, opened and read front to back: with
// pread when plain, decompressed as it is read when compressed images, and
// read whole and decompressed once when compressed labels (they are held
// anyway), within the request's decompression limits.
struct IdxFile {
  std::string role;  // of its source stream
  fs::path path;
  FileReader file;
  bool compressed = false;
  std::string bytes;         // compressed labels: the file
  std::string decompressed;  // and their content, once read_whole()

  void read_whole(const DecompressLimits& limits) {
    if (!compressed || !bytes.empty()) return;
    bytes.resize(static_cast<std::size_t>(file.size()));
    file.read_at(0, bytes);
    file.check_end();
    decompressed = decompress_input(bytes, display_name(path), limits);
  }
  // The source stream of compressed labels, from the bytes held.
  void append_held(StreamBuilder& source) const {
    for (std::size_t at = 0; at < bytes.size(); at += kSourcePieceBytes)
      source.append(std::string_view(bytes).substr(at, kSourcePieceBytes));
  }
  // The first bytes of the content (decompressed), enough for an IDX header.
  std::string head(const DecompressLimits& limits) const {
    std::string out(kMaxIdxHeaderBytes, '\0');
    if (compressed) {
      DecompressingReader stream(file, display_name(path), limits);
      out.resize(stream.read(out));
    } else {
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(file.size(), out.size())));
      file.read_at(0, out);
    }
    return out;
  }
};

// The files of a streamed IDX import, opened as the whole-file import
// opens them (the same errors for a missing file), when the import is of
// IDX images of element type u8 (or of a file whose IDX header is bad: the
// scan reports it as parse_idx does) and names its labels as IDX needs;
// nullopt otherwise (other element types, another format, flags IDX does
// not take): the whole-file import reads those and reports what is wrong.
// The train images' header is read first (decompressed when compressed), as
// the whole-file import reads them first to tell their format.
std::optional<std::vector<IdxFile>> open_u8_idx(const ImportRequest& request) {
  if (!request.labels || !request.date_formats.empty() || request.test.has_value() != request.test_labels.has_value())
    return std::nullopt;
  if (request.format != Format::kAuto && request.format != Format::kIdx) return std::nullopt;
  if (request.format == Format::kAuto) {
    const Format named = format_from_name(request.file.filename().string());
    if (named != Format::kAuto && named != Format::kIdx) return std::nullopt;
  }
  std::vector<IdxFile> files;
  auto add = [&](const std::string& role, const fs::path& path, Subject subject) {
    files.push_back({role, path, open_input<FileReader>(path, subject), false, {}, {}});
    IdxFile& file = files.back();
    std::array<char, 4> magic{};
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(magic.size(), file.file.size()));
    file.file.read_at(0, std::span<char>(magic.data(), n));
    file.compressed = is_compressed_input(std::string_view(magic.data(), n));
  };
  files.reserve(4);
  add("source", request.file, Subject::kDataFile);
  add("source.labels", *request.labels, Subject::kLabelsFile);
  if (request.test) {
    add("test.source", *request.test, Subject::kTestFile);
    add("test.source.labels", *request.test_labels, Subject::kTestLabelsFile);
  }
  const std::string head = files[0].head(request.decompress_limits);
  if (request.format == Format::kAuto && detect_format(request.file.filename().string(), head) != Format::kIdx)
    return std::nullopt;
  if (std::optional<unsigned char> type = idx_element_type(head); type && *type != kIdxU8Type) return std::nullopt;
  return files;
}

// IDX images of element type u8 in bounded memory, in two passes over each
// part (train; test), as import_delimited_streamed reads CSV. Pass 1
// (nothing written) checks everything, takes the statistics and hashes the
// sources; pass 2, under the writer lock, reads the pixels again and streams
// them straight into the u8 "features" stream, the sources into theirs,
// while the split mask is decided row by row. The version is the one the
// whole-file import recorded (the same streams, chunks, schema and
// statistics), without a float copy of the images. Held: the labels (and,
// compressed, their file and content), the split mask and a piece of
// pixels; plain images are read with pread, compressed ones decompressed
// as they are read, once per pass. nullopt when the test images turn out
// to be of another element type: the caller imports those whole.
std::optional<ImportResult> import_u8_idx_streamed(Store& store, const ImportRequest& request, Reporter& reporter,
                                                   std::vector<IdxFile>& files) {
  const ObjectStore& objects = store.objects();
  ImportResult result;
  for (const IdxFile& f : files) result.source_bytes += f.file.size();
  reporter.note("reading " + std::to_string(result.source_bytes) + " bytes");
  const std::size_t parts = files.size() / 2;

  // One part's scan: its images, then its labels (files[2 * part], +1).
  // Every byte of the images file and of the labels file goes to the
  // builders given, once, in order.
  auto scan_part = [&](std::size_t part, const Table* reference, IdxScanCallbacks callbacks,
                       StreamBuilder& images_source, StreamBuilder& labels_source) {
    IdxFile& images = files[2 * part];
    IdxFile& labels = files[2 * part + 1];
    ParseOptions options = parse_options_of(request, display_name(images.path));
    if (reference) options.reference = &reference->columns;
    auto to_images_source = [&](std::string_view bytes) { images_source.append(bytes); };
    std::optional<DecompressingReader> stream;
    std::optional<IdxInput> images_input;
    if (images.compressed) {
      stream.emplace(images.file, display_name(images.path), request.decompress_limits, to_images_source);
      images_input.emplace(*stream);
    } else {
      callbacks.on_bytes = to_images_source;
      images_input.emplace(images.file);
    }
    Table table;
    if (labels.compressed) {
      labels.read_whole(request.decompress_limits);
      IdxInput labels_input(labels.decompressed);
      table = scan_idx_u8(*images_input, labels_input, options, display_name(labels.path), callbacks);
      labels.append_held(labels_source);
    } else {
      // Plain labels: the bytes parsed are the bytes hashed.
      callbacks.on_label_bytes = [&](std::string_view bytes) { labels_source.append(bytes); };
      IdxInput labels_input(labels.file);
      table = scan_idx_u8(*images_input, labels_input, options, display_name(labels.path), callbacks);
    }
    return table;
  };

  // Pass 1: read and check everything, hash the sources; write nothing.
  std::vector<Table> tables(parts);
  std::vector<StreamChunks> sources(files.size());
  for (std::size_t part = 0; part < parts; ++part) {
    if (part > 0) {
      const std::string head = files[2 * part].head(request.decompress_limits);
      if (std::optional<unsigned char> type = idx_element_type(head); type && *type != kIdxU8Type) return std::nullopt;
    }
    StreamBuilder images_source(objects, kSourceChunking, nullptr);
    StreamBuilder labels_source(objects, kSourceChunking, nullptr);
    tables[part] = scan_part(part, part == 0 ? nullptr : &tables[0], {}, images_source, labels_source);
    sources[2 * part] = images_source.finish();
    sources[2 * part + 1] = labels_source.finish();
  }
  const Table& train = tables[0];
  const std::string label = train.columns[train.label_column].name;
  std::vector<std::pair<std::string, std::string>> source_hashes;
  for (std::size_t i = 0; i < files.size(); ++i) source_hashes.emplace_back(files[i].role, sources[i].hash);
  std::map<std::string, std::string> feature_dtypes{{"features", "u8"}};
  if (request.test) feature_dtypes["test.features"] = "u8";
  const ImportIdentity identity = import_identity(request, Format::kIdx, label, source_hashes, feature_dtypes);
  std::vector<ColumnSchema> columns = train.columns;
  if (request.test)
    for (std::size_t c = 0; c < columns.size(); ++c) columns[c] = merge_column(train.columns[c], tables[1].columns[c]);
  const std::string schema_text = schema_text_of(request, columns, train.sample_shape);
  fault_point("import.prepared");

  // Pass 2: from the first object written until the catalog commit, hold
  // the writer lock so a concurrent gc cannot take objects that are not yet
  // referenced (and an import of bytes already stored heals them, as the
  // other imports do).
  FileLock writer = store.writer_lock();
  reporter.note("writing objects");
  ObjectStaging staging(objects);
  std::vector<VersionStream> streams;
  std::uint64_t test_rows_in_split = 0;
  std::vector<BuiltTensor> tensors;
  for (std::size_t part = 0; part < parts; ++part) {
    IdxFile& images = files[2 * part];
    IdxFile& labels = files[2 * part + 1];
    const Table& table = tables[part];
    const std::string prefix = part == 0 ? "" : "test.";
    StreamBuilder images_source(objects, kSourceChunking, &staging);
    StreamBuilder labels_source(objects, kSourceChunking, &staging);
    StreamBuilder features(objects, kTensorChunking, &staging);
    const bool split = part == 0 && !request.test && request.split > 0;
    std::optional<ByteRowSplit> splitter;
    std::vector<std::uint8_t> mask;
    if (split) {
      splitter.emplace(static_cast<std::uint64_t>(table.sample_width()), table.labels, request.split, request.seed);
      mask.reserve(static_cast<std::size_t>(table.rows));
    }
    IdxScanCallbacks callbacks;
    callbacks.statistics = false;
    callbacks.on_pixels = [&](std::string_view pixels) {
      if (splitter) {
        tbb::parallel_invoke([&] { features.append(pixels); }, [&] { splitter->append(pixels, mask); });
      } else {
        features.append(pixels);
      }
    };
    const Table again = scan_part(part, part == 0 ? nullptr : &tables[0], callbacks, images_source, labels_source);
    for (auto [file, builder] : {std::pair{&images, &images_source}, std::pair{&labels, &labels_source}}) {
      StreamChunks stored = builder->finish();
      const StreamChunks& checked = sources[file == &images ? 2 * part : 2 * part + 1];
      if (stored.hash != checked.hash || again.rows != table.rows)
        throw data_error(display_name(file->path) +
                         ": the file changed between the two reads of the import (still being written?); "
                         "nothing was recorded, import it again once it is complete");
      streams.push_back({file->role, std::move(stored), file->path.filename().string(), {}, {}});
    }
    tensors.push_back({prefix + "features", "u8", with_rows(table.rows, table.sample_shape), std::move(features)});
    StreamBuilder label_values(objects, kTensorChunking, &staging);
    label_values.append(as_bytes(again.labels));
    tensors.push_back({prefix + "labels", "f32", {static_cast<std::int64_t>(table.rows)}, std::move(label_values)});
    if (split) {
      test_rows_in_split = static_cast<std::uint64_t>(std::count(mask.begin(), mask.end(), 1));
      StreamBuilder mask_stream(objects, kTensorChunking, &staging);
      mask_stream.append(as_bytes(mask));
      tensors.push_back({"split", "u8", {static_cast<std::int64_t>(mask.size())}, std::move(mask_stream)});
    }
  }
  finish_tensors(tensors, streams);
  result.bytes_added = staging.publish();
  fault_point("import.objects-written");

  VersionRow row;
  row.fingerprint = identity.fingerprint;
  row.format = Format::kIdx;
  row.rows = train.rows + (request.test ? tables[1].rows : 0);
  row.train_rows = request.test ? train.rows : train.rows - test_rows_in_split;
  row.test_rows = request.test ? tables[1].rows : test_rows_in_split;
  row.label = label;
  row.schema_text = schema_text;
  row.options = identity.options;
  return record_version(store, request, row, streams, result);
}

}  // namespace

ImportResult import_dataset(Store& store, const ImportRequest& request, Reporter& reporter) {
  validate_dataset_name(request.dataset);
  if (!(request.split >= 0 && request.split < 1))
    throw usage_error(Subject::kTestFraction, std::to_string(request.split) + ": expected a fraction in [0, 1)");
  if (std::optional<Format> format = streamable_format(request))
    return import_delimited_streamed(store, request, reporter, *format);
  if (std::optional<std::vector<IdxFile>> idx = open_u8_idx(request))
    if (std::optional<ImportResult> result = import_u8_idx_streamed(store, request, reporter, *idx)) return *result;

  std::vector<SourceFile> sources;
  auto add_source = [&](const std::string& role, const fs::path& path, Subject subject) {
    sources.push_back({role, path, open_input<FileSnapshot>(path, subject)});
  };
  add_source("source", request.file, Subject::kDataFile);
  if (request.labels) add_source("source.labels", *request.labels, Subject::kLabelsFile);
  if (request.test) add_source("test.source", *request.test, Subject::kTestFile);
  if (request.test_labels) add_source("test.source.labels", *request.test_labels, Subject::kTestLabelsFile);

  const ObjectStore& objects = store.objects();
  ImportResult result;
  for (const auto& s : sources) result.source_bytes += s.contents.bytes().size();

  // Chunk, hash and compress the sources while the parser runs: nothing is
  // written until the parse has succeeded, so bad input leaves no trace.
  reporter.note("reading " + std::to_string(result.source_bytes) + " bytes");
  std::vector<PreparedStream> source_streams(sources.size());
  Format format = Format::kAuto;
  Table train, test;
  tbb::task_group group;
  for (std::size_t i = 0; i < sources.size(); ++i)
    group.run([&, i] {
      source_streams[i] = prepare_stream(objects, sources[i].contents.bytes(), kSourceChunking);
    });
  group.run([&] { parse_inputs(request, sources, format, train, test, result.date_format_hints); });
  group.wait();

  std::vector<std::pair<std::string, std::string>> source_hashes;
  for (std::size_t i = 0; i < sources.size(); ++i) source_hashes.emplace_back(sources[i].role, source_streams[i].hash);
  std::map<std::string, std::string> feature_dtypes;
  if (train.byte_features) feature_dtypes["features"] = "u8";
  if (request.test && test.byte_features) feature_dtypes["test.features"] = "u8";
  const ImportIdentity identity =
      import_identity(request, format, train.columns[train.label_column].name, source_hashes, feature_dtypes);

  // The parsed form: features and labels in source row order (so appended
  // rows append to these streams too), and a split mask or the test part.
  std::vector<ColumnSchema> columns = train.columns;
  std::vector<std::uint8_t> split;
  if (request.test) {
    for (std::size_t c = 0; c < columns.size(); ++c) columns[c] = merge_column(train.columns[c], test.columns[c]);
    result.version.train_rows = train.rows;
    result.version.test_rows = test.rows;
  } else {
    split = content_split(train, request.split, request.seed);
    std::uint64_t test_rows = static_cast<std::uint64_t>(std::count(split.begin(), split.end(), 1));
    result.version.train_rows = train.rows - test_rows;
    result.version.test_rows = test_rows;
  }
  struct TensorStream {
    std::string role;
    std::string_view bytes;
    std::string dtype;
    std::vector<std::int64_t> shape;
    PreparedStream prepared;
  };
  // Features read from unsigned bytes (IDX images) are stored as bytes
  // (dtype u8): exactly the file's pixels, a quarter of float32 to store,
  // decode and hold. The float form is dropped once converted.
  std::vector<std::uint8_t> train_bytes, test_bytes;
  auto features_stream = [&](const char* role, Table& part, std::vector<std::uint8_t>& bytes) -> TensorStream {
    if (!part.byte_features) return {role, as_bytes(part.features), "f32", with_rows(part.rows, part.sample_shape), {}};
    bytes = features_as_bytes(part.features);
    std::vector<float>().swap(part.features);
    return {role, as_bytes(bytes), "u8", with_rows(part.rows, part.sample_shape), {}};
  };
  std::vector<TensorStream> tensors;
  tensors.push_back(features_stream("features", train, train_bytes));
  tensors.push_back({"labels", as_bytes(train.labels), "f32", {static_cast<std::int64_t>(train.rows)}, {}});
  if (request.test) {
    tensors.push_back(features_stream("test.features", test, test_bytes));
    tensors.push_back({"test.labels", as_bytes(test.labels), "f32", {static_cast<std::int64_t>(test.rows)}, {}});
  } else if (request.split > 0) {
    tensors.push_back({"split", as_bytes(split), "u8", {static_cast<std::int64_t>(split.size())}, {}});
  }
  for (auto& t : tensors) group.run([&t, &objects] { t.prepared = prepare_stream(objects, t.bytes, kTensorChunking); });
  group.wait();
  fault_point("import.prepared");

  const std::string schema_text = schema_text_of(request, columns, train.sample_shape);

  // From the first object written until the catalog commit, hold the writer
  // lock so a concurrent gc cannot take objects that are not yet referenced.
  FileLock writer = store.writer_lock();
  reporter.note("writing objects");
  std::vector<const PreparedStream*> all_streams;
  for (const auto& s : source_streams) all_streams.push_back(&s);
  for (const auto& t : tensors) all_streams.push_back(&t.prepared);
  result.bytes_added = commit_streams(objects, all_streams);
  fault_point("import.objects-written");

  VersionRow row;
  row.fingerprint = identity.fingerprint;
  row.format = format;
  row.rows = train.rows + (request.test ? test.rows : 0);
  row.train_rows = result.version.train_rows;
  row.test_rows = result.version.test_rows;
  row.label = train.columns[train.label_column].name;
  row.schema_text = schema_text;
  row.options = identity.options;
  std::vector<VersionStream> streams;
  for (std::size_t i = 0; i < sources.size(); ++i)
    streams.push_back({sources[i].role, chunks_of(source_streams[i]), sources[i].path.filename().string(), {}, {}});
  for (const auto& t : tensors) streams.push_back({t.role, chunks_of(t.prepared), std::nullopt, t.dtype, t.shape});
  return record_version(store, request, row, streams, result);
}

// ------------------------------------------------------------------ queries

DatasetVersion find_dataset(Store& store, const DatasetRef& ref) {
  return lookup(store.db(), ref).second;
}

std::vector<DatasetVersion> dataset_versions(Store& store, std::string_view name) {
  sql::Database& db = store.db();
  auto ds = db.prepare("SELECT id FROM datasets WHERE name = ?");
  ds.bind(1, name);
  if (!ds.step()) throw not_found("no dataset named '" + std::string(name) + "'");
  auto stmt = db.prepare(std::string("SELECT ") + kVersionColumns +
                         " FROM dataset_versions v WHERE v.dataset_id = ? ORDER BY v.version");
  stmt.bind(1, ds.int64(0));
  std::vector<DatasetVersion> versions;
  while (stmt.step()) {
    versions.push_back(read_version_row(stmt, std::string(name)));
    load_streams(db, stmt.int64(0), versions.back());
  }
  return versions;
}

std::vector<DatasetSummary> list_datasets(Store& store) {
  sql::Database& db = store.db();
  auto stmt = db.prepare(
      "SELECT d.name, count(v.id) FROM datasets d JOIN dataset_versions v ON v.dataset_id = d.id "
      "GROUP BY d.id ORDER BY d.name");
  std::vector<DatasetSummary> out;
  while (stmt.step()) {
    DatasetSummary s;
    s.name = stmt.text(0);
    s.versions = static_cast<int>(stmt.int64(1));
    out.push_back(std::move(s));
  }
  for (auto& s : out) s.latest = find_dataset(store, {s.name, std::nullopt});
  return out;
}

DatasetDiff diff_datasets(Store& store, const DatasetRef& from, const DatasetRef& to) {
  DatasetDiff diff;
  diff.from = find_dataset(store, from);
  diff.to = find_dataset(store, to);
  sql::Database& db = store.db();

  // Schema: columns added, removed, retyped, with changed dictionaries.
  std::map<std::string, const ColumnSchema*> before, after;
  for (const auto& c : diff.from.columns) before[c.name] = &c;
  for (const auto& c : diff.to.columns) after[c.name] = &c;
  for (const auto& [name, c] : before)
    if (!after.count(name)) diff.schema_changes.push_back("removed column '" + name + "'");
  for (const auto& c : diff.to.columns) {
    auto it = before.find(c.name);
    if (it == before.end()) {
      diff.schema_changes.push_back("added column '" + c.name + "' (" + column_type_name(c.type) + ")");
      continue;
    }
    const ColumnSchema& old = *it->second;
    if (old.type != c.type)
      diff.schema_changes.push_back("column '" + c.name + "' changed type " +
                                    column_type_name(old.type) + " -> " + column_type_name(c.type));
    else if (c.type == ColumnType::kCategorical && old.categories != c.categories) {
      std::set<std::string> was(old.categories.begin(), old.categories.end());
      std::size_t added = 0;
      for (const auto& cat : c.categories) added += !was.count(cat);
      diff.schema_changes.push_back("column '" + c.name + "': " + std::to_string(added) +
                                    " new categories");
    } else if (c.type == ColumnType::kDatetime && old.datetime_format != c.datetime_format) {
      diff.schema_changes.push_back("column '" + c.name + "' changed date format " + old.datetime_format +
                                    " -> " + c.datetime_format);
    }
    if (old.shape != c.shape) diff.schema_changes.push_back("column '" + c.name + "' changed shape");
  }
  if (diff.from.label_column != diff.to.label_column)
    diff.schema_changes.push_back("label column '" + diff.from.label_column + "' -> '" +
                                  diff.to.label_column + "'");

  // Bytes: distinct chunk objects of each version, and those both hold.
  auto chunk_set = [&](const DatasetVersion& v, bool sources_only) {
    std::unordered_map<std::string, std::uint64_t> set;
    for (const auto& s : v.streams) {
      if (sources_only && s.role.find("source") == std::string::npos) continue;
      for (const auto& c : blob_chunks(db, s.blob)) set.emplace(c.object, c.length);
    }
    return set;
  };
  auto a = chunk_set(diff.from, false), b = chunk_set(diff.to, false);
  for (const auto& [id, len] : a) diff.from_bytes += len;
  for (const auto& [id, len] : b) {
    diff.to_bytes += len;
    if (a.count(id)) diff.shared_bytes += len;
  }
  auto sa = chunk_set(diff.from, true), sb = chunk_set(diff.to, true);
  for (const auto& [id, len] : sb)
    if (sa.count(id)) diff.source_shared_bytes += len;
  return diff;
}

void export_dataset(Store& store, const DatasetRef& ref, const std::string& role,
                    const fs::path& out, bool force) {
  DatasetVersion v = find_dataset(store, ref);
  const DatasetStream* stream = v.stream(role);
  if (!stream) {
    std::string roles;
    for (const auto& s : v.streams) roles += (roles.empty() ? "" : ", ") + s.role;
    throw usage_error(Subject::kDatasetPart, role + ": " + v.ref() + " has no such part (parts: " + roles + ")");
  }
  if (!force && fs::exists(out))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  std::string bytes = read_blob(store.db(), store.objects(), stream->blob,
                                "dataset " + v.ref() + ", " + role);
  fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!write_file_atomic(out, bytes, dir, /*replace=*/force))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
}

namespace {

// Rows decoded per block when a stream is converted or split on load: about
// 32 chunks of 256 KiB, enough to keep every core decoding, and small beside
// the arrays being filled.
constexpr std::uint64_t kLoadBlockBytes = std::uint64_t{8} << 20;

// Decodes every row of `reader`'s stream as float32, in order, into `train`
// and `test`: row i goes to `test` when split[i] is nonzero (an empty
// `split`: every row to `train`). The spans hold exactly the rows each part
// gets. u8 values become 0..255. An f32 stream going whole to `train` is
// decoded straight into place; otherwise blocks of rows are decoded into a
// small buffer and converted or copied row by row, so no second copy of the
// whole stream is ever held.
void load_rows_as_f32(const TensorRowReader& reader, std::span<const std::uint8_t> split, std::span<float> train,
                      std::span<float> test) {
  const std::uint64_t rows = reader.rows();
  const auto width = static_cast<std::size_t>(reader.row_width());
  if (split.empty() && reader.type() == StoredType::kF32) {
    reader.read(0, rows, std::as_writable_bytes(train));
    return;
  }
  const std::size_t row_bytes = reader.row_bytes();
  const std::uint64_t block_rows = std::max<std::uint64_t>(1, kLoadBlockBytes / std::max<std::size_t>(row_bytes, 1));
  std::vector<std::byte> block(static_cast<std::size_t>(std::min(rows, block_rows)) * row_bytes);
  std::vector<float*> targets;
  std::size_t train_at = 0, test_at = 0;  // floats written to each part
  for (std::uint64_t first = 0; first < rows; first += block_rows) {
    const auto count = static_cast<std::size_t>(std::min(block_rows, rows - first));
    const std::span<std::byte> bytes(block.data(), count * row_bytes);
    reader.read(first, count, bytes);
    targets.resize(count);
    for (std::size_t r = 0; r < count; ++r) {
      const bool to_test = !split.empty() && split[first + r] != 0;
      std::size_t& at = to_test ? test_at : train_at;
      targets[r] = (to_test ? test : train).data() + at;
      at += width;
    }
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count), [&](const auto& range) {
      for (std::size_t r = range.begin(); r < range.end(); ++r) {
        const std::byte* in = bytes.data() + r * row_bytes;
        float* out = targets[r];
        if (reader.type() == StoredType::kU8) {
          for (std::size_t j = 0; j < width; ++j) out[j] = static_cast<float>(std::to_integer<std::uint8_t>(in[j]));
        } else {
          std::memcpy(out, in, row_bytes);
        }
      }
    });
  }
}

}  // namespace

LoadedDataset load_dataset(Store& store, const DatasetRef& ref) {
  LoadedDataset loaded;
  loaded.version = find_dataset(store, ref);
  const DatasetVersion& v = loaded.version;
  auto shell = [&](Table& t) {
    t.columns = v.columns;
    t.sample_shape = v.sample_shape;
    for (std::size_t c = 0; c < v.columns.size(); ++c)
      if (v.columns[c].name == v.label_column) t.label_column = c;
  };
  shell(loaded.train);
  shell(loaded.test);
  const auto width = loaded.train.sample_width();
  // Every reader of a Table indexes rows x width: streams that are not the
  // same number of whole rows are damage, refused before anything is read.
  auto check_rows = [&](const TensorRowReader& features, const TensorRowReader& labels) {
    if (features.row_width() != width || labels.row_width() != 1 || features.rows() != labels.rows())
      throw corrupt(features.owner() + ": " + std::to_string(features.rows()) + " rows of " +
                    std::to_string(features.row_width()) + " values beside " + std::to_string(labels.rows()) +
                    " labels of " + std::to_string(labels.row_width()) + " (expected rows of " + std::to_string(width) +
                    " values, one label each)")
          .with(Remedy::kCheckStore);
  };
  auto load_whole = [&](const TensorRowReader& features, const TensorRowReader& labels, Table& part) {
    part.rows = labels.rows();
    part.features.resize(static_cast<std::size_t>(part.rows) * static_cast<std::size_t>(width));
    part.labels.resize(static_cast<std::size_t>(part.rows));
    load_rows_as_f32(features, {}, part.features, {});
    load_rows_as_f32(labels, {}, part.labels, {});
  };
  const TensorRowReader features(store, v, "features"), labels(store, v, "labels");
  check_rows(features, labels);
  if (v.stream("test.features")) {
    const TensorRowReader test_features(store, v, "test.features"), test_labels(store, v, "test.labels");
    check_rows(test_features, test_labels);
    load_whole(features, labels, loaded.train);
    load_whole(test_features, test_labels, loaded.test);
    return loaded;
  }
  std::vector<std::uint8_t> split;
  if (v.stream("split")) {
    const TensorRowReader mask(store, v, "split");
    if (mask.type() != StoredType::kU8 || mask.row_width() != 1 || mask.rows() != labels.rows())
      throw corrupt(mask.owner() + ": expected " + std::to_string(labels.rows()) + " u8 values, one per row, found " +
                    std::to_string(mask.rows()) + " rows of " + std::to_string(mask.row_width()) + " " +
                    stored_type_name(mask.type()))
          .with(Remedy::kCheckStore);
    split.resize(static_cast<std::size_t>(mask.rows()));
    mask.read(0, mask.rows(), std::as_writable_bytes(std::span<std::uint8_t>(split)));
  }
  const auto test_rows =
      static_cast<std::size_t>(std::count_if(split.begin(), split.end(), [](std::uint8_t s) { return s != 0; }));
  if (test_rows == 0) {
    load_whole(features, labels, loaded.train);  // the streams as stored are the training split
    return loaded;
  }
  loaded.train.rows = labels.rows() - test_rows;
  loaded.test.rows = test_rows;
  for (Table* part : {&loaded.train, &loaded.test}) {
    part->features.resize(static_cast<std::size_t>(part->rows) * static_cast<std::size_t>(width));
    part->labels.resize(static_cast<std::size_t>(part->rows));
  }
  load_rows_as_f32(features, split, loaded.train.features, loaded.test.features);
  load_rows_as_f32(labels, split, loaded.train.labels, loaded.test.labels);
  return loaded;
}

}  // namespace anneal
