// Streams: byte sequences (source files, parsed tensors) stored as lists of
// content-defined chunks, each chunk one object. A stream is recorded in the
// catalog as a blob (its hash and size) with its ordered chunk list; blobs
// are shared between every version that holds the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/chunker.h"
#include "anneal/object_store.h"

namespace anneal {

namespace sql {
class Database;
}

struct PreparedStream {
  std::string hash;  // the stream's tree hash (stream_hash)
  std::uint64_t size = 0;
  std::vector<PreparedObject> chunks;
};

// A stream's id: BLAKE2b-256 of the text "ID LENGTH\n" for each chunk in
// order (hex object id, decimal length). A function of the bytes alone, like
// a plain hash, but computed from the chunk hashes, so the bytes are hashed
// once, in parallel.
std::string stream_hash(const std::vector<std::pair<std::string, std::uint64_t>>& chunks);

// Chunks and hashes `bytes` in parallel (oneTBB). Writes nothing; the
// result views `bytes`, which must outlive it.
PreparedStream prepare_stream(const ObjectStore& objects, std::string_view bytes,
                              const ChunkParams& params);

// Compresses and durably writes the chunks of these streams not yet stored
// (ObjectStore::commit). Returns the compressed bytes added to the store.
std::uint64_t commit_streams(const ObjectStore& objects,
                             const std::vector<const PreparedStream*>& streams);
inline std::uint64_t commit_stream(const ObjectStore& objects, const PreparedStream& stream) {
  return commit_streams(objects, {&stream});
}

// A stream as the catalog records it: its hash, size and chunk list (object
// id and length of each chunk, in order), without the bytes.
struct StreamChunks {
  std::string hash;
  std::uint64_t size = 0;
  std::vector<std::pair<std::string, std::uint64_t>> chunks;
};

// Builds a stream from bytes that arrive in pieces, keeping only what the
// next cut needs: it cuts exactly the chunks prepare_stream cuts from the
// whole stream (first_chunk_end), so the stream's hash and objects do not
// depend on how it was fed. Given a staging, each piece's finished chunks
// are staged (ObjectStaging::stage; the caller holds the writer lock and
// publishes once the whole operation has succeeded) as soon as they are
// cut; without one, they are only hashed.
//
// The cutting, hashing and staging of a piece run in the background (a
// oneTBB task) while the caller produces the next piece: append() copies
// the piece, waits for the previous piece's work and starts this one's;
// finish() waits for all of it. An error in the background work is thrown
// by the next append() or finish(). Memory: two pieces plus less than
// params.max_size bytes carried to the next. Not thread-safe; one thread
// feeds a builder (several builders may share a staging).
class StreamBuilder {
 public:
  StreamBuilder(const ObjectStore& objects, const ChunkParams& params, ObjectStaging* staging);
  ~StreamBuilder();  // waits for the background work
  StreamBuilder(StreamBuilder&&) noexcept;
  StreamBuilder& operator=(StreamBuilder&&) = delete;

  // Appends the stream's next bytes; cuts, hashes (in parallel) and, with
  // a staging, stages every chunk they complete, in the background.
  void append(std::string_view bytes);
  // Cuts the rest as the stream's last chunk(s) and returns the stream.
  // The builder is empty afterwards.
  StreamChunks finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Records the blob and its chunk list (a no-op when the blob is known).
// Call inside the transaction that records what owns the blob.
void record_blob(sql::Database& db, const StreamChunks& stream);
void record_blob(sql::Database& db, const PreparedStream& stream);

struct BlobChunk {
  std::string object;
  std::uint64_t length;
};
std::vector<BlobChunk> blob_chunks(sql::Database& db, const std::string& blob);

// Reassembles a blob from its chunks, verifying every object and the whole
// stream's hash. `owner` names what the blob belongs to for error messages.
std::string read_blob(sql::Database& db, const ObjectStore& objects, const std::string& blob,
                      std::string_view owner);

// read_blob into a caller's buffer: verifies the chunk list as read_blob
// does, then calls `buffer(size)` once with the blob's size and writes the
// verified chunks (in parallel) into the span it returns, which must hold
// exactly `size` bytes. A caller decodes a large blob straight into its
// final array this way, without a second copy in a string.
void read_blob_into(sql::Database& db, const ObjectStore& objects, const std::string& blob,
                    std::string_view owner, const std::function<std::span<char>(std::uint64_t size)>& buffer);

}  // namespace anneal
