// CSV/TSV imported in bounded memory (see import_delimited_streamed).
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
  const SplitRule split_rule = split_rule_for(store, request.dataset, format);
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
      std::vector<std::uint8_t> mask = content_split(batch, request.split, request.seed, split_rule);
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
  const ImportIdentity identity = import_identity(request, format, label, source_hashes, {}, split_rule);
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

}  // namespace anneal::importing
