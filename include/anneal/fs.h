// File-system primitives with the durability rules the store relies on.
// Every function throws anneal::Error (kind kFailure unless noted) naming the
// path and the errno text; none of them print.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace anneal {

// The whole content of a file as read once, into memory. Not a mapping: a
// mapped file that another process truncates raises SIGBUS at the next read
// of a lost page, which no caller can turn into an error; a copy stays valid
// whatever happens to the file. Throws kNotFound when the file does not
// exist, kFailure when it cannot be opened or is not a regular file (a
// directory, a pipe, a device), and kBadData
// when its size changes while it is read (truncated or still being written:
// "PATH: expected N bytes, found M; the file changed while being read").
// Memory: the file's size.
class FileSnapshot {
 public:
  explicit FileSnapshot(const std::filesystem::path& path);

  std::string_view bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// A regular file read piece by piece into the caller's buffers, for input
// too large to hold whole. Opening throws as FileSnapshot does (kNotFound,
// kFailure); the size is the one fstat reported then. read_at throws the
// kBadData "the file changed while being read" of FileSnapshot when the file
// has become shorter, check_end when it has become longer; kFailure on a
// read error. Pages read this way are the kernel's page cache, not the
// process's memory.
class FileReader {
 public:
  explicit FileReader(const std::filesystem::path& path);
  ~FileReader();
  FileReader(FileReader&& other) noexcept;
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  FileReader& operator=(FileReader&&) = delete;

  // A reader over the open file `fd` (duplicated: the caller keeps its
  // own), named `path` in messages; kFailure when it is not a regular file.
  static FileReader of_descriptor(int fd, const std::filesystem::path& path);

  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Fills `out` with the bytes at [offset, offset + out.size()), which must
  // lie within size().
  void read_at(std::uint64_t offset, std::span<char> out) const;
  // Throws when the file now holds more than size() bytes.
  void check_end() const;

 private:
  FileReader() = default;
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Scratch space for bytes too many to hold in memory (a decompressed
// import): a file created in `dir` (the store's tmp/, on the store's file
// system rather than a small /tmp) and unlinked at once, so it is gone when
// this closes it, however the process ends. One thread at a time.
class ScratchFile {
 public:
  explicit ScratchFile(const std::filesystem::path& dir);  // kFailure when it cannot be created
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Appends `bytes`; kFailure naming the directory on a write error (a
  // full disk).
  void append(std::string_view bytes);
  // A reader over what was appended so far, named `name` in its messages.
  FileReader reader(const std::filesystem::path& name) const;

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

// Reads exactly `size` bytes from the start of the open file `fd` (the size
// fstat reported when it was opened) and checks that the file ends there;
// FileSnapshot's read, exposed so tests can change the file between the two.
// Throws kBadData naming `path` when the file has become shorter or longer,
// kFailure on a read error.
std::string read_whole_file(int fd, std::uint64_t size, const std::filesystem::path& path);

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

// A file written piece by piece and put in place atomically, for output
// too large to build in memory first; write_file_atomic's guarantees. The
// bytes go to a new temporary file in `tmp_dir` (which must be on path's
// file system), created with mode `mode` (0600 unless other users must
// read it). commit() fsyncs it, renames it over `path` (with `replace`; or
// links it there, leaving an existing `path` alone and returning false)
// and fsyncs path's directory (unless `sync_parent` is false). Until
// commit returns true `path` is untouched; a writer destroyed before that
// (an error on the way) removes its temporary file, so nothing is left
// behind. Throws kFailure naming the file on a create, write, fsync or
// rename error.
class AtomicFileWriter {
 public:
  AtomicFileWriter(const std::filesystem::path& path, const std::filesystem::path& tmp_dir, unsigned mode = 0600);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends `bytes` to the temporary file. Not after commit.
  void append(std::string_view bytes);
  // Puts the file in place, once; see above.
  bool commit(bool replace, bool sync_parent = true);
  // The temporary file, while there is one (for tests and messages).
  const std::filesystem::path& temp_path() const { return tmp_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  bool done_ = false;  // committed: the temporary file is gone or is `path`
};

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
