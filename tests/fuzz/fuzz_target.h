// Shared by every fuzz target in tests/fuzz/.
//
// Each fuzz_*.cc defines LLVMFuzzerTestOneInput, the libFuzzer entry point.
// The same source builds two ways: with clang and -fsanitize=fuzzer under
// -DANNEAL_FUZZ=ON (make fuzz), and in the normal build linked with
// replay_main.cc, which feeds it every file of the target's corpus and
// regressions directories, so the suite keeps replaying what fuzzing found.
//
// Contract of a target: any input returns normally or throws anneal::Error
// (bad input is reported, never a crash); anything else escaping (a
// std::exception from a library, a sanitizer report, a timeout, memory past
// -rss_limit_mb) is a bug in the code under test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "anneal/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace anneal::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`, swallowing only anneal::Error: the reported, expected outcome
// of bad input. Returns 0 as libFuzzer wants.
template <typename Parse>
int expect_error_or_success(Parse&& parse) {
  try {
    parse();
  } catch (const anneal::Error&) {
  }
  return 0;
}

}  // namespace anneal::fuzz
