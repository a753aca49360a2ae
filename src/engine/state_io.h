// Byte-level writer and reader for trainer state: fixed-width little-endian
// integers and IEEE doubles, length-prefixed strings and raw float arrays.
// The reader throws anneal::Error kCorrupt instead of reading past the end.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "anneal/error.h"

namespace anneal::engine {

static_assert(std::endian::native == std::endian::little, "state bytes are written little-endian");

class StateWriter {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  void u8(std::uint8_t v) { bytes(&v, 1); }
  void u32(std::uint32_t v) { bytes(&v, 4); }
  void u64(std::uint64_t v) { bytes(&v, 8); }
  void i64(std::int64_t v) { bytes(&v, 8); }
  void f64(double v) { bytes(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  std::vector<std::uint8_t> take() { return std::move(out_); }

 private:
  std::vector<std::uint8_t> out_;
};

class StateReader {
 public:
  explicit StateReader(std::span<const std::uint8_t> in) : in_(in) {}
  void bytes(void* out, std::size_t n) {
    if (n > in_.size() - pos_) throw corrupt("trainer state: truncated");
    std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
  }
  std::uint8_t u8() { std::uint8_t v; bytes(&v, 1); return v; }
  std::uint32_t u32() { std::uint32_t v; bytes(&v, 4); return v; }
  std::uint64_t u64() { std::uint64_t v; bytes(&v, 8); return v; }
  std::int64_t i64() { std::int64_t v; bytes(&v, 8); return v; }
  double f64() { double v; bytes(&v, 8); return v; }
  std::string str() {
    const std::uint64_t n = u64();
    if (n > in_.size() - pos_) throw corrupt("trainer state: truncated string");
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), std::size_t(n));
    pos_ += std::size_t(n);
    return s;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

}  // namespace anneal::engine
