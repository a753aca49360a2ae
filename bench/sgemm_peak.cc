// The machine's sgemm peak, the yardstick for training GFLOP/s:
//   anneal-sgemm-peak THREADS  ->  "OPENBLAS_GFLOPS ONEDNN_GFLOPS OPENBLAS_CORE"
// Best of several 2048^3 products with each library's sgemm (OpenBLAS's
// cblas_sgemm and oneDNN's dnnl_sgemm), after a warm-up product.
// OPENBLAS_CORE is the kernel set OpenBLAS picked for this CPU ("SkylakeX",
// "Zen", "Haswell"): ONEDNN_MAX_CPU_ISA caps oneDNN's, not OpenBLAS's
// (OPENBLAS_CORETYPE does that).
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

double best_gflops(const std::function<void()>& sgemm, double flops) {
  double best = 0;
  for (int run = 0; run < 7; ++run) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) best = std::max(best, flops / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
  const int n = 2048;
  const double flops = 2.0 * n * n * n;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  double openblas = best_gflops([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  }, flops);
  bool ok = c[0] == 0.5f * 0.25f * n;
  double onednn = best_gflops([&] {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }, flops);
  ok = ok && c[0] == 0.5f * 0.25f * n;
  std::printf("%.1f %.1f %s\n", openblas, onednn, openblas_get_corename());
  return ok ? 0 : 1;
}
