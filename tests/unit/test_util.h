// Helpers shared by the unit tests: throwaway directories and test data paths.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "anneal/device.h"
#include "anneal/table.h"
#include "anneal/trainer.h"

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

// The CPU backend with `threads` threads (tests name the device they test).
std::unique_ptr<Backend> cpu_backend(int threads = 1);

// A Trainer that owns its CPU backend: the backend is a base constructed
// before, and destroyed after, the Trainer that borrows it.
struct OwnedCpuBackend {
  explicit OwnedCpuBackend(int threads) : owned_backend(cpu_backend(threads)) {}
  std::unique_ptr<Backend> owned_backend;
};
class CpuTrainer : private OwnedCpuBackend, public Trainer {
 public:
  CpuTrainer(TrainerConfig config, DataView train, std::optional<DataView> validation, Reporter& reporter,
             int threads = 1)
      : OwnedCpuBackend(threads),
        Trainer(std::move(config), *owned_backend, std::move(train), std::move(validation), reporter) {}
};

// A column schema for hand-built Tables: only the name and type set.
ColumnSchema column(const std::string& name, ColumnType type = ColumnType::kNumeric);

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& bytes);

// `data` compressed as gzip; as a zstd frame that records its size; as
// one that does not (what `zstd` writes when reading a pipe).
std::string gzip(std::string_view data);
std::string zstd_with_size(std::string_view data);
std::string zstd_streamed(std::string_view data);

}  // namespace anneal::test
