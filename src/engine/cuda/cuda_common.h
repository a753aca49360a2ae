// What the CUDA backend's parts share: error checks for the CUDA runtime,
// cuBLASLt and cuDNN; the one tensor layout (plain row-major: NCHW for
// images, what cuBLAS and cuDNN take without a reorder); device scratch
// memory; and the context every op holds (stream and library handles).
//
// Errors: every library call is checked, and every kernel launch is
// followed by check_launch(); a failure throws anneal::Error kFailure naming
// the call and the library's own error text.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/tensor.h"

namespace anneal::cuda {

void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
void check(cudnnStatus_t status, const char* what);
// After a kernel launch: a bad launch configuration surfaces here, an
// asynchronous fault at the next synchronizing call.
void check_launch(const char* kernel);

// The layout of every tensor on this backend: dense row-major in the
// logical dims. Two layouts are the same when they hold the same bytes.
class CudaLayout final : public TensorLayout {
 public:
  explicit CudaLayout(std::size_t bytes) : bytes_(bytes) {}
  std::size_t bytes() const override { return bytes_; }
  bool is_plain() const override { return true; }
  bool same_as(const TensorLayout& other) const override;

 private:
  std::size_t bytes_;
};

// Shapes `t` as plain (dims, dtype), reusing its storage when big enough.
void shape_plain(Tensor& t, const Dims& dims, DType dtype, MemoryAllocator& allocator);
// The tensor's fp32 storage; kFailure when it is not an fp32 tensor.
float* f32(Tensor& t, const char* what);
const float* f32(const Tensor& t, const char* what);
// The same for a parameter or its gradient, which must also have `dims`
// (as the op's shape_* gave it): the kernels read dims' count of floats,
// so a smaller tensor would be read past its end on the device. kFailure
// naming `what` otherwise, as the CPU backend refuses it.
float* f32(Tensor& t, const Dims& dims, const char* what);
const float* f32(const Tensor& t, const Dims& dims, const char* what);

// Device memory an op keeps across steps (grown, never shrunk). Freed with
// the op.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(MemoryAllocator& allocator) : allocator_(&allocator) {}
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes; the old contents are lost when it grows.
  void* ensure(std::size_t bytes);
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  MemoryAllocator* allocator_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// What every op of one backend shares. Owned by the backend, which outlives
// its ops; used by one thread at a time (backend.h).
struct CudaContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  MemoryAllocator* allocator = nullptr;
  // cuBLASLt's and cuDNN's workspace, shared: ops run one at a time on the
  // one stream.
  std::unique_ptr<DeviceBuffer> workspace;
  // deterministic: only algorithms that give the same bits run after run.
  bool deterministic = true;
  // tf32: fp32 products and convolutions may run on TF32 tensor cores.
  bool tf32 = false;
};

// Elements per fp32 device pointer, as an int for kernel arguments; kUsage
// past 2^31 − 1 (a tensor of 8 GiB), which no layer here needs.
int kernel_count(std::int64_t n, const char* what);

// ---- cuDNN descriptors (the convolution and pooling ops') ----

cudnnDataType_t dnn_type(DType dtype);

// A 4-d NCHW cuDNN tensor descriptor, owned.
class TensorDesc {
 public:
  TensorDesc() { check(cudnnCreateTensorDescriptor(&d_), "tensor descriptor"); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(int n, int c, int h, int w, DType dtype) {
    check(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, dnn_type(dtype), n, c, h, w), "tensor shape");
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

// (C, H, W) of a per-sample image spec, each within int; kUsage naming
// `what` otherwise.
std::array<int, 3> image_dims(const Dims& in, const char* what);

}  // namespace anneal::cuda
