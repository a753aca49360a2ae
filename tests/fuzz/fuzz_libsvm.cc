// LIBSVM reader: the first byte picks non-finite handling and whether a
// train part's feature count applies; the rest is the file.
#include "anneal/formats.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  anneal::ParseOptions options;
  options.display_name = "fuzz.libsvm";
  options.nonfinite = (mode & 1) ? anneal::NonFinite::kMissing : anneal::NonFinite::kError;
  if (mode & 2) options.libsvm_features = mode >> 2;
  options.max_columns = 4096;
  return anneal::fuzz::expect_error_or_success(
      [&] { anneal::parse_libsvm(anneal::fuzz::as_text(data + 1, size - 1), options); });
}
