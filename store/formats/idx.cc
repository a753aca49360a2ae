// IDX: the big-endian array format of MNIST and Fashion-MNIST.
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "formats/idx_scan.h"
#include "formats/stats.h"

namespace anneal {

namespace {

// Elements converted (and their statistics taken) per parallel task. Fixed,
// so the merged statistics do not depend on the thread count.
constexpr std::size_t kConvertChunk = std::size_t{1} << 20;

enum class ElementType : unsigned char {
  kU8 = 0x08, kS8 = 0x09, kI16 = 0x0B, kI32 = 0x0C, kF32 = 0x0D, kF64 = 0x0E,
};

std::size_t element_bytes(unsigned char type) {
  switch (static_cast<ElementType>(type)) {
    case ElementType::kU8:
    case ElementType::kS8: return 1;
    case ElementType::kI16: return 2;
    case ElementType::kI32:
    case ElementType::kF32: return 4;
    case ElementType::kF64: return 8;
  }
  return 0;
}

std::string hex_bytes(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    auto byte = static_cast<unsigned char>(c);
    if (!out.empty()) out += ' ';
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string out;
  for (std::int64_t d : dims) {
    if (!out.empty()) out += 'x';
    out += std::to_string(d);
  }
  return out;
}

std::uint64_t read_big_endian(const unsigned char* p, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value = value << 8 | p[i];
  return value;
}

// One IDX file, validated: dims multiply out to exactly the data present.
struct IdxArray {
  unsigned char type = 0;
  std::vector<std::int64_t> dims;
  const unsigned char* data = nullptr;
  std::size_t header_bytes = 0;  // where data starts in the file
  std::uint64_t elements = 0;
  // What the dims say the data takes (uint64 max: more than any file).
  std::uint64_t data_bytes = 0;
};

// The layout an IDX file's header gives: `head` is the file's first bytes
// (all of them, or at least the header's kMaxIdxHeaderBytes), `file_size`
// its size, or at least that of `head` when the size is not known yet (the
// size is then checked with check_data_bytes once known). Leaves `data`
// unset.
IdxArray read_idx_header(std::string_view head, std::uint64_t file_size, const std::string& name) {
  if (file_size < 4 || head[0] != 0 || head[1] != 0 || element_bytes(static_cast<unsigned char>(head[2])) == 0 ||
      head[3] == 0)
    throw data_error(name + ": expected IDX magic 00 00 TYPE RANK (TYPE 08, 09, 0b, 0c, 0d or 0e; RANK >= 1), found " +
                     (file_size == 0 ? std::string("an empty file") : hex_bytes(head.substr(0, 4))));
  IdxArray array;
  array.type = static_cast<unsigned char>(head[2]);
  std::size_t rank = static_cast<unsigned char>(head[3]);
  std::size_t header = 4 + 4 * rank;
  if (file_size < header)
    throw data_error(name + ": expected " + std::to_string(header) + " header bytes for rank " +
                     std::to_string(rank) + ", found " + std::to_string(file_size));
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  std::uint64_t data_bytes = element_bytes(array.type);
  array.elements = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    std::uint64_t dim = read_big_endian(p + 4 + 4 * i, 4);
    array.dims.push_back(static_cast<std::int64_t>(dim));
    // Dims can claim far more than any file holds; compare without overflow.
    if (__builtin_mul_overflow(array.elements, dim, &array.elements) ||
        __builtin_mul_overflow(data_bytes, dim, &data_bytes))
      data_bytes = std::numeric_limits<std::uint64_t>::max();
  }
  array.header_bytes = header;
  array.data_bytes = data_bytes;
  return array;
}

// Checks that the file holds exactly the data its dims say: `found` bytes
// after the header.
void check_data_bytes(const IdxArray& array, std::uint64_t found, const std::string& name) {
  if (array.data_bytes != found)
    throw data_error(name + ": expected " +
                     (array.data_bytes == std::numeric_limits<std::uint64_t>::max()
                          ? std::string("an impossible amount of")
                          : std::to_string(array.data_bytes)) +
                     " data bytes for dims " + shape_text(array.dims) + ", found " + std::to_string(found) +
                     (found < array.data_bytes ? " (truncated file?)" : " (trailing data?)"));
}

// read_idx_header and check_data_bytes, for a file whose size is known.
IdxArray read_idx_layout(std::string_view head, std::uint64_t file_size, const std::string& name) {
  IdxArray array = read_idx_header(head, file_size, name);
  check_data_bytes(array, file_size - array.header_bytes, name);
  return array;
}

IdxArray read_idx(std::string_view bytes, const std::string& name) {
  IdxArray array = read_idx_layout(bytes, bytes.size(), name);
  array.data = reinterpret_cast<const unsigned char*>(bytes.data()) + array.header_bytes;
  return array;
}

float element_at(const IdxArray& array, std::uint64_t i) {
  switch (static_cast<ElementType>(array.type)) {
    case ElementType::kU8: return array.data[i];
    case ElementType::kS8: return static_cast<signed char>(array.data[i]);
    case ElementType::kI16:
      return static_cast<std::int16_t>(static_cast<std::uint16_t>(read_big_endian(array.data + 2 * i, 2)));
    case ElementType::kI32:
      return static_cast<float>(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_big_endian(array.data + 4 * i, 4))));
    case ElementType::kF32: {
      auto bits = static_cast<std::uint32_t>(read_big_endian(array.data + 4 * i, 4));
      float value;
      std::memcpy(&value, &bits, sizeof value);
      return value;
    }
    case ElementType::kF64: {
      std::uint64_t bits = read_big_endian(array.data + 8 * i, 8);
      double value;
      std::memcpy(&value, &bits, sizeof value);
      return static_cast<float>(value);
    }
  }
  return 0;
}

bool is_float_type(unsigned char type) {
  return type == static_cast<unsigned char>(ElementType::kF32) || type == static_cast<unsigned char>(ElementType::kF64);
}

// Converts every element to float in parallel, returning their statistics.
// f32/f64 elements that are not finite (inf, NaN, f64 beyond float32's
// range) become missing (NaN) when `policy` is kMissing; otherwise the first
// one is reported as kBadData naming `name`, its element and byte offset,
// and `note` (if any), with `remedy`.
// Integer elements are always finite.
ColumnStats convert(const IdxArray& array, std::vector<float>& out, NonFinite policy, const std::string& name,
                    std::string_view note, Remedy remedy) {
  out.resize(array.elements);
  std::size_t chunks = (array.elements + kConvertChunk - 1) / kConvertChunk;
  std::vector<ColumnStats> chunk_stats(chunks);
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> first_nonfinite(chunks, kNone);
  const bool floats = is_float_type(array.type);
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::uint64_t begin = c * kConvertChunk, end = std::min<std::uint64_t>(begin + kConvertChunk, array.elements);
    if (array.type == static_cast<unsigned char>(ElementType::kU8)) {
      for (std::uint64_t i = begin; i < end; ++i) out[i] = array.data[i];  // the common case, vectorized
    } else {
      for (std::uint64_t i = begin; i < end; ++i) out[i] = element_at(array, i);
    }
    if (floats) {
      for (std::uint64_t i = begin; i < end; ++i) {
        if (std::isfinite(out[i])) continue;
        if (policy != NonFinite::kMissing) {
          first_nonfinite[c] = i;
          return;
        }
        out[i] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    formats::add_row_stats(out.data() + begin, end - begin, 1, &chunk_stats[c]);
  });
  for (std::uint64_t i : first_nonfinite) {
    if (i == kNone) continue;
    std::string found = std::isnan(out[i]) ? "nan" : out[i] > 0 ? "inf" : "-inf";
    if (array.type == static_cast<unsigned char>(ElementType::kF64) && !std::isnan(out[i]))
      found += " (beyond float32's range)";
    throw data_error(name + ": expected a finite number, found " + found + " at element " + std::to_string(i) +
                     ", byte " + std::to_string(array.header_bytes + i * element_bytes(array.type)) +
                     (note.empty() ? "" : " (" + std::string(note) + ")"))
        .with(remedy);
  }
  ColumnStats stats;
  for (const auto& chunk : chunk_stats) stats.merge(chunk);
  return stats;
}

// N x H x W images are single-channel: {1, H, W}; other ranks keep their
// per-sample dims ({D}, {C, H, W}, ...); N scalars are {1}.
std::vector<std::int64_t> sample_shape_of(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> shape(dims.begin() + 1, dims.end());
  if (shape.empty()) return {1};
  if (shape.size() == 2) shape.insert(shape.begin(), 1);
  return shape;
}

// The Table of these images and labels without their values: checks that
// they belong together (and to the train part, given options.reference),
// names the columns and sets the sample shape and row count.
Table table_of(const IdxArray& image_array, const IdxArray& label_array, const ParseOptions& options,
               const std::string& labels_display_name) {
  const std::int64_t samples = image_array.dims[0];
  if (label_array.dims.size() != 1)
    throw data_error(labels_display_name + ": expected labels of rank 1 (one per image), found dims " +
                     shape_text(label_array.dims));
  if (label_array.dims[0] != samples)
    throw data_error(labels_display_name + ": expected " + std::to_string(samples) + " labels, one per image in " +
                     options.display_name + ", found " + std::to_string(label_array.dims[0]));
  if (samples == 0) throw data_error(options.display_name + ": expected at least one image, found 0");
  for (std::size_t i = 1; i < image_array.dims.size(); ++i)
    if (image_array.dims[i] == 0)
      throw data_error(options.display_name + ": expected non-empty samples, found dims " +
                       shape_text(image_array.dims));

  Table table;
  table.sample_shape = sample_shape_of(image_array.dims);
  if (options.reference != nullptr) {
    for (const ColumnSchema& column : *options.reference)
      if (column.name == "image" && column.shape != table.sample_shape)
        throw data_error(options.display_name + ": expected images of shape " + shape_text(column.shape) +
                         " as in the train part, found " + shape_text(table.sample_shape));
  }
  table.rows = static_cast<std::uint64_t>(samples);
  table.label_column = 1;
  table.columns.resize(2);
  table.columns[0].name = "image";
  table.columns[0].shape = table.sample_shape;
  table.columns[1].name = "label";
  table.byte_features = image_array.type == static_cast<unsigned char>(ElementType::kU8);
  return table;
}

// The labels' values and statistics. A label cannot be missing, whatever
// --nonfinite says.
void convert_labels(const IdxArray& label_array, const std::string& labels_display_name, Table& table) {
  convert(label_array, table.labels, NonFinite::kError, labels_display_name, "a label must be finite", Remedy::kNone)
      .store_into(table.columns[1]);
}

// Reads up to out.size() bytes of `input` into `out`; returns how many.
std::size_t read_some(IdxInput& input, std::string& out) { return input.read(std::span<char>(out.data(), out.size())); }

}  // namespace

Table parse_idx(std::string_view images, std::string_view labels, const ParseOptions& options,
                const std::string& labels_display_name) {
  IdxArray image_array = read_idx(images, options.display_name);
  IdxArray label_array = read_idx(labels, labels_display_name);
  Table table = table_of(image_array, label_array, options, labels_display_name);
  convert(image_array, table.features, options.nonfinite, options.display_name, "",
          Remedy::kReadNonFiniteAsMissing)
      .store_into(table.columns[0]);
  convert_labels(label_array, labels_display_name, table);
  return table;
}

std::optional<unsigned char> idx_element_type(std::string_view head) {
  if (head.size() < 4 || head[0] != 0 || head[1] != 0 || head[3] == 0) return std::nullopt;
  const auto type = static_cast<unsigned char>(head[2]);
  if (element_bytes(type) == 0) return std::nullopt;
  return type;
}

std::size_t IdxInput::read(std::span<char> out) {
  if (stream_ != nullptr) return stream_->read(out);
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), *size_ - offset_));
  if (file_ != nullptr) file_->read_at(offset_, out.first(n));
  else std::memcpy(out.data(), bytes_.data() + offset_, n);
  offset_ += n;
  return n;
}

void IdxInput::check_end() const {
  if (file_ != nullptr) file_->check_end();
}

Table scan_idx_u8(IdxInput& images, IdxInput& labels, const ParseOptions& options,
                  const std::string& labels_display_name, const IdxScanCallbacks& callbacks, std::size_t piece_bytes) {
  std::string image_head(kMaxIdxHeaderBytes, '\0');
  image_head.resize(read_some(images, image_head));
  // A stream that ended within the longest header has told its size.
  const std::optional<std::uint64_t> images_size =
      images.size() ? images.size()
                    : image_head.size() < kMaxIdxHeaderBytes ? std::optional<std::uint64_t>(image_head.size())
                                                             : std::nullopt;
  // Without the size, the head is a full kMaxIdxHeaderBytes: at least any header.
  const IdxArray image_array =
      read_idx_header(image_head, images_size.value_or(image_head.size()), options.display_name);
  if (image_array.type != static_cast<unsigned char>(ElementType::kU8))
    throw failure("internal: scan_idx_u8 given IDX elements of type " + hex_bytes(image_head.substr(2, 1)));

  // The labels: read whole once their header is checked against their
  // size and their count against the images'.
  if (!labels.size()) throw failure("internal: scan_idx_u8 given labels of unknown size");
  Table table;
  auto read_labels = [&] {
    std::string label_bytes(kMaxIdxHeaderBytes, '\0');
    label_bytes.resize(read_some(labels, label_bytes));
    IdxArray label_array = read_idx_layout(label_bytes, *labels.size(), labels_display_name);
    table = table_of(image_array, label_array, options, labels_display_name);
    const std::size_t head = label_bytes.size();
    label_bytes.resize(static_cast<std::size_t>(*labels.size()));  // one label per image, header included
    if (label_bytes.size() > head) labels.read(std::span<char>(label_bytes.data() + head, label_bytes.size() - head));
    labels.check_end();
    label_array.data = reinterpret_cast<const unsigned char*>(label_bytes.data()) + label_array.header_bytes;
    convert_labels(label_array, labels_display_name, table);
    if (callbacks.on_label_bytes) callbacks.on_label_bytes(label_bytes);
  };
  // With the images' size known, everything is checked before a pixel is read.
  if (images_size) {
    check_data_bytes(image_array, *images_size - image_array.header_bytes, options.display_name);
    read_labels();
  }

  // The pixels, a piece of whole statistics blocks at a time: each block's
  // statistics taken as convert takes them and merged in the same order,
  // so they are parse_idx's bit for bit. The head holds the first ones.
  // The next piece is read (decompressed) while the last is handed on.
  const std::size_t blocks_per_piece = std::max<std::size_t>(1, piece_bytes / kConvertChunk);
  const std::uint64_t piece_elements = std::uint64_t{blocks_per_piece} * kConvertChunk;
  // With a known size, exactly the pixels the dims say; else up to the end.
  const std::uint64_t expected = images_size ? image_array.elements : std::numeric_limits<std::uint64_t>::max();
  std::array<std::string, 2> pieces;
  for (std::string& piece : pieces) piece.resize(static_cast<std::size_t>(std::min(piece_elements, expected)));
  std::string_view carried = std::string_view(image_head).substr(image_array.header_bytes);
  std::uint64_t read = 0;  // pixels read so far
  bool ended = false;      // nothing more to read
  auto read_piece = [&](std::string& piece) -> std::size_t {
    const auto want = static_cast<std::size_t>(std::min(piece_elements, expected - read));
    const std::size_t from_head = std::min(want, carried.size());
    std::memcpy(piece.data(), carried.data(), from_head);
    carried.remove_prefix(from_head);
    const std::size_t count =
        from_head + (want > from_head ? images.read(std::span<char>(piece.data() + from_head, want - from_head)) : 0);
    read += count;
    ended = count < want || read == expected;  // a stream's end, or all the dims say
    return count;
  };
  std::vector<ColumnStats> block_stats(blocks_per_piece);
  ColumnStats stats;
  std::uint64_t found = 0;
  if (callbacks.on_bytes) callbacks.on_bytes(std::string_view(image_head).substr(0, image_array.header_bytes));
  std::size_t current = 0;
  std::size_t count = expected > 0 ? read_piece(pieces[current]) : 0;
  while (count > 0) {
    const std::string_view pixels(pieces[current].data(), count);
    const std::size_t blocks = (count + kConvertChunk - 1) / kConvertChunk;
    auto take_statistics = [&] {
      if (!callbacks.statistics) return;
      tbb::parallel_for(std::size_t{0}, blocks, [&](std::size_t b) {
        const std::size_t begin = b * kConvertChunk, end = std::min(begin + kConvertChunk, count);
        block_stats[b] = ColumnStats{};
        formats::add_row_stats(reinterpret_cast<const std::uint8_t*>(pixels.data()) + begin, end - begin, 1,
                               &block_stats[b]);
      });
    };
    auto pass_on = [&] {
      if (callbacks.on_bytes) callbacks.on_bytes(pixels);
      if (callbacks.on_pixels) callbacks.on_pixels(pixels);
    };
    std::size_t next = 0;
    auto read_ahead = [&] {
      if (!ended) next = read_piece(pieces[1 - current]);
    };
    tbb::parallel_invoke(take_statistics, pass_on, read_ahead);
    if (callbacks.statistics)
      for (std::size_t b = 0; b < blocks; ++b) stats.merge(block_stats[b]);
    found += count;
    current = 1 - current;
    count = next;
  }
  images.check_end();
  if (!images_size) {
    check_data_bytes(image_array, found, options.display_name);
    read_labels();
  }
  if (callbacks.statistics) stats.store_into(table.columns[0]);
  return table;
}

}  // namespace anneal
