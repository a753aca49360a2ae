// AtomicFileWriter: a file written piece by piece appears whole at commit
// or not at all; an existing file is replaced only when asked, and an
// error (the writer destroyed before its commit) leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/fs.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFileWriter, PiecesAppearWholeAtCommit) {
  TempDir dir;
  const fs::path out = dir.path() / "out.csv";
  AtomicFileWriter writer(out, dir.path());
  writer.append("row,prediction\n");
  std::string expected = "row,prediction\n";
  for (int i = 1; i <= 1000; ++i) {
    const std::string line = std::to_string(i) + ",yes\n";
    writer.append(line);
    expected += line;
  }
  writer.append("");
  EXPECT_FALSE(fs::exists(out)) << "nothing at the path before the commit";
  EXPECT_TRUE(fs::exists(writer.temp_path()));
  EXPECT_EQ(writer.temp_path().parent_path(), dir.path());
  EXPECT_TRUE(writer.commit(/*replace=*/false));
  EXPECT_EQ(test::read_file(out), expected);
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"out.csv"})) << "no temporary file left";
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_THROW(writer.append("more"), Error);
  EXPECT_THROW(writer.commit(true), Error);
  EXPECT_EQ(test::read_file(out), expected);
}

TEST(AtomicFileWriter, DestroyedBeforeCommitLeavesNothingAndTheOldFileAlone) {
  TempDir dir;
  const fs::path out = dir.path() / "out.csv";
  test::write_file(out, "old\n");
  {
    AtomicFileWriter writer(out, dir.path());
    writer.append("new, half written\n");
    EXPECT_EQ(names_in(dir.path()).size(), 2u);
    // An error on the way: the writer goes out of scope uncommitted.
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"out.csv"}));
  EXPECT_EQ(test::read_file(out), "old\n");
  {
    AtomicFileWriter writer(dir.path() / "fresh.csv", dir.path());
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"out.csv"}));
}

TEST(AtomicFileWriter, ReplacesOnlyWhenAsked) {
  TempDir dir;
  const fs::path out = dir.path() / "out.csv";
  test::write_file(out, "old\n");
  {
    AtomicFileWriter writer(out, dir.path());
    writer.append("new\n");
    EXPECT_FALSE(writer.commit(/*replace=*/false));
  }
  EXPECT_EQ(test::read_file(out), "old\n") << "an existing file is kept without replace";
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"out.csv"}));
  {
    AtomicFileWriter writer(out, dir.path());
    writer.append("new\n");
    EXPECT_TRUE(writer.commit(/*replace=*/true));
  }
  EXPECT_EQ(test::read_file(out), "new\n");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"out.csv"}));
}

TEST(AtomicFileWriter, ModeAndErrorsNameTheFile) {
  TempDir dir;
  const fs::path out = dir.path() / "shared.csv";
  {
    AtomicFileWriter writer(out, dir.path(), 0644);
    writer.append("x\n");
    EXPECT_TRUE(writer.commit(false));
  }
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  // A directory that is not there: kFailure naming the temporary file.
  try {
    AtomicFileWriter writer(dir.path() / "missing" / "out.csv", dir.path() / "missing");
    FAIL() << "created a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailure);
    EXPECT_NE(std::string(e.what()).find((dir.path() / "missing").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot create"), std::string::npos) << e.what();
  }
  // Renaming over a directory fails: kFailure, the temporary file removed.
  fs::create_directory(dir.path() / "taken");
  test::write_file(dir.path() / "taken" / "inside", "keep");
  {
    AtomicFileWriter writer(dir.path() / "taken", dir.path());
    writer.append("x\n");
    EXPECT_THROW(writer.commit(true), Error);
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"shared.csv", "taken"}));
  EXPECT_EQ(test::read_file(dir.path() / "taken" / "inside"), "keep");
}

// write_file_atomic is the writer with one piece: the same guarantees.
TEST(AtomicFileWriter, WriteFileAtomicKeepsItsContract) {
  TempDir dir;
  const fs::path out = dir.path() / "a.txt";
  EXPECT_TRUE(write_file_atomic(out, "one", dir.path(), false));
  EXPECT_FALSE(write_file_atomic(out, "two", dir.path(), false));
  EXPECT_EQ(test::read_file(out), "one");
  EXPECT_TRUE(write_file_atomic(out, "two", dir.path(), true));
  EXPECT_EQ(test::read_file(out), "two");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>({"a.txt"}));
}

}  // namespace
}  // namespace anneal
