// The GPU's fp32 GEMM peak, the yardstick for the CUDA training benchmark:
//   anneal-cublas-peak  ->  "FP32_TFLOPS TF32_TFLOPS DEVICE_NAME"
// cuBLASLt products of 8192^3 on random data: fp32 (CUBLAS_COMPUTE_32F, what
// anneal's dense layers run) and, for context, TF32. Each figure is the
// median of 10 timed products (CUDA events) after 3 warm-ups. Exit 1 with a
// message on stderr when there is no usable GPU.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

void check(cudaError_t s, const char* what) {
  if (s == cudaSuccess) return;
  std::fprintf(stderr, "anneal-cublas-peak: %s: %s\n", what, cudaGetErrorString(s));
  std::exit(1);
}
void check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "anneal-cublas-peak: %s: %s\n", what, cublasLtGetStatusString(s));
  std::exit(1);
}

double median_tflops(cublasLtHandle_t lt, cublasComputeType_t compute, int n, const void* a, const void* b,
                     void* c, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t layout;
  check(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "descriptor");
  check(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, n, n, n), "layout");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof workspace_bytes),
        "workspace limit");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, desc, layout, layout, layout, layout, pref, 1, &result, &found),
        "heuristic");
  if (found == 0) {
    std::fprintf(stderr, "anneal-cublas-peak: no algorithm\n");
    std::exit(1);
  }
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<double> tflops;
  for (int run = 0; run < 13; ++run) {
    check(cudaEventRecord(start, stream), "record");
    check(cublasLtMatmul(lt, desc, &alpha, a, layout, b, layout, &beta, c, layout, c, layout, &result.algo,
                         workspace, workspace_bytes, stream),
          "matmul");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (run >= 3) tflops.push_back(2.0 * n * n * double(n) / (ms * 1e-3) / 1e12);
  }
  std::sort(tflops.begin(), tflops.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  return tflops[tflops.size() / 2];
}

}  // namespace

int main() {
  const int n = 8192;
  const std::size_t count = std::size_t(n) * n;
  std::vector<float> host(count);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : host) x = dist(rng);
  void *a, *b, *c, *workspace;
  const std::size_t workspace_bytes = std::size_t{64} << 20;
  check(cudaMalloc(&a, count * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&b, count * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&c, count * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc");
  check(cudaMemcpy(a, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(b, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "copy");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "handle");
  const double fp32 = median_tflops(lt, CUBLAS_COMPUTE_32F, n, a, b, c, workspace, workspace_bytes, stream);
  const double tf32 =
      median_tflops(lt, CUBLAS_COMPUTE_32F_FAST_TF32, n, a, b, c, workspace, workspace_bytes, stream);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, 0), "properties");
  std::printf("%.2f %.2f %s\n", fp32, tf32, p.name);
  cublasLtDestroy(lt);
  return 0;
}
