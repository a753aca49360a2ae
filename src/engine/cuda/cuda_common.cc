// The shared parts of the CUDA backend (cuda_common.h).
#include "engine/cuda/cuda_common.h"

#include <limits>

namespace anneal::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky launch error so the next call reports its own
  throw failure(std::string("cuda: ") + what + ": " + cudaGetErrorString(status) + " (" +
                cudaGetErrorName(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw failure(std::string("cublasLt: ") + what + ": " + cublasLtGetStatusString(status) + " (" +
                cublasLtGetStatusName(status) + ")");
}

void check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw failure(std::string("cudnn: ") + what + ": " + cudnnGetErrorString(status));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

bool CudaLayout::same_as(const TensorLayout& other) const {
  const auto* o = dynamic_cast<const CudaLayout*>(&other);
  return o != nullptr && o->bytes_ == bytes_;
}

void shape_plain(Tensor& t, const Dims& dims, DType dtype, MemoryAllocator& allocator) {
  const std::size_t bytes = static_cast<std::size_t>(dims.product()) * dtype_size(dtype);
  if (!t.empty() && !t.is_view() && t.dims() == dims && t.dtype() == dtype && t.bytes() == bytes) return;
  if (t.is_view()) t = Tensor();  // viewed another tensor; own storage again
  t.reshape(dims, dtype, std::make_shared<const CudaLayout>(bytes), allocator);
}

float* f32(Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32) throw failure(std::string(what) + ": expects an f32 tensor");
  return static_cast<float*>(t.data());
}

const float* f32(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32) throw failure(std::string(what) + ": expects an f32 tensor");
  return static_cast<const float*>(t.data());
}

namespace {
void check_dims(const Tensor& t, const Dims& dims, const char* what) {
  if (t.dims() != dims)
    throw failure(std::string(what) + ": " + t.dims().str() + " is not the " + dims.str() + " the op shaped");
}
}  // namespace

float* f32(Tensor& t, const Dims& dims, const char* what) {
  check_dims(t, dims, what);
  return f32(t, what);
}

const float* f32(const Tensor& t, const Dims& dims, const char* what) {
  check_dims(t, dims, what);
  return f32(t, what);
}

void* DeviceBuffer::ensure(std::size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  release();
  data_ = allocator_->allocate(bytes);
  bytes_ = bytes;
  return data_;
}

void DeviceBuffer::release() noexcept {
  if (data_ != nullptr) allocator_->deallocate(data_);
  data_ = nullptr;
  bytes_ = 0;
}

int kernel_count(std::int64_t n, const char* what) {
  if (n < 0 || n > std::numeric_limits<int>::max())
    throw usage_error(std::string(what) + ": " + std::to_string(n) +
                      " elements are more than the CUDA backend's kernels index (2^31 - 1)");
  return static_cast<int>(n);
}

cudnnDataType_t dnn_type(DType dtype) {
  return dtype == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : dtype == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

std::array<int, 3> image_dims(const Dims& in, const char* what) {
  if (in.rank() != 3) throw usage_error(std::string(what) + ": expects a (C, H, W) input, not " + in.str());
  return {kernel_count(in[0], what), kernel_count(in[1], what), kernel_count(in[2], what)};
}

}  // namespace anneal::cuda
