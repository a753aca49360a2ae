// The model file decoder (model show, eval, predict, bench load it).
#include "fuzz_target.h"
#include "anneal/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::runs::decode_model(anneal::fuzz::as_text(data, size), "fuzz model"); });
}
