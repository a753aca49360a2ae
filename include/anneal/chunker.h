// Content-defined chunking (FastCDC with normalized chunking).
//
// A byte stream is cut where a gear rolling hash over the last bytes matches
// a mask, so boundaries depend only on nearby content: inserting or appending
// bytes moves only the chunks around the edit, and every other chunk keeps its
// bytes and so its object id. docs/STORE.md gives the exact algorithm (gear
// table, masks) so another implementation reproduces the same cuts.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace anneal {

struct ChunkParams {
  std::size_t min_size;  // no cut before this many bytes (except at the end)
  std::size_t avg_size;  // the normalization point; a power of two
  std::size_t max_size;  // a cut is forced here
};

// Source files as imported: ~1 MiB chunks.
inline constexpr ChunkParams kSourceChunking{256 << 10, 1 << 20, 4 << 20};
// Parsed arrays: ~256 KiB chunks. An append rewrites the last chunk of every
// stream, and the parsed form is several streams, so its tail must be small.
inline constexpr ChunkParams kTensorChunking{64 << 10, 256 << 10, 1 << 20};

// Returns the end offset of each chunk, ascending; the last equals data.size().
// An empty input has no chunks. Pure and thread-safe.
std::vector<std::size_t> chunk_ends(std::string_view data, const ChunkParams& params);

// The length of the first chunk of `data` (0 for empty data). A cut never
// looks more than params.max_size bytes ahead, so for a stream that arrives
// in pieces this is the stream's next cut as soon as `data` (what is left of
// the stream) holds at least max_size bytes, or holds all of the rest:
// cutting that way gives exactly chunk_ends of the whole stream. Pure.
std::size_t first_chunk_end(std::string_view data, const ChunkParams& params);

}  // namespace anneal
