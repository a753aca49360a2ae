// IDX parsing: generated files of every element type, errors, and the real
// Fashion-MNIST files when the machine has them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "test_util.h"

namespace anneal {
namespace {

// An IDX file: magic 00 00 TYPE RANK, big-endian u32 dims, big-endian data.
std::string idx_file(unsigned char type, const std::vector<std::uint32_t>& dims, const std::vector<double>& values) {
  std::string out = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  auto put_big_endian = [&](std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  for (std::uint32_t d : dims) put_big_endian(d, 4);
  for (double v : values) {
    switch (type) {
      case 0x08: put_big_endian(static_cast<std::uint8_t>(v), 1); break;
      case 0x09: put_big_endian(static_cast<std::uint8_t>(static_cast<std::int8_t>(v)), 1); break;
      case 0x0B: put_big_endian(static_cast<std::uint16_t>(static_cast<std::int16_t>(v)), 2); break;
      case 0x0C: put_big_endian(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4); break;
      case 0x0D: {
        float f = static_cast<float>(v);
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        put_big_endian(bits, 4);
        break;
      }
      case 0x0E: {
        std::uint64_t bits;
        std::memcpy(&bits, &v, 8);
        put_big_endian(bits, 8);
        break;
      }
    }
  }
  return out;
}

ParseOptions images_named(std::string name) {
  ParseOptions options;
  options.display_name = std::move(name);
  return options;
}

std::string idx_error(std::string_view images, std::string_view labels, const ParseOptions& options = images_named("img")) {
  try {
    parse_idx(images, labels, options, "lab");
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadData);
    return error.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(Idx, U8ImagesBecomeOneChannel) {
  // 3 images of 2 x 2.
  std::vector<double> pixels = {0, 255, 10, 20, 1, 2, 3, 4, 100, 100, 100, 100};
  Table table = parse_idx(idx_file(0x08, {3, 2, 2}, pixels), idx_file(0x08, {3}, {7, 0, 9}), images_named("img"), "lab");
  EXPECT_EQ(table.rows, 3u);
  EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({1, 2, 2}));
  ASSERT_EQ(table.columns.size(), 2u);
  EXPECT_EQ(table.columns[0].name, "image");
  EXPECT_EQ(table.columns[0].shape, table.sample_shape);
  EXPECT_EQ(table.columns[0].type, ColumnType::kNumeric);
  EXPECT_EQ(table.columns[1].name, "label");
  EXPECT_EQ(table.label_column, 1u);
  EXPECT_EQ(table.features, std::vector<float>(pixels.begin(), pixels.end()));
  EXPECT_TRUE(table.byte_features);  // the store keeps them as bytes
  EXPECT_EQ(table.labels, std::vector<float>({7, 0, 9}));
  const ColumnSchema& image = table.columns[0];
  EXPECT_EQ(image.count, 12u);
  EXPECT_EQ(image.min, 0);
  EXPECT_EQ(image.max, 255);
  double mean = 0;
  for (double p : pixels) mean += p / 12;
  EXPECT_NEAR(image.mean, mean, 1e-9);
  EXPECT_EQ(table.columns[1].max, 9);
}

TEST(Idx, EveryElementType) {
  std::vector<double> values = {-3, 0, 1, 100, -120, 42};
  for (unsigned char type : {0x09, 0x0B, 0x0C, 0x0D, 0x0E}) {
    SCOPED_TRACE(static_cast<int>(type));
    Table table = parse_idx(idx_file(type, {2, 3}, values), idx_file(type, {2}, {-1, 5}), images_named("img"), "lab");
    EXPECT_EQ(table.sample_shape, std::vector<std::int64_t>({3}));  // N x D
    EXPECT_EQ(table.features, std::vector<float>(values.begin(), values.end()));
    EXPECT_FALSE(table.byte_features);  // only unsigned bytes are kept as bytes
    EXPECT_EQ(table.labels, std::vector<float>({-1, 5}));
  }
  Table wide = parse_idx(idx_file(0x0C, {1, 1}, {-2000000}), idx_file(0x0E, {1}, {0.25}), images_named("img"), "lab");
  EXPECT_EQ(wide.features[0], -2000000.0f);
  EXPECT_EQ(wide.labels[0], 0.25f);
}

TEST(Idx, ChannelsAndScalars) {
  std::vector<double> values(2 * 3 * 2 * 2);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  Table chw = parse_idx(idx_file(0x08, {2, 3, 2, 2}, values), idx_file(0x08, {2}, {0, 1}), images_named("img"), "lab");
  EXPECT_EQ(chw.sample_shape, std::vector<std::int64_t>({3, 2, 2}));
  EXPECT_EQ(chw.features.size(), values.size());
  Table scalars = parse_idx(idx_file(0x0D, {2}, {1.5, 2.5}), idx_file(0x08, {2}, {0, 1}), images_named("img"), "lab");
  EXPECT_EQ(scalars.sample_shape, std::vector<std::int64_t>({1}));
}

TEST(Idx, Errors) {
  std::string images = idx_file(0x08, {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  std::string labels = idx_file(0x08, {2}, {0, 1});
  EXPECT_NE(idx_error("\x1f\x8b\x08\x00rest", labels).find("img: expected IDX magic"), std::string::npos);
  EXPECT_NE(idx_error(images, std::string("\0\0\x07\x01", 4)).find("lab: expected IDX magic"), std::string::npos);
  EXPECT_NE(idx_error("", labels).find("found an empty file"), std::string::npos);
  EXPECT_NE(idx_error(images.substr(0, 9), labels).find("header bytes"), std::string::npos);
  std::string truncated = idx_error(images.substr(0, images.size() - 1), labels);
  EXPECT_NE(truncated.find("img: expected 8 data bytes for dims 2x2x2, found 7 (truncated file?)"), std::string::npos)
      << truncated;
  EXPECT_NE(idx_error(images + "x", labels).find("trailing"), std::string::npos);
  std::string mismatch = idx_error(images, idx_file(0x08, {3}, {0, 1, 2}));
  EXPECT_NE(mismatch.find("lab: expected 2 labels"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("found 3"), std::string::npos) << mismatch;
  EXPECT_NE(idx_error(images, idx_file(0x08, {2, 1}, {0, 1})).find("rank 1"), std::string::npos);
  // Dims whose product overflows must not be trusted.
  EXPECT_NE(idx_error(idx_file(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, {}), labels).find("expected"),
            std::string::npos);
  EXPECT_NE(idx_error(idx_file(0x08, {0, 2, 2}, {}), idx_file(0x08, {0}, {})).find("at least one image"),
            std::string::npos);
}

TEST(Idx, TestPartMustMatchTrainShape) {
  Table train = parse_idx(idx_file(0x08, {1, 2, 2}, {1, 2, 3, 4}), idx_file(0x08, {1}, {0}), images_named("img"), "lab");
  ParseOptions options = images_named("test-img");
  options.reference = &train.columns;
  EXPECT_NO_THROW(parse_idx(idx_file(0x08, {1, 2, 2}, {5, 6, 7, 8}), idx_file(0x08, {1}, {1}), options, "lab"));
  std::string message = idx_error(idx_file(0x08, {1, 1, 4}, {5, 6, 7, 8}), idx_file(0x08, {1}, {1}), options);
  EXPECT_NE(message.find("expected images of shape 1x2x2 as in the train part, found 1x1x4"), std::string::npos)
      << message;
}

TEST(Idx, FashionMnist) {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST in " << dir;
  auto load = [&](const std::string& file) {
    std::string path = (dir / file).string();
    return decompress_input(test::read_file(path), path);
  };
  Table train = parse_idx(load("train-images-idx3-ubyte.gz"), load("train-labels-idx1-ubyte.gz"),
                          images_named("train-images-idx3-ubyte.gz"), "train-labels-idx1-ubyte.gz");
  EXPECT_EQ(train.rows, 60000u);
  EXPECT_EQ(train.sample_shape, std::vector<std::int64_t>({1, 28, 28}));
  EXPECT_EQ(train.features.size(), 60000u * 784);
  EXPECT_EQ(train.columns[0].count, 60000u * 784);
  EXPECT_EQ(train.columns[0].min, 0);
  EXPECT_EQ(train.columns[0].max, 255);
  EXPECT_NEAR(train.columns[0].mean, 72.94, 0.01);  // the well-known 0.2860 * 255
  EXPECT_NEAR(train.columns[0].std, 90.02, 0.01);   // 0.3530 * 255
  EXPECT_EQ(train.columns[1].min, 0);
  EXPECT_EQ(train.columns[1].max, 9);
  EXPECT_NEAR(train.columns[1].mean, 4.5, 1e-9);  // 6000 of each class
  ParseOptions test_options = images_named("t10k-images-idx3-ubyte.gz");
  test_options.reference = &train.columns;
  Table test = parse_idx(load("t10k-images-idx3-ubyte.gz"), load("t10k-labels-idx1-ubyte.gz"), test_options,
                         "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(test.rows, 10000u);
}

// Damaged headers and truncations must give a Table or kBadData, never a
// crash or a huge allocation (this also runs under ASan/UBSan).
TEST(Idx, SurvivesRandomDamage) {
  const std::string images = idx_file(0x08, {3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const std::string labels = idx_file(0x08, {3}, {0, 1, 2});
  std::mt19937 rng(5);
  for (int round = 0; round < 3000; ++round) {
    std::string damaged_images = images, damaged_labels = labels;
    std::string& target = rng() % 2 ? damaged_images : damaged_labels;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e) {
      std::size_t at = rng() % target.size();
      switch (rng() % 3) {
        case 0: target[at] = static_cast<char>(rng()); break;
        case 1: target.resize(at); break;
        default: target.insert(at, 1, static_cast<char>(rng())); break;
      }
      if (target.empty()) break;
    }
    try {
      Table table = parse_idx(damaged_images, damaged_labels, images_named("img"), "lab");
      EXPECT_EQ(table.features.size(), table.rows * static_cast<std::uint64_t>(table.sample_width()));
      EXPECT_EQ(table.labels.size(), table.rows);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kBadData);
    }
  }
}

}  // namespace
}  // namespace anneal
