// The bounded-memory CSV/TSV import: streams built from pieces equal streams
// built from the whole buffer, a windowed scan equals the whole-text parse
// (rows, schema, errors), the scan's buffers stay bounded whatever the file's
// size, and a streamed import records the same version as the whole-file one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/delimited_scan.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/store.h"
#include "sqlite.h"
#include "streams.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

// A CSV of `rows` rows: numbers, a categorical column, quoted fields that
// hold commas, quotes and newlines, empty lines, CRLF line ends and missing
// cells, so record ends do not follow line ends. Seeded.
std::string mixed_csv(std::size_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-50, 50);
  const char* cities[] = {"Oslo", "Lima", "\"Rome, IT\"", "\"New\nYork\"", "\"say \"\"hi\"\"\"", "Kyiv"};
  std::string out = "a,b,city,c,label\n";
  char buf[64];
  for (std::size_t i = 0; i < rows; ++i) {
    int n = std::snprintf(buf, sizeof buf, "%.5f,%.3f,", value(rng), value(rng));
    out.append(buf, static_cast<std::size_t>(n));
    out += cities[rng() % 6];
    out += ",";
    if (rng() % 17 != 0) out += std::to_string(rng() % 1000);
    out += ",";
    out += 'k';
    out += std::to_string(rng() % 3);
    out += rng() % 5 == 0 ? "\r\n" : "\n";
    if (rng() % 101 == 0) out += "\n";
  }
  return out;
}

struct Scanned {
  Table schema;
  std::vector<float> features, labels;
  std::string bytes;
  DelimitedScanPeak peak;
  // Per column: what on_categories passed, in order.
  std::map<std::size_t, std::vector<std::string>> categories;
  std::size_t batches = 0;
};

Scanned scan(const fs::path& path, std::size_t window, const std::string& name, ParseOptions options = {}) {
  Scanned out;
  FileReader file(path);
  options.display_name = name;
  DelimitedScanCallbacks callbacks;
  callbacks.on_bytes = [&](std::string_view bytes) { out.bytes.append(bytes); };
  callbacks.on_rows = [&](Table& batch) {
    out.features.insert(out.features.end(), batch.features.begin(), batch.features.end());
    out.labels.insert(out.labels.end(), batch.labels.begin(), batch.labels.end());
    // Every code in the batch has its text already.
    const auto width = static_cast<std::size_t>(batch.sample_width());
    for (std::size_t c = 0; c < batch.columns.size(); ++c) {
      if (batch.columns[c].type != ColumnType::kCategorical || c == batch.label_column) continue;
      const std::size_t feature = c - (c > batch.label_column ? 1 : 0);
      for (std::uint64_t r = 0; r < batch.rows; ++r) {
        const float code = batch.features[r * width + feature];
        if (!std::isnan(code)) {
          EXPECT_LT(static_cast<std::size_t>(code), out.categories[c].size());
        }
      }
    }
    ++out.batches;
  };
  callbacks.on_categories = [&](const Table&, std::size_t column, std::span<const std::string> added) {
    out.categories[column].insert(out.categories[column].end(), added.begin(), added.end());
  };
  out.schema = scan_delimited(file, ',', options, callbacks, window, &out.peak);
  return out;
}

std::string parse_error(const std::string& text, const std::string& name, ParseOptions options = {}) {
  options.display_name = name;
  try {
    parse_delimited(text, ',', options);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string scan_error(const fs::path& path, std::size_t window, const std::string& name, ParseOptions options = {}) {
  try {
    scan(path, window, name, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ImportStreaming, StreamBuiltFromPiecesEqualsWholeBuffer) {
  test::TempDir dir;
  fs::create_directories(dir.path() / "objects");
  fs::create_directories(dir.path() / "tmp");
  ObjectStore objects(dir.path());
  std::mt19937_64 rng(7);
  std::string bytes(6 << 20, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() % 7);  // low entropy: cuts fall everywhere
  for (const ChunkParams& params : {kSourceChunking, kTensorChunking}) {
    PreparedStream whole = prepare_stream(objects, bytes, params);
    for (std::size_t piece : {std::size_t{1} << 10, std::size_t{333333}, std::size_t{5} << 20}) {
      StreamBuilder builder(objects, params, nullptr);
      for (std::size_t at = 0; at < bytes.size(); at += piece) builder.append(std::string_view(bytes).substr(at, piece));
      StreamChunks pieces = builder.finish();
      EXPECT_EQ(pieces.hash, whole.hash) << "piece " << piece;
      EXPECT_EQ(pieces.size, whole.size);
      ASSERT_EQ(pieces.chunks.size(), whole.chunks.size());
      for (std::size_t i = 0; i < whole.chunks.size(); ++i) {
        EXPECT_EQ(pieces.chunks[i].first, whole.chunks[i].id);
        EXPECT_EQ(pieces.chunks[i].second, whole.chunks[i].raw.size());
      }
      EXPECT_TRUE(objects.list().empty()) << "a builder that does not write wrote objects";
    }
  }
}

TEST(ImportStreaming, WindowedScanEqualsWholeTextParse) {
  test::TempDir dir;
  const std::string text = mixed_csv(120000, 3);  // about 4 MB: several 1 MiB blocks
  const fs::path path = dir.path() / "mixed.csv";
  test::write_file(path, text);
  ParseOptions options;
  options.display_name = "mixed.csv";
  const Table whole = parse_delimited(text, ',', options);
  for (std::size_t window : {std::size_t{64} << 10, (std::size_t{1} << 20) + 7, std::size_t{16} << 20}) {
    Scanned s = scan(path, window, "mixed.csv");
    EXPECT_EQ(s.bytes, text) << "every byte handed on once, in order";
    EXPECT_EQ(s.schema.rows, whole.rows);
    EXPECT_TRUE(same_floats(s.features, whole.features)) << "window " << window;
    EXPECT_TRUE(same_floats(s.labels, whole.labels)) << "window " << window;
    EXPECT_EQ(columns_to_json(s.schema.columns).dump(), columns_to_json(whole.columns).dump()) << "window " << window;
  }
}

TEST(ImportStreaming, ScanHoldsAWindowNotTheFile) {
  test::TempDir dir;
  const fs::path path = dir.path() / "big.csv";
  const std::string text = mixed_csv(400000, 5);  // about 13 MB
  test::write_file(path, text);
  const std::size_t window = 256 << 10;
  Scanned s = scan(path, window, "big.csv");
  ASSERT_GT(text.size(), std::size_t{12} << 20);
  // A batch is one 1 MiB parse block or more, cut at a record end: the text
  // held stays near two blocks, a sixth of this file, and would stay there
  // for a file of any size.
  EXPECT_LE(s.peak.buffer_bytes, std::size_t{2} << 20);
  EXPECT_LE(s.peak.batch_rows, s.schema.rows / 6);
  EXPECT_GT(s.peak.batch_rows, 0u);
}

TEST(ImportStreaming, ErrorsAreTheWholeTextParsesErrors) {
  test::TempDir dir;
  const std::string good = mixed_csv(150000, 11);
  struct Case {
    std::string name, text;
  };
  std::string late_bad_cell = good + "1.0,2.0,Oslo,not-a-number,k1\n";
  std::string late_ragged = good + "1.0,2.0,Oslo,3\n" + mixed_csv(1000, 12).substr(17);
  std::string late_quote = good + "1.0,2.0,\"Oslo,3,k1\n";
  // A parse error early and an encoding error late: the encoding error wins.
  // (Appended in steps: GCC 12 warns falsely on a chain of + here.)
  std::string early_bad_late_utf8 = "a,b,city,c,label\n1,2,x,oops,k1\n";
  early_bad_late_utf8.append(good, 17);
  early_bad_late_utf8.append("1,2,\xff,3,k1\n");
  std::string header_only = "a,b,city,c,label\n\n";
  for (const Case& c : {Case{"late_bad_cell.csv", late_bad_cell}, Case{"late_ragged.csv", late_ragged},
                        Case{"late_quote.csv", late_quote}, Case{"utf8.csv", early_bad_late_utf8},
                        Case{"header_only.csv", header_only}}) {
    const fs::path path = dir.path() / c.name;
    test::write_file(path, c.text);
    const std::string expected = parse_error(c.text, c.name);
    ASSERT_NE(expected, "no error") << c.name;
    EXPECT_EQ(scan_error(path, 128 << 10, c.name), expected) << c.name;
  }
}

// Input without a label column (predict): the windowed scan gives the
// whole-text parse's features, and on_categories the text of every code
// before the batch that holds it.
TEST(ImportStreaming, UnlabelledScanEqualsWholeTextParse) {
  test::TempDir dir;
  const std::string text = mixed_csv(120000, 4);
  const fs::path path = dir.path() / "rows.csv";
  test::write_file(path, text);
  ParseOptions options;
  options.display_name = "rows.csv";
  options.labelled = false;
  options.typed_columns = std::vector<std::string>{"a", "b", "c"};
  const Table whole = parse_delimited(text, ',', options);
  ASSERT_EQ(whole.label_column, whole.columns.size());
  ASSERT_TRUE(whole.labels.empty());
  for (std::size_t window : {std::size_t{64} << 10, (std::size_t{1} << 20) + 7}) {
    Scanned s = scan(path, window, "rows.csv", options);
    EXPECT_GT(s.batches, 1u) << "window " << window;
    EXPECT_EQ(s.schema.rows, whole.rows);
    EXPECT_EQ(s.schema.label_column, whole.label_column);
    EXPECT_TRUE(s.labels.empty());
    EXPECT_TRUE(same_floats(s.features, whole.features)) << "window " << window;
    EXPECT_EQ(columns_to_json(s.schema.columns).dump(), columns_to_json(whole.columns).dump()) << "window " << window;
    // city and label are categorical: what on_categories passed is their dictionary.
    for (std::size_t c : {std::size_t{2}, std::size_t{4}}) EXPECT_EQ(s.categories[c], whole.columns[c].categories) << c;
    EXPECT_EQ(s.categories.size(), 2u);
  }
  // A column read past takes no dictionary and passes no categories.
  options.read_columns = std::vector<std::string>{"a", "b", "c", "label"};
  Scanned s = scan(path, 64 << 10, "rows.csv", options);
  EXPECT_EQ(s.categories.count(2), 0u);
  EXPECT_TRUE(s.schema.columns[2].categories.empty());
  EXPECT_EQ(s.schema.columns[2].missing, whole.rows);
  EXPECT_EQ(s.categories[4], whole.columns[4].categories);
}

// Hostile input without a label column: the errors, their NAME:LINE:COLUMN
// (late in the file, past the first windows) and their order are the
// whole-text parse's.
TEST(ImportStreaming, UnlabelledErrorsAreTheWholeTextParsesErrors) {
  test::TempDir dir;
  const std::string good = mixed_csv(150000, 11);
  const auto lines = static_cast<std::size_t>(std::count(good.begin(), good.end(), '\n'));
  struct Case {
    std::string name, text, location;  // location: the expected NAME:LINE:COLUMN, where one is certain
  };
  const std::string late_line = std::to_string(lines + 1);
  std::string late_bad_cell = good + "1.0,2.0,Oslo,not-a-number,k1\n";
  std::string late_ragged = good + "1.0,2.0,Oslo,3\n" + mixed_csv(1000, 12).substr(17);
  std::string late_long = good + "1.0,2.0,Oslo,3,k1,extra\n";
  std::string late_quote = good + "1.0,2.0,\"Oslo,3,k1\n";
  std::string late_crlf_bad_cell = good + "1.0,2.0,\"New\r\nYork\",x,k1\r\n";
  std::string late_utf8 = good;
  late_utf8.append("1,2,\xff,3,k1\n");
  std::string bom_header_only = "\xEF\xBB\xBF" "a,b,city,c,label\r\n\r\n";
  ParseOptions options;
  options.labelled = false;
  options.typed_columns = std::vector<std::string>{"a", "b", "c"};
  for (const Case& c : {Case{"late_bad_cell.csv", late_bad_cell, "late_bad_cell.csv:" + late_line + ":14"},
                        Case{"late_ragged.csv", late_ragged, "late_ragged.csv:" + late_line + ":15"},
                        Case{"late_long.csv", late_long, "late_long.csv:" + late_line + ":19"},
                        Case{"late_quote.csv", late_quote, "late_quote.csv:" + late_line + ":9"},
                        Case{"late_crlf.csv", late_crlf_bad_cell, "late_crlf.csv:" + std::to_string(lines + 2) + ":7"},
                        Case{"late_utf8.csv", late_utf8, "late_utf8.csv:" + late_line + ":5"},
                        Case{"bom_header_only.csv", bom_header_only, "bom_header_only.csv:3:1"}}) {
    const fs::path path = dir.path() / c.name;
    test::write_file(path, c.text);
    const std::string expected = parse_error(c.text, c.name, options);
    ASSERT_NE(expected, "no error") << c.name;
    EXPECT_EQ(expected.rfind(c.location + ": ", 0), 0u) << expected;
    EXPECT_EQ(scan_error(path, 128 << 10, c.name, options), expected) << c.name;
  }
}

class StreamedImport : public ::testing::Test {
 protected:
  void SetUp() override { Store::init(root()); }
  fs::path root() const { return dir_.path() / "store"; }
  ImportResult import(const fs::path& store_root, const fs::path& file) {
    Store store = Store::open(store_root);
    ImportRequest request;
    request.dataset = "d";
    request.file = file;
    request.format = Format::kAuto;
    return import_dataset(store, request, reporter_);
  }
  // Every stream of the latest version: role -> blob, dtype, shape.
  static std::string streams_of(const DatasetVersion& v) {
    std::string out;
    for (const auto& s : v.streams) {
      out += s.role + " " + s.blob + " " + s.dtype + " " + std::to_string(s.size) + "\n";
    }
    return out;
  }
  test::TempDir dir_;
  NullReporter reporter_;
};

// The same bytes named .csv (streamed) and .txt (sniffed: the whole-file
// path) give the same fingerprint, streams and schema, for the fixtures
// and for a file of several parse blocks.
TEST_F(StreamedImport, SameVersionAsTheWholeFileImport) {
  std::vector<fs::path> files;
  for (const char* name : {"iris.csv", "sales.csv", "wine.csv"}) files.push_back(fs::path(ANNEAL_TEST_DATA_DIR) / name);
  files.push_back(dir_.path() / "mixed.csv");
  test::write_file(files.back(), mixed_csv(100000, 9));
  for (const fs::path& csv : files) {
    const fs::path txt = dir_.path() / (csv.stem().string() + ".txt");
    fs::copy_file(csv, txt, fs::copy_options::overwrite_existing);
    const fs::path whole_root = dir_.path() / ("whole-" + csv.stem().string());
    const fs::path streamed_root = dir_.path() / ("streamed-" + csv.stem().string());
    Store::init(whole_root);
    Store::init(streamed_root);
    ImportResult whole = import(whole_root, txt);
    ImportResult streamed = import(streamed_root, csv);
    ASSERT_TRUE(whole.created);
    ASSERT_TRUE(streamed.created);
    EXPECT_EQ(streamed.version.fingerprint, whole.version.fingerprint) << csv;
    EXPECT_EQ(streams_of(streamed.version), streams_of(whole.version)) << csv;
    EXPECT_EQ(columns_to_json(streamed.version.columns).dump(), columns_to_json(whole.version.columns).dump()) << csv;
    EXPECT_EQ(streamed.version.train_rows, whole.version.train_rows);
    EXPECT_EQ(streamed.version.test_rows, whole.version.test_rows);
    // And the streamed import finds the version the whole-file one made.
    ImportResult again = import(whole_root, csv);
    EXPECT_FALSE(again.created) << csv;
    EXPECT_EQ(again.version.version, whole.version.version);
  }
}

// Compressed CSV streams too: decompressed once into a scratch file that
// both passes scan, the compressed file stored as the source. gzip and
// zstd named .csv.gz / .csv.zst (streamed) give the version the same bytes
// named .gz / .zst (sniffed: the whole-file path) give, and leave nothing
// in the store's tmp/.
TEST_F(StreamedImport, CompressedCsvStreamsToTheWholeFileVersion) {
  const std::string text = mixed_csv(100000, 5);
  for (const auto& [suffix, bytes] : {std::pair{std::string(".gz"), test::gzip(text)},
                                      std::pair{std::string(".zst"), test::zstd_streamed(text)}}) {
    const fs::path named = dir_.path() / ("mixed.csv" + suffix), sniffed = dir_.path() / ("mixed" + suffix);
    test::write_file(named, bytes);
    test::write_file(sniffed, bytes);
    const fs::path whole_root = dir_.path() / ("whole" + suffix), streamed_root = dir_.path() / ("streamed" + suffix);
    Store::init(whole_root);
    Store::init(streamed_root);
    ImportResult whole = import(whole_root, sniffed);
    ImportResult streamed = import(streamed_root, named);
    ASSERT_TRUE(whole.created && streamed.created);
    EXPECT_EQ(streamed.version.fingerprint, whole.version.fingerprint) << suffix;
    EXPECT_EQ(streams_of(streamed.version), streams_of(whole.version)) << suffix;
    EXPECT_EQ(columns_to_json(streamed.version.columns).dump(), columns_to_json(whole.version.columns).dump());
    EXPECT_TRUE(fs::is_empty(streamed_root / "tmp")) << suffix;
  }
}

// A bad cell late in a compressed file: its file:line:column, nothing
// written, no scratch file left; a decompression bomb stops at the limit.
TEST_F(StreamedImport, CompressedCsvErrorsWriteNothing) {
  const fs::path csv = dir_.path() / "late.csv.gz";
  const std::string good = mixed_csv(150000, 4);
  const auto bad_line = std::count(good.begin(), good.end(), '\n') + 1;  // quoted newlines count
  test::write_file(csv, test::gzip(good + "1.0,2.0,Oslo,oops,k1\n"));
  try {
    import(root(), csv);
    FAIL() << "a bad cell was imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadData);
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(csv.string() + ":" + std::to_string(bad_line) + ":", 0), 0u) << message;
    EXPECT_NE(message.find("expected a number in column 'c'"), std::string::npos) << message;
  }
  const fs::path bomb = dir_.path() / "bomb.csv.zst";
  test::write_file(bomb, test::zstd_streamed("a,label\n" + std::string(64 << 20, '1')));
  Store store = Store::open(root());
  ImportRequest request;
  request.dataset = "d";
  request.file = bomb;
  request.decompress_limits.max_bytes = 1 << 20;
  request.decompress_limits.max_ratio = 1 << 30;
  try {
    import_dataset(store, request, reporter_);
    FAIL() << "a bomb was imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.remedy(), Remedy::kRaiseDecompressedSize) << e.what();
  }
  EXPECT_TRUE(store.objects().list().empty()) << "objects written before the error";
  EXPECT_TRUE(list_datasets(store).empty());
  EXPECT_TRUE(fs::is_empty(root() / "tmp"));
}

TEST_F(StreamedImport, BadCellLateInTheFileWritesNothing) {
  const fs::path csv = dir_.path() / "late.csv";
  test::write_file(csv, mixed_csv(150000, 4) + "1.0,2.0,Oslo,oops,k1\n");
  const std::string expected_prefix = csv.string() + ":";
  try {
    import(root(), csv);
    FAIL() << "a bad cell was imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadData);
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("expected a number in column 'c'"), std::string::npos) << message;
    EXPECT_EQ(message.rfind(expected_prefix, 0), 0u) << message;
  }
  Store store = Store::open(root());
  EXPECT_TRUE(store.objects().list().empty()) << "objects written before the error";
  EXPECT_TRUE(list_datasets(store).empty());
}

}  // namespace
}  // namespace anneal
