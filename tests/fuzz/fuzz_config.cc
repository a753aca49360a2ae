// The INI train config parser.
#include "anneal/config.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::parse_train_config(anneal::fuzz::as_text(data, size), "fuzz.ini", {}); });
}
