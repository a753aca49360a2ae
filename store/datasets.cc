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
#include "import_pipeline.h"
#include "streams.h"

namespace anneal {
namespace fs = std::filesystem;
using nlohmann::json;
// The steps the whole-file import shares with the streamed ones.
using namespace importing;

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

struct SourceFile {
  std::string role;
  fs::path path;
  FileSnapshot contents;  // read once: the parse and the stored source see the same bytes
};

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

}  // namespace

// ------------------------------------------------------------------- import

namespace {

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

}  // namespace

ImportResult import_dataset(Store& store, const ImportRequest& request, Reporter& reporter) {
  validate_dataset_name(request.dataset);
  if (!(request.split >= 0 && request.split < 1))
    throw usage_error(Subject::kTestFraction, std::to_string(request.split) + ": expected a fraction in [0, 1)");
  if (std::optional<Format> format = streamable_format(request))
    return importing::import_delimited_streamed(store, request, reporter, *format);
  if (std::optional<ImportResult> result = importing::import_idx_streamed(store, request, reporter)) return *result;

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
  const SplitRule split_rule = split_rule_for(store, request.dataset, format);
  const ImportIdentity identity = import_identity(request, format, train.columns[train.label_column].name,
                                                  source_hashes, feature_dtypes, split_rule);

  // The parsed form: features and labels in source row order (so appended
  // rows append to these streams too), and a split mask or the test part.
  std::vector<ColumnSchema> columns = train.columns;
  std::vector<std::uint8_t> split;
  if (request.test) {
    for (std::size_t c = 0; c < columns.size(); ++c) columns[c] = merge_column(train.columns[c], test.columns[c]);
    result.version.train_rows = train.rows;
    result.version.test_rows = test.rows;
  } else {
    split = content_split(train, request.split, request.seed, split_rule);
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
