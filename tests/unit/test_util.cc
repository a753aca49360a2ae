#include "test_util.h"

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

}  // namespace anneal::test
