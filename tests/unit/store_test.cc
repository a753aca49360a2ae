// The dataset store end to end through its C++ API: import, dedup across
// versions, export, damage detection, gc.
#include <gtest/gtest.h>
#include <sodium.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "anneal/chunker.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/maintenance.h"
#include "anneal/preprocess.h"
#include "anneal/store.h"
#include "sqlite.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

// mixed_csv's categories; the last makes its rows longer than the 1 KiB a
// row's bytes are gathered in on the stack before they move to the heap.
const std::vector<std::string> kCities = {"Oslo", "Lima", "Kraków", "Abu Dhabi", "Llan" + std::string(1500, 'f')};

// A table of `rows` rows, each named by its numeric column k: a categorical
// column, a numeric one with missing cells and a categorical label.
std::string mixed_csv(std::size_t rows) {
  std::string text = "k,city,x,label\n";
  for (std::size_t i = 0; i < rows; ++i)
    text += std::to_string(i) + "," + kCities[i % kCities.size()] + "," + (i % 7 == 0 ? "" : std::to_string(i % 13) + ".25") + "," +
            (i % 3 == 0 ? "yes" : "no") + "\n";
  return text;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Store::init(root()); }
  fs::path root() const { return dir_.path() / "store"; }
  // Dataset "mixed" from mixed_csv(rows), split 0.3 with seed 7.
  ImportRequest mixed_import(std::size_t rows) {
    ImportRequest request;
    request.dataset = "mixed";
    request.file = dir_.path() / "mixed.csv";
    test::write_file(request.file, mixed_csv(rows));
    request.split = 0.3;
    request.seed = 7;
    return request;
  }
  ImportResult import(const std::string& name, const fs::path& file) {
    Store store = Store::open(root());
    ImportRequest request;
    request.dataset = name;
    request.file = file;
    return import_dataset(store, request, reporter_);
  }
  test::TempDir dir_;
  NullReporter reporter_;
};

// A numeric CSV of `rows` rows: 10 features with 6 decimals and a class label.
std::string numeric_csv_rows(std::size_t first, std::size_t rows) {
  std::mt19937_64 rng(first * 7 + 1);
  std::uniform_real_distribution<double> value(-100, 100);
  std::string out;
  char buf[32];
  for (std::size_t i = first; i < first + rows; ++i) {
    for (int c = 0; c < 10; ++c) {
      int n = std::snprintf(buf, sizeof buf, "%.6f,", value(rng));
      out.append(buf, static_cast<std::size_t>(n));
    }
    out += std::to_string(i % 4) + "\n";
  }
  return out;
}

const char* kHeader = "f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,label\n";

TEST_F(StoreTest, ImportsRealCsvsWithTheirSchema) {
  struct Case { const char* file; std::uint64_t rows; std::size_t columns; const char* label; };
  for (Case c : {Case{"iris.csv", 150, 5, "species"}, Case{"wine.csv", 178, 14, "cultivar"},
                 Case{"digits.csv", 1797, 65, "digit"}, Case{"breast_cancer.csv", 569, 31, "diagnosis"}}) {
    ImportResult r = import(fs::path(c.file).stem().string(), test::data_file(c.file));
    EXPECT_TRUE(r.created);
    EXPECT_EQ(r.version.version, 1);
    EXPECT_EQ(r.version.rows, c.rows) << c.file;
    EXPECT_EQ(r.version.columns.size(), c.columns) << c.file;
    EXPECT_EQ(r.version.label_column, c.label) << c.file;
    EXPECT_EQ(r.version.train_rows + r.version.test_rows, c.rows);
    // Decided per row: a binomial count, within 3.5 standard deviations.
    const double n = static_cast<double>(c.rows);
    EXPECT_NEAR(static_cast<double>(r.version.test_rows), 0.2 * n, 3.5 * std::sqrt(n * 0.2 * 0.8)) << c.file;
  }
  Store store = Store::open(root());
  LoadedDataset digits = load_dataset(store, parse_dataset_ref("digits"));
  EXPECT_EQ(digits.train.rows + digits.test.rows, 1797u);
  EXPECT_EQ(digits.train.features.size(), digits.train.rows * 64);
  EXPECT_EQ(digits.version.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(digits.version.columns[0].max, 0);  // the first pixel column is always blank
}

TEST_F(StoreTest, SplitTakesAboutTheFractionOfEachClassAndIsReproducible) {
  ImportResult r = import("iris", test::data_file("iris.csv"));
  EXPECT_EQ(r.version.options.at("split_rule"), "row-content-siphash");
  Store store = Store::open(root());
  LoadedDataset d = load_dataset(store, parse_dataset_ref("iris"));
  // Decided per row, so about (not exactly) 10 of each class's 50 rows:
  // a binomial count, within 3.5 standard deviations (2.8 rows).
  std::map<float, int> per_class;
  for (float y : d.test.labels) ++per_class[y];
  ASSERT_EQ(per_class.size(), 3u);
  for (auto [label, n] : per_class) {
    EXPECT_GE(n, 1) << "class " << label;
    EXPECT_LE(n, 20) << "class " << label;
  }
  // Same seed in another store: the same rows.
  fs::path other = dir_.path() / "other";
  Store::init(other);
  Store store2 = Store::open(other);
  ImportRequest request;
  request.dataset = "iris";
  request.file = test::data_file("iris.csv");
  import_dataset(store2, request, reporter_);
  EXPECT_EQ(load_dataset(store2, parse_dataset_ref("iris")).test.features, d.test.features);
}

// The k of every test row of mixed_csv(rows), decided by docs/STORE.md's
// formula for `rule`, computed here from the CSV's values with libsodium
// alone: per column in file order a u32 width (0xffffffff for the label),
// then the cell (float32 bits, 0x7fc00000 when missing, 0x80000000 | length
// and the text for a category), little-endian.
std::set<float> documented_test_rows(std::size_t rows, double fraction, std::uint64_t seed, const std::string& rule) {
  auto put_u32 = [](std::string& out, std::uint32_t v) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>(v >> (8 * b)));
  };
  auto put_float = [&](std::string& out, float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_u32(out, bits);
  };
  auto put_text = [&](std::string& out, const std::string& text) {
    put_u32(out, 0x80000000u | static_cast<std::uint32_t>(text.size()));
    out += text;
  };
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(fraction, 64));
  std::set<float> test;
  for (std::size_t i = 0; i < rows; ++i) {
    std::string bytes;
    put_u32(bytes, 1);
    put_float(bytes, static_cast<float>(i));
    put_u32(bytes, 1);
    put_text(bytes, kCities[i % kCities.size()]);
    put_u32(bytes, 1);
    if (i % 7 == 0) put_u32(bytes, 0x7fc00000u);
    else put_float(bytes, static_cast<float>(i % 13) + 0.25f);
    put_u32(bytes, 0xffffffffu);
    put_text(bytes, i % 3 == 0 ? "yes" : "no");
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    std::uint64_t z = 0;
    if (rule == "row-content-siphash") {
      unsigned char key[16] = {}, out[8];
      for (int b = 0; b < 8; ++b) key[b] = static_cast<unsigned char>(seed >> (8 * b));
      crypto_shorthash(out, data, bytes.size(), key);
      for (int b = 0; b < 8; ++b) z |= std::uint64_t{out[b]} << (8 * b);
    } else {
      unsigned char digest[32];
      crypto_generichash(digest, 32, data, bytes.size(), nullptr, 0);
      for (int b = 0; b < 8; ++b) z |= std::uint64_t{digest[b]} << (8 * b);
      z ^= seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
    }
    if (z < threshold) test.insert(static_cast<float>(i));
  }
  return test;
}

std::set<float> test_rows_of(Store& store, const std::string& ref) {
  LoadedDataset d = load_dataset(store, parse_dataset_ref(ref));
  std::set<float> ks;
  const std::size_t width = static_cast<std::size_t>(d.test.sample_width());
  for (std::uint64_t r = 0; r < d.test.rows; ++r) ks.insert(d.test.features[r * width]);
  return ks;
}

// A new dataset is split by row-content-siphash, exactly as docs/STORE.md
// writes it down.
TEST_F(StoreTest, NewDatasetSplitIsTheDocumentedSipHashRule) {
  Store store = Store::open(root());
  ImportResult r = import_dataset(store, mixed_import(400), reporter_);
  EXPECT_EQ(r.version.options.at("split_rule"), "row-content-siphash");
  const std::set<float> want = documented_test_rows(400, 0.3, 7, "row-content-siphash");
  EXPECT_EQ(test_rows_of(store, "mixed@v1"), want);
  EXPECT_EQ(r.version.test_rows, want.size());
  EXPECT_NEAR(static_cast<double>(want.size()), 120, 3.5 * std::sqrt(400 * 0.3 * 0.7));
  // Another seed, another split of the same rows.
  EXPECT_NE(documented_test_rows(400, 0.3, 8, "row-content-siphash"), want);
}

// A dataset with a version split by row-content (imported before
// row-content-siphash existed) goes on with it, so the rows it held keep
// their sides in every later version.
TEST_F(StoreTest, DatasetSplitByRowContentKeepsThatRule) {
  Store store = Store::open(root());
  import_dataset(store, mixed_import(300), reporter_);
  // v1 as an earlier anneal recorded it (its mask is not read again here).
  store.db().exec(
      "UPDATE dataset_versions SET options_json = json_set(options_json, '$.split_rule', 'row-content')");
  const ImportRequest request = mixed_import(400);
  ImportResult r = import_dataset(store, request, reporter_);
  ASSERT_TRUE(r.created);
  EXPECT_EQ(r.version.options.at("split_rule"), "row-content");
  const std::set<float> want = documented_test_rows(400, 0.3, 7, "row-content");
  EXPECT_EQ(test_rows_of(store, "mixed@v2"), want);
  EXPECT_NE(want, documented_test_rows(400, 0.3, 7, "row-content-siphash"));
  // Importing the same file again finds that version: the rule is part of
  // the identity, and it is chosen the same way again.
  EXPECT_FALSE(import_dataset(store, request, reporter_).created);
}

// The keys of a loaded part's rows (their content, label included).
std::set<std::uint64_t> content_keys(const Table& part) {
  std::set<std::uint64_t> keys;
  for (std::uint64_t r = 0; r < part.rows; ++r) keys.insert(row_content_key(part, r));
  return keys;
}

// An export that grows nightly, in no particular row order: the first 60%,
// 80% and 100% of a shuffled digits.csv as v1, v2, v3. A row's side does
// not change between versions, so no version's test rows were trained on
// by a model of an earlier version.
TEST_F(StoreTest, TestRowsStayTestRowsAsTheDataGrows) {
  std::istringstream lines(test::read_file(test::data_file("digits.csv")));
  std::string header, line;
  std::getline(lines, header);
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  std::mt19937_64 rng(14);
  for (std::size_t i = rows.size() - 1; i > 0; --i) std::swap(rows[i], rows[rng() % (i + 1)]);
  std::vector<LoadedDataset> versions;
  for (double share : {0.6, 0.8, 1.0}) {
    std::string text = header + "\n";
    const auto n = static_cast<std::size_t>(share * static_cast<double>(rows.size()));
    for (std::size_t i = 0; i < n; ++i) text += rows[i] + "\n";
    const fs::path file = dir_.path() / "digits-export.csv";
    test::write_file(file, text);
    ImportResult r = import("digits", file);
    ASSERT_TRUE(r.created);
    Store store = Store::open(root());
    versions.push_back(load_dataset(store, parse_dataset_ref("digits@v" + std::to_string(r.version.version))));
  }
  std::vector<std::set<std::uint64_t>> test_keys, train_keys;
  for (const auto& v : versions) {
    test_keys.push_back(content_keys(v.test));
    train_keys.push_back(content_keys(v.train));
    // About a fifth held out (1797 rows: a binomial count, 3.5 sd is 0.033).
    const double held_out = static_cast<double>(v.test.rows) / static_cast<double>(v.test.rows + v.train.rows);
    EXPECT_NEAR(held_out, 0.2, 0.035) << v.version.ref();
  }
  for (std::size_t later : {std::size_t{1}, std::size_t{2}}) {
    for (std::uint64_t key : test_keys[0]) EXPECT_TRUE(test_keys[later].count(key)) << "v1 test row left the test split";
    for (std::uint64_t key : train_keys[0]) EXPECT_FALSE(test_keys[later].count(key)) << "v1 train row became a test row";
  }
  for (std::uint64_t key : test_keys[1]) EXPECT_TRUE(test_keys[2].count(key));
  EXPECT_GT(test_keys[2].size(), test_keys[0].size());  // the new rows bring new test rows
}

TEST_F(StoreTest, IdenticalContentCreatesNoVersion) {
  ImportResult first = import("iris", test::data_file("iris.csv"));
  ImportResult again = import("iris", test::data_file("iris.csv"));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.version.ref(), "iris@v1");
  EXPECT_EQ(again.bytes_added, 0u);
  Store store = Store::open(root());
  EXPECT_EQ(dataset_versions(store, "iris").size(), 1u);
}

TEST_F(StoreTest, AppendingOnePercentOfRowsStoresUnderThreePercentNewBytes) {
  // ~50 MB: 500k rows of ~100 bytes.
  const std::size_t rows = 500000;
  std::string v1 = kHeader + numeric_csv_rows(0, rows);
  std::string v2 = v1 + numeric_csv_rows(rows, rows / 100);
  test::write_file(dir_.path() / "v1.csv", v1);
  test::write_file(dir_.path() / "v2.csv", v2);
  ImportResult first = import("big", dir_.path() / "v1.csv");
  ImportResult second = import("big", dir_.path() / "v2.csv");
  ASSERT_TRUE(second.created);
  EXPECT_EQ(second.version.rows, rows + rows / 100);
  double new_fraction_of_file = static_cast<double>(second.bytes_added) / static_cast<double>(v2.size());
  double new_fraction_of_stored = static_cast<double>(second.bytes_added) / static_cast<double>(first.bytes_added);
  std::cout << "file " << v1.size() << " B; v1 stored " << first.bytes_added << " B; v2 (+1% rows) added "
            << second.bytes_added << " B = " << 100 * new_fraction_of_file << "% of the file, "
            << 100 * new_fraction_of_stored << "% of v1's stored bytes\n";
  EXPECT_LT(new_fraction_of_file, 0.03);
  EXPECT_LT(new_fraction_of_stored, 0.03);

  Store store = Store::open(root());
  DatasetDiff diff = diff_datasets(store, parse_dataset_ref("big@v1"), parse_dataset_ref("big@v2"));
  EXPECT_GT(static_cast<double>(diff.source_shared_bytes), 0.95 * static_cast<double>(v1.size()));
}

TEST_F(StoreTest, InsertionNearTheStartSharesAllButACoupleOfSourceChunks) {
  std::string body = numeric_csv_rows(0, 300000);
  std::string v1 = kHeader + body;
  std::size_t cut = v1.find('\n', 5000) + 1;
  std::string v2 = v1.substr(0, cut) + numeric_csv_rows(900000, 3) + v1.substr(cut);
  test::write_file(dir_.path() / "v1.csv", v1);
  test::write_file(dir_.path() / "v2.csv", v2);
  import("ins", dir_.path() / "v1.csv");
  import("ins", dir_.path() / "v2.csv");
  Store store = Store::open(root());
  DatasetVersion a = find_dataset(store, parse_dataset_ref("ins@v1"));
  DatasetVersion b = find_dataset(store, parse_dataset_ref("ins@v2"));
  DatasetDiff diff = diff_datasets(store, parse_dataset_ref("ins@v1"), parse_dataset_ref("ins@v2"));
  std::uint64_t source_chunks = b.stream("source")->chunks;
  EXPECT_GE(source_chunks, 20u);
  // Unshared source bytes: at most two chunks' worth (each at most 4 MiB,
  // about 1 MiB on average).
  std::uint64_t unshared = b.stream("source")->size - diff.source_shared_bytes;
  EXPECT_LT(unshared, 2 * kSourceChunking.avg_size + 2 * kSourceChunking.min_size)
      << "of " << source_chunks << " chunks";
  (void)a;
}

TEST_F(StoreTest, ExportIsBitIdentical) {
  import("wine", test::data_file("wine.csv"));
  Store store = Store::open(root());
  export_dataset(store, parse_dataset_ref("wine@v1"), "source", dir_.path() / "out.csv", false);
  EXPECT_EQ(test::read_file(dir_.path() / "out.csv"), test::read_file(test::data_file("wine.csv")));
  EXPECT_THROW(export_dataset(store, parse_dataset_ref("wine@v1"), "source", dir_.path() / "out.csv", false),
               Error);
}

TEST_F(StoreTest, FlippedByteInAnyObjectIsCaughtOnReadAndByFsck) {
  import("iris", test::data_file("iris.csv"));
  Store store = Store::open(root());
  std::vector<std::string> ids = store.objects().list();
  ASSERT_GE(ids.size(), 3u);  // source, features, labels, split
  EXPECT_TRUE(fsck(store, reporter_).ok());
  for (const auto& id : ids) {
    fs::path path = store.objects().path_of(id);
    std::string original = test::read_file(path);
    std::string damaged = original;
    damaged[damaged.size() / 2] ^= 0x01;
    test::write_file(path, damaged);
    FsckReport report = fsck(store, reporter_);
    ASSERT_EQ(report.problems.size(), 1u) << id;
    EXPECT_NE(report.problems[0].find(id), std::string::npos);
    EXPECT_NE(report.problems[0].find("iris@v1"), std::string::npos) << report.problems[0];
    // Reading every stream (the parsed form, then the source) must fail.
    EXPECT_THROW(
        {
          load_dataset(store, parse_dataset_ref("iris"));
          export_dataset(store, parse_dataset_ref("iris"), "source", dir_.path() / "x.csv", true);
        },
        Error);
    test::write_file(path, original);
  }
  EXPECT_TRUE(fsck(store, reporter_).ok());
  EXPECT_EQ(load_dataset(store, parse_dataset_ref("iris")).train.rows, find_dataset(store, parse_dataset_ref("iris")).train_rows);
}

TEST_F(StoreTest, GcRemovesOnlyUnreferencedObjects) {
  import("iris", test::data_file("iris.csv"));
  Store store = Store::open(root());
  std::size_t live = store.objects().list().size();
  std::string orphan = store.objects().put("an object nothing references");
  GcReport dry = gc(store, /*dry_run=*/true, reporter_);
  EXPECT_EQ(dry.objects_removed, 1u);
  EXPECT_TRUE(store.objects().contains(orphan));
  GcReport real = gc(store, /*dry_run=*/false, reporter_);
  EXPECT_EQ(real.objects_removed, 1u);
  EXPECT_FALSE(store.objects().contains(orphan));
  EXPECT_EQ(store.objects().list().size(), live);
  EXPECT_TRUE(fsck(store, reporter_).ok());
}

TEST_F(StoreTest, ReferencesParse) {
  EXPECT_EQ(parse_dataset_ref("a").to_string(), "a@latest");
  EXPECT_EQ(parse_dataset_ref("a@latest").to_string(), "a@latest");
  EXPECT_EQ(*parse_dataset_ref("my-data.v2@v12").version, 12);
  for (const char* bad : {"", "@v1", "a@", "a@v0", "a@x1", "a@v", "a b", "a@v1x"})
    EXPECT_THROW(parse_dataset_ref(bad), Error) << bad;
}

TEST_F(StoreTest, OpeningAMissingStoreSaysHowToCreateOne) {
  try {
    Store::open(dir_.path() / "nowhere");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_EQ(e.remedy(), Remedy::kCreateStore);
  }
}

}  // namespace
}  // namespace anneal
