// The check behind JobFence (catalog_runs.h), shared by the run and job
// records. store/ internal.
#pragma once

#include "anneal/catalog_runs.h"
#include "sqlite.h"

namespace anneal {

// Inside a write transaction on `db`: throws kBusy unless job `fence.job` is
// running under claim `fence.claim`.
void require_job_fence(sql::Database& db, const JobFence& fence);

}  // namespace anneal
