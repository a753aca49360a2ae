// anneal::Error's subject and remedy: what() says them as concepts, so the
// layers below cli/ need no flag names, while the parts stay separate for
// cli/ to say with flags (cli/error_text.cc; the e2e tests check that side).
#include <gtest/gtest.h>

#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/store.h"
#include "test_util.h"

namespace anneal {
namespace {

TEST(Error, PlainMessageIsItsOwnDetail) {
  const Error e = usage_error("bad thing");
  EXPECT_STREQ(e.what(), "bad thing");
  EXPECT_EQ(e.detail(), "bad thing");
  EXPECT_EQ(e.subject(), Subject::kNone);
  EXPECT_EQ(e.remedy(), Remedy::kNone);
}

TEST(Error, SubjectAndRemedyAreSaidAsConcepts) {
  EXPECT_STREQ(usage_error(Subject::kJobCores, "must be at least 1").what(), "the job's core count must be at least 1");
  EXPECT_STREQ(usage_error(Subject::kFormat, ": expected csv").what(), "the input format: expected csv");
  const Error e = Error(ErrorKind::kUsage, Subject::kOutputFile, "out.csv: file exists", Remedy::kReplaceExisting);
  EXPECT_STREQ(e.what(), "the output file out.csv: file exists (replacing it was not asked for)");
  EXPECT_EQ(e.detail(), "out.csv: file exists");
  const Error with = not_found("no job job-9").with(Remedy::kListJobs);
  EXPECT_EQ(with.kind(), ErrorKind::kNotFound);
  EXPECT_EQ(with.remedy(), Remedy::kListJobs);
  EXPECT_EQ(std::string(with.what()).find("anneal"), std::string::npos) << with.what();
}

TEST(Error, TheStoreNamesNoFlags) {
  test::TempDir dir;
  Store::init(dir.path() / "store");
  Store store = Store::open(dir.path() / "store");
  JobSpec spec;
  spec.cores = 0;
  try {
    submit_job(store, spec, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.subject(), Subject::kJobCores);
    EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << e.what();
  }
  try {
    find_job(store, 9);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.remedy(), Remedy::kListJobs);
    EXPECT_EQ(std::string(e.what()).find("'anneal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anneal
