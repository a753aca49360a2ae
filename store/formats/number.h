// Number parsing for the text formats.
//
// A number is what std::from_chars parses as a double: an optional '-',
// decimal digits with an optional '.', an optional exponent, or inf, infinity
// and nan in any case. The float result is correctly rounded. Short decimals,
// which are nearly all real data, take Clinger's exact fast path with digits
// read eight at a time; the rest go to std::from_chars.
#pragma once

namespace anneal::formats {

// Parses the longest number at the start of [begin, end), reading no byte
// outside it. Returns the byte after the number, or nullptr when no number
// starts at `begin`. Values beyond float's range (even beyond double's)
// become infinity or zero, like any other rounding to float32; callers
// decide what a non-finite result means.
const char* parse_float_prefix(const char* begin, const char* end, float& value);

// Parses all of [begin, end) as one number, also allowing a leading '+'
// (which from_chars does not). Returns false when anything else is there.
// Bytes up to `readable_end` (>= end) may be read, which lets the parser
// take its wide fast path on short fields inside a larger text.
bool parse_float_exactly(const char* begin, const char* end, const char* readable_end, float& value);
inline bool parse_float_exactly(const char* begin, const char* end, float& value) {
  return parse_float_exactly(begin, end, end, value);
}

}  // namespace anneal::formats
