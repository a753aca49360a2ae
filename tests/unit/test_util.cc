#include "test_util.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include "anneal/datasets.h"
#include "anneal/preprocess.h"
#include "anneal/report.h"
#include "anneal/store.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace anneal::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/anneal-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path data_file(const std::string& name) {
  return std::filesystem::path(ANNEAL_TEST_DATA_DIR) / name;
}

void init_store_with_dataset(const std::filesystem::path& root, const std::string& name, const std::string& file) {
  Store::init(root);
  Store store = Store::open(root);
  ImportRequest request;
  request.dataset = name;
  request.file = data_file(file);
  NullReporter quiet;
  import_dataset(store, request, quiet);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::unique_ptr<Backend> cpu_backend(int threads) {
  return make_backend({.device = Device::kCpu, .threads = threads});
}

ColumnSchema column(const std::string& name, ColumnType type) {
  ColumnSchema c;
  c.name = name;
  c.type = type;
  return c;
}

std::string gzip(std::string_view data) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, static_cast<uLong>(data.size())) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string zstd_with_size(std::string_view data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  std::size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// A frame without a content size, as `zstd` writes when reading a pipe.
std::string zstd_streamed(std::string_view data) {
  ZSTD_CCtx* context = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(context, ZSTD_c_contentSizeFlag, 0);
  std::string out(ZSTD_compressBound(data.size()) + 64, '\0');
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  EXPECT_EQ(ZSTD_compressStream2(context, &o, &in, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(context);
  out.resize(o.pos);
  EXPECT_EQ(ZSTD_getFrameContentSize(out.data(), out.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  return out;
}

}  // namespace anneal::test
