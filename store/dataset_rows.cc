#include "anneal/dataset_rows.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "anneal/error.h"
#include "streams.h"

namespace anneal {

std::size_t stored_type_size(StoredType type) {
  switch (type) {
    case StoredType::kF32: return 4;
    case StoredType::kU8: return 1;
  }
  return 0;
}

const char* stored_type_name(StoredType type) {
  switch (type) {
    case StoredType::kF32: return "f32";
    case StoredType::kU8: return "u8";
  }
  return "?";
}

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

TensorRowReader::TensorRowReader(Store& store, const DatasetVersion& version, std::string_view role)
    : objects_(&store.objects()), owner_("dataset " + version.ref() + ", " + std::string(role)) {
  auto damaged = [&](const std::string& what) { return corrupt(owner_ + ": " + what).with(Remedy::kCheckStore); };
  const DatasetStream* stream = version.stream(role);
  if (stream == nullptr || stream->dtype.empty()) throw damaged("no such parsed stream in the catalog");
  if (stream->dtype == "f32") type_ = StoredType::kF32;
  else if (stream->dtype == "u8") type_ = StoredType::kU8;
  else throw damaged("unknown dtype '" + stream->dtype + "' (expected f32 or u8)");

  // Shape [rows, d1, ...]: every dim non-negative and the product bounded,
  // so a damaged shape cannot overflow the arithmetic below.
  const std::vector<std::int64_t>& shape = stream->shape;
  if (shape.empty()) throw damaged("no shape recorded (expected [rows, ...])");
  for (std::int64_t dim : shape)
    if (dim < 0) throw damaged("shape " + shape_text(shape) + " has a negative dim");
  rows_ = static_cast<std::uint64_t>(shape[0]);
  std::uint64_t width = 1;
  for (std::size_t i = 1; i < shape.size(); ++i)
    if (__builtin_mul_overflow(width, static_cast<std::uint64_t>(shape[i]), &width))
      throw damaged("shape " + shape_text(shape) + " overflows");
  std::uint64_t row_bytes = 0, expected = 0;
  if (__builtin_mul_overflow(width, stored_type_size(type_), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, rows_, &expected) || row_bytes > std::uint64_t{1} << 62)
    throw damaged("shape " + shape_text(shape) + " overflows");
  row_width_ = static_cast<std::int64_t>(width);
  row_bytes_ = static_cast<std::size_t>(row_bytes);
  if (stream->size != expected)
    throw damaged(std::to_string(stream->size) + " bytes is not shape " + shape_text(shape) + " of " +
                  stream->dtype + " (" + std::to_string(expected) + " bytes)");

  // The chunk list, trusted only once it hashes to the blob id (the id is
  // what the version row names) and its lengths cover exactly the stream.
  std::vector<BlobChunk> listed = blob_chunks(store.db(), stream->blob);
  std::vector<std::pair<std::string, std::uint64_t>> list;
  list.reserve(listed.size());
  for (const BlobChunk& c : listed) list.emplace_back(c.object, c.length);
  if (stream_hash(list) != stream->blob)
    throw damaged("the chunk list of blob " + stream->blob + " does not match its hash");
  chunks_.reserve(listed.size());
  std::uint64_t offset = 0;
  for (BlobChunk& c : listed) {
    chunks_.push_back({std::move(c.object), offset, c.length});
    offset += c.length;
  }
  if (offset != stream->size)
    throw damaged("chunk lengths of blob " + stream->blob + " add up to " + std::to_string(offset) +
                  " bytes, not its size " + std::to_string(stream->size));
}

void TensorRowReader::read(std::uint64_t first, std::uint64_t count, std::span<std::byte> out) const {
  if (first > rows_ || count > rows_ - first)
    throw usage_error(owner_ + ": rows [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
                      std::to_string(count) + ") are past the stream's " + std::to_string(rows_) + " rows");
  const std::uint64_t begin = first * row_bytes_, end = (first + count) * row_bytes_;
  if (out.size() != end - begin)
    throw usage_error(owner_ + ": a buffer of " + std::to_string(out.size()) + " bytes for " + std::to_string(count) +
                      " rows of " + std::to_string(row_bytes_) + " bytes (expected " + std::to_string(end - begin) +
                      ")");
  if (begin == end) return;
  // The chunks overlapping [begin, end): from the last one starting at or
  // before `begin` to the last one starting before `end`.
  auto starts_after = [](std::uint64_t offset, const Chunk& c) { return offset < c.begin; };
  const std::size_t lo =
      static_cast<std::size_t>(std::upper_bound(chunks_.begin(), chunks_.end(), begin, starts_after) - chunks_.begin()) - 1;
  const std::size_t hi =
      static_cast<std::size_t>(std::upper_bound(chunks_.begin(), chunks_.end(), end - 1, starts_after) - chunks_.begin());
  char* const base = reinterpret_cast<char*>(out.data());
  tbb::parallel_for(lo, hi, [&](std::size_t i) {
    const Chunk& chunk = chunks_[i];
    const std::uint64_t from = std::max(begin, chunk.begin), to = std::min(end, chunk.begin + chunk.length);
    char* const target = base + (from - begin);
    if (from == chunk.begin && to == chunk.begin + chunk.length) {
      // Wholly inside the range: decoded and verified in its final place.
      objects_->get_into(chunk.object, owner_, std::span<char>(target, chunk.length));
      return;
    }
    // Partly inside: the hash covers the whole chunk, so decode all of it.
    std::string scratch(chunk.length, '\0');
    objects_->get_into(chunk.object, owner_, std::span<char>(scratch.data(), scratch.size()));
    std::memcpy(target, scratch.data() + (from - chunk.begin), to - from);
  });
}

}  // namespace anneal
