// Input files are read once into memory (FileSnapshot), not mapped: a file
// truncated by another process while anneal reads it must give a clean
// kBadData error, never SIGBUS (issue 12). Every step here is ordered by the
// test itself: no timing, no second process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "anneal/error.h"
#include "anneal/fs.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// With a mapping, reading the pages of a file truncated after it was opened
// raised SIGBUS; a snapshot keeps the bytes it read.
TEST(FileSnapshot, TruncatingTheFileAfterwardsDoesNotTouchTheSnapshot) {
  TempDir dir;
  fs::path path = dir.path() / "input.csv";
  std::string content(1 << 20, 'x');
  write(path, content);
  FileSnapshot snapshot(path);
  fs::resize_file(path, 0);
  std::string_view bytes = snapshot.bytes();
  ASSERT_EQ(bytes.size(), content.size());
  EXPECT_EQ(bytes.back(), 'x');  // a mapped page past the new end: SIGBUS here
  EXPECT_EQ(bytes, content);
}

// Truncated between the size check and the read: the real read of
// FileSnapshot, with the file changed in between.
TEST(FileSnapshot, FileTruncatedWhileBeingReadIsBadData) {
  TempDir dir;
  fs::path path = dir.path() / "input.csv";
  write(path, std::string(100000, 'x'));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  fs::resize_file(path, 4096);
  try {
    read_whole_file(fd, static_cast<std::uint64_t>(st.st_size), path);
    ADD_FAILURE() << "expected kBadData";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadData);
    EXPECT_EQ(std::string(e.what()), path.string() +
                                         ": expected 100000 bytes, found 4096; the file changed while being read "
                                         "(truncated, or still being written?)");
  }
  // Grown instead (still being written): also refused.
  fs::resize_file(path, 200000);
  try {
    read_whole_file(fd, static_cast<std::uint64_t>(st.st_size), path);
    ADD_FAILURE() << "expected kBadData";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadData);
    EXPECT_NE(std::string(e.what()).find("expected 100000 bytes, found more"), std::string::npos);
  }
  ::close(fd);
}

TEST(FileSnapshot, MissingFileAndDirectory) {
  TempDir dir;
  try {
    FileSnapshot snapshot(dir.path() / "absent");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
  EXPECT_THROW(FileSnapshot snapshot(dir.path()), Error);
  EXPECT_THROW(FileSnapshot snapshot("/dev/null"), Error);  // no size to check a read against
  write(dir.path() / "empty", "");
  EXPECT_EQ(FileSnapshot(dir.path() / "empty").bytes().size(), 0u);
}

}  // namespace
}  // namespace anneal
