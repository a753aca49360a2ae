// The checkpoint decoder (train --resume and job retries load it).
#include "fuzz_target.h"
#include "anneal/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::runs::decode_checkpoint(anneal::fuzz::as_text(data, size), "fuzz checkpoint"); });
}
