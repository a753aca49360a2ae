// The tokenizer of CSV/TSV text: fields and records per RFC 4180, read
// straight from the input without copying. Shared by the header reader, the
// type inference, the record count and the block parser in delimited.cc.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "formats/number.h"
#include "formats/text.h"

namespace anneal::formats {

// How messages name the delimiter.
inline std::string delimiter_name(char delimiter) {
  return delimiter == '\t' ? std::string("a tab") : std::string("'") + delimiter + "'";
}

// The bytes of the UTF-8 character at p, for "found ..." in messages.
inline std::string_view character_at(const char* p, const char* end) {
  auto lead = static_cast<unsigned char>(*p);
  std::size_t length = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  return std::string_view(p, std::min<std::size_t>(length, static_cast<std::size_t>(end - p)));
}

// One field as read from the text. For a quoted field [begin, end) is what
// lies between the quotes, still holding doubled quotes when `escaped`; for
// an unquoted one it is the field without surrounding blanks or the '\r' of
// a CRLF line end.
struct Field {
  const char* start = nullptr;  // first byte of the field, for error positions
  const char* begin = nullptr;
  const char* end = nullptr;
  bool quoted = false;
  bool escaped = false;

  std::string_view content() const { return {begin, static_cast<std::size_t>(end - begin)}; }
  // The field's value: quotes removed and doubled quotes made single.
  std::string value() const {
    std::string out(content());
    if (escaped) {
      std::size_t kept = 0;
      for (std::size_t i = 0; i < out.size(); ++i, ++kept) {
        out[kept] = out[i];
        if (out[i] == '"') ++i;  // the second of a doubled quote
      }
      out.resize(kept);
    }
    return out;
  }
};

// Tokenizes RFC 4180 text within [base, end): fields separated by the
// delimiter, records by LF or CRLF, double-quoted fields that may hold the
// delimiter, line ends and doubled quotes. Spaces (and tabs, unless tab is
// the delimiter) around a field are not part of it. A quote anywhere but at
// the start of a field is an error, which keeps quote parity meaningful for
// split_records.
class FieldReader {
 public:
  // `base` holds the input's byte `base_offset` (0 for a whole input; a
  // window of a larger input read piece by piece starts further on), so
  // offsets, and the errors that carry them, are those of the whole input.
  FieldReader(const char* base, const char* end, char delimiter, std::size_t base_offset = 0)
      : base_(base), end_(end), delimiter_(delimiter), base_offset_(base_offset) {}

  const char* end() const { return end_; }
  const char* begin_of(std::size_t offset) const { return base_ + (offset - base_offset_); }
  std::size_t offset(const char* p) const { return base_offset_ + static_cast<std::size_t>(p - base_); }

  // Past any empty lines at p (a record start).
  const char* skip_empty_lines(const char* p) const {
    while (p < end_) {
      if (*p == '\n') {
        ++p;
      } else if (*p == '\r' && (p + 1 == end_ || p[1] == '\n')) {
        p += p + 1 == end_ ? 1 : 2;
      } else {
        break;
      }
    }
    return p;
  }

  // Whether a field ends exactly at p; if so sets where the next field
  // starts and whether the record ended with it. Lets the numeric fast path
  // parse a number straight from the text and only check what follows.
  bool ends_field(const char* p, const char*& next, bool& record_end) const {
    if (p == end_) {
      next = p;
      record_end = true;
      return true;
    }
    if (*p == delimiter_) {
      next = p + 1;
      record_end = false;
      return true;
    }
    if (*p == '\n' || (*p == '\r' && (p + 1 == end_ || p[1] == '\n'))) {
      next = p + (*p == '\n' || p + 1 == end_ ? 1 : 2);
      record_end = true;
      return true;
    }
    return false;
  }

  // Reads the field at p and returns where the next one starts.
  const char* read(const char* p, Field& field, bool& record_end) const {
    field.start = p;
    while (p < end_ && is_blank(*p)) ++p;
    if (p < end_ && *p == '"') return read_quoted(p, field, record_end);
    field.quoted = field.escaped = false;
    field.begin = p;
    const char* q = p;
    while (q < end_ && *q != delimiter_ && *q != '\n') {
      if (*q == '"')
        throw TextError{offset(q),
                        "expected a quote only at the start of a field, found '\"' inside an "
                        "unquoted field (quote the whole field and double the inner quotes)"};
      ++q;
    }
    const char* value_end = q;
    if ((q == end_ || *q == '\n') && value_end > p && value_end[-1] == '\r') --value_end;
    while (value_end > p && is_blank(value_end[-1])) --value_end;
    field.end = value_end;
    record_end = q == end_ || *q == '\n';
    return q == end_ ? q : q + 1;
  }

  // Reads the rest of a record whose fields run past the expected count and
  // returns how many fields it had in all (`read_so_far` + the rest).
  std::size_t count_remaining(const char* p, std::size_t read_so_far) const {
    Field field;
    bool record_end = false;
    while (!record_end) {
      p = read(p, field, record_end);
      ++read_so_far;
    }
    return read_so_far;
  }

 private:
  bool is_blank(char c) const { return c == ' ' || (c == '\t' && delimiter_ != '\t'); }

  const char* read_quoted(const char* quote, Field& field, bool& record_end) const {
    field.quoted = true;
    field.escaped = false;
    field.begin = quote + 1;
    const char* p = quote + 1;
    for (;;) {
      const void* found = std::memchr(p, '"', static_cast<std::size_t>(end_ - p));
      if (found == nullptr)
        throw TextError{offset(quote),
                        "expected a closing quote for the field opened here, found end of input"};
      p = static_cast<const char*>(found);
      if (p + 1 < end_ && p[1] == '"') {
        field.escaped = true;
        p += 2;
        continue;
      }
      break;
    }
    field.end = p++;
    while (p < end_ && is_blank(*p)) ++p;
    const char* next;
    if (ends_field(p, next, record_end)) return next;
    throw TextError{offset(p), "expected " + delimiter_name(delimiter_) +
                                   " or end of line after the closing quote, found " +
                                   quote_for_message(character_at(p, end_))};
  }

  const char* base_;
  const char* end_;
  char delimiter_;
  std::size_t base_offset_;
};

// Reads one whole record into `fields`; returns where the next one starts.
// A record of more than `max_fields` fields throws TextError at the first
// field too many ("expected N fields, found M"), so one very long line
// cannot make `fields` grow without bound.
inline const char* read_record(const FieldReader& reader, const char* p, std::vector<Field>& fields,
                               std::size_t max_fields) {
  fields.clear();
  bool record_end = false;
  while (!record_end) {
    if (fields.size() == max_fields)
      throw TextError{reader.offset(p), "expected " + std::to_string(max_fields) + " fields, found " +
                                            std::to_string(reader.count_remaining(p, max_fields))};
    fields.emplace_back();
    p = reader.read(p, fields.back(), record_end);
  }
  return p;
}

// The field's value with blanks inside quotes trimmed too: what numbers and
// missing markers are recognized from.
inline std::string_view trimmed_content(const Field& field) {
  std::string_view value = field.content();
  if (field.quoted) {
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  }
  return value;
}

inline bool is_missing(const Field& field) {
  return !field.escaped && is_missing_value(trimmed_content(field));
}

// The field's number, if it is one; `readable_end` (the text's end) lets the
// number parser read ahead in wide steps.
inline bool field_number(const Field& field, const char* readable_end, float& number) {
  std::string_view value = trimmed_content(field);
  return !field.escaped && parse_float_exactly(value.data(), value.data() + value.size(), readable_end, number);
}

}  // namespace anneal::formats
