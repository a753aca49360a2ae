// CSV/TSV reader: the first byte picks the delimiter, header, label and
// non-finite handling; the rest is the file.
#include <string>

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
  return anneal::fuzz::expect_error_or_success(
      [&] { anneal::parse_delimited(anneal::fuzz::as_text(data + 1, size - 1), delimiter, options); });
}
