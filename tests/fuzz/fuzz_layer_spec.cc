// The layer spec parser ("dense(256) relu dropout(0.5) dense(10)").
#include "anneal/network.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::parse_layer_spec(anneal::fuzz::as_text(data, size)); });
}
