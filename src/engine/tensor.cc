#include "anneal/tensor.h"

#include <stdexcept>
#include <utility>

namespace anneal {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kS8:
    case DType::kU8: return 1;
  }
  return 4;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kS8: return "s8";
    case DType::kU8: return "u8";
  }
  return "?";
}

Dims::Dims(std::initializer_list<std::int64_t> dims) {
  if (dims.size() > kMaxRank) throw std::length_error("anneal::Dims: rank above kMaxRank");
  for (std::int64_t d : dims) dims_[rank_++] = d;
}

Dims::Dims(const std::vector<std::int64_t>& dims) {
  if (dims.size() > kMaxRank) throw std::length_error("anneal::Dims: rank above kMaxRank");
  for (std::int64_t d : dims) dims_[rank_++] = d;
}

std::int64_t Dims::product() const {
  std::int64_t p = 1;
  for (int i = 0; i < rank_; ++i) p *= dims_[i];
  return p;
}

bool Dims::operator==(const Dims& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

Dims Dims::with_batch(std::int64_t n) const {
  if (rank_ >= kMaxRank) throw std::length_error("anneal::Dims: rank above kMaxRank");
  Dims out;
  out.dims_[0] = n;
  for (int i = 0; i < rank_; ++i) out.dims_[i + 1] = dims_[i];
  out.rank_ = rank_ + 1;
  return out;
}

Dims Dims::without_batch() const {
  Dims out;
  for (int i = 1; i < rank_; ++i) out.dims_[i - 1] = dims_[i];
  out.rank_ = rank_ > 0 ? rank_ - 1 : 0;
  return out;
}

std::vector<std::int64_t> Dims::to_vector() const {
  return std::vector<std::int64_t>(dims_.begin(), dims_.begin() + rank_);
}

std::string Dims::str() const {
  std::string s = "{";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "}";
}

Tensor::~Tensor() { release(); }

Tensor::Tensor(Tensor&& other) noexcept
    : dims_(other.dims_),
      dtype_(other.dtype_),
      layout_(std::move(other.layout_)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      owner_(std::exchange(other.owner_, nullptr)),
      version_(other.version_) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    dims_ = other.dims_;
    dtype_ = other.dtype_;
    layout_ = std::move(other.layout_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    owner_ = std::exchange(other.owner_, nullptr);
    version_ = other.version_;
  }
  return *this;
}

void Tensor::release() noexcept {
  if (owner_ != nullptr && data_ != nullptr) owner_->deallocate(data_);
  data_ = nullptr;
  capacity_ = 0;
  owner_ = nullptr;
}

void Tensor::reshape(const Dims& dims, DType dtype, std::shared_ptr<const TensorLayout> layout,
                     MemoryAllocator& allocator) {
  if (data_ != nullptr && owner_ == nullptr)
    throw std::logic_error("anneal::Tensor::reshape on a view");
  const std::size_t need = layout->bytes();
  if (need > capacity_ || owner_ != &allocator) {
    release();
    data_ = allocator.allocate(need);
    capacity_ = need;
    owner_ = &allocator;
  }
  if (dims_ != dims) dims_ = dims;
  dtype_ = dtype;
  if (layout_ != layout) layout_ = std::move(layout);
}

void Tensor::view_of(const Tensor& base, const Dims& dims,
                     std::shared_ptr<const TensorLayout> layout) {
  if (layout->bytes() > base.bytes())
    throw std::logic_error("anneal::Tensor::view_of: view larger than its base");
  release();
  data_ = const_cast<void*>(base.data());
  capacity_ = base.bytes();
  dims_ = dims;
  dtype_ = base.dtype();
  layout_ = std::move(layout);
}

void Tensor::view_of_memory(void* data, std::size_t bytes, const Dims& dims, DType dtype,
                            std::shared_ptr<const TensorLayout> layout) {
  if (layout->bytes() > bytes) throw std::logic_error("anneal::Tensor::view_of_memory: view larger than its memory");
  release();
  data_ = data;
  capacity_ = bytes;
  dims_ = dims;
  dtype_ = dtype;
  layout_ = std::move(layout);
}

}  // namespace anneal
