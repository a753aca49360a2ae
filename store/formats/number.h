// Number parsing for the text formats.
//
// A number is what std::from_chars parses as a double: an optional '-',
// decimal digits with an optional '.', an optional exponent, or inf, infinity
// and nan in any case. The float result is correctly rounded. Short decimals,
// which are nearly all real data, take Clinger's exact fast path; the rest go
// to std::from_chars.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace anneal::formats {

namespace detail {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Values above float's range become infinity, like any other overflow to
// float32; only what a double cannot hold is "not a number".
inline const char* parse_float_slow(const char* begin, const char* end, float& value) {
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc()) return ptr;
  if (ec != std::errc::result_out_of_range) return nullptr;
  double wide;
  auto [wide_ptr, wide_ec] = std::from_chars(begin, end, wide);
  if (wide_ec != std::errc()) return nullptr;
  value = static_cast<float>(wide);
  return wide_ptr;
}

// Rounds a double that is within `error_ulps` ulps of the exact value to
// float, unless that could differ from rounding the exact value: when the
// double lies within error_ulps of a point halfway between two floats. The
// doubles here are all normal floats once rounded (29 extra mantissa bits,
// halfway = 1 << 28); error_ulps 0 means the double is correctly rounded and
// only an exact halfway double is ambiguous.
inline bool round_to_float(double approximate, std::uint64_t error_ulps, float& out) {
  std::uint64_t bits;
  std::memcpy(&bits, &approximate, sizeof bits);
  std::uint64_t below_float = bits & ((std::uint64_t{1} << 29) - 1);
  std::uint64_t halfway = std::uint64_t{1} << 28;
  std::uint64_t distance = below_float > halfway ? below_float - halfway : halfway - below_float;
  if (distance <= error_ulps) return false;
  out = static_cast<float>(approximate);
  return true;
}

inline const char* finish(const char* end, bool negative, float magnitude, float& value) {
  value = negative ? -magnitude : magnitude;
  return end;
}

}  // namespace detail

// Parses the longest number at the start of [begin, end). Returns the byte
// after it, or nullptr when no number starts at `begin`.
inline const char* parse_float_prefix(const char* begin, const char* end, float& value) {
  static constexpr double kDoublePowers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                             1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                             1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  static constexpr double kDoubleInversePowers[] = {
      1e0,   1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,  1e-8,  1e-9,  1e-10, 1e-11,
      1e-12, 1e-13, 1e-14, 1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};
  using detail::is_digit;
  const char* p = begin;
  bool negative = p < end && *p == '-';
  if (negative) ++p;
  std::uint64_t mantissa = 0;  // wraps past 19 digits; such numbers go the slow way
  const char* digits_begin = p;
  while (p < end && is_digit(*p)) mantissa = mantissa * 10 + static_cast<unsigned>(*p++ - '0');
  std::ptrdiff_t digits = p - digits_begin;
  std::ptrdiff_t fraction_digits = 0;
  if (p < end && *p == '.') {
    const char* fraction_begin = ++p;
    while (p < end && is_digit(*p)) mantissa = mantissa * 10 + static_cast<unsigned>(*p++ - '0');
    fraction_digits = p - fraction_begin;
    digits += fraction_digits;
  }
  if (digits == 0 || digits > 19) return detail::parse_float_slow(begin, end, value);
  int exponent = 0;
  if (p < end && (*p == 'e' || *p == 'E')) {
    const char* q = p + 1;
    bool exponent_negative = q < end && *q == '-';
    if (q < end && (*q == '-' || *q == '+')) ++q;
    const char* exponent_begin = q;
    while (q < end && is_digit(*q) && q - exponent_begin < 4) exponent = exponent * 10 + (*q++ - '0');
    // "1e" (from_chars stops before the 'e') and huge exponents: slow path.
    if (q == exponent_begin || (q < end && is_digit(*q)))
      return detail::parse_float_slow(begin, end, value);
    if (exponent_negative) exponent = -exponent;
    p = q;
  }
  exponent -= static_cast<int>(fraction_digits);
  if (mantissa == 0) {
    value = negative ? -0.0f : 0.0f;
    return p;
  }
  // Clinger: an exact mantissa times or over an exact power of ten rounds
  // once, to double; every result here is a normal float.
  if (mantissa <= (std::uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
    double m = static_cast<double>(mantissa);
    float v;
    if (exponent >= 0) {
      if (detail::round_to_float(m * kDoublePowers[exponent], 0, v)) return detail::finish(p, negative, v, value);
    } else {
      // Multiplying by the inexact 10^-k is off by under 2 ulps of the double,
      // which only matters within a few ulps of a float halfway point; there
      // the exact division decides.
      if (detail::round_to_float(m * kDoubleInversePowers[-exponent], 8, v) ||
          detail::round_to_float(m / kDoublePowers[-exponent], 0, v))
        return detail::finish(p, negative, v, value);
    }
  }
  return detail::parse_float_slow(begin, end, value);
}

// Parses `text` as one whole number, allowing one leading '+' (which
// from_chars does not). Returns false when anything else is there.
inline bool parse_float_exactly(const char* begin, const char* end, float& value) {
  if (end - begin > 1 && *begin == '+' && begin[1] != '-' && begin[1] != '+') ++begin;
  return parse_float_prefix(begin, end, value) == end && begin < end;
}

}  // namespace anneal::formats
