// Format names, format detection, decompression and number parsing.
#include <gtest/gtest.h>

#include <charconv>
#include <cstring>
#include <random>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/input_stream.h"
#include "formats/number.h"
#include "test_util.h"
#include "formats/text.h"

namespace anneal {
namespace {

using namespace std::string_literals;
using test::gzip;
using test::zstd_streamed;
using test::zstd_with_size;

std::string sample_text(std::size_t bytes) {
  std::string text;
  std::mt19937 rng(3);
  while (text.size() < bytes) text += std::to_string(rng() % 100000) + (rng() % 8 ? "," : "\n");
  return text;
}

std::string decompress_error(std::string_view bytes) {
  try {
    decompress_input(bytes, "in.gz");
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadData);
    return error.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(FormatNames, RoundTrip) {
  for (Format format : {Format::kAuto, Format::kCsv, Format::kTsv, Format::kIdx, Format::kLibsvm})
    EXPECT_EQ(parse_format_name(format_name(format)), format);
  EXPECT_STREQ(format_name(Format::kCsv), "csv");
  EXPECT_STREQ(format_name(Format::kLibsvm), "libsvm");
}

TEST(FormatNames, UnknownNameIsAUsageErrorAboutTheFormat) {
  try {
    parse_format_name("parquet");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kUsage);
    EXPECT_EQ(error.subject(), Subject::kFormat);  // cli/ names it --format
    EXPECT_NE(std::string(error.what()).find("'parquet'"), std::string::npos) << error.what();
  }
}

TEST(DetectFormat, ByFileName) {
  EXPECT_EQ(detect_format("data/iris.csv", ""), Format::kCsv);
  EXPECT_EQ(detect_format("IRIS.CSV.GZ", ""), Format::kCsv);
  EXPECT_EQ(detect_format("x.tsv.zst", "a,b,c\n"), Format::kTsv);
  EXPECT_EQ(detect_format("train-images-idx3-ubyte.gz", ""), Format::kIdx);
  EXPECT_EQ(detect_format("t10k-labels-idx1-ubyte", ""), Format::kIdx);
  EXPECT_EQ(detect_format("a9a.libsvm", ""), Format::kLibsvm);
  EXPECT_EQ(detect_format("a9a.svm", ""), Format::kLibsvm);
}

TEST(DetectFormat, ByContent) {
  EXPECT_EQ(detect_format("data", "\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x07"s),
            Format::kIdx);
  EXPECT_EQ(detect_format("data.txt", "# comment\n\n+1 3:1 11:0.5\n-1 2:1\n"), Format::kLibsvm);
  EXPECT_EQ(detect_format("data.txt", "a\tb\tc\n1\t2\t3\n"), Format::kTsv);
  EXPECT_EQ(detect_format("data.txt", "\xEF\xBB\xBFx,y\n1,2\n"), Format::kCsv);
  EXPECT_EQ(detect_format("data", ""), Format::kCsv);
  EXPECT_EQ(detect_format("data", "1 2 3\n"), Format::kCsv);  // not LIBSVM: no INDEX:VALUE
}

TEST(Decompress, PlainInputIsReturnedUnchanged) {
  EXPECT_EQ(decompress_input("a,b\n1,2\n", "x.csv"), "a,b\n1,2\n");
  EXPECT_EQ(decompress_input("", "x.csv"), "");
  EXPECT_FALSE(is_compressed_input("a,b\n1,2\n"));
  EXPECT_FALSE(is_compressed_input("\x1f"));
  EXPECT_TRUE(is_compressed_input(gzip("x")));
  EXPECT_TRUE(is_compressed_input(zstd_with_size("x")));
}

TEST(Decompress, Gzip) {
  std::string text = sample_text(3 << 20);
  EXPECT_EQ(decompress_input(gzip(text), "x.csv.gz"), text);
  EXPECT_EQ(decompress_input(gzip(""), "x.csv.gz"), "");
}

TEST(Decompress, GzipWithSeveralMembers) {
  std::string a = sample_text(100000), b = sample_text(5000);
  EXPECT_EQ(decompress_input(gzip(a) + gzip(b) + gzip(a), "x.csv.gz"), a + b + a);
  EXPECT_EQ(decompress_input(gzip(a) + std::string(512, '\0'), "x.csv.gz"), a);  // zero padding
}

TEST(Decompress, ZstdWithAndWithoutContentSize) {
  std::string text = sample_text(3 << 20);
  EXPECT_EQ(decompress_input(zstd_with_size(text), "x.csv.zst"), text);
  EXPECT_EQ(decompress_input(zstd_streamed(text), "x.csv.zst"), text);
  EXPECT_EQ(decompress_input(zstd_streamed("ab") + zstd_with_size("cd"), "x.zst"), "abcd");
}

TEST(Decompress, TruncatedOrCorruptStreamsAreBadData) {
  std::string text = sample_text(200000);
  std::string gz = gzip(text), zst = zstd_streamed(text);
  for (std::size_t keep : {std::size_t{2}, std::size_t{10}, gz.size() / 2, gz.size() - 1}) {
    std::string message = decompress_error(gz.substr(0, keep));
    EXPECT_NE(message.find("in.gz: expected"), std::string::npos) << message;
  }
  for (std::size_t keep : {std::size_t{4}, std::size_t{9}, zst.size() / 2, zst.size() - 1})
    EXPECT_NE(decompress_error(zst.substr(0, keep)).find("zstd"), std::string::npos);
  std::string corrupt = gz;
  for (std::size_t i = 20; i < 60; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  EXPECT_NE(decompress_error(corrupt).find("gzip"), std::string::npos);
  EXPECT_NE(decompress_error(gzip(text) + "trailing junk").find("another gzip member"), std::string::npos);
  std::string bad_zst = zst;
  for (std::size_t i = 12; i < bad_zst.size(); i += 7) bad_zst[i] = static_cast<char>(bad_zst[i] ^ 0x33);
  EXPECT_NE(decompress_error(bad_zst).find("zstd"), std::string::npos);
}

// A decompression bomb stops at the limit, not after inflating it all: the
// error comes however far the stream would go, naming the limit's flag.
TEST(Decompress, SizeLimitStopsABombEarly) {
  const std::string zeros(64 << 20, '\0');
  DecompressLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_ratio = 1 << 30;
  for (const std::string& bomb : {gzip(zeros), zstd_streamed(zeros), zstd_with_size(zeros)}) {
    try {
      decompress_input(bomb, "bomb.gz", limits);
      ADD_FAILURE() << "expected kBadData";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadData);
      EXPECT_EQ(std::string(e.what()),
                "bomb.gz: expected at most 1048576 bytes once decompressed, found more; the decompressed size "
                "limit can be raised (or decompress the file first)");
      EXPECT_EQ(e.remedy(), Remedy::kRaiseDecompressedSize);
    }
  }
  limits.max_bytes = zeros.size();
  EXPECT_EQ(decompress_input(gzip(zeros), "ok.gz", limits).size(), zeros.size());  // exactly at the limit
}

TEST(Decompress, RatioLimit) {
  const std::string zeros(8 << 20, '\0');
  const std::string gz = gzip(zeros);  // about 1000:1
  DecompressLimits limits;
  limits.max_ratio = 100;
  try {
    decompress_input(gz, "bomb.gz", limits);
    ADD_FAILURE() << "expected kBadData";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "bomb.gz: expected at most 100 times its " + std::to_string(gz.size()) +
                                         " compressed bytes once decompressed, found more; the decompression "
                                         "ratio limit can be raised (or decompress the file first)");
    EXPECT_EQ(e.remedy(), Remedy::kRaiseDecompressionRatio);
  }
  limits.max_ratio = 2000;
  EXPECT_EQ(decompress_input(gz, "ok.gz", limits), zeros);
  // The default lets ordinary text through.
  std::string text = sample_text(1 << 20);
  EXPECT_EQ(decompress_input(gzip(text), "t.gz"), text);
}

// DecompressingReader reads a file a piece at a time and is pulled a
// piece at a time: whatever the piece sizes, it gives decompress_input's
// bytes, or its error word for word (truncation, corruption, junk after a
// member, zero padding split across pieces, the limits), and hands every
// compressed byte on once.
TEST(Decompress, ReaderInPiecesIsDecompressInput) {
  test::TempDir dir;
  const std::string text = sample_text(300000), a = sample_text(70000);
  const std::string gz = gzip(text), zst = zstd_streamed(text);
  DecompressLimits tight;
  tight.max_bytes = 100000;
  const std::vector<std::pair<std::string, DecompressLimits>> inputs = {
      {gz, {}},
      {gzip(a) + gzip("") + gzip(a), {}},
      {gzip(a) + std::string(700, '\0'), {}},
      {gzip(a) + std::string(3, '\0') + gzip(a), {}},
      {gzip(a) + "trailing junk", {}},
      {gzip(a) + "\x1f", {}},
      {gz.substr(0, gz.size() / 2), {}},
      {gz.substr(0, 10), {}},
      {zst, {}},
      {zstd_with_size("ab") + zstd_streamed("cd"), {}},
      {zst.substr(0, zst.size() - 1), {}},
      {zst.substr(0, 9), {}},
      {gz, tight},
      {zst, tight},
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const auto& [bytes, limits] = inputs[k];
    const std::filesystem::path path = dir.path() / ("in" + std::to_string(k));
    test::write_file(path, bytes);
    std::string want, want_error;
    try {
      want = decompress_input(bytes, "in.gz", limits);
    } catch (const Error& e) {
      want_error = e.what();
    }
    for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
      for (std::size_t pull : {std::size_t{3}, std::size_t{65536}}) {
        std::string got, got_error, handed_on;
        try {
          FileReader file(path);
          DecompressingReader reader(file, "in.gz", limits, [&](std::string_view b) { handed_on += b; }, piece);
          std::string out(pull, '\0');
          for (std::size_t n; (n = reader.read(out)) > 0;) got.append(out.data(), n);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kBadData);
          got_error = e.what();
        }
        const std::string where = "input " + std::to_string(k) + ", pieces of " + std::to_string(piece) +
                                  ", pulled " + std::to_string(pull);
        EXPECT_EQ(got_error, want_error) << where;
        if (want_error.empty()) {
          EXPECT_TRUE(got == want) << where << ": " << got.size() << " bytes, " << want.size() << " expected";
          EXPECT_TRUE(handed_on == bytes) << where;
        }
      }
    }
  }
}

// The fast path must agree bit for bit with std::from_chars (correctly
// rounded) on every spelling it accepts.
TEST(NumberParsing, MatchesFromChars) {
  std::mt19937_64 rng(11);
  char text[64];
  auto check = [&](const char* s) {
    std::size_t n = std::strlen(s);
    float fast = 0, reference = 0;
    const char* fast_end = formats::parse_float_prefix(s, s + n, fast);
    auto [reference_end, status] = std::from_chars(s, s + n, reference);
    if (status == std::errc::result_out_of_range) return;  // handled separately below
    ASSERT_EQ(fast_end == nullptr, status != std::errc()) << s;
    if (fast_end == nullptr) return;
    ASSERT_EQ(fast_end, reference_end) << s;
    if (std::isnan(reference)) {
      EXPECT_TRUE(std::isnan(fast)) << s;
    } else {
      ASSERT_EQ(std::memcmp(&fast, &reference, sizeof fast), 0) << s << " fast " << fast << " ref " << reference;
    }
  };
  for (int i = 0; i < 300000; ++i) {
    int digits = 1 + static_cast<int>(rng() % 19);
    int point = static_cast<int>(rng() % (digits + 1));
    std::string s = rng() % 2 ? "-" : "";
    for (int d = 0; d < digits; ++d) {
      if (d == point && rng() % 4) s += '.';
      s += static_cast<char>('0' + rng() % 10);
    }
    if (rng() % 3 == 0) {
      s += 'e';
      s += std::to_string(static_cast<int>(rng() % 60) - 30);
    }
    std::snprintf(text, sizeof text, "%s", s.c_str());
    check(text);
  }
  // Typical generated data: %.6f of doubles, and halfway cases for float.
  std::uniform_real_distribution<double> value(-1000, 1000);
  for (int i = 0; i < 300000; ++i) {
    std::snprintf(text, sizeof text, "%.6f", value(rng));
    check(text);
    std::snprintf(text, sizeof text, "%.9g", value(rng));
    check(text);
  }
  for (std::uint32_t bits = 0x3f800000; bits < 0x3f800000 + 20000; ++bits) {
    float a, b;
    std::memcpy(&a, &bits, 4);
    std::uint32_t next = bits + 1;
    std::memcpy(&b, &next, 4);
    std::snprintf(text, sizeof text, "%.17g", (static_cast<double>(a) + b) / 2);  // exactly halfway
    check(text);
  }
  for (const char* s : {"0", "-0", "1.", ".5", "1e5", "1E+05", "1e", "1e+", "-", ".", "nan", "-inf", "Infinity",
                        "12345678901234567890", "0.000000000000000000000000001", "1e-300", "9007199254740993",
                        "3.4028234e38", "1.17549435e-38"})
    check(s);
}

TEST(NumberParsing, WholeFieldAndOutOfRange) {
  float value;
  auto whole = [&](std::string_view s) { return formats::parse_float_exactly(s.data(), s.data() + s.size(), value); };
  EXPECT_TRUE(whole("+2.5"));
  EXPECT_EQ(value, 2.5f);
  EXPECT_FALSE(whole("+-2"));
  EXPECT_FALSE(whole("+"));
  EXPECT_FALSE(whole(""));
  EXPECT_FALSE(whole("1.5x"));
  EXPECT_FALSE(whole("0x10"));
  EXPECT_TRUE(whole("1e39"));  // beyond float: infinity, as any float32 overflow
  EXPECT_EQ(value, INFINITY);
  EXPECT_TRUE(whole("-1e-50"));
  EXPECT_EQ(value, 0.0f);
  // Beyond double too: still a number, rounded like any overflow or
  // underflow, so the parsers report it as non-finite rather than text.
  EXPECT_TRUE(whole("1e400"));
  EXPECT_EQ(value, INFINITY);
  EXPECT_TRUE(whole("-1e400"));
  EXPECT_EQ(value, -INFINITY);
  EXPECT_TRUE(whole("1e-400"));
  EXPECT_EQ(value, 0.0f);
}

// The fast line count decides where CSV rows go: it must match the plain
// definition (lines other than "" and "\r") on every range.
TEST(TextScan, CountNonemptyLinesMatchesTheDefinition) {
  std::mt19937 rng(17);
  const char alphabet[] = {'\n', '\n', '\r', 'a', ','};
  for (int round = 0; round < 3000; ++round) {
    std::string text(rng() % (round % 10 == 0 ? 9000 : 120), 'x');  // long ones cross 255 SIMD steps
    for (char& c : text) c = alphabet[rng() % sizeof alphabet];
    // Ranges start at a line start, as blocks do.
    std::vector<std::size_t> line_starts = {0};
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') line_starts.push_back(i + 1);
    std::size_t begin = line_starts[rng() % line_starts.size()];
    std::size_t end = begin + rng() % (text.size() - begin + 1);
    std::size_t expected = 0;
    for (std::size_t line = begin; line < end;) {
      std::size_t newline = std::min(text.find('\n', line), end);
      std::string_view content(text.data() + line, newline - line);
      expected += !(content.empty() || content == "\r");
      line = newline + 1;
    }
    ASSERT_EQ(formats::count_nonempty_lines(text, begin, end), expected)
        << "begin " << begin << " end " << end << " text " << formats::quote_for_message(text);
  }
}

}  // namespace
}  // namespace anneal
