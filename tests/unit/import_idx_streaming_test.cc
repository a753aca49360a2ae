// The IDX import of u8 images, streamed from the file (plain, or
// decompressed as it is read): it records exactly the version the
// whole-file import recorded before it (the same streams, chunks, schema and
// statistics: golden values taken from that import), refuses hostile files
// with the whole-file parse's messages leaving the store as it was, and
// tells a u8 version from an older f32 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/hash.h"
#include "anneal/fs.h"
#include "anneal/store.h"
#include "formats/idx_scan.h"
#include "anneal/input_stream.h"
#include "sqlite.h"
#include "streams.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

std::string big_endian_u32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// An IDX header: magic 00 00 TYPE RANK, then the dims as big-endian u32.
std::string idx_header(unsigned char type, const std::vector<std::uint32_t>& dims) {
  std::string out = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims) out += big_endian_u32(d);
  return out;
}

// `rows` u8 images of h x w (or rows x h when w is 0): a dark border and
// seeded noise inside, like scanned images (runs of zeros, so chunk cuts
// fall at varied places).
std::string u8_images(std::uint32_t rows, std::uint32_t h, std::uint32_t w, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out = w ? idx_header(0x08, {rows, h, w}) : idx_header(0x08, {rows, h});
  const std::uint32_t width = w ? w : 1;
  for (std::uint64_t i = 0; i < std::uint64_t{rows} * h * width; ++i) {
    const std::uint64_t x = i % width, y = (i / width) % h;
    const bool border = w && (x < 3 || y < 3 || x + 3 >= w || y + 3 >= h);
    out += static_cast<char>(border ? 0 : static_cast<unsigned char>(rng() >> 56));
  }
  return out;
}

std::string u8_labels(std::uint32_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out = idx_header(0x08, {rows});
  for (std::uint32_t i = 0; i < rows; ++i) out += static_cast<char>(rng() % 10);
  return out;
}

std::string gzip(const std::string& bytes) { return test::gzip(bytes); }
std::string zstd(const std::string& bytes) { return test::zstd_with_size(bytes); }

// The store's objects and versions, to compare before and after.
std::string store_state(const fs::path& root) {
  Store store = Store::open(root);
  std::string out;
  for (const std::string& id : store.objects().list()) out += id + "\n";
  auto rows = store.db().prepare("SELECT v.version, v.fingerprint FROM dataset_versions v ORDER BY v.id");
  while (rows.step()) out += rows.text(0) + " " + rows.text(1) + "\n";
  return out;
}

class IdxImport : public ::testing::Test {
 protected:
  void SetUp() override { Store::init(root()); }
  fs::path root() const { return dir_.path() / "store"; }
  fs::path write(const std::string& name, const std::string& bytes) const {
    fs::path path = dir_.path() / name;
    test::write_file(path, bytes);
    return path;
  }
  ImportRequest request(const fs::path& images, const fs::path& labels) const {
    ImportRequest r;
    r.dataset = "d";
    r.file = images;
    r.labels = labels;
    return r;
  }
  ImportResult import(const ImportRequest& r) {
    Store store = Store::open(root());
    return import_dataset(store, r, reporter_);
  }
  // The parsed streams (not the sources, whose bytes are the test's own)
  // and the schema, as the catalog records them.
  static std::string tensors_of(const DatasetVersion& v) {
    std::string out;
    for (const auto& s : v.streams) {
      if (s.role.find("source") != std::string::npos) continue;
      std::string shape;
      for (std::int64_t d : s.shape) shape += std::to_string(d) + ",";
      out += s.role + " " + s.blob + " " + s.dtype + " " + std::to_string(s.size) + " " +
             std::to_string(s.chunks) + " [" + shape + "]\n";
    }
    out += columns_to_json(v.columns).dump() + "\n";
    out += "rows " + std::to_string(v.train_rows) + " " + std::to_string(v.test_rows) + "\n";
    return out;
  }
  // Importing `image_path` and `labels_path` (holding `images` and
  // `labels`, maybe compressed) fails with `expected`, kBadData, and leaves
  // the store as it was.
  void expect_refused(const fs::path& image_path, const fs::path& labels_path, const std::string& expected) {
    const std::string before = store_state(root());
    ASSERT_NE(expected, "no error");
    try {
      import(request(image_path, labels_path));
      ADD_FAILURE() << "imported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadData);
      EXPECT_EQ(std::string(e.what()), expected);
    }
    EXPECT_EQ(store_state(root()), before) << "the store changed";
  }
  test::TempDir dir_;
  NullReporter reporter_;
};

// Whole-file parse's error message for these bytes, or "no error".
std::string parse_error(const std::string& images, const std::string& labels, const ParseOptions& options,
                        const std::string& labels_name) {
  try {
    parse_idx(images, labels, options, labels_name);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

ParseOptions named(const fs::path& path) {
  ParseOptions options;
  options.display_name = path.string();
  return options;
}

// What a scan passes on and returns.
struct Scanned {
  Table table;
  std::string bytes, pixels, label_bytes;
};

Scanned scan(IdxInput images, IdxInput labels, const ParseOptions& options, std::size_t piece) {
  Scanned out;
  IdxScanCallbacks callbacks;
  callbacks.on_bytes = [&](std::string_view b) { out.bytes.append(b); };
  callbacks.on_pixels = [&](std::string_view p) { out.pixels.append(p); };
  callbacks.on_label_bytes = [&](std::string_view b) { out.label_bytes.append(b); };
  out.table = scan_idx_u8(images, labels, options, "lab", callbacks, piece);
  return out;
}

// The scan of a file, read with pread or from memory, in pieces of one or
// several statistics blocks, is parse_idx without the floats: the same
// shape, labels and statistics bit for bit (the JSON of the schema prints
// every double exactly), every byte handed on once.
TEST_F(IdxImport, ScanEqualsTheWholeFileParse) {
  struct Case {
    std::string images, labels;
  };
  for (const Case& c : {Case{u8_images(3000, 28, 28, 1), u8_labels(3000, 2)},  // 2.35M pixels: 3 blocks
                        Case{u8_images(7, 3, 5, 9), u8_labels(7, 8)}, Case{u8_images(4000, 300, 0, 5), u8_labels(4000, 6)},
                        Case{u8_images(1, 1100, 1000, 3), u8_labels(1, 4)}}) {  // one row over a block
    const fs::path path = write("scan.idx", c.images);
    const fs::path labels_path = write("scan-labels.idx", c.labels);
    const Table whole = parse_idx(c.images, c.labels, named(path), "lab");
    const fs::path gz_path = write("scan.idx.gz", gzip(c.images));
    FileReader file(path), labels_file(labels_path), gz_file(gz_path);
    for (std::size_t piece : {std::size_t{1}, std::size_t{2} << 20, std::size_t{64} << 20}) {
      SCOPED_TRACE(std::to_string(c.images.size()) + " bytes, piece " + std::to_string(piece));
      for (int from : {0, 1, 2}) {  // a file, bytes in memory, a decompressed stream
        DecompressingReader stream(gz_file, gz_path.string(), {});
        Scanned s = from == 0   ? scan(IdxInput(file), IdxInput(labels_file), named(path), piece)
                    : from == 1 ? scan(IdxInput(c.images), IdxInput(c.labels), named(path), piece)
                                : scan(IdxInput(stream), IdxInput(c.labels), named(path), piece);
        EXPECT_TRUE(s.bytes == c.images);  // the decompressed content, for the stream
        EXPECT_TRUE(s.label_bytes == c.labels);
        EXPECT_EQ(s.pixels.size(), whole.features.size());
        EXPECT_TRUE(std::equal(s.pixels.begin(), s.pixels.end(), whole.features.begin(),
                               [](char p, float f) { return static_cast<float>(static_cast<unsigned char>(p)) == f; }));
        EXPECT_TRUE(s.table.features.empty()) << "no float copy";
        EXPECT_TRUE(s.table.byte_features);
        EXPECT_EQ(s.table.rows, whole.rows);
        EXPECT_EQ(s.table.sample_shape, whole.sample_shape);
        EXPECT_EQ(s.table.labels, whole.labels);
        EXPECT_EQ(columns_to_json(s.table.columns).dump(), columns_to_json(whole.columns).dump());
      }
    }
  }
}

// Damaged files: the scan agrees with parse_idx on every one, the same
// error message or the same labels and schema (tests/fuzz/fuzz_idx.cc
// checks the same on what fuzzing finds).
TEST_F(IdxImport, ScanAgreesWithTheWholeFileParseOnDamagedFiles) {
  const std::string images = u8_images(5, 3, 4, 2), labels = u8_labels(5, 2);
  std::mt19937 rng(9);
  auto outcome = [](const std::function<Table()>& parse) {
    try {
      Table table = parse();
      // Appended in steps: GCC 12 warns falsely (-Wrestrict) on "..." + to_string().
      std::string out = "rows ";
      out += std::to_string(table.rows);
      for (float label : table.labels) (out += ' ') += std::to_string(label);
      return out + " " + columns_to_json(table.columns).dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadData) << e.what();
      return std::string("error ") + e.what();
    }
  };
  int compared = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string damaged_images = images, damaged_labels = labels;
    std::string& target = rng() % 2 ? damaged_images : damaged_labels;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 3) && !target.empty(); ++e) {
      std::size_t at = rng() % target.size();
      switch (rng() % 3) {
        case 0: target[at] = static_cast<char>(rng()); break;
        case 1: target.resize(at); break;
        default: target.insert(at, 1, static_cast<char>(rng())); break;
      }
    }
    const std::optional<unsigned char> type = idx_element_type(damaged_images.substr(0, 4));
    if (type && *type != kIdxU8Type) continue;  // the import parses those whole
    const std::string parsed = outcome([&] { return parse_idx(damaged_images, damaged_labels, named("img"), "lab"); });
    const std::string scanned = outcome([&] {
      IdxInput image_input(damaged_images), label_input(damaged_labels);
      return scan_idx_u8(image_input, label_input, named("img"), "lab", {});
    });
    EXPECT_EQ(scanned, parsed);
    ++compared;
  }
  EXPECT_GT(compared, 2000);
}

// The versions the whole-file import recorded before the streamed one
// existed (the digest of every parsed stream's hash, dtype, size, chunk
// count and shape, the schema and the split, taken with that import): the
// streamed import records the same, so stores imported before see no
// change. Split and test part, N x D data, and gzip input.
TEST_F(IdxImport, RecordsTheVersionTheWholeFileImportRecorded) {
  // 3000 images of 28x28: 2.35M pixels, three of the whole-file parse's
  // statistics blocks (1M elements) and several chunks.
  const std::string image_bytes = u8_images(3000, 28, 28, 1);
  const fs::path images = write("images.idx", image_bytes);
  const fs::path labels = write("labels.idx", u8_labels(3000, 2));
  auto digest = [](const ImportResult& r) { return to_hex(hash_bytes(tensors_of(r.version))); };

  ImportResult split = import(request(images, labels));
  EXPECT_EQ(digest(split), "c728912057ab85ac60487806e7920b49787211671eea6fd4863e38d505734694") << tensors_of(split.version);
  Store store = Store::open(root());
  EXPECT_EQ(split.version.stream("source")->blob, prepare_stream(store.objects(), image_bytes, kSourceChunking).hash);
  EXPECT_EQ(split.version.stream("source.labels")->blob,
            prepare_stream(store.objects(), test::read_file(labels), kSourceChunking).hash);
  const std::string stored = read_blob(store.db(), store.objects(), split.version.stream("features")->blob, "test");
  EXPECT_EQ(stored, image_bytes.substr(16)) << "the features stream is the file's pixels";

  ImportRequest with_test = request(images, labels);
  with_test.test = write("test-images.idx", u8_images(700, 28, 28, 3));
  with_test.test_labels = write("test-labels.idx", u8_labels(700, 4));
  ImportResult test = import(with_test);
  EXPECT_EQ(digest(test), "384e79e0632d5d282abb37e407904d9893557d007237e2b8154443c8479e85d7") << tensors_of(test.version);

  ImportRequest flat = request(write("flat.idx", u8_images(5000, 300, 0, 5)), write("flat-labels.idx", u8_labels(5000, 6)));
  flat.split = 0.3;
  flat.seed = 5;
  ImportResult flat_result = import(flat);
  EXPECT_EQ(digest(flat_result), "39a21a10c661a3c06de7a3bc4075dc2d4a0f3316772a20c41d53360135b6ff2d")
      << tensors_of(flat_result.version);

  const std::string gz_bytes = gzip(image_bytes);
  ImportResult gz = import(request(write("images.idx.gz", gz_bytes), labels));
  EXPECT_EQ(digest(gz), digest(split)) << tensors_of(gz.version);
  EXPECT_EQ(gz.version.stream("source")->blob, prepare_stream(store.objects(), gz_bytes, kSourceChunking).hash)
      << "a compressed source is stored as it is";
  EXPECT_EQ(gz.version.version, 4);
}

// Every object file and catalog row, for "the store exactly as it was".

// Hostile files: the import refuses each with the whole-file parse's
// message, one line, kBadData, before anything is written: the store is as
// it was (one earlier version, its objects, nothing else).
TEST_F(IdxImport, HostileFilesAreRefusedWithTheParsersMessageAndWriteNothing) {
  import(request(write("ok.idx", u8_images(50, 4, 4, 1)), write("ok-labels.idx", u8_labels(50, 1))));
  const std::string before = store_state(root());
  const std::string images = u8_images(300, 28, 28, 7), labels = u8_labels(300, 7);
  struct Case {
    std::string what, images, labels;
  };
  // A label must be finite: f32 labels, the last one NaN.
  std::string nan_labels = idx_header(0x0D, {300});
  for (int i = 0; i < 300; ++i) nan_labels += i == 299 ? std::string("\x7f\xc0\x00\x00", 4) : std::string(4, '\0');
  const std::vector<Case> cases = {
      {"truncated pixels", images.substr(0, images.size() - 1), labels},
      {"trailing data", images + "x", labels},
      {"huge dims", idx_header(0x08, {0xffffffff, 0xffffffff, 0xffffffff}) + images.substr(16), labels},
      {"dims claiming more than the file", idx_header(0x08, {100000, 28, 28}) + images.substr(16), labels},
      {"fewer labels", images, u8_labels(299, 7)},
      {"more labels", images, u8_labels(301, 7)},
      {"labels of rank 2", images, idx_header(0x08, {300, 1}) + labels.substr(8)},
      {"truncated labels", images, labels.substr(0, labels.size() - 1)},
      {"bad magic", "\x01\x02" + images.substr(2), labels},
      {"bad label magic", images, std::string("\0\0\x07\x01", 4) + labels.substr(4)},
      {"empty images", "", labels},
      {"header cut short", images.substr(0, 9), labels},
      {"no images", idx_header(0x08, {0, 28, 28}), idx_header(0x08, {0})},
      {"empty samples", idx_header(0x08, {300, 0, 28}), labels},
      {"a NaN label", images, nan_labels},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path image_path = write("bad.idx", c.images), labels_path = write("bad-labels.idx", c.labels);
    expect_refused(image_path, labels_path, parse_error(c.images, c.labels, named(image_path), labels_path.string()));
  }
  // The test part must have the train part's image shape.
  ImportRequest mismatch = request(write("train.idx", images), write("train-labels.idx", labels));
  mismatch.test = write("test.idx", u8_images(10, 14, 56, 2));
  mismatch.test_labels = write("test-labels.idx", u8_labels(10, 2));
  try {
    import(mismatch);
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), mismatch.test->string() + ": expected images of shape 1x28x28 as in the train part, found 1x14x56");
  }
  EXPECT_EQ(store_state(root()), before);
}

// A file that shrinks or grows while it is read is refused (FileReader's
// kBadData), not read as whatever bytes it holds.
TEST_F(IdxImport, AFileChangingWhileReadIsRefused) {
  // Three 2 MiB pieces: the third is read after the first has been handed
  // on (the scan reads one piece ahead), so after the change.
  const std::string images = u8_images(7000, 28, 28, 4), labels = u8_labels(7000, 4);
  const fs::path labels_path = write("labels.idx", labels);
  FileReader labels_file(labels_path);
  for (bool shrink : {true, false}) {
    SCOPED_TRACE(shrink ? "shrinks" : "grows");
    const fs::path path = write("changing.idx", images);
    FileReader file(path);
    IdxScanCallbacks callbacks;
    bool changed = false;
    callbacks.on_pixels = [&](std::string_view) {
      if (changed) return;
      changed = true;
      if (shrink) fs::resize_file(path, images.size() / 2);
      else test::write_file(path, images + "more");
    };
    try {
      IdxInput images_input(file), labels_input(labels_file);
      scan_idx_u8(images_input, labels_input, named(path), "lab", callbacks);
      ADD_FAILURE() << "read a changing file";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadData);
      EXPECT_NE(std::string(e.what()).find("the file changed while being read"), std::string::npos) << e.what();
    }
  }
}

// Reads `stream` to its end in reads of `step` bytes.
std::string read_all(DecompressingReader& stream, std::size_t step) {
  std::string out, piece(step, '\0');
  for (std::size_t n; (n = stream.read(piece)) > 0;) out.append(piece, 0, n);
  return out;
}

std::string whole_error(const std::string& bytes, const std::string& name, const DecompressLimits& limits) {
  try {
    decompress_input(bytes, name, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string streamed_error(const fs::path& path, const DecompressLimits& limits) {
  FileReader file(path);
  try {
    DecompressingReader stream(file, path.string(), limits);
    read_all(stream, 100000);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Decompressing a piece at a time gives decompress_input's content, and
// hands on every byte of the file once; its errors are decompress_input's.
TEST_F(IdxImport, StreamedDecompressionEqualsTheWholeOne) {
  const std::string content = u8_images(4000, 28, 28, 11);  // 3 MB: several 1 MiB input pieces
  const std::string content2 = u8_labels(5000, 3);
  struct Case {
    std::string name, bytes;
  };
  const std::vector<Case> good = {
      {"one.gz", gzip(content)},
      {"members.gz", gzip(content) + gzip(content2)},  // cat a.gz b.gz
      {"padded.gz", gzip(content) + std::string(3 << 20, '\0')},
      {"one.zst", zstd(content)},
      {"frames.zst", zstd(content) + zstd(content2)},
  };
  for (const Case& c : good) {
    SCOPED_TRACE(c.name);
    const fs::path path = write(c.name, c.bytes);
    const std::string expected = decompress_input(c.bytes, c.name);
    FileReader file(path);
    for (std::size_t step : {std::size_t{1000}, std::size_t{1} << 20, std::size_t{16} << 20}) {
      std::string handed_on;
      DecompressingReader stream(file, c.name, {}, [&](std::string_view b) { handed_on.append(b); });
      EXPECT_TRUE(read_all(stream, step) == expected) << "step " << step;
      EXPECT_TRUE(handed_on == c.bytes) << "step " << step;
    }
  }
  const std::string gz = gzip(content);
  std::string corrupt = gz;
  for (std::size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  struct Bad {
    std::string name, bytes;
    DecompressLimits limits;
  };
  const std::vector<Bad> bad = {
      {"truncated.gz", gz.substr(0, gz.size() - 100), {}},
      {"truncated.zst", zstd(content).substr(0, 2000), {}},
      {"garbage-after.gz", gz + std::string(2 << 20, '\0') + "junk", {}},
      {"over-size.gz", gz, {1 << 20, 200}},
      {"over-ratio.gz", gzip(std::string(8 << 20, '\0')), {}},
      {"over-size.zst", zstd(content), {1 << 20, 200}},
      {"corrupt.gz", corrupt, {}},
  };
  for (const Bad& c : bad) {
    SCOPED_TRACE(c.name);
    const std::string expected = whole_error(c.bytes, write(c.name, c.bytes).string(), c.limits);
    ASSERT_NE(expected, "no error");
    EXPECT_EQ(streamed_error(dir_.path() / c.name, c.limits), expected);
  }
}

// Compressed IDX that is bad inside: the streamed import reads the
// content to its end and refuses it with the whole-file parse's message,
// writing nothing.
TEST_F(IdxImport, HostileCompressedFilesAreRefusedWithTheParsersMessage) {
  const std::string images = u8_images(3000, 28, 28, 7), labels = u8_labels(3000, 7);
  struct Case {
    std::string what, images, labels;
  };
  const std::vector<Case> cases = {
      {"truncated pixels", images.substr(0, images.size() - 1), labels},
      {"trailing data", images + std::string(3 << 20, 'x'), labels},
      {"huge dims", idx_header(0x08, {0xffffffff, 0xffffffff, 0xffffffff}) + images.substr(16), labels},
      {"fewer labels", images, u8_labels(2999, 7)},
      {"a header cut short", images.substr(0, 9), labels},
      {"empty content", "", labels},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path image_path = write("bad.idx.gz", gzip(c.images)), labels_path = write("bad-labels.idx.gz", gzip(c.labels));
    expect_refused(image_path, labels_path, parse_error(c.images, c.labels, named(image_path), labels_path.string()));
  }
}

// The fingerprint an import had before the stored dtype was part of it:
// the options and the sources' stream hashes alone.
std::string fingerprint_without_dtype(const DatasetVersion& v) {
  nlohmann::json sources = nlohmann::json::object();
  for (const auto& s : v.streams)
    if (s.role.find("source") != std::string::npos) sources[s.role] = s.blob;
  return to_hex(hash_bytes(nlohmann::json{{"options", v.options}, {"sources", sources}}.dump()));
}

// A store holding the f32 version an older anneal made of the same IDX
// files (its fingerprint without a dtype, its features f32) does not hand
// that version back for a u8 import: the u8 version is a new one. CSV
// versions keep the fingerprint they always had.
TEST_F(IdxImport, TheStoredDtypeIsPartOfTheImportsIdentity) {
  const fs::path images = write("images.idx", u8_images(40, 6, 6, 3)), labels = write("labels.idx", u8_labels(40, 3));
  ImportResult first = import(request(images, labels));
  ASSERT_TRUE(first.created);
  const std::string old_fingerprint = fingerprint_without_dtype(first.version);
  EXPECT_NE(first.version.fingerprint, old_fingerprint);
  {
    // Make v1 what an older anneal stored: f32 features under the old identity.
    Store store = Store::open(root());
    store.db()
        .prepare("UPDATE dataset_versions SET fingerprint = ? WHERE version = 1")
        .bind(1, old_fingerprint)
        .run();
    store.db().prepare("UPDATE dataset_streams SET dtype = 'f32' WHERE role = 'features'").run();
  }
  ImportResult again = import(request(images, labels));
  EXPECT_TRUE(again.created) << "the u8 import reused the f32 version";
  EXPECT_EQ(again.version.version, 2);
  EXPECT_EQ(again.version.stream("features")->dtype, "u8");
  ImportResult third = import(request(images, labels));
  EXPECT_FALSE(third.created) << "the same u8 import again is the same version";
  EXPECT_EQ(third.version.version, 2);

  ImportRequest csv;
  csv.dataset = "iris";
  csv.file = test::data_file("iris.csv");
  ImportResult iris = import(csv);
  EXPECT_EQ(iris.version.fingerprint, fingerprint_without_dtype(iris.version)) << "a CSV's identity changed";
}

// IDX of other element types is parsed whole, as before: its features are
// f32 and its fingerprint has no dtypes, so versions stored before keep
// being found; a u8 train part beside an i16 test part is imported whole too.
TEST_F(IdxImport, OtherElementTypesAreImportedWholeAsBefore) {
  std::string floats = idx_header(0x0D, {20, 2, 2});
  for (int i = 0; i < 80; ++i) floats += big_endian_u32(0x3f800000u + static_cast<std::uint32_t>(i));  // 1.0f and up
  const fs::path labels = write("labels.idx", u8_labels(20, 1));
  ImportResult f32 = import(request(write("floats.idx", floats), labels));
  EXPECT_EQ(f32.version.stream("features")->dtype, "f32");
  EXPECT_EQ(f32.version.fingerprint, fingerprint_without_dtype(f32.version));

  std::string shorts = idx_header(0x0B, {20, 2, 2});
  for (int i = 0; i < 80; ++i) shorts += std::string{'\0', static_cast<char>(i)};
  ImportRequest mixed = request(write("bytes.idx", u8_images(20, 2, 2, 1)), labels);
  mixed.dataset = "mixed";
  mixed.test = write("shorts.idx", shorts);
  mixed.test_labels = labels;
  ImportResult result = import(mixed);
  EXPECT_EQ(result.version.stream("features")->dtype, "u8");
  EXPECT_EQ(result.version.stream("test.features")->dtype, "f32");
  EXPECT_EQ(result.version.test_rows, 20u);
}

}  // namespace
}  // namespace anneal
