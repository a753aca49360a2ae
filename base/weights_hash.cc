#include "anneal/weights_hash.h"

#include <bit>
#include <stdexcept>

namespace anneal {

static_assert(std::endian::native == std::endian::little, "the weights hash frames little-endian bytes");

std::string_view weights_dtype_name(WeightsDtype dtype) {
  switch (dtype) {
    case WeightsDtype::kF32:
      return "f32";
    case WeightsDtype::kF64:
      return "f64";
    case WeightsDtype::kU8:
      return "u8";
  }
  return "?";
}

namespace {

std::uint64_t dtype_size(WeightsDtype dtype) {
  return dtype == WeightsDtype::kF64 ? 8 : dtype == WeightsDtype::kF32 ? 4 : 1;
}

}  // namespace

void WeightsHasher::add_u64(std::uint64_t value) {
  hasher_.update(std::string_view(reinterpret_cast<const char*>(&value), sizeof value));
}

void WeightsHasher::add_text(std::string_view text) {
  add_u64(text.size());
  hasher_.update(text);
}

void WeightsHasher::add(std::string_view name, WeightsDtype dtype, std::span<const std::int64_t> dims,
                        std::string_view values) {
  std::uint64_t elements = 1;
  for (const std::int64_t d : dims) {
    if (d < 0) throw std::invalid_argument("weights hash: tensor " + std::string(name) + " has a negative dim");
    elements *= std::uint64_t(d);
  }
  if (elements * dtype_size(dtype) != values.size())
    throw std::invalid_argument("weights hash: tensor " + std::string(name) + " holds " +
                                std::to_string(values.size()) + " bytes, not its dims' worth");
  add_text(name);
  add_text(weights_dtype_name(dtype));
  add_u64(dims.size());
  for (const std::int64_t d : dims) add_u64(std::uint64_t(d));
  add_u64(values.size());
  hasher_.update(values);
}

void WeightsHasher::add_f32(std::string_view name, std::span<const std::int64_t> dims, std::span<const float> values) {
  add(name, WeightsDtype::kF32, dims,
      std::string_view(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
}

void WeightsHasher::add_f64(std::string_view name, std::span<const std::int64_t> dims, std::span<const double> values) {
  add(name, WeightsDtype::kF64, dims,
      std::string_view(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
}

void WeightsHasher::add_u8(std::string_view name, std::span<const std::int64_t> dims, std::string_view values) {
  add(name, WeightsDtype::kU8, dims, values);
}

std::string WeightsHasher::finish_hex() { return to_hex(hasher_.finish()); }

}  // namespace anneal
