// The layer spec parser ("dense(256) relu dropout(0.5) dense(10)"): its
// syntax, and each layer's arguments checked and typed by its row of the
// layer table (huge, fractional and negative numbers cast to integers).
#include "anneal/network.h"
#include "engine/layer_table.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return anneal::fuzz::expect_error_or_success(
      [&] { (void)anneal::engine::parse_layers(anneal::fuzz::as_text(data, size)); });
}
