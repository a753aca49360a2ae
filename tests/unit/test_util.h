// Helpers shared by the unit tests: throwaway directories and test data paths.
#pragma once

#include <filesystem>
#include <string>

namespace anneal::test {

// A fresh directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Path of a file under tests/data.
std::filesystem::path data_file(const std::string& name);

// Creates a store at `root` holding one dataset, `name`, imported from
// tests/data/`file` with the default options. Throws what init or import throw.
void init_store_with_dataset(const std::filesystem::path& root, const std::string& name, const std::string& file);

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& bytes);

}  // namespace anneal::test
