// IDX images of element type u8 read a piece at a time, for imports of
// files larger than memory: the checks, messages, schema and statistics of
// parse_idx, without its float copy of the pixels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/table.h"
#include "anneal/input_stream.h"

namespace anneal {

// The most bytes an IDX header takes: magic, then up to 255 dims of 4 bytes.
inline constexpr std::size_t kMaxIdxHeaderBytes = 4 + 4 * 255;
// The element type byte of u8 data (MNIST's and Fashion-MNIST's pixels).
inline constexpr unsigned char kIdxU8Type = 0x08;

// The element type byte of the IDX data whose first bytes are `head`, when
// its magic is valid (00 00 TYPE RANK with a known TYPE and RANK >= 1);
// nullopt otherwise.
std::optional<unsigned char> idx_element_type(std::string_view head);

// Where a scan reads an IDX file's bytes, front to back: a file read with
// pread (plain input), bytes in memory, or a compressed file decompressed
// as it is read, whose size is known only at its end. Views what it is
// given, which must outlive it.
class IdxInput {
 public:
  explicit IdxInput(const FileReader& file) : file_(&file), size_(file.size()) {}
  explicit IdxInput(std::string_view bytes) : bytes_(bytes), size_(bytes.size()) {}
  explicit IdxInput(DecompressingReader& stream) : stream_(&stream) {}

  // The size, when known before reading (not for a decompressed stream).
  std::optional<std::uint64_t> size() const { return size_; }
  // Fills `out` with the next bytes; returns how many: fewer than
  // out.size() only at the end. Throws what FileReader::read_at or
  // DecompressingReader::read throw.
  std::size_t read(std::span<char> out);
  // Throws what FileReader::check_end throws (a file that became longer).
  void check_end() const;

 private:
  const FileReader* file_ = nullptr;
  std::string_view bytes_;
  DecompressingReader* stream_ = nullptr;
  std::optional<std::uint64_t> size_;
  std::uint64_t offset_ = 0;  // of the next byte read (file and memory)
};

struct IdxScanCallbacks {
  // Every byte of the images input, once, in order, header included (the
  // import hashes or stores a plain source from these). May be empty.
  std::function<void(std::string_view bytes)> on_bytes;
  // The pixels, once, in order, in pieces of any length (not cut at rows).
  // May be empty.
  std::function<void(std::string_view pixels)> on_pixels;
  // The whole labels input as read for the labels' values, once (the
  // import hashes or stores a plain labels source from these, so the
  // labels parsed are the labels stored). May be empty.
  std::function<void(std::string_view bytes)> on_label_bytes;
  // When false the pixels' statistics are not taken (a second pass that
  // only stores them): the image column's statistics are then left zero.
  bool statistics = true;
};

// Pixels a scan reads at a time: 2 statistics blocks of parse_idx (1M
// pixels each), so both cores of a small server have one; larger pieces
// only hold more (each builder fed keeps up to a piece besides its carry).
inline constexpr std::size_t kIdxScanPieceBytes = std::size_t{2} << 20;

// Reads the IDX images in `images` (element type u8: check with
// idx_element_type first) and their labels in `labels` (of known size: a
// file or bytes) as parse_idx reads them whole: the same checks in the
// same order with the same messages
// (naming options.display_name and `labels_display_name`), the same
// columns, sample shape and statistics bit for bit, and the same labels.
// Returns that Table without features (byte_features set, features empty).
// Each input is read once, front to back. When the images' size is known,
// the headers are checked against the sizes before the pixels are read, so
// dims that claim more than the file holds cost nothing, and the labels are
// read before the pixels; otherwise (a decompressed stream) the pixels are
// read to the end first, and the size check and the labels follow (the
// same order of errors). Holds the labels (their bytes and floats) and one
// piece of about `piece_bytes` pixels, whatever the size of the images. On
// an error nothing more is passed on; with an images size not known ahead,
// a file that turns out longer or shorter than its dims say has had its
// bytes passed on before the error. Throws kFailure (internal) when the
// images are valid IDX of another element type.
Table scan_idx_u8(IdxInput& images, IdxInput& labels, const ParseOptions& options,
                  const std::string& labels_display_name, const IdxScanCallbacks& callbacks,
                  std::size_t piece_bytes = kIdxScanPieceBytes);

}  // namespace anneal
