// Parsed tensor streams read by row range (TensorRowReader), and images kept
// in their stored type: IDX unsigned bytes are stored as u8 and still load as
// the same floats, beside versions stored as f32 before.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "anneal/chunker.h"
#include "anneal/dataset_rows.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/maintenance.h"
#include "anneal/store.h"
#include "sqlite.h"
#include "streams.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

constexpr unsigned char kIdxU8 = 0x08, kIdxF32 = 0x0D;

// An IDX file: magic 00 00 TYPE RANK, big-endian u32 dims, big-endian data
// (u8 or f32 elements).
std::string idx_file(unsigned char type, const std::vector<std::uint32_t>& dims, const std::vector<float>& values) {
  std::string out = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  auto put_big_endian = [&](std::uint32_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  for (std::uint32_t d : dims) put_big_endian(d, 4);
  for (float v : values) {
    if (type == kIdxU8) {
      put_big_endian(static_cast<std::uint8_t>(v), 1);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      put_big_endian(bits, 4);
    }
  }
  return out;
}

// `count` pixel values of the type: bytes 0..255, or floats of either sign
// with every mantissa bit in use (so a byte out of place shows).
std::vector<float> random_values(unsigned char type, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> values(count);
  for (float& v : values)
    v = type == kIdxU8 ? static_cast<float>(rng() % 256)
                       : std::uniform_real_distribution<float>(-1000.0f, 1000.0f)(rng);
  return values;
}

std::string bytes_of(std::span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

class DatasetRowsTest : public ::testing::Test {
 protected:
  void SetUp() override { Store::init(root()); }
  fs::path root() const { return dir_.path() / "store"; }

  // Writes IDX images (rows x side x side of `type`) and labels, and their
  // test part when test_rows > 0; returns the import request for them.
  ImportRequest idx_request(const std::string& name, unsigned char type, std::uint32_t rows, std::uint32_t side,
                            std::uint32_t test_rows) {
    auto write_part = [&](const std::string& prefix, std::uint32_t n, std::uint64_t seed) {
      images_[prefix] = random_values(type, std::size_t{n} * side * side, seed);
      labels_[prefix] = random_values(kIdxU8, n, seed + 1);
      for (float& l : labels_[prefix]) l = static_cast<float>(static_cast<int>(l) % 10);
      const fs::path images = dir_.path() / (name + "-" + prefix + "images.idx");
      const fs::path labels = dir_.path() / (name + "-" + prefix + "labels.idx");
      test::write_file(images, idx_file(type, {n, side, side}, images_[prefix]));
      test::write_file(labels, idx_file(kIdxU8, {n}, labels_[prefix]));
      return std::pair{images, labels};
    };
    ImportRequest request;
    request.dataset = name;
    std::tie(request.file, request.labels) = write_part("", rows, 7);
    if (test_rows > 0) std::tie(request.test, request.test_labels) = write_part("test.", test_rows, 11);
    return request;
  }
  DatasetVersion import(const ImportRequest& request) {
    Store store = Store::open(root());
    return import_dataset(store, request, reporter_).version;
  }

  test::TempDir dir_;
  NullReporter reporter_;
  std::map<std::string, std::vector<float>> images_, labels_;  // by part prefix: "" or "test."
};

// Rows where a chunk of the stream begins (after the first), from the catalog.
std::vector<std::uint64_t> chunk_start_rows(Store& store, const DatasetVersion& version, std::string_view role,
                                            std::size_t row_bytes) {
  std::vector<std::uint64_t> rows;
  std::uint64_t offset = 0;
  for (const BlobChunk& chunk : blob_chunks(store.db(), version.stream(role)->blob)) {
    if (offset > 0) rows.push_back(offset / row_bytes);
    offset += chunk.length;
  }
  return rows;
}

// Reads rows [first, first + count) and returns them as floats.
std::vector<float> read_as_floats(const TensorRowReader& reader, std::uint64_t first, std::uint64_t count) {
  std::vector<std::byte> bytes(count * reader.row_bytes());
  reader.read(first, count, bytes);
  std::vector<float> values(count * static_cast<std::uint64_t>(reader.row_width()));
  if (reader.type() == StoredType::kF32) {
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  } else {
    for (std::size_t i = 0; i < bytes.size(); ++i) values[i] = std::to_integer<std::uint8_t>(bytes[i]);
  }
  return values;
}

// The ranges worth reading: the first and last rows, the whole stream, a
// few rows across every chunk boundary, several whole chunks with a row on
// either side, and random ranges (fixed seed).
std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges_of(std::uint64_t rows,
                                                               const std::vector<std::uint64_t>& boundaries) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges = {{0, 1}, {rows - 1, 1}, {0, rows}, {rows, 0}};
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    const std::uint64_t b = boundaries[i];
    const std::uint64_t from = b >= 2 ? b - 2 : 0;
    ranges.emplace_back(from, std::min<std::uint64_t>(rows, b + 2) - from);
    ranges.emplace_back(b, 1);
    if (b > 0) ranges.emplace_back(b - 1, 1);
    if (i + 3 < boundaries.size()) ranges.emplace_back(b - 1, boundaries[i + 3] - b + 2);
  }
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t first = rng() % rows;
    ranges.emplace_back(first, 1 + rng() % (rows - first));
  }
  return ranges;
}

// Every range of the stream equals the same rows of `expected` (what
// load_dataset gave), bit for bit.
void expect_ranges_equal(Store& store, const DatasetVersion& version, const std::string& role,
                         const std::vector<float>& expected) {
  SCOPED_TRACE(role);
  const TensorRowReader reader(store, version, role);
  ASSERT_GT(reader.rows(), 0u);
  ASSERT_EQ(expected.size(), reader.rows() * static_cast<std::uint64_t>(reader.row_width()));
  const auto width = static_cast<std::size_t>(reader.row_width());
  for (const auto& [first, count] : ranges_of(reader.rows(), chunk_start_rows(store, version, role, reader.row_bytes()))) {
    const std::vector<float> got = read_as_floats(reader, first, count);
    const std::span<const float> want(expected.data() + first * width, count * width);
    ASSERT_EQ(bytes_of(got), bytes_of(want)) << "rows " << first << " + " << count;
  }
}

TEST_F(DatasetRowsTest, EveryRangeOfF32StreamsEqualsLoadDataset) {
  // 20000 images of 8x8 float32: 5 MB of features, about 20 chunks.
  DatasetVersion version = import(idx_request("floats", kIdxF32, 20000, 8, 3000));
  Store store = Store::open(root());
  const TensorRowReader features(store, version, "features");
  EXPECT_EQ(features.type(), StoredType::kF32);
  EXPECT_EQ(features.rows(), 20000u);
  EXPECT_EQ(features.row_width(), 64);
  EXPECT_EQ(features.row_bytes(), 256u);
  EXPECT_GE(features.chunk_count(), 10u);
  const TensorRowReader labels(store, version, "labels");
  EXPECT_EQ(labels.type(), StoredType::kF32);
  EXPECT_EQ(labels.row_width(), 1);
  EXPECT_GE(labels.chunk_count(), 1u);

  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("floats@v1"));
  ASSERT_EQ(bytes_of(loaded.train.features), bytes_of(images_[""]));  // the generated values, as parsed
  expect_ranges_equal(store, version, "features", loaded.train.features);
  expect_ranges_equal(store, version, "labels", loaded.train.labels);
  expect_ranges_equal(store, version, "test.features", loaded.test.features);
  expect_ranges_equal(store, version, "test.labels", loaded.test.labels);
}

TEST_F(DatasetRowsTest, EveryRangeOfU8FeaturesEqualsLoadDataset) {
  // 20000 images of 16x16 bytes: 5 MB as stored, about 20 chunks.
  DatasetVersion version = import(idx_request("bytes", kIdxU8, 20000, 16, 1000));
  Store store = Store::open(root());
  const TensorRowReader features(store, version, "features");
  EXPECT_EQ(features.type(), StoredType::kU8);
  EXPECT_EQ(features.row_width(), 256);
  EXPECT_EQ(features.row_bytes(), 256u);
  EXPECT_GE(features.chunk_count(), 10u);
  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("bytes"));
  ASSERT_EQ(loaded.train.features, images_[""]);
  expect_ranges_equal(store, version, "features", loaded.train.features);
  expect_ranges_equal(store, version, "test.features", loaded.test.features);
}

TEST_F(DatasetRowsTest, RowsOfASplitVersionMatchLoadDatasetsParts) {
  // No test file: the split stream says which rows load_dataset put in test.
  ImportRequest request = idx_request("split", kIdxU8, 12000, 16, 0);
  request.split = 0.25;
  DatasetVersion version = import(request);
  Store store = Store::open(root());
  const TensorRowReader mask(store, version, "split"), features(store, version, "features"),
      labels(store, version, "labels");
  EXPECT_EQ(mask.type(), StoredType::kU8);
  EXPECT_EQ(mask.row_width(), 1);
  EXPECT_EQ(mask.rows(), 12000u);
  std::vector<std::byte> split(mask.rows());
  mask.read(0, mask.rows(), split);
  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("split"));
  ASSERT_GT(loaded.test.rows, 0u);
  ASSERT_EQ(loaded.train.rows + loaded.test.rows, 12000u);
  const std::vector<float> all_features = read_as_floats(features, 0, features.rows());
  const std::vector<float> all_labels = read_as_floats(labels, 0, labels.rows());
  std::uint64_t train_at = 0, test_at = 0;
  for (std::uint64_t row = 0; row < mask.rows(); ++row) {
    const bool test = split[row] != std::byte{0};
    const Table& part = test ? loaded.test : loaded.train;
    std::uint64_t& at = test ? test_at : train_at;
    ASSERT_EQ(bytes_of(std::span<const float>(all_features.data() + row * 256, 256)),
              bytes_of(std::span<const float>(part.features.data() + at * 256, 256)))
        << row;
    ASSERT_EQ(all_labels.at(row), part.labels[at]) << row;
    ++at;
  }
  EXPECT_EQ(train_at, loaded.train.rows);
  EXPECT_EQ(test_at, loaded.test.rows);
}

TEST_F(DatasetRowsTest, ConcurrentReadsFromTwoThreadsEqualLoadDataset) {
  ImportRequest request = idx_request("shared", kIdxF32, 20000, 8, 0);
  request.split = 0;  // every row in the training part, as stored
  DatasetVersion version = import(request);
  Store store = Store::open(root());
  const std::vector<float> expected = load_dataset(store, parse_dataset_ref("shared")).train.features;
  const TensorRowReader reader(store, version, "features");
  ASSERT_EQ(expected.size(), 20000u * 64);
  std::atomic<int> mismatches{0}, reads{0};
  auto reading = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 60; ++i) {
      const std::uint64_t first = rng() % reader.rows();
      const std::uint64_t count = 1 + rng() % std::min<std::uint64_t>(reader.rows() - first, 5000);
      const std::vector<float> got = read_as_floats(reader, first, count);
      if (bytes_of(got) != bytes_of(std::span<const float>(expected.data() + first * 64, count * 64))) ++mismatches;
      ++reads;
    }
  };
  std::thread prefetching(reading, 1);
  reading(2);
  prefetching.join();
  EXPECT_EQ(reads.load(), 120);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(DatasetRowsTest, DamagedChunkIsCorruptNamingTheDatasetWhereverItIsRead) {
  DatasetVersion version = import(idx_request("damaged", kIdxF32, 20000, 8, 0));
  Store store = Store::open(root());
  const TensorRowReader reader(store, version, "features");
  const std::vector<BlobChunk> chunks = blob_chunks(store.db(), version.stream("features")->blob);
  ASSERT_GE(chunks.size(), 4u);
  // Overwrite bytes in the middle of the third chunk's object file.
  const fs::path object = store.objects().path_of(chunks[2].object);
  std::string file = test::read_file(object);
  for (std::size_t i = file.size() / 2; i < file.size() / 2 + 8; ++i) file[i] = static_cast<char>(~file[i]);
  test::write_file(object, file);

  const std::uint64_t chunk2_first = (chunks[0].length + chunks[1].length) / reader.row_bytes() + 1;
  for (auto [first, count] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {chunk2_first, 1}, {chunk2_first - 2, 4}, {0, reader.rows()}}) {
    std::vector<std::byte> out(count * reader.row_bytes());
    try {
      reader.read(first, count, out);
      ADD_FAILURE() << "rows " << first << " + " << count << " read from a damaged chunk";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
      EXPECT_NE(std::string(e.what()).find("dataset damaged@v1, features"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(chunks[2].object), std::string::npos) << e.what();
    }
  }
  // Rows in the chunks before it decode only those chunks, so they still read.
  std::vector<std::byte> head(10 * reader.row_bytes());
  EXPECT_NO_THROW(reader.read(0, 10, head));
  // load_dataset reads the damaged chunk too.
  try {
    load_dataset(store, parse_dataset_ref("damaged"));
    ADD_FAILURE() << "loaded a damaged version";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("damaged@v1"), std::string::npos) << e.what();
  }
}

TEST_F(DatasetRowsTest, BadRangesAndBufferSizesAreUsageErrors) {
  DatasetVersion version = import(idx_request("ranges", kIdxU8, 100, 4, 0));
  Store store = Store::open(root());
  const TensorRowReader reader(store, version, "features");
  ASSERT_EQ(reader.rows(), 100u);
  ASSERT_EQ(reader.row_bytes(), 16u);
  auto kind_of = [&](std::uint64_t first, std::uint64_t count, std::size_t bytes) -> std::string {
    std::vector<std::byte> out(bytes);
    try {
      reader.read(first, count, out);
      return "ok";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dataset ranges@v1, features"), std::string::npos) << e.what();
      return e.kind() == ErrorKind::kUsage ? "usage" : e.what();
    }
  };
  EXPECT_EQ(kind_of(0, 100, 1600), "ok");
  EXPECT_EQ(kind_of(100, 0, 0), "ok");  // an empty range at the end
  EXPECT_EQ(kind_of(99, 2, 32), "usage");
  EXPECT_EQ(kind_of(101, 0, 0), "usage");
  EXPECT_EQ(kind_of(1, std::numeric_limits<std::uint64_t>::max(), 0), "usage");  // first + count overflows
  EXPECT_EQ(kind_of(std::numeric_limits<std::uint64_t>::max(), 1, 16), "usage");
  EXPECT_EQ(kind_of(0, 2, 31), "usage");
  EXPECT_EQ(kind_of(0, 2, 33), "usage");
  EXPECT_EQ(kind_of(0, 0, 16), "usage");
}

TEST_F(DatasetRowsTest, MissingOrInconsistentStreamsAreCorruptNamingTheVersionAndRole) {
  DatasetVersion version = import(idx_request("broken", kIdxU8, 3000, 16, 0));
  Store store = Store::open(root());
  auto corrupt_message = [&](const DatasetVersion& v, std::string_view role) -> std::string {
    try {
      TensorRowReader reader(store, v, role);
      return "constructed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
      EXPECT_NE(std::string(e.what()).find("dataset broken@v1, " + std::string(role)), std::string::npos) << e.what();
      return e.what();
    }
  };
  EXPECT_NE(corrupt_message(version, "test.features").find("no such parsed stream"), std::string::npos);
  EXPECT_NE(corrupt_message(version, "source").find("no such parsed stream"), std::string::npos);  // a file, no dtype

  DatasetVersion unknown_dtype = version;
  for (DatasetStream& s : unknown_dtype.streams)
    if (s.role == "features") s.dtype = "f16";
  EXPECT_NE(corrupt_message(unknown_dtype, "features").find("unknown dtype 'f16'"), std::string::npos);

  DatasetVersion wrong_size = version;
  for (DatasetStream& s : wrong_size.streams)
    if (s.role == "features") s.shape = {3000, 1, 16, 17};
  EXPECT_NE(corrupt_message(wrong_size, "features").find("is not shape [3000, 1, 16, 17] of u8"), std::string::npos);
  for (DatasetStream& s : wrong_size.streams)
    if (s.role == "features") s.shape = {3000, -1, 16, 16};
  EXPECT_NE(corrupt_message(wrong_size, "features").find("negative"), std::string::npos);
  for (DatasetStream& s : wrong_size.streams)
    if (s.role == "features") s.shape = {3000, 1 << 30, 1 << 30, 1 << 30};
  EXPECT_NE(corrupt_message(wrong_size, "features").find("overflows"), std::string::npos);

  // A chunk list edited in the catalog no longer hashes to the blob id.
  store.db()
      .prepare("UPDATE blob_chunks SET length = length + 1 WHERE blob = ? AND seq = 0")
      .bind(1, version.stream("features")->blob)
      .run();
  EXPECT_NE(corrupt_message(version, "features").find("does not match its hash"), std::string::npos);
  EXPECT_NO_THROW(TensorRowReader(store, version, "labels"));
}

// ------------------------------------------------------ images stored as u8

TEST_F(DatasetRowsTest, IdxBytesAreStoredAsU8ExactlyTheFilesPixels) {
  ImportRequest request = idx_request("pixels", kIdxU8, 500, 28, 100);
  DatasetVersion version = import(request);
  for (const char* role : {"features", "test.features"}) {
    const DatasetStream* s = version.stream(role);
    ASSERT_NE(s, nullptr) << role;
    EXPECT_EQ(s->dtype, "u8") << role;
    const std::uint64_t rows = std::string_view(role) == "features" ? 500 : 100;
    EXPECT_EQ(s->shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(rows), 1, 28, 28})) << role;
    EXPECT_EQ(s->size, rows * 28 * 28) << role;
  }
  for (const char* role : {"labels", "test.labels"}) EXPECT_EQ(version.stream(role)->dtype, "f32") << role;

  Store store = Store::open(root());
  // The stream is the IDX file's data, byte for byte (its 16-byte header off).
  export_dataset(store, parse_dataset_ref("pixels"), "features", dir_.path() / "features.u8", false);
  EXPECT_EQ(test::read_file(dir_.path() / "features.u8"), test::read_file(request.file).substr(16));

  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("pixels"));
  EXPECT_EQ(loaded.train.features, images_[""]);
  EXPECT_EQ(loaded.train.labels, labels_[""]);
  EXPECT_EQ(loaded.test.features, images_["test."]);
  EXPECT_EQ(loaded.test.labels, labels_["test."]);
  EXPECT_EQ(loaded.train.sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_TRUE(fsck(store, reporter_).ok());
}

TEST_F(DatasetRowsTest, IdxBytesWithASplitLoadAsTheSameFloats) {
  ImportRequest request = idx_request("pixels", kIdxU8, 2000, 28, 0);
  request.split = 0.3;
  DatasetVersion version = import(request);
  EXPECT_EQ(version.stream("features")->dtype, "u8");
  Store store = Store::open(root());
  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("pixels"));
  // The same rows in the same parts as the parser's floats would give.
  ParseOptions options;
  options.display_name = "images";
  const Table parsed = parse_idx(test::read_file(request.file), test::read_file(*request.labels), options, "labels");
  ASSERT_TRUE(parsed.byte_features);
  ASSERT_EQ(loaded.train.rows, version.train_rows);
  ASSERT_EQ(loaded.test.rows, version.test_rows);
  ASSERT_GT(loaded.test.rows, 0u);
  std::vector<float> train, test;
  const TensorRowReader mask(store, version, "split");
  std::vector<std::byte> split(mask.rows());
  mask.read(0, mask.rows(), split);
  for (std::size_t row = 0; row < parsed.rows; ++row) {
    auto& part = split[row] != std::byte{0} ? test : train;
    part.insert(part.end(), parsed.features.begin() + static_cast<std::ptrdiff_t>(row * 784),
                parsed.features.begin() + static_cast<std::ptrdiff_t>((row + 1) * 784));
  }
  EXPECT_EQ(loaded.train.features, train);
  EXPECT_EQ(loaded.test.features, test);
}

TEST_F(DatasetRowsTest, IdxFloatImagesStayF32) {
  DatasetVersion version = import(idx_request("floats", kIdxF32, 50, 4, 10));
  EXPECT_EQ(version.stream("features")->dtype, "f32");
  EXPECT_EQ(version.stream("test.features")->dtype, "f32");
  EXPECT_EQ(version.stream("features")->size, 50u * 16 * 4);
}

// A version imported before images were kept as bytes: the same IDX files,
// their features stream written as float32 the way that code wrote it.
// It must keep loading, and importing the same files again names it.
TEST_F(DatasetRowsTest, AVersionStoredAsF32BeforeStillLoads) {
  ImportRequest request = idx_request("old", kIdxU8, 3000, 28, 0);
  request.split = 0.2;
  import(request);
  {
    Store store = Store::open(root());
    const std::string f32_bytes = bytes_of(images_[""]);
    PreparedStream stream = prepare_stream(store.objects(), f32_bytes, kTensorChunking);
    FileLock writer = store.writer_lock();
    commit_stream(store.objects(), stream);
    sql::Transaction txn(store.db());
    record_blob(store.db(), stream);
    store.db()
        .prepare("UPDATE dataset_streams SET blob = ?, dtype = 'f32' WHERE role = 'features' AND version_id = "
                 "(SELECT v.id FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id WHERE d.name = 'old')")
        .bind(1, stream.hash)
        .run();
    txn.commit();
  }
  Store store = Store::open(root());
  const DatasetVersion version = find_dataset(store, parse_dataset_ref("old@v1"));
  ASSERT_EQ(version.stream("features")->dtype, "f32");
  ASSERT_EQ(version.stream("features")->size, 3000u * 784 * 4);
  EXPECT_TRUE(fsck(store, reporter_).ok());
  const TensorRowReader reader(store, version, "features");
  EXPECT_EQ(reader.type(), StoredType::kF32);
  EXPECT_EQ(reader.row_bytes(), 784u * 4);

  LoadedDataset loaded = load_dataset(store, parse_dataset_ref("old"));
  ASSERT_EQ(loaded.train.rows + loaded.test.rows, 3000u);
  ASSERT_GT(loaded.test.rows, 0u);
  // The rows of both parts, against the f32 stream read row by row.
  const TensorRowReader mask(store, version, "split");
  std::vector<std::byte> split(mask.rows());
  mask.read(0, mask.rows(), split);
  std::uint64_t train_at = 0, test_at = 0;
  for (std::uint64_t row = 0; row < 3000; ++row) {
    const bool test = split[row] != std::byte{0};
    std::uint64_t& at = test ? test_at : train_at;
    const Table& part = test ? loaded.test : loaded.train;
    ASSERT_EQ(bytes_of(std::span<const float>(part.features.data() + at * 784, 784)),
              bytes_of(std::span<const float>(images_[""].data() + row * 784, 784)))
        << row;
    ++at;
  }

  // The same files again: the same content and options, so the same version.
  ImportResult again = import_dataset(store, request, reporter_);
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.version.version, 1);
  EXPECT_EQ(again.version.stream("features")->dtype, "f32");
}

}  // namespace
}  // namespace anneal
