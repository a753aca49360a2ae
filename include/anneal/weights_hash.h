// The weights hash: one BLAKE2b-256 digest over a model's weights, framed
// the one way docs/STORE.md ("Weights hash") documents, whatever made the
// weights. The trainer hashes its network's parameters and buffers with
// it, and src/runs hashes every kind of stored model with it (the values a
// model file decodes to), so the hash `anneal train` reports is the one
// the model file stores and a reader of the file can recompute.
//
// Framing, per tensor in order (all integers u64 little-endian):
//   name byte length, name bytes (UTF-8)
//   dtype byte length, dtype bytes ("f32", "f64" or "u8")
//   rank, then each dim
//   value byte length, then the values, little-endian, row-major
// Every variable field is length-prefixed, so two different sequences of
// tensors never frame to the same bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "anneal/hash.h"

namespace anneal {

// The element types a weights hash records.
enum class WeightsDtype : std::uint8_t { kF32, kF64, kU8 };

// "f32", "f64", "u8": the dtype's name in the framing.
std::string_view weights_dtype_name(WeightsDtype dtype);

// Accumulates tensors into one weights hash. Not thread-safe; use one per
// thread. Cheap to make.
class WeightsHasher {
 public:
  // Adds one tensor: `name`, the element type of `values`, its `dims`
  // (row-major, first dim slowest) and its values as little-endian bytes.
  // Throws std::invalid_argument (a programming error) when `values` is not
  // the product of `dims` elements of `dtype`.
  void add(std::string_view name, WeightsDtype dtype, std::span<const std::int64_t> dims, std::string_view values);

  // The same for f32, f64 and u8 values in host order (anneal builds only
  // for little-endian hosts).
  void add_f32(std::string_view name, std::span<const std::int64_t> dims, std::span<const float> values);
  void add_f64(std::string_view name, std::span<const std::int64_t> dims, std::span<const double> values);
  void add_u8(std::string_view name, std::span<const std::int64_t> dims, std::string_view values);

  // 64 lowercase hex digits of the digest of everything added. The hasher
  // must not be used afterwards.
  std::string finish_hex();

 private:
  void add_u64(std::uint64_t value);
  void add_text(std::string_view text);
  Hasher hasher_;
};

}  // namespace anneal
