// The machine's sgemm peak (OpenBLAS), the yardstick for training GFLOP/s:
//   anneal-sgemm-peak THREADS  ->  prints GFLOP/s (best of several runs)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  openblas_set_num_threads(threads);
  const int n = 2048;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  double best = 0;
  for (int run = 0; run < 7; ++run) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);  // run 0 warms up
  }
  std::printf("%.1f\n", best);
  return c[0] == 0.5f * 0.25f * n ? 0 : 1;
}
