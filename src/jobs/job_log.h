// What a failed job's log says went wrong: the line the worker records as
// the job's error (after "exited with status N: ").
#pragma once

#include <string>
#include <string_view>

namespace anneal {

// The line of a job log (`log`: its whole text) that best says why the job's
// last attempt failed, or "" when it has none. Only the last attempt counts:
// each begins with the worker's "--- job-N attempt K on worker W" line.
// Within it, in order of preference:
//   1. anneal's own error: the first line "anneal: ..." (text logs), or the
//      message of the first JSON log line whose level is "error";
//   2. the first line of an mpirun banner (the help messages Open MPI frames
//      with rows of dashes) that says more than "a process exited non-zero":
//      a rank killed by a signal, an executable mpirun could not start;
//   3. the first meaningful line outside the banners and mpirun's
//      "[host:pid] ..." notices (what a rank wrote before failing);
//   4. the first line of any banner.
// A meaningful line holds at least one letter or digit: rows of dashes and
// blank lines never are. Surrounding whitespace and carriage returns are cut.
std::string job_failure_line(std::string_view log);

}  // namespace anneal
