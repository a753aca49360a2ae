// IDX images of element type u8 imported in bounded memory (see
// import_u8_idx_streamed below).
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
  const ImportIdentity identity = import_identity(request, Format::kIdx, label, source_hashes, feature_dtypes,
                                                  split_rule_for(store, request.dataset, Format::kIdx));
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

std::optional<ImportResult> import_idx_streamed(Store& store, const ImportRequest& request, Reporter& reporter) {
  std::optional<std::vector<IdxFile>> files = open_u8_idx(request);
  if (!files) return std::nullopt;
  return import_u8_idx_streamed(store, request, reporter, *files);
}

}  // namespace anneal::importing
