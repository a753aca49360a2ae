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

// The content of a gzip or zstd file (is_compressed_input of its first
// bytes), decompressed as it is read, front to back. The same checks as
// decompress_input with the same messages: a corrupt or truncated stream,
// other data after a gzip member (zero padding is allowed), and output past
// limits.max_bytes or limits.max_ratio times the file's size; the byte a
// corruption is reported near may differ by a few bytes, the stream being
// fed in pieces. Holds a piece of compressed input (1 MiB) and the
// decoder's state (zstd: a window of at most 128 MiB, as decompress_input
// allows), whatever the sizes. Every byte of the file is handed to
// `on_compressed` once, in order, as it is read (the import hashes or
// stores the source from these), trailing padding included. Throws what
// FileReader throws when the file changes size. Views `file`, which must
// outlive it.
class DecompressingReader {
 public:
  DecompressingReader(const FileReader& file, std::string display_name, const DecompressLimits& limits,
                      std::function<void(std::string_view compressed)> on_compressed = {});
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
