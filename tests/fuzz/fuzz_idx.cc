// IDX reader: byte 0 picks non-finite handling, byte 1 where the images end
// and the labels begin (as a fraction of the rest), the rest is both files.
#include "anneal/formats.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  anneal::ParseOptions options;
  options.display_name = "images.idx";
  options.nonfinite = (data[0] & 1) ? anneal::NonFinite::kMissing : anneal::NonFinite::kError;
  std::string_view rest = anneal::fuzz::as_text(data + 2, size - 2);
  std::size_t cut = rest.size() * data[1] / 255;
  return anneal::fuzz::expect_error_or_success(
      [&] { anneal::parse_idx(rest.substr(0, cut), rest.substr(cut), options, "labels.idx"); });
}
