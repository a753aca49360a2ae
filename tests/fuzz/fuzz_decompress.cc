// gzip/zstd input decompression, under limits small enough that every input
// stays cheap: the limits themselves are what is being tested.
#include "anneal/formats.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  anneal::DecompressLimits limits;
  limits.max_bytes = 8 << 20;
  limits.max_ratio = 1000;
  return anneal::fuzz::expect_error_or_success(
      [&] { anneal::decompress_input(anneal::fuzz::as_text(data, size), "fuzz.gz", limits); });
}
