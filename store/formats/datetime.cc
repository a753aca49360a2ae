#include "formats/datetime.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "anneal/error.h"
#include "anneal/formats.h"

namespace anneal::formats {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_separator(char c) {
  return c == ' ' || c == '-' || c == '/' || c == '.' || c == ':' || c == ',' || c == '_' || c == 'T';
}

// Whether year-month-day names a day of the proleptic Gregorian calendar
// (no 2023-02-30). The parser reads at most 4-digit years, well inside
// std::chrono::year's range.
bool calendar_date_ok(std::int64_t year, unsigned month, unsigned day) {
  namespace chrono = std::chrono;
  return chrono::year_month_day{chrono::year{static_cast<int>(year)}, chrono::month{month}, chrono::day{day}}.ok();
}

// Reads `count` digits exactly at value[i...]; false when there are fewer.
bool read_fixed(std::string_view value, std::size_t& i, int count, unsigned& out) {
  out = 0;
  for (int k = 0; k < count; ++k, ++i) {
    if (i >= value.size() || !is_digit(value[i])) return false;
    out = out * 10 + static_cast<unsigned>(value[i] - '0');
  }
  return true;
}

// The compiled forms of a list of notations; the notations are this file's
// own, so a failure is a programming error.
std::vector<DateTimeFormat> compile_all(std::initializer_list<std::string_view> notations) {
  std::vector<DateTimeFormat> out;
  for (std::string_view notation : notations) {
    std::string why;
    std::optional<DateTimeFormat> format = DateTimeFormat::compile(notation, why);
    if (!format) throw std::logic_error("built-in date format " + std::string(notation) + ": " + why);
    out.push_back(std::move(*format));
  }
  return out;
}

}  // namespace

std::optional<DateTimeFormat> DateTimeFormat::compile(std::string_view notation, std::string& why) {
  DateTimeFormat format;
  format.notation_ = std::string(notation);
  bool seen[8] = {};
  std::optional<Part> last_number;  // the last part that is not a separator
  auto add = [&](Part part, char literal = 0) {
    if (part != Part::kLiteral) {
      auto index = static_cast<std::size_t>(part);
      if (seen[index]) {
        static const char* const kNames[] = {"YYYY", "MM (month)", "DD", "HH", "MM (minutes)", "SS", "f", "Z"};
        why = std::string("expected each field once, found ") + kNames[index] + " twice";
        return false;
      }
      seen[index] = true;
      last_number = part;
    }
    format.pieces_.push_back({part, literal});
    return true;
  };
  for (std::size_t i = 0; i < notation.size();) {
    std::string_view rest = notation.substr(i);
    bool ok = true;
    if (!format.pieces_.empty() && format.pieces_.back().part == Part::kZone) {
      why = "expected the zone (Z) last, found '" + std::string(rest) + "' after it";
      return std::nullopt;
    }
    if (rest.starts_with("YYYY")) {
      ok = add(Part::kYear), i += 4;
    } else if (rest.starts_with("MM")) {
      ok = add(last_number == Part::kHour ? Part::kMinute : Part::kMonth), i += 2;
    } else if (rest.starts_with("DD")) {
      ok = add(Part::kDay), i += 2;
    } else if (rest.starts_with("HH")) {
      ok = add(Part::kHour), i += 2;
    } else if (rest.starts_with("SS")) {
      ok = add(Part::kSecond), i += 2;
    } else if (rest[0] == 'f') {
      std::size_t run = rest.find_first_not_of('f');
      if (run == std::string_view::npos) run = rest.size();
      if (run > 9) {
        why = "expected at most 9 f (fractional second digits), found " + std::to_string(run);
        return std::nullopt;
      }
      ok = add(Part::kFraction, static_cast<char>(run)), i += run;
    } else if (rest[0] == 'Z') {
      ok = add(Part::kZone), i += 1;
    } else if (is_separator(rest[0])) {
      ok = add(Part::kLiteral, rest[0]), i += 1;
    } else {
      why = "expected YYYY, MM, DD, HH, MM (minutes), SS, f (fractions of a second), Z (a zone) and the "
            "separators space - / . : , _ T, found '" + std::string(rest.substr(0, 1)) + "'";
      return std::nullopt;
    }
    if (!ok) return std::nullopt;
  }
  auto has = [&](Part part) { return seen[static_cast<std::size_t>(part)]; };
  if (!has(Part::kYear) || !has(Part::kMonth) || !has(Part::kDay)) {
    why = "expected a year (YYYY), a month (MM) and a day (DD)";
    return std::nullopt;
  }
  if (has(Part::kHour) != has(Part::kMinute)) {
    why = "expected minutes (MM) right after the hour (HH), as in HH:MM";
    return std::nullopt;
  }
  if (has(Part::kSecond) && !has(Part::kMinute)) {
    why = "expected seconds (SS) only after minutes, as in HH:MM:SS";
    return std::nullopt;
  }
  if (has(Part::kFraction) && !has(Part::kSecond)) {
    why = "expected fractions of a second (f) only after seconds, as in HH:MM:SS.fff";
    return std::nullopt;
  }
  format.has_time_ = has(Part::kHour);
  return format;
}

DateTimeFormat::Match DateTimeFormat::read(std::string_view value, double& days) const {
  std::int64_t year = 0;
  unsigned month = 0, day = 0, hour = 0, minute = 0, second = 0;
  double fraction = 0;
  bool valid = true;
  std::size_t i = 0;
  for (std::size_t p = 0; p < pieces_.size(); ++p) {
    const Piece& piece = pieces_[p];
    switch (piece.part) {
      case Part::kLiteral:
        if (i >= value.size() || value[i] != piece.literal) return Match::kNoMatch;
        ++i;
        break;
      case Part::kYear: {
        unsigned y;
        if (!read_fixed(value, i, 4, y)) return Match::kNoMatch;
        year = y;
        break;
      }
      case Part::kMonth:
      case Part::kDay:
      case Part::kHour:
      case Part::kMinute:
      case Part::kSecond: {
        // Two digits, or one when no number follows directly (3/1/2024 9:05).
        const bool next_is_number = p + 1 < pieces_.size() && pieces_[p + 1].part != Part::kLiteral &&
                                    pieces_[p + 1].part != Part::kZone;
        unsigned n = 0;
        int digits = 0;
        while (digits < 2 && i < value.size() && is_digit(value[i])) n = n * 10 + static_cast<unsigned>(value[i++] - '0'), ++digits;
        if (digits == 0 || (next_is_number && digits < 2)) return Match::kNoMatch;
        (piece.part == Part::kMonth    ? month
         : piece.part == Part::kDay    ? day
         : piece.part == Part::kHour   ? hour
         : piece.part == Part::kMinute ? minute
                                       : second) = n;
        break;
      }
      case Part::kFraction: {
        std::uint64_t numerator = 0, denominator = 1;
        int digits = 0;
        for (; i < value.size() && is_digit(value[i]) && digits < 10; ++i, ++digits, denominator *= 10)
          numerator = numerator * 10 + static_cast<std::uint64_t>(value[i] - '0');
        if (digits == 0 || digits > 9) return Match::kNoMatch;
        fraction = static_cast<double>(numerator) / static_cast<double>(denominator);
        break;
      }
      case Part::kZone: {
        if (i < value.size() && value[i] == 'Z') {
          ++i;
          break;
        }
        if (i >= value.size() || (value[i] != '+' && value[i] != '-')) return Match::kNoMatch;
        ++i;
        unsigned zone_hours = 0, zone_minutes = 0;
        if (!read_fixed(value, i, 2, zone_hours)) return Match::kNoMatch;
        const bool colon = i < value.size() && value[i] == ':';
        if (colon) ++i;
        if ((colon || i < value.size()) && !read_fixed(value, i, 2, zone_minutes)) return Match::kNoMatch;
        valid = valid && zone_hours <= 23 && zone_minutes <= 59;
        break;
      }
    }
  }
  if (i != value.size()) return Match::kNoMatch;
  valid = valid && month >= 1 && month <= 12 && calendar_date_ok(year, month, day) && hour <= 23 &&
          minute <= 59 && second <= 59;
  if (!valid) return Match::kInvalid;
  days = static_cast<double>(days_from_civil(year, month, day)) +
         (hour * 3600.0 + minute * 60.0 + second + fraction) / 86400.0;
  return Match::kOk;
}

std::string DateTimeFormat::example() const {
  std::string out;
  for (const Piece& piece : pieces_) {
    switch (piece.part) {
      case Part::kLiteral: out += piece.literal; break;
      case Part::kYear: out += "2024"; break;
      case Part::kMonth: out += "03"; break;
      case Part::kDay: out += "01"; break;
      case Part::kHour: out += "09"; break;
      case Part::kMinute: out += "30"; break;
      case Part::kSecond: out += "00"; break;
      case Part::kFraction: out += std::string(static_cast<std::size_t>(piece.literal), '0'); break;
      case Part::kZone: out += "Z"; break;
    }
  }
  return out;
}

std::span<const DateTimeFormat> recognized_formats() {
  static const std::vector<DateTimeFormat> kFormats = compile_all({
      "YYYY-MM-DD",
      "YYYY-MM-DDTHH:MM", "YYYY-MM-DDTHH:MM:SS", "YYYY-MM-DDTHH:MM:SS.fff",
      "YYYY-MM-DDTHH:MMZ", "YYYY-MM-DDTHH:MM:SSZ", "YYYY-MM-DDTHH:MM:SS.fffZ",
      "YYYY-MM-DD HH:MM", "YYYY-MM-DD HH:MM:SS", "YYYY-MM-DD HH:MM:SS.fff",
      "YYYY-MM-DD HH:MMZ", "YYYY-MM-DD HH:MM:SSZ", "YYYY-MM-DD HH:MM:SS.fffZ",
      "YYYY/MM/DD", "YYYY/MM/DD HH:MM", "YYYY/MM/DD HH:MM:SS",
      "DD.MM.YYYY", "DD.MM.YYYY HH:MM", "DD.MM.YYYY HH:MM:SS",
  });
  return kFormats;
}

std::span<const DateTimeFormat> ambiguous_formats() {
  static const std::vector<DateTimeFormat> kFormats = compile_all({
      "DD/MM/YYYY", "MM/DD/YYYY", "DD/MM/YYYY HH:MM", "MM/DD/YYYY HH:MM",
      "DD/MM/YYYY HH:MM:SS", "MM/DD/YYYY HH:MM:SS",
      "DD-MM-YYYY", "MM-DD-YYYY", "DD-MM-YYYY HH:MM", "MM-DD-YYYY HH:MM",
      "DD-MM-YYYY HH:MM:SS", "MM-DD-YYYY HH:MM:SS",
  });
  return kFormats;
}

std::int64_t days_from_civil(std::int64_t year, unsigned month, unsigned day) {
  namespace chrono = std::chrono;
  const chrono::year_month_day date{chrono::year{static_cast<int>(year)}, chrono::month{month}, chrono::day{day}};
  return chrono::sys_days{date}.time_since_epoch().count();
}

std::string iso_text(double days, bool with_time, bool with_seconds) {
  // Beyond any year a value can be written with (YYYY), the text would be
  // meaningless; 3e6 days (about the year 10183) also keeps the calendar
  // arithmetic well inside std::chrono::year's range.
  if (!std::isfinite(days) || std::fabs(days) > 3e6) return "";
  namespace chrono = std::chrono;
  const std::int64_t units_per_day = with_seconds ? 86400 : with_time ? 1440 : 1;
  const auto units = static_cast<std::int64_t>(std::llround(days * static_cast<double>(units_per_day)));
  const std::int64_t z = units >= 0 ? units / units_per_day : -((-units + units_per_day - 1) / units_per_day);
  const std::int64_t within = units - z * units_per_day;
  const chrono::year_month_day date{chrono::sys_days{chrono::days{z}}};
  const long long year = static_cast<int>(date.year());
  const unsigned month = static_cast<unsigned>(date.month()), day = static_cast<unsigned>(date.day());
  char buffer[64];
  int n = std::snprintf(buffer, sizeof buffer, "%04lld-%02u-%02u", static_cast<long long>(year), month, day);
  if (with_seconds)
    std::snprintf(buffer + n, sizeof buffer - static_cast<std::size_t>(n), " %02lld:%02lld:%02lld",
                  static_cast<long long>(within / 3600), static_cast<long long>(within / 60 % 60),
                  static_cast<long long>(within % 60));
  else if (with_time)
    std::snprintf(buffer + n, sizeof buffer - static_cast<std::size_t>(n), " %02lld:%02lld",
                  static_cast<long long>(within / 60), static_cast<long long>(within % 60));
  return buffer;
}

}  // namespace anneal::formats

// ---------------------------------------------------------- public (formats.h)

namespace anneal {

DateFormatOption parse_date_format_option(std::string_view text) {
  DateFormatOption option;
  const std::size_t equals = text.rfind('=');
  if (equals != std::string_view::npos) {
    option.column = std::string(text.substr(0, equals));
    if (option.column.empty())
      throw usage_error(Subject::kDateFormat, std::string(text) + ": expected FORMAT or COLUMN=FORMAT, found no column before '='");
  }
  option.format = std::string(equals == std::string_view::npos ? text : text.substr(equals + 1));
  std::string why;
  if (!formats::DateTimeFormat::compile(option.format, why))
    throw usage_error(Subject::kDateFormat, std::string(text) + ": " + why);
  return option;
}

std::string date_format_option_text(const DateFormatOption& option) {
  return option.column.empty() ? option.format : option.column + "=" + option.format;
}

std::string datetime_text(double days, const ColumnSchema& column) {
  return formats::iso_text(days, column.has_time, column.datetime_format.find("SS") != std::string::npos);
}

}  // namespace anneal
