#include "formats/text.h"

#include <tbb/parallel_for.h>

#if defined(__SSE2__) && defined(__x86_64__)
#define ANNEAL_TEXT_SSE2 1
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>

#include "anneal/error.h"

namespace anneal::formats {

namespace {

// Scanning 16 bytes at a time: one set bit per byte that matches, in an
// unspecified position (callers only test for zero or take the parity).
#if ANNEAL_TEXT_SSE2
std::uint64_t bytes_equal_16(const char* p, char c) {
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_set1_epi8(c))));
}
// Bytes that are NUL or not ASCII.
std::uint64_t nul_or_high_16(const char* p) {
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m128i nul = _mm_cmpeq_epi8(bytes, _mm_setzero_si128());
  return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_or_si128(bytes, nul)));
}
#else
constexpr std::uint64_t kOnes = 0x0101010101010101ull;
constexpr std::uint64_t kHighBits = 0x8080808080808080ull;
constexpr std::uint64_t kLowBits = 0x7f7f7f7f7f7f7f7full;

std::uint64_t load_word(const char* p) {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
}

// High bit set in every byte of `word` that is zero; exact (no carries
// between bytes), unlike the shorter has-zero trick.
std::uint64_t zero_bytes(std::uint64_t word) {
  return ~(((word & kLowBits) + kLowBits) | word) & kHighBits;
}

std::uint64_t bytes_equal_16(const char* p, char c) {
  const std::uint64_t pattern = kOnes * static_cast<unsigned char>(c);
  return zero_bytes(load_word(p) ^ pattern) | zero_bytes(load_word(p + 8) ^ pattern) >> 7;
}
std::uint64_t nul_or_high_16(const char* p) {
  std::uint64_t a = load_word(p), b = load_word(p + 8);
  return ((a | b) & kHighBits) | zero_bytes(a) | zero_bytes(b);
}
#endif

std::string hex_byte(unsigned char byte) {
  static const char kDigits[] = "0123456789ABCDEF";
  return std::string("0x") + kDigits[byte >> 4] + kDigits[byte & 15];
}

// Length of the UTF-8 sequence starting at s[0] (a byte >= 0x80), or 0 when
// it is not a valid, shortest-form encoding of a scalar value (RFC 3629).
std::size_t utf8_sequence_length(const unsigned char* s, std::size_t available) {
  unsigned char lead = s[0];
  std::size_t continuation;
  unsigned char low = 0x80, high = 0xBF;  // range allowed for the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuation = 2;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuation = 3;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (available <= continuation) return 0;
  for (std::size_t k = 1; k <= continuation; ++k) {
    if (s[k] < low || s[k] > high) return 0;
    low = 0x80;
    high = 0xBF;
  }
  return continuation + 1;
}

std::optional<TextError> check_utf8_range(std::string_view text, std::size_t begin,
                                          std::size_t end) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = begin;
  while (i < end) {
    // Plain ASCII without NULs is nearly all real input: skip 16 bytes a step.
    while (i + 16 <= end && nul_or_high_16(text.data() + i) == 0) i += 16;
    if (i >= end) break;
    unsigned char byte = bytes[i];
    if (byte == 0)
      return TextError{i, "expected UTF-8 text, found a NUL byte (0x00); is this a binary file?"};
    if (byte < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = utf8_sequence_length(bytes + i, end - i);
    if (length == 0)
      return TextError{i, "expected UTF-8 text, found byte " + hex_byte(byte) +
                              " that does not start a valid UTF-8 sequence (re-encode the file as UTF-8)"};
    i += length;
  }
  return std::nullopt;
}

// Whether the '\n' at s[i] ends an empty line ("" or "\r"), given that a
// line starts at `begin`.
bool ends_empty_line(const char* s, std::size_t begin, std::size_t i) {
  if (i == begin || s[i - 1] == '\n') return true;
  return s[i - 1] == '\r' && (i - 1 == begin || s[i - 2] == '\n');
}

#if ANNEAL_TEXT_SSE2
// Counts newlines and newlines that end empty lines in [from, to), 16 bytes
// a step, with per-byte counters summed before they can overflow. Needs
// from >= begin + 2 so that the two bytes before each position are readable.
void count_newlines_sse2(const char* s, std::size_t from, std::size_t to, std::size_t& newlines,
                         std::size_t& empty) {
  const __m128i lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'), zero = _mm_setzero_si128();
  auto total = [&](__m128i counters) {
    __m128i sums = _mm_sad_epu8(counters, zero);
    return static_cast<std::size_t>(_mm_cvtsi128_si64(sums) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  };
  std::size_t i = from;
  while (i + 16 <= to) {
    __m128i newline_counts = zero, empty_counts = zero;
    for (int step = 0; step < 255 && i + 16 <= to; ++step, i += 16) {
      __m128i here = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      __m128i before = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i - 1));
      __m128i two_before = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i - 2));
      __m128i newline = _mm_cmpeq_epi8(here, lf);
      __m128i after_crlf_start = _mm_and_si128(_mm_cmpeq_epi8(before, cr), _mm_cmpeq_epi8(two_before, lf));
      __m128i empty_line = _mm_and_si128(newline, _mm_or_si128(_mm_cmpeq_epi8(before, lf), after_crlf_start));
      newline_counts = _mm_sub_epi8(newline_counts, newline);  // cmpeq gives -1 per match
      empty_counts = _mm_sub_epi8(empty_counts, empty_line);
    }
    newlines += total(newline_counts);
    empty += total(empty_counts);
  }
}
#endif

bool equals_ignoring_case(std::string_view value, std::string_view lower) {
  if (value.size() != lower.size()) return false;
  for (std::size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

}  // namespace

bool odd_quote_count(const char* p, std::size_t n) {
  // One marker bit per quote, XORed together: the parity of the bits left is
  // the parity of the count. Two accumulators keep the loop off one chain.
  std::uint64_t even = 0, odd = 0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    even ^= bytes_equal_16(p + i, '"');
    odd ^= bytes_equal_16(p + i + 16, '"');
  }
  bool parity = std::popcount(even ^ odd) & 1;
  for (; i < n; ++i) parity ^= (p[i] == '"');
  return parity;
}

// Offset just past the '\n' that ends the record containing `pos`, given
// whether `pos` lies inside a quoted field; text.size() when none does.
std::size_t record_end_after(std::string_view text, std::size_t pos, bool in_quote) {
  const char* data = text.data();
  const char* end = data + text.size();
  const char* p = data + pos;
  while (p < end) {
    if (in_quote) {
      const void* quote = std::memchr(p, '"', static_cast<std::size_t>(end - p));
      if (quote == nullptr) return text.size();
      p = static_cast<const char*>(quote) + 1;
      in_quote = false;
      continue;
    }
    const void* newline = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
    const char* line_end = newline ? static_cast<const char*>(newline) : end;
    const void* quote = std::memchr(p, '"', static_cast<std::size_t>(line_end - p));
    if (quote != nullptr) {
      p = static_cast<const char*>(quote) + 1;
      in_quote = true;
      continue;
    }
    return newline ? static_cast<std::size_t>(line_end - data) + 1 : text.size();
  }
  return text.size();
}

std::string location(const std::string& name, std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::string_view before = text.substr(0, offset);
  std::size_t line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  std::size_t last_newline = before.rfind('\n');
  std::size_t line_start = last_newline == std::string_view::npos ? 0 : last_newline + 1;
  return name + ":" + std::to_string(line) + ":" + std::to_string(offset - line_start + 1);
}

void throw_text_error(const std::string& name, std::string_view text, const TextError& error) {
  throw data_error(location(name, text, error.offset) + ": " + error.what)
      .with(error.remedy, error.remedy_argument);
}

const TextError* first_error(const std::vector<std::optional<TextError>>& errors) {
  const TextError* first = nullptr;
  for (const auto& error : errors)
    if (error && (first == nullptr || error->offset < first->offset)) first = &*error;
  return first;
}

std::string quote_for_message(std::string_view value) {
  constexpr std::size_t kMaxBytes = 60;
  bool cut = value.size() > kMaxBytes;
  if (cut) {
    std::size_t keep = kMaxBytes;
    // Do not split a UTF-8 sequence: back up over continuation bytes.
    while (keep > 0 && (static_cast<unsigned char>(value[keep]) & 0xC0) == 0x80) --keep;
    value = value.substr(0, keep);
  }
  std::string out = "'";
  for (char c : value) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (byte < 0x20 || byte == 0x7f) out += "\\x" + hex_byte(byte).substr(2);
    else out += c;
  }
  out += cut ? "...'" : "'";
  return out;
}

std::optional<TextError> first_utf8_error(std::string_view text) {
  constexpr std::size_t kCheckBlockBytes = std::size_t{4} << 20;
  std::vector<std::size_t> starts = split_after_newlines(text, 0, kCheckBlockBytes);
  std::size_t blocks = starts.size() - 1;
  std::vector<std::optional<TextError>> errors(blocks);
  tbb::parallel_for(std::size_t{0}, blocks, [&](std::size_t b) {
    errors[b] = check_utf8_range(text, starts[b], starts[b + 1]);
  });
  if (const TextError* error = first_error(errors)) return *error;
  return std::nullopt;
}

void check_utf8_text(std::string_view text, const std::string& name) {
  if (auto error = first_utf8_error(text)) throw_text_error(name, text, *error);
}

std::vector<std::size_t> split_after_newlines(std::string_view text, std::size_t begin,
                                              std::size_t block_bytes) {
  std::vector<std::size_t> starts{begin};
  std::size_t next = begin + block_bytes;
  while (next < text.size()) {
    const void* newline = std::memchr(text.data() + next, '\n', text.size() - next);
    if (newline == nullptr) break;
    std::size_t cut = static_cast<std::size_t>(static_cast<const char*>(newline) - text.data()) + 1;
    if (cut >= text.size()) break;
    starts.push_back(cut);
    next = cut + block_bytes;
  }
  starts.push_back(text.size());
  return starts;
}

std::vector<std::size_t> split_records(std::string_view text, std::size_t begin,
                                       std::size_t block_bytes) {
  // Nominal cuts every block_bytes; the quote parity of each stretch between
  // them (counted in parallel) says whether a cut falls inside a quoted field,
  // and each cut then moves forward to the end of its record.
  std::vector<std::size_t> nominal;
  for (std::size_t at = begin + block_bytes; at < text.size(); at += block_bytes)
    nominal.push_back(at);
  std::vector<char> odd(nominal.size());
  tbb::parallel_for(std::size_t{0}, nominal.size(), [&](std::size_t j) {
    std::size_t from = j == 0 ? begin : nominal[j - 1];
    odd[j] = odd_quote_count(text.data() + from, nominal[j] - from);
  });
  std::vector<char> in_quote(nominal.size());
  bool inside = false;
  for (std::size_t j = 0; j < nominal.size(); ++j) in_quote[j] = inside ^= odd[j];
  std::vector<std::size_t> cuts(nominal.size());
  tbb::parallel_for(std::size_t{0}, nominal.size(), [&](std::size_t j) {
    cuts[j] = record_end_after(text, nominal[j], in_quote[j]);
  });
  std::vector<std::size_t> starts{begin};
  for (std::size_t cut : cuts)
    if (cut > starts.back() && cut < text.size()) starts.push_back(cut);
  starts.push_back(text.size());
  return starts;
}

std::size_t count_nonempty_lines(std::string_view text, std::size_t begin, std::size_t end) {
  const char* s = text.data();
  std::size_t newlines = 0, empty = 0, i = begin;
  auto count_one = [&](std::size_t at) {
    if (s[at] != '\n') return;
    ++newlines;
    empty += ends_empty_line(s, begin, at);
  };
#if ANNEAL_TEXT_SSE2
  for (; i < end && i < begin + 2; ++i) count_one(i);
  count_newlines_sse2(s, i, end, newlines, empty);
  i += (end - i) / 16 * 16;
#endif
  for (; i < end; ++i) count_one(i);
  std::size_t lines = newlines - empty;
  // A last line without '\n' counts unless it is just "\r".
  if (end > begin && s[end - 1] != '\n') {
    bool lone_cr = s[end - 1] == '\r' && (end - 1 == begin || s[end - 2] == '\n');
    lines += !lone_cr;
  }
  return lines;
}

bool is_missing_value(std::string_view value) {
  switch (value.size()) {
    case 0: return true;
    case 2: return equals_ignoring_case(value, "na");
    case 3: return equals_ignoring_case(value, "nan") || equals_ignoring_case(value, "n/a");
    default: return false;
  }
}

}  // namespace anneal::formats
