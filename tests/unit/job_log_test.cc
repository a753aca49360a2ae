// The line a failed job's log gives as its error (src/jobs/job_log.cc): the
// worker records it after "exited with status N: ". The mpirun output here
// is Open MPI 4.1's, as it appears in a job log.
#include <gtest/gtest.h>

#include "jobs/job_log.h"

namespace anneal {
namespace {

const char* kDashes = "--------------------------------------------------------------------------\n";

std::string primary_job_banner() {
  return std::string(kDashes) +
         "Primary job  terminated normally, but 1 process returned\n"
         "a non-zero exit code. Per user-direction, the job has been aborted.\n" +
         kDashes;
}

TEST(JobFailureLine, AnnealsErrorBeforeMpirunsBannerWins) {
  // What issue 29 saw: the last line, a row of dashes, was recorded.
  const std::string log = "--- job-3 attempt 1 on worker w1\n"
                          "epoch 1/10: loss 0.91\n"
                          "anneal: rank 0 of 2: dataset 'iris' not found (see 'anneal data list')\n"
                          "anneal: rank 1 of 2: dataset 'iris' not found (see 'anneal data list')\n" +
                          primary_job_banner() + std::string(kDashes) +
                          "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
                          "the job to be terminated. The first process to do so was:\n\n"
                          "  Process name: [[61443,1],0]\n  Exit code:    1\n" +
                          kDashes;
  EXPECT_EQ(job_failure_line(log), "anneal: rank 0 of 2: dataset 'iris' not found (see 'anneal data list')");
}

TEST(JobFailureLine, JsonLogsGiveTheErrorsMessage) {
  const std::string log =
      "--- job-1 attempt 1 on worker w1\n"
      R"({"time":"2026-01-01T00:00:00Z","level":"info","message":"epoch 1/2: loss 0.5","pid":7})" "\n"
      R"({"time":"2026-01-01T00:00:01Z","level":"error","message":"rank 0 of 2: out of disk","pid":7})" "\n" +
      primary_job_banner();
  EXPECT_EQ(job_failure_line(log), "rank 0 of 2: out of disk");
}

TEST(JobFailureLine, ARankKilledBySignalIsNamedByMpirunsBanner) {
  const std::string log = "--- job-2 attempt 1 on worker w1\nepoch 1/10: loss 0.91\n" + primary_job_banner() +
                          kDashes +
                          "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n" +
                          kDashes;
  EXPECT_EQ(job_failure_line(log),
            "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).");
}

TEST(JobFailureLine, MpirunsOwnFailureIsItsBannersFirstLine) {
  const std::string log = "--- job-2 attempt 1 on worker w1\n" + std::string(kDashes) +
                          "mpirun was unable to launch the specified application as it could not access\n"
                          "or execute an executable:\n\nExecutable: /nonexistent/x\nNode: vm\n\n"
                          "while attempting to start process rank 0.\n" +
                          kDashes;
  EXPECT_EQ(job_failure_line(log),
            "mpirun was unable to launch the specified application as it could not access");
}

TEST(JobFailureLine, WhatARankWroteComesBeforeTheGenericBanner) {
  const std::string log = "--- job-4 attempt 1 on worker w1\n\n   \nsome rank output\nsome rank output\n" +
                          primary_job_banner() +
                          "[vm:01234] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n";
  EXPECT_EQ(job_failure_line(log), "some rank output");
}

TEST(JobFailureLine, OnlyABannerLeftGivesItsFirstLine) {
  EXPECT_EQ(job_failure_line("--- job-4 attempt 1 on worker w1\n" + primary_job_banner()),
            "Primary job  terminated normally, but 1 process returned");
}

TEST(JobFailureLine, PunctuationAndBlankLinesAreNeverTheError) {
  EXPECT_EQ(job_failure_line(""), "");
  EXPECT_EQ(job_failure_line("--- job-1 attempt 1 on worker w1\n----------\n\n  \r\n=====\n"), "");
  EXPECT_EQ(job_failure_line("***\n  ...  \n=\n"), "");
}

TEST(JobFailureLine, OnlyTheLastAttemptCounts) {
  const std::string log = "--- job-5 attempt 1 on worker w1\nanneal: the first attempt's error\n"
                          "--- job-5 attempt 2 on worker w2\nanneal: the second attempt's error\r\n";
  EXPECT_EQ(job_failure_line(log), "anneal: the second attempt's error");
  EXPECT_EQ(job_failure_line("--- job-5 attempt 1 on worker w1\nanneal: it failed\n--- job-5 attempt 2 on worker w2\n"),
            "");
}

TEST(JobFailureLine, ALogWithoutHeaderIsReadWhole) {
  EXPECT_EQ(job_failure_line("anneal: no header here\n"), "anneal: no header here");
}

}  // namespace
}  // namespace anneal
