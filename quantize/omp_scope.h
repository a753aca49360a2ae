// Bounds the calling thread's OpenMP team for a scope (oneDNN runs on it).
#pragma once

#include <omp.h>

namespace anneal::compress {

class OmpThreads {
 public:
  explicit OmpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace anneal::compress
