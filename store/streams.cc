#include "streams.h"

#include <tbb/parallel_for.h>
#include <tbb/task_group.h>

#include <stdexcept>

#include "anneal/error.h"
#include "anneal/hash.h"
#include "sqlite.h"

namespace anneal {

std::string stream_hash(const std::vector<std::pair<std::string, std::uint64_t>>& chunks) {
  Hasher hasher;
  for (const auto& [id, length] : chunks) hasher.update(id + " " + std::to_string(length) + "\n");
  return to_hex(hasher.finish());
}

namespace {

std::string stream_hash_of(const std::vector<PreparedObject>& chunks) {
  std::vector<std::pair<std::string, std::uint64_t>> list;
  for (const auto& c : chunks) list.emplace_back(c.id, c.raw.size());
  return stream_hash(list);
}

}  // namespace

PreparedStream prepare_stream(const ObjectStore& objects, std::string_view bytes,
                              const ChunkParams& params) {
  PreparedStream stream;
  stream.size = bytes.size();
  std::vector<std::size_t> ends = chunk_ends(bytes, params);
  stream.chunks.resize(ends.size());
  tbb::parallel_for(std::size_t(0), ends.size(), [&](std::size_t i) {
    std::size_t begin = i == 0 ? 0 : ends[i - 1];
    stream.chunks[i] = objects.prepare(bytes.substr(begin, ends[i] - begin));
  });
  stream.hash = stream_hash_of(stream.chunks);
  return stream;
}

std::uint64_t commit_streams(const ObjectStore& objects,
                             const std::vector<const PreparedStream*>& streams) {
  std::vector<const PreparedObject*> chunks;
  for (const PreparedStream* stream : streams)
    for (const PreparedObject& chunk : stream->chunks) chunks.push_back(&chunk);
  return objects.commit(chunks);
}

struct StreamBuilder::State {
  const ObjectStore* objects;
  ChunkParams params;
  ObjectStaging* staging;
  std::string carry;  // bytes after the last cut, then the piece being cut
  std::string piece;  // the next piece, copied in while `carry` is cut
  StreamChunks stream;
  tbb::task_group cutting;  // at most one task: the cut of `carry`

  // Cuts every chunk of `carry` that is final: once max_size bytes lie
  // ahead of it (a cut never looks further) or the stream has ended.
  void cut(bool at_end) {
    std::vector<std::size_t> ends;
    std::size_t at = 0;
    while (at < carry.size() && (at_end || carry.size() - at >= params.max_size)) {
      at += first_chunk_end(std::string_view(carry).substr(at), params);
      ends.push_back(at);
    }
    if (ends.empty()) return;
    std::vector<PreparedObject> chunks(ends.size());
    tbb::parallel_for(std::size_t(0), ends.size(), [&](std::size_t i) {
      std::size_t begin = i == 0 ? 0 : ends[i - 1];
      chunks[i] = objects->prepare(std::string_view(carry).substr(begin, ends[i] - begin));
    });
    if (staging != nullptr) {
      std::vector<const PreparedObject*> pointers;
      for (const auto& chunk : chunks) pointers.push_back(&chunk);
      staging->stage(pointers);
    }
    for (const auto& chunk : chunks) {
      stream.chunks.emplace_back(chunk.id, chunk.raw.size());
      stream.size += chunk.raw.size();
    }
    carry.erase(0, at);
  }
};

StreamBuilder::StreamBuilder(const ObjectStore& objects, const ChunkParams& params, ObjectStaging* staging)
    : state_(new State{&objects, params, staging, {}, {}, {}, {}}) {}

StreamBuilder::StreamBuilder(StreamBuilder&&) noexcept = default;

StreamBuilder::~StreamBuilder() {
  if (!state_) return;
  // Reached with work in flight only when the operation is failing anyway
  // (an error thrown past the builder): that error is the one to report,
  // and the background work's own is dropped with the stream.
  try {
    state_->cutting.wait();
  } catch (...) {
  }
}

void StreamBuilder::append(std::string_view bytes) {
  State& s = *state_;
  s.piece.assign(bytes);  // while the last piece is cut
  s.cutting.wait();       // rethrows what that cut threw
  s.carry.append(s.piece);
  s.cutting.run([&s] { s.cut(false); });
}

StreamChunks StreamBuilder::finish() {
  State& s = *state_;
  s.cutting.wait();
  s.cut(true);
  s.stream.hash = stream_hash(s.stream.chunks);
  StreamChunks done = std::move(s.stream);
  s.stream = StreamChunks{};
  s.carry.clear();
  return done;
}

void record_blob(sql::Database& db, const PreparedStream& stream) {
  StreamChunks chunks{stream.hash, stream.size, {}};
  for (const auto& c : stream.chunks) chunks.chunks.emplace_back(c.id, c.raw.size());
  record_blob(db, chunks);
}

void record_blob(sql::Database& db, const StreamChunks& stream) {
  auto insert_blob = db.prepare("INSERT OR IGNORE INTO blobs(hash, size) VALUES (?, ?)");
  insert_blob.bind(1, stream.hash).bind(2, static_cast<std::int64_t>(stream.size)).run();
  if (sqlite3_changes(db.handle()) == 0) return;  // known blob: its chunks are recorded
  auto insert_chunk =
      db.prepare("INSERT INTO blob_chunks(blob, seq, object, length) VALUES (?, ?, ?, ?)");
  for (std::size_t i = 0; i < stream.chunks.size(); ++i) {
    insert_chunk.reset();
    insert_chunk.bind(1, stream.hash)
        .bind(2, static_cast<std::int64_t>(i))
        .bind(3, stream.chunks[i].first)
        .bind(4, static_cast<std::int64_t>(stream.chunks[i].second))
        .run();
  }
}

std::vector<BlobChunk> blob_chunks(sql::Database& db, const std::string& blob) {
  auto stmt = db.prepare("SELECT object, length FROM blob_chunks WHERE blob = ? ORDER BY seq");
  stmt.bind(1, blob);
  std::vector<BlobChunk> chunks;
  while (stmt.step())
    chunks.push_back({stmt.text(0), static_cast<std::uint64_t>(stmt.int64(1))});
  return chunks;
}

std::string read_blob(sql::Database& db, const ObjectStore& objects, const std::string& blob,
                      std::string_view owner) {
  std::string bytes;
  read_blob_into(db, objects, blob, owner, [&](std::uint64_t size) {
    bytes.resize(size);
    return std::span<char>(bytes.data(), bytes.size());
  });
  return bytes;
}

void read_blob_into(sql::Database& db, const ObjectStore& objects, const std::string& blob,
                    std::string_view owner, const std::function<std::span<char>(std::uint64_t size)>& buffer) {
  auto size_stmt = db.prepare("SELECT size FROM blobs WHERE hash = ?");
  size_stmt.bind(1, blob);
  if (!size_stmt.step())
    throw corrupt("catalog: " + std::string(owner) + " refers to unknown blob " + blob)
        .with(Remedy::kCheckStore);
  std::uint64_t size = static_cast<std::uint64_t>(size_stmt.int64(0));
  std::vector<BlobChunk> chunks = blob_chunks(db, blob);
  std::vector<std::pair<std::string, std::uint64_t>> list;
  for (const auto& c : chunks) list.emplace_back(c.object, c.length);
  if (stream_hash(list) != blob)
    throw corrupt("catalog: " + std::string(owner) + ": the chunk list of blob " + blob +
                  " does not match its hash")
        .with(Remedy::kCheckStore);
  std::vector<std::uint64_t> offsets(chunks.size() + 1, 0);
  for (std::size_t i = 0; i < chunks.size(); ++i) offsets[i + 1] = offsets[i] + chunks[i].length;
  if (offsets.back() != size)
    throw corrupt("catalog: " + std::string(owner) + ": chunk lengths of blob " + blob +
                  " do not add up to its size")
        .with(Remedy::kCheckStore);
  const std::span<char> bytes = buffer(size);
  if (bytes.size() != size)
    throw std::logic_error("read_blob_into: the buffer holds " + std::to_string(bytes.size()) + " bytes, the blob " +
                           std::to_string(size));
  tbb::parallel_for(std::size_t(0), chunks.size(), [&](std::size_t i) {
    // Each chunk decompressed and verified where it belongs in the blob.
    objects.get_into(chunks[i].object, owner, bytes.subspan(offsets[i], chunks[i].length));
  });
}

}  // namespace anneal
