// Dates and date-times in CSV/TSV cells: the --date-format notation, the
// forms the import recognizes by itself, and the value a kDatetime cell
// holds (include/anneal/table.h). Internal to store/formats.
//
// Notation: YYYY (4 digits), MM (the month; minutes when it follows HH),
// DD, HH, SS (1 or 2 digits when a separator or the end follows, else
// exactly 2), a run of f (fractional seconds, 1 to 9 digits), Z (a zone:
// 'Z', +HH:MM, -HH:MM, +HHMM, -HHMM or +HH; kept in the source bytes but not
// applied) and the separators space - / . : , _ T taken literally.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anneal::formats {

class DateTimeFormat {
 public:
  // The compiled notation, or nullopt with `why` saying what is wrong
  // ("expected ..., found ...", without the notation itself).
  static std::optional<DateTimeFormat> compile(std::string_view notation, std::string& why);

  enum class Match {
    kNoMatch,  // the value is not written in this format
    kInvalid,  // written in it, but no such date or time (2023-02-30, 25:00)
    kOk,
  };
  // Reads `value` (already trimmed); on kOk sets `days` to days since
  // 1970-01-01T00:00 of the wall-clock time as written, the time of day as
  // the fraction. Pure.
  Match read(std::string_view value, double& days) const;

  const std::string& notation() const { return notation_; }
  bool has_time() const { return has_time_; }
  // An example value in this format, for messages: "2024-03-01 09:30".
  std::string example() const;

 private:
  enum class Part : std::uint8_t { kYear, kMonth, kDay, kHour, kMinute, kSecond, kFraction, kZone, kLiteral };
  struct Piece {
    Part part;
    char literal;  // kLiteral: the character
  };
  std::vector<Piece> pieces_;
  std::string notation_;
  bool has_time_ = false;
};

// The unambiguous forms the import recognizes without being told: ISO 8601
// (date, or date and time with T or a space, minutes, seconds or fractional
// seconds, with or without a zone), YYYY/MM/DD and DD.MM.YYYY (each with an
// optional HH:MM or HH:MM:SS). A value is written in at most one of them.
std::span<const DateTimeFormat> recognized_formats();

// Forms a value may be written in whose order of day and month the value
// does not tell (01/02/2024): DD/MM/YYYY and MM/DD/YYYY with '/' or '-',
// each with an optional HH:MM or HH:MM:SS. Never chosen without the user
// naming one; used to suggest one.
std::span<const DateTimeFormat> ambiguous_formats();

// Days since 1970-01-01 of a proleptic Gregorian date (month 1-12).
std::int64_t days_from_civil(std::int64_t year, unsigned month, unsigned day);

// "YYYY-MM-DD", "YYYY-MM-DD HH:MM" or "YYYY-MM-DD HH:MM:SS" of a value in
// days since 1970-01-01, rounded to the nearest minute (or second); "" for
// NaN, infinities and values beyond 10^8 days.
std::string iso_text(double days, bool with_time, bool with_seconds);

}  // namespace anneal::formats
