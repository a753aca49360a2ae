// OmpThreads: bounds the calling thread's OpenMP team (ours and oneDNN's)
// to `threads` for the lifetime of the scope, restoring the previous bound
// after. The bound is a per-thread OpenMP setting, so scopes on different
// threads do not interfere.
#pragma once

#include <omp.h>

namespace anneal::engine {

class OmpThreads {
 public:
  explicit OmpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace anneal::engine
