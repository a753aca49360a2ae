// IDX: the big-endian array format of MNIST and Fashion-MNIST.
#include <tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "anneal/formats.h"
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
};

IdxArray read_idx(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || element_bytes(static_cast<unsigned char>(bytes[2])) == 0 ||
      bytes[3] == 0)
    throw data_error(name + ": expected IDX magic 00 00 TYPE RANK (TYPE 08, 09, 0b, 0c, 0d or 0e; RANK >= 1), found " +
                     (bytes.empty() ? std::string("an empty file") : hex_bytes(bytes.substr(0, 4))));
  IdxArray array;
  array.type = static_cast<unsigned char>(bytes[2]);
  std::size_t rank = static_cast<unsigned char>(bytes[3]);
  std::size_t header = 4 + 4 * rank;
  if (bytes.size() < header)
    throw data_error(name + ": expected " + std::to_string(header) + " header bytes for rank " +
                     std::to_string(rank) + ", found " + std::to_string(bytes.size()));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
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
  std::uint64_t found = bytes.size() - header;
  if (data_bytes != found)
    throw data_error(name + ": expected " +
                     (data_bytes == std::numeric_limits<std::uint64_t>::max() ? std::string("an impossible amount of")
                                                                             : std::to_string(data_bytes)) +
                     " data bytes for dims " + shape_text(array.dims) + ", found " + std::to_string(found) +
                     (found < data_bytes ? " (truncated file?)" : " (trailing data?)"));
  array.data = p + header;
  array.header_bytes = header;
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

}  // namespace

Table parse_idx(std::string_view images, std::string_view labels, const ParseOptions& options,
                const std::string& labels_display_name) {
  IdxArray image_array = read_idx(images, options.display_name);
  IdxArray label_array = read_idx(labels, labels_display_name);
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
  ColumnSchema& image = table.columns[0];
  image.name = "image";
  image.shape = table.sample_shape;
  convert(image_array, table.features, options.nonfinite, options.display_name, "",
          Remedy::kReadNonFiniteAsMissing)
      .store_into(image);
  table.byte_features = image_array.type == static_cast<unsigned char>(ElementType::kU8);
  ColumnSchema& label = table.columns[1];
  label.name = "label";
  // A label cannot be missing, whatever --nonfinite says.
  convert(label_array, table.labels, NonFinite::kError, labels_display_name, "a label must be finite", Remedy::kNone)
      .store_into(label);
  return table;
}

}  // namespace anneal
