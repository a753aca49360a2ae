// File-system primitives with the durability rules the store relies on.
// Every function throws anneal::Error (kind kFailure unless noted) naming the
// path and the errno text; none of them print.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace anneal {

// A read-only view of a whole file (mmap; an empty file maps to an empty
// view). Movable, not copyable; unmaps on destruction. Throws kNotFound when
// the file does not exist.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

// Creates `dir` (and parents) with mode 0700 when missing.
void make_private_dir(const std::filesystem::path& dir);

// fsync() on a directory, so a rename or create inside it is durable.
void sync_dir(const std::filesystem::path& dir);

// Writes `bytes` to `path` atomically: a temporary file in `tmp_dir` (same
// file system), fsync, rename over `path`, fsync of path's directory (unless
// `sync_parent` is false: the caller then syncs it, once for many files).
// Mode `mode` (0600 unless other users must read it). With `replace` false
// an existing `path` is left alone and the call returns false; otherwise it
// returns true.
bool write_file_atomic(const std::filesystem::path& path, std::string_view bytes,
                       const std::filesystem::path& tmp_dir, bool replace,
                       bool sync_parent = true, unsigned mode = 0600);

// An advisory lock (flock) on a lock file, released on destruction or when
// the process dies, so a killed holder never leaves a stale lock.
class FileLock {
 public:
  enum class Mode { kShared, kExclusive };
  // Blocks until the lock is granted.
  FileLock(const std::filesystem::path& path, Mode mode);
  // Does not block: returns an unlocked FileLock (held() false) when another
  // process holds a conflicting lock.
  static FileLock try_lock(const std::filesystem::path& path, Mode mode);
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool held() const { return fd_ >= 0; }

  // Replaces the lock file's content with `holder` (who holds it, for the
  // message another process prints when it finds the lock taken). Only
  // while held; the content outlives the lock and is overwritten by the
  // next holder.
  void describe(std::string_view holder) const;
  // What the last holder of the lock at `path` wrote with describe();
  // empty when nothing (or no file).
  static std::string holder(const std::filesystem::path& path);

 private:
  FileLock() = default;
  int fd_ = -1;
};

// "strerror(errno)" with the path, as one line: "PATH: No such file ...".
std::string errno_message(const std::filesystem::path& path, std::string_view what);

}  // namespace anneal
