// The object file decoder behind ObjectStore::get and fsck: a damaged or
// crafted object file must be reported, not crash or allocate its claim.
#include <string>

#include "anneal/object_store.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string raw;
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::decode_object_file(anneal::fuzz::as_text(data, size), raw); });
}
