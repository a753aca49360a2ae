// Tensor: an n-dimensional array in backend memory.
//
// A Tensor has logical dims, batch first ((N, C, H, W) for images, (N, F) for
// flat features), an element type, and a layout that the backend chose and
// only the backend understands (the CPU backend may keep a conv activation in
// oneDNN's blocked nChw16c form; a CUDA backend would keep NCHW). Code above
// the backend never reads a tensor's bytes directly: it passes tensors to
// backend ops and copies values to and from the host through the backend.
//
// Thread-safety: a Tensor is a plain value; concurrent reads are safe,
// anything else needs outside synchronization.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace anneal {

enum class DType : std::uint8_t {
  kF32,   // IEEE float32: master weights, gradients, fp32 compute
  kBF16,  // bfloat16: activations and working weights under bf16 compute
  kF16,   // IEEE binary16: activations and working weights under fp16 compute (loss-scaled)
  // Quantized activations of int8 inference (Backend's inference-only ops):
  // q with real value ≈ q · scale, the scale static per layer and known to
  // the ops (it is not part of the tensor).
  kS8,    // signed, q in [-128, 127]
  kU8,    // unsigned, q in [0, 255]: values known non-negative (after a relu)
};

std::size_t dtype_size(DType dtype);  // bytes per element
const char* dtype_name(DType dtype);  // "f32" / "bf16" / "f16" / "s8" / "u8"

// Dims: a tensor's logical extents, at most kMaxRank of them. Fixed capacity,
// so building one in a training step allocates nothing.
class Dims {
 public:
  static constexpr int kMaxRank = 5;

  Dims() = default;
  // Throws std::length_error past kMaxRank.
  Dims(std::initializer_list<std::int64_t> dims);
  explicit Dims(const std::vector<std::int64_t>& dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  std::int64_t product() const;  // 1 for rank 0
  bool operator==(const Dims& other) const;
  bool operator!=(const Dims& other) const { return !(*this == other); }

  // {n} followed by these dims: per-sample dims -> batch dims.
  Dims with_batch(std::int64_t n) const;
  // These dims without the first: batch dims -> per-sample dims.
  Dims without_batch() const;
  std::vector<std::int64_t> to_vector() const;
  std::string str() const;  // "{1, 28, 28}"

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// How a tensor's elements sit in memory. Defined by a backend, opaque to all
// other code; immutable once made, so tensors and threads may share one.
class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
  // Bytes of storage the layout needs, block padding included.
  virtual std::size_t bytes() const = 0;
  // True when the elements are dense row-major in the logical dims.
  virtual bool is_plain() const = 0;
  virtual bool same_as(const TensorLayout& other) const = 0;
};

// Where tensor storage comes from: implemented by each Backend.
class MemoryAllocator {
 public:
  virtual ~MemoryAllocator() = default;
  // Returns at least `bytes` bytes aligned to 64, never null; throws
  // anneal::Error (kFailure) when memory runs out.
  virtual void* allocate(std::size_t bytes) = 0;
  // Frees what allocate() returned. Must not throw.
  virtual void deallocate(void* data) noexcept = 0;
};

class Tensor {
 public:
  Tensor() = default;
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const Dims& dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  // Null until the tensor is first shaped.
  const TensorLayout* layout() const { return layout_.get(); }
  const std::shared_ptr<const TensorLayout>& shared_layout() const { return layout_; }
  bool empty() const { return layout_ == nullptr; }
  std::int64_t batch() const { return dims_.rank() > 0 ? dims_[0] : 0; }
  std::int64_t elements() const { return dims_.product(); }
  // Bytes the current layout occupies (<= capacity()).
  std::size_t bytes() const { return layout_ ? layout_->bytes() : 0; }
  std::size_t capacity() const { return capacity_; }
  // True when the storage is another tensor's (see view_of).
  bool is_view() const { return data_ != nullptr && owner_ == nullptr; }

  // Backend memory: only backends and their ops dereference these.
  void* data() { return data_; }
  const void* data() const { return data_; }

  // A counter bumped whenever the values change in place outside the op that
  // produced them (an optimizer step, a restore). Backends key derived copies
  // on it, such as the bf16 working copy of fp32 master weights.
  std::uint64_t version() const { return version_; }
  void mark_modified() { ++version_; }

  // Gives the tensor new dims, dtype and layout, and makes sure its storage
  // holds layout->bytes(). Storage is reallocated through `allocator` only
  // when too small, so a training step that reshapes to the same or a smaller
  // size allocates nothing. Old contents are kept only if nothing was
  // reallocated. Must not be called on a view.
  void reshape(const Dims& dims, DType dtype, std::shared_ptr<const TensorLayout> layout,
               MemoryAllocator& allocator);

  // Makes this tensor a view of `base`'s storage with other dims and layout
  // (flatten of a plain tensor). The view must not outlive base's storage;
  // layout->bytes() must not exceed base.bytes().
  void view_of(const Tensor& base, const Dims& dims, std::shared_ptr<const TensorLayout> layout);
  // Makes this tensor a view of `bytes` bytes of memory it does not own: a
  // backend wrapping caller memory it can address directly
  // (Backend::view_host). The memory must outlive the view's use;
  // layout->bytes() must not exceed `bytes`.
  void view_of_memory(void* data, std::size_t bytes, const Dims& dims, DType dtype,
                      std::shared_ptr<const TensorLayout> layout);

 private:
  void release() noexcept;

  Dims dims_;
  DType dtype_ = DType::kF32;
  std::shared_ptr<const TensorLayout> layout_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  MemoryAllocator* owner_ = nullptr;  // null for views and empty tensors
  std::uint64_t version_ = 0;
};

}  // namespace anneal
