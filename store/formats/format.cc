// Format names and detection.
#include <algorithm>
#include <cctype>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "formats/number.h"

namespace anneal {

namespace {

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

Format format_from_file_name(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view base = name;  // without a compression suffix
  for (std::string_view compressed : {".gz", ".zst", ".zstd"})
    if (ends_with(base, compressed)) base.remove_suffix(compressed.size());
  if (ends_with(base, ".csv")) return Format::kCsv;
  if (ends_with(base, ".tsv") || ends_with(base, ".tab")) return Format::kTsv;
  if (ends_with(base, ".svm") || ends_with(base, ".libsvm") || ends_with(base, ".svmlight"))
    return Format::kLibsvm;
  // MNIST's own names: train-images-idx3-ubyte, t10k-labels.idx1-ubyte, ...
  if (ends_with(base, ".idx") || ends_with(base, "ubyte")) return Format::kIdx;
  return Format::kAuto;
}

bool looks_like_idx(std::string_view content) {
  if (content.size() < 4 || content[0] != 0 || content[1] != 0) return false;
  auto type = static_cast<unsigned char>(content[2]);
  auto rank = static_cast<unsigned char>(content[3]);
  bool known_type = type == 0x08 || type == 0x09 || (type >= 0x0B && type <= 0x0E);
  return known_type && rank >= 1 && content.size() >= 4 + 4 * std::size_t{rank};
}

// "LABEL INDEX:VALUE ..." with at least one pair.
bool looks_like_libsvm_line(std::string_view line) {
  std::size_t pairs = 0, tokens = 0, at = 0;
  while (at < line.size()) {
    std::size_t begin = line.find_first_not_of(" \t\r", at);
    if (begin == std::string_view::npos || line[begin] == '#') break;
    std::size_t end = std::min(line.find_first_of(" \t\r", begin), line.size());
    std::string_view token = line.substr(begin, end - begin);
    at = end;
    float value;
    if (tokens++ == 0) {
      if (!formats::parse_float_exactly(token.data(), token.data() + token.size(), value)) return false;
      continue;
    }
    std::size_t colon = token.find(':');
    if (colon == 0 || colon == std::string_view::npos ||
        token.substr(0, colon).find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    std::string_view number = token.substr(colon + 1);
    if (!formats::parse_float_exactly(number.data(), number.data() + number.size(), value)) return false;
    ++pairs;
  }
  return pairs > 0;
}

Format format_from_content(std::string_view content) {
  if (looks_like_idx(content)) return Format::kIdx;
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  // The first line that says something.
  std::string_view line;
  while (!content.empty()) {
    std::size_t newline = std::min(content.find('\n'), content.size());
    line = content.substr(0, newline);
    content.remove_prefix(std::min(newline + 1, content.size()));
    if (line.find_first_not_of(" \t\r") != std::string_view::npos && line.front() != '#') break;
    line = {};
  }
  if (looks_like_libsvm_line(line)) return Format::kLibsvm;
  auto tabs = std::count(line.begin(), line.end(), '\t');
  auto commas = std::count(line.begin(), line.end(), ',');
  return tabs > commas ? Format::kTsv : Format::kCsv;
}

}  // namespace

const char* format_name(Format format) {
  switch (format) {
    case Format::kAuto: return "auto";
    case Format::kCsv: return "csv";
    case Format::kTsv: return "tsv";
    case Format::kIdx: return "idx";
    case Format::kLibsvm: return "libsvm";
  }
  return "unknown";
}

Format parse_format_name(std::string_view name) {
  for (Format format : {Format::kAuto, Format::kCsv, Format::kTsv, Format::kIdx, Format::kLibsvm})
    if (name == format_name(format)) return format;
  throw usage_error(Subject::kFormat, ": expected one of auto, csv, tsv, idx, libsvm, found '" +
                    std::string(name) + "'");
}

Format format_from_name(std::string_view file_name) {
  std::string_view base = file_name.substr(std::min(file_name.size(), file_name.find_last_of('/') + 1));
  return format_from_file_name(std::string(base));
}

Format detect_format(std::string_view file_name, std::string_view content) {
  Format by_name = format_from_name(file_name);
  return by_name != Format::kAuto ? by_name : format_from_content(content);
}

}  // namespace anneal
