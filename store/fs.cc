#include "anneal/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>

#include "anneal/error.h"

namespace anneal {
namespace fs = std::filesystem;

std::string errno_message(const fs::path& path, std::string_view what) {
  return path.string() + ": " + std::string(what) + ": " + std::strerror(errno);
}

namespace {

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw failure(errno_message(path, "write failed"));
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string unique_suffix() {
  // Unique among concurrent writers in this and other processes: pid plus a
  // per-process random stream seeded from the OS.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(rng());
}

}  // namespace

namespace {

Error file_changed(const fs::path& path, std::uint64_t size, std::uint64_t found) {
  return data_error(path.string() + ": expected " + std::to_string(size) + " bytes, found " +
                    (found > size ? "more" : std::to_string(found)) +
                    "; the file changed while being read (truncated, or still being written?)");
}

// Reads [offset, offset + out.size()) of a file of `size` bytes.
void read_range(int fd, std::uint64_t size, const fs::path& path, std::uint64_t offset, std::span<char> out) {
  std::uint64_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, static_cast<std::size_t>(out.size() - done),
                        static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw failure(errno_message(path, "read failed"));
    }
    if (n == 0) throw file_changed(path, size, offset + done);
    done += static_cast<std::uint64_t>(n);
  }
}

void check_ends_at(int fd, std::uint64_t size, const fs::path& path) {
  char probe;
  ssize_t more;
  do {
    more = ::pread(fd, &probe, 1, static_cast<off_t>(size));
  } while (more < 0 && errno == EINTR);
  if (more < 0) throw failure(errno_message(path, "read failed"));
  if (more > 0) throw file_changed(path, size, size + 1);
}

// Opens a regular file for reading; returns the descriptor and its size.
std::pair<int, std::uint64_t> open_regular(const fs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) throw not_found(path.string() + ": no such file");
    throw failure(errno_message(path, "cannot open"));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw failure(errno_message(path, "cannot stat"));
  if (S_ISDIR(st.st_mode)) throw failure(path.string() + ": is a directory, expected a file");
  // A pipe or device has no size to check the read against.
  if (!S_ISREG(st.st_mode)) throw failure(path.string() + ": is not a regular file, expected one");
  return {fd.release(), static_cast<std::uint64_t>(st.st_size)};
}

}  // namespace

FileReader::FileReader(const fs::path& path) : path_(path) {
  std::tie(fd_, size_) = open_regular(path);
}

FileReader FileReader::of_descriptor(int fd, const fs::path& path) {
  Fd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (copy.get() < 0) throw failure(errno_message(path, "cannot duplicate the descriptor of"));
  struct stat st;
  if (::fstat(copy.get(), &st) != 0) throw failure(errno_message(path, "cannot stat"));
  if (!S_ISREG(st.st_mode)) throw failure(path.string() + ": is not a regular file, expected one");
  FileReader reader;
  reader.path_ = path;
  reader.size_ = static_cast<std::uint64_t>(st.st_size);
  reader.fd_ = copy.release();
  return reader;
}

ScratchFile::ScratchFile(const fs::path& dir) : dir_(dir) {
  std::string name = (dir / "scratch-XXXXXX").string();
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) throw failure(errno_message(dir, "cannot create a scratch file in"));
  if (::unlink(name.c_str()) != 0) {
    const int error = errno;
    ::close(fd_);
    errno = error;
    throw failure(errno_message(name, "cannot unlink"));
  }
}

ScratchFile::~ScratchFile() { ::close(fd_); }

void ScratchFile::append(std::string_view bytes) { write_all(fd_, bytes, dir_ / "(scratch file)"); }

FileReader ScratchFile::reader(const fs::path& name) const { return FileReader::of_descriptor(fd_, name); }

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read_at(std::uint64_t offset, std::span<char> out) const {
  read_range(fd_, size_, path_, offset, out);
}

void FileReader::check_end() const { check_ends_at(fd_, size_, path_); }

std::string read_whole_file(int fd, std::uint64_t size, const fs::path& path) {
  std::string bytes(static_cast<std::size_t>(size), '\0');
  read_range(fd, size, path, 0, std::span<char>(bytes.data(), bytes.size()));
  check_ends_at(fd, size, path);
  return bytes;
}

FileSnapshot::FileSnapshot(const fs::path& path) {
  auto [descriptor, size] = open_regular(path);
  Fd fd(descriptor);
  bytes_ = read_whole_file(fd.get(), size, path);
}

void make_private_dir(const fs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  make_private_dir(dir.parent_path());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw failure(errno_message(dir, "cannot create directory"));
}

void sync_dir(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw failure(errno_message(dir, "cannot open directory"));
  if (::fsync(fd.get()) != 0) throw failure(errno_message(dir, "fsync failed"));
}

AtomicFileWriter::AtomicFileWriter(const fs::path& path, const fs::path& tmp_dir, unsigned mode)
    : path_(path), tmp_(tmp_dir / (path.filename().string() + "." + unique_suffix() + ".tmp")) {
  Fd fd(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode)));
  if (fd.get() < 0) throw failure(errno_message(tmp_, "cannot create"));
  // The process umask (anneal's is 077) must not narrow a mode asked for.
  if (mode != 0600 && ::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    const Error error = failure(errno_message(tmp_, "cannot set the mode of"));
    ::unlink(tmp_.c_str());
    throw error;
  }
  fd_ = fd.release();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::append(std::string_view bytes) {
  if (done_ || fd_ < 0) throw failure(path_.string() + ": written after it was committed");
  write_all(fd_, bytes, tmp_);
}

bool AtomicFileWriter::commit(bool replace, bool sync_parent) {
  if (done_ || fd_ < 0) throw failure(path_.string() + ": committed twice");
  if (::fsync(fd_) != 0) throw failure(errno_message(tmp_, "fsync failed"));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw failure(errno_message(tmp_, "close failed"));
  int rc = replace ? ::rename(tmp_.c_str(), path_.c_str())
                   // link() fails with EEXIST instead of replacing: a concurrent
                   // writer of the same path wins and we keep its file.
                   : ::link(tmp_.c_str(), path_.c_str());
  if (rc != 0) {
    if (!replace && errno == EEXIST) return false;  // the destructor removes the temporary file
    throw failure(errno_message(path_, replace ? "rename failed" : "link failed"));
  }
  done_ = true;
  if (!replace) ::unlink(tmp_.c_str());
  if (sync_parent) sync_dir(path_.parent_path().empty() ? fs::path(".") : path_.parent_path());
  return true;
}

bool write_file_atomic(const fs::path& path, std::string_view bytes, const fs::path& tmp_dir,
                       bool replace, bool sync_parent, unsigned mode) {
  if (!replace && ::access(path.c_str(), F_OK) == 0) return false;
  AtomicFileWriter writer(path, tmp_dir, mode);
  writer.append(bytes);
  return writer.commit(replace, sync_parent);
}

FileLock::FileLock(const fs::path& path, Mode mode) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) throw failure(errno_message(path, "cannot open lock file"));
  int op = mode == Mode::kShared ? LOCK_SH : LOCK_EX;
  while (::flock(fd.get(), op) != 0) {
    if (errno != EINTR) throw failure(errno_message(path, "cannot lock"));
  }
  fd_ = fd.release();
}

FileLock FileLock::try_lock(const fs::path& path, Mode mode) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) throw failure(errno_message(path, "cannot open lock file"));
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | LOCK_NB;
  FileLock lock;
  while (::flock(fd.get(), op) != 0) {
    if (errno == EWOULDBLOCK) return lock;
    if (errno != EINTR) throw failure(errno_message(path, "cannot lock"));
  }
  lock.fd_ = fd.release();
  return lock;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

FileLock::FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

void FileLock::describe(std::string_view holder) const {
  if (fd_ < 0) throw failure("FileLock::describe: the lock is not held");
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size()))
    throw failure(std::string("cannot record the lock holder: ") + std::strerror(errno));
}

std::string FileLock::holder(const fs::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return "";
  char buffer[512];
  const ssize_t n = ::pread(fd.get(), buffer, sizeof buffer, 0);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace anneal
