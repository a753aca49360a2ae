// Compressed input decompressed a piece at a time, for imports that stream
// it instead of holding its content.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "anneal/formats.h"
#include "anneal/fs.h"

namespace anneal {

// The content of gzip or zstd input (is_compressed_input of its first
// bytes), decompressed as it is read, front to back: the one decoder
// anneal has (decompress_input is this reader over bytes in memory). It
// refuses a corrupt or truncated stream, other data after a gzip member
// (zero padding is allowed), and output past limits.max_bytes or
// limits.max_ratio times the input's size, naming the limit's flag; the
// messages do not depend on how the input is read or the output pulled.
// Holds a piece of compressed input and the decoder's state (zstd: a
// window of at most 128 MiB), whatever the sizes. Views its input, which
// must outlive it. One thread at a time.
class DecompressingReader {
 public:
  // `file` read `piece_bytes` at a time (at least 4). Every byte of the
  // file is handed to `on_compressed` once, in order, as it is read (the
  // import hashes or stores the source from these), trailing padding
  // included. Throws what FileReader throws when the file changes size.
  DecompressingReader(const FileReader& file, std::string display_name, const DecompressLimits& limits,
                      std::function<void(std::string_view compressed)> on_compressed = {},
                      std::size_t piece_bytes = std::size_t{1} << 20);
  // Compressed bytes in memory.
  DecompressingReader(std::string_view bytes, std::string display_name, const DecompressLimits& limits);
  ~DecompressingReader();
  DecompressingReader(const DecompressingReader&) = delete;
  DecompressingReader& operator=(const DecompressingReader&) = delete;

  // Fills `out` with the next bytes of the content; returns how many. Fewer
  // than out.size() only once the content has ended (then 0 ever after).
  std::size_t read(std::span<char> out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal
