#include "formats/number.h"

#include <bit>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace anneal::formats {

namespace {

constexpr std::uint64_t kPowersOfTen[] = {1,      10,      100,      1000,     10000,
                                          100000, 1000000, 10000000, 100000000};
constexpr double kDoublePowers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
constexpr double kDoubleInversePowers[] = {1e0,   1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,
                                           1e-8,  1e-9,  1e-10, 1e-11, 1e-12, 1e-13, 1e-14, 1e-15,
                                           1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// How many of the 8 bytes of `word` (first byte lowest) are ASCII digits
// before the first non-digit.
int leading_digits(std::uint64_t word) {
  constexpr std::uint64_t kHighNibbles = 0xF0F0F0F0F0F0F0F0ull, kZeros = 0x3030303030303030ull;
  std::uint64_t not_3x = (word & kHighNibbles) ^ kZeros;
  // +6 pushes 0x3A..0x3F out of 0x3_. A carry out of a byte can only reach
  // bytes after a non-digit, which do not matter.
  std::uint64_t above_9 = ((word + 0x0606060606060606ull) & kHighNibbles) ^ kZeros;
  std::uint64_t non_digits = not_3x | above_9;
  return non_digits == 0 ? 8 : std::countr_zero(non_digits) / 8;
}

// The value of the first n (1..8) digits of `word`: shifting them to the top
// turns the bytes below into leading zeros, then three multiplies combine
// pairs, quads and octets (the fast_float / simdjson trick).
std::uint32_t digits_value(std::uint64_t word, int n) {
  word <<= 8 * (8 - n);
  word = ((word & 0x0F0F0F0F0F0F0F0Full) * 2561) >> 8;
  word = ((word & 0x00FF00FF00FF00FFull) * 6553601) >> 16;
  return static_cast<std::uint32_t>(((word & 0x0000FFFF0000FFFFull) * 42949672960001ull) >> 32);
}

// Appends the digits at p to `mantissa` (wrapping past 19 digits: callers
// count digits and give up then). Returns how many there were.
std::ptrdiff_t read_digits(const char*& p, const char* end, std::uint64_t& mantissa) {
  const char* begin = p;
  while (end - p >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, sizeof word);
    int n = leading_digits(word);
    if (n == 0) return p - begin;
    mantissa = mantissa * kPowersOfTen[n] + digits_value(word, n);
    p += n;
    if (n < 8) return p - begin;
  }
  while (p < end && is_digit(*p)) mantissa = mantissa * 10 + static_cast<unsigned>(*p++ - '0');
  return p - begin;
}

[[gnu::cold]] const char* parse_float_slow(const char* begin, const char* end, float& value) {
  auto [ptr, status] = std::from_chars(begin, end, value);
  if (status == std::errc()) return ptr;
  if (status != std::errc::result_out_of_range) return nullptr;
  // Beyond float: round like any float32 overflow (to infinity, which the
  // parsers then report as non-finite) or underflow (to zero). Beyond double
  // too, strtod on the matched text tells which: it returns +-HUGE_VAL or a
  // value that rounds to +-0.
  double wide;
  auto [wide_ptr, wide_status] = std::from_chars(begin, end, wide);
  if (wide_status == std::errc::result_out_of_range) {
    std::string matched(begin, wide_ptr);
    wide = std::strtod(matched.c_str(), nullptr);
  } else if (wide_status != std::errc()) {
    return nullptr;
  }
  value = static_cast<float>(wide);
  return wide_ptr;
}

// Rounds a double that is within `error_ulps` ulps of the exact value to
// float, unless that could differ from rounding the exact value: when the
// double lies within error_ulps of a point halfway between two floats. The
// doubles here are all normal floats once rounded (29 extra mantissa bits,
// halfway = 1 << 28); error_ulps 0 means the double is correctly rounded and
// only an exactly halfway double is ambiguous.
bool round_to_float(double approximate, std::uint64_t error_ulps, float& out) {
  std::uint64_t bits;
  std::memcpy(&bits, &approximate, sizeof bits);
  std::uint64_t below_float = bits & ((std::uint64_t{1} << 29) - 1);
  constexpr std::uint64_t kHalfway = std::uint64_t{1} << 28;
  std::uint64_t distance = below_float > kHalfway ? below_float - kHalfway : kHalfway - below_float;
  if (distance <= error_ulps) return false;
  out = static_cast<float>(approximate);
  return true;
}

// m * 10^exponent for m <= 2^53, |exponent| <= 22 (Clinger's fast path);
// false when the result needs the exact slow path.
inline bool scale_exactly(std::uint64_t mantissa, int exponent, float& out) {
  double m = static_cast<double>(mantissa);
  if (exponent >= 0) return round_to_float(m * kDoublePowers[exponent], 0, out);
  // Multiplying by the inexact 10^-k is off by under 2 ulps of the double,
  // which only matters within a few ulps of a float halfway point; there the
  // correctly rounded division decides.
  return round_to_float(m * kDoubleInversePowers[-exponent], 8, out) ||
         round_to_float(m / kDoublePowers[-exponent], 0, out);
}

// The shape of nearly every number in real data: up to 7 integer digits,
// optionally '.' and 1 to 7 fraction digits, no exponent, with at least 16
// readable bytes. Two loads and no loops; false means "use the general path".
bool parse_short_decimal(const char*& p, const char* end, float& magnitude) {
  if (end - p < 16) return false;
  std::uint64_t integer_word;
  std::memcpy(&integer_word, p, sizeof integer_word);
  int integer_digits = leading_digits(integer_word);
  if (integer_digits == 0 || integer_digits == 8) return false;
  const char* after_integer = p + integer_digits;
  if (*after_integer != '.') {
    if (*after_integer == 'e' || *after_integer == 'E') return false;
    magnitude = static_cast<float>(digits_value(integer_word, integer_digits));  // < 10^7: exact
    p = after_integer;
    return true;
  }
  std::uint64_t fraction_word;
  std::memcpy(&fraction_word, after_integer + 1, sizeof fraction_word);
  int fraction_digits = leading_digits(fraction_word);
  if (fraction_digits == 0 || fraction_digits == 8) return false;
  const char* after_fraction = after_integer + 1 + fraction_digits;
  if (*after_fraction == 'e' || *after_fraction == 'E') return false;
  std::uint64_t mantissa = digits_value(integer_word, integer_digits) * kPowersOfTen[fraction_digits] +
                           digits_value(fraction_word, fraction_digits);
  if (!scale_exactly(mantissa, -fraction_digits, magnitude)) return false;
  p = after_fraction;
  return true;
}

// Everything parse_short_decimal leaves: a sign, long digit runs, exponents,
// inf/nan, numbers near the end of the text. Out of line so the fast path
// stays small.
[[gnu::noinline]] const char* parse_float_general(const char* begin, const char* end, float& value) {
  const char* p = begin;
  bool negative = p < end && *p == '-';
  if (negative) ++p;
  std::uint64_t mantissa = 0;
  std::ptrdiff_t digits = read_digits(p, end, mantissa);
  std::ptrdiff_t fraction_digits = 0;
  if (p < end && *p == '.') {
    ++p;
    fraction_digits = read_digits(p, end, mantissa);
    digits += fraction_digits;
  }
  if (digits == 0 || digits > 19) return parse_float_slow(begin, end, value);
  int exponent = 0;
  if (p < end && (*p == 'e' || *p == 'E')) {
    const char* q = p + 1;
    bool exponent_negative = q < end && *q == '-';
    if (q < end && (*q == '-' || *q == '+')) ++q;
    const char* exponent_begin = q;
    while (q < end && is_digit(*q) && q - exponent_begin < 4) exponent = exponent * 10 + (*q++ - '0');
    // "1e" (from_chars stops before the 'e') and long exponents: slow path.
    if (q == exponent_begin || (q < end && is_digit(*q))) return parse_float_slow(begin, end, value);
    if (exponent_negative) exponent = -exponent;
    p = q;
  }
  exponent -= static_cast<int>(fraction_digits);
  float magnitude = 0;
  if (mantissa != 0) {
    // Every result of the fast path is a normal float: 1e-22 <= |v| < 2^53 * 1e22.
    bool fast = mantissa <= (std::uint64_t{1} << 53) && exponent >= -22 && exponent <= 22 &&
                scale_exactly(mantissa, exponent, magnitude);
    if (!fast) return parse_float_slow(begin, end, value);
  }
  value = negative ? -magnitude : magnitude;
  return p;
}

}  // namespace

const char* parse_float_prefix(const char* begin, const char* end, float& value) {
  if (begin == end) return nullptr;
  // Signs are random in real data: no branches on them.
  bool negative = *begin == '-';
  const char* p = begin + negative;
  float magnitude;
  if (!parse_short_decimal(p, end, magnitude)) return parse_float_general(begin, end, value);
  value = std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | std::uint32_t{negative} << 31);
  return p;
}

bool parse_float_exactly(const char* begin, const char* end, const char* readable_end, float& value) {
  if (end - begin > 1 && *begin == '+' && begin[1] != '-' && begin[1] != '+') ++begin;
  return begin < end && parse_float_prefix(begin, readable_end, value) == end;
}

}  // namespace anneal::formats
