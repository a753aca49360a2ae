// CSV/TSV reader: the first byte picks the delimiter, header, label (or
// none), non-finite handling and date formats; the rest is the file.
#include <string>
#include <vector>

#include "anneal/formats.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  anneal::ParseOptions options;
  options.display_name = "fuzz.csv";
  options.header = (mode & 1) == 0;
  if (mode & 2) options.label = std::to_string(0);  // column 0; else the last column
  options.nonfinite = (mode & 4) ? anneal::NonFinite::kMissing : anneal::NonFinite::kError;
  if (mode & 8) options.categorical = {"0"};
  options.max_columns = 256;  // keeps each input's work small, as the flag does
  const char delimiter = (mode & 16) ? '\t' : ',';
  // Date formats for any column that fits, and one for a column named "d"
  // (which the input may lack: a usage error).
  if (mode & 32) options.date_formats = {{"", "DD/MM/YYYY", false}, {"", "MM-DD-YYYY HH:MM:SS.fffZ", false}};
  if (mode & 64) options.date_formats.push_back({"d", "DD.MM.YYYY HH:MM", false});
  // Predict's reading: no label column, only some columns typed or kept.
  if (mode & 128) {
    options.labelled = false;
    options.typed_columns = std::vector<std::string>{"a", "col1"};
    options.read_columns = std::vector<std::string>{"a", "b", "col1", "col2"};
  }
  std::vector<anneal::DateFormatHint> hints;
  options.date_format_hints = &hints;
  return anneal::fuzz::expect_error_or_success(
      [&] { anneal::parse_delimited(anneal::fuzz::as_text(data + 1, size - 1), delimiter, options); });
}
