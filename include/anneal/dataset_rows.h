// Reading a dataset version's parsed tensors by row range.
//
// load_dataset (datasets.h) decodes a whole version into float arrays; a
// version larger than memory is instead read block by block through a
// TensorRowReader, which decodes only the chunks that hold the rows asked
// for and hands them over in the type they are stored in (u8 images stay
// one byte per pixel). docs/STORE.md gives the streams and their dtypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/object_store.h"
#include "anneal/store.h"

namespace anneal {

// The element type of a parsed tensor stream (its catalog dtype).
enum class StoredType : std::uint8_t {
  kF32,  // "f32": little-endian IEEE float32
  kU8,   // "u8": one unsigned byte
};
std::size_t stored_type_size(StoredType type);  // bytes per element
const char* stored_type_name(StoredType type);  // "f32" / "u8"

// Reads one parsed tensor stream of a version ("features", "labels",
// "test.features", "test.labels", "split") by row range, in the type it is
// stored in, decoding only the chunks that hold those rows. Row i of a
// stream of shape [rows, d1, d2, ...] is its elements
// [i x row_width(), (i + 1) x row_width()).
//
// The reader keeps a reference to `store`'s ObjectStore: the Store must
// outlive it. It holds no catalog connection after construction.
class TensorRowReader {
 public:
  // Loads the stream's chunk list from the catalog (the only use of
  // `store`'s database, so construct it on the thread that owns `store`; the
  // reader keeps what it needs). Throws kCorrupt naming the version and role
  // when the stream is missing, its dtype is unknown, its shape is not
  // [rows, ...] of non-negative dims, its size is not rows x row_bytes(), or
  // the chunk list does not hash to the blob id or add up to its size.
  TensorRowReader(Store& store, const DatasetVersion& version, std::string_view role);

  std::uint64_t rows() const { return rows_; }
  // Scalars per row: the product of shape[1:] (1 for a vector).
  std::int64_t row_width() const { return row_width_; }
  StoredType type() const { return type_; }
  // row_width() x the type's size.
  std::size_t row_bytes() const { return row_bytes_; }
  // The number of chunk objects the stream is stored in.
  std::size_t chunk_count() const { return chunks_.size(); }
  // "dataset NAME@vN, ROLE": what errors name.
  const std::string& owner() const { return owner_; }

  // Writes rows [first, first + count) into `out`, which must hold exactly
  // count x row_bytes() bytes; throws kUsage for a range past rows() or a
  // wrong size (count 0 with an empty `out` is a valid no-op for first <=
  // rows()). Every chunk touched is decompressed and verified against its
  // object id (kCorrupt naming the version and role on damage or a missing
  // object; `out` then holds no meaningful bytes), several chunks in
  // parallel on oneTBB. A chunk wholly inside the range is decoded straight
  // into `out`; one only partly inside is decoded into a scratch buffer and
  // the needed part copied.
  // Thread-safe: several threads may read at once (a prefetching thread
  // beside the training thread); nothing here touches the catalog.
  void read(std::uint64_t first, std::uint64_t count, std::span<std::byte> out) const;

 private:
  struct Chunk {
    std::string object;
    std::uint64_t begin = 0;  // byte offset of the chunk in the stream
    std::uint64_t length = 0;
  };
  const ObjectStore* objects_;
  std::string owner_;
  StoredType type_ = StoredType::kF32;
  std::uint64_t rows_ = 0;
  std::int64_t row_width_ = 1;
  std::size_t row_bytes_ = 0;
  std::vector<Chunk> chunks_;  // in stream order; begin ascending, contiguous
};

}  // namespace anneal
