// Transparent decompression of gzip and zstd inputs.
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"

namespace anneal {

namespace {

// A size hint from the stream may be wrong (a truncated gzip's last four
// bytes are not its ISIZE) or hostile: trust it only up to this many times
// the input, and never beyond kMaxSizeHint; the buffer still grows as needed.
constexpr std::size_t kMaxSizeHint = std::size_t{1} << 30;
constexpr std::size_t kMaxHintRatio = 64;
// zlib counts in 32-bit uInt: feed it at most this much at a time.
constexpr std::size_t kZlibStep = std::size_t{1} << 30;

bool starts_with(std::string_view bytes, std::string_view magic) {
  return bytes.substr(0, magic.size()) == magic;
}

constexpr std::string_view kGzipMagic("\x1f\x8b", 2);
constexpr std::string_view kZstdMagic("\x28\xb5\x2f\xfd", 4);

std::size_t plausible_size(std::size_t hint, std::size_t input_bytes) {
  return std::min({hint, kMaxHintRatio * input_bytes, kMaxSizeHint});
}

// Makes room to write more output: doubles the buffer when it is full.
void make_room(std::string& out, std::size_t used) {
  if (used == out.size()) out.resize(std::max<std::size_t>(2 * out.size(), 64 * 1024));
}

struct InflateEnd {
  void operator()(z_stream* stream) const {
    inflateEnd(stream);
    delete stream;
  }
};
using Inflater = std::unique_ptr<z_stream, InflateEnd>;

Inflater open_gzip_inflater() {
  auto stream = std::make_unique<z_stream>();
  if (inflateInit2(stream.get(), 15 + 16) != Z_OK)  // 16: gzip wrapper only
    throw failure("zlib: cannot initialize inflate");
  return Inflater(stream.release());
}

// The last member's ISIZE: the uncompressed size modulo 2^32.
std::size_t gzip_size_hint(std::string_view bytes) {
  if (bytes.size() < 18) return bytes.size();
  const auto* tail = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
  std::size_t size = tail[0] | tail[1] << 8 | tail[2] << 16 | std::size_t{tail[3]} << 24;
  return plausible_size(std::max(size + 1, bytes.size()), bytes.size());
}

std::string gunzip(std::string_view bytes, const std::string& name) {
  Inflater stream = open_gzip_inflater();
  std::string out(gzip_size_hint(bytes), '\0');
  std::size_t in_used = 0, out_used = 0;
  for (;;) {
    make_room(out, out_used);
    std::size_t in_step = std::min(bytes.size() - in_used, kZlibStep);
    std::size_t out_step = std::min(out.size() - out_used, kZlibStep);
    stream->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + in_used));
    stream->avail_in = static_cast<uInt>(in_step);
    stream->next_out = reinterpret_cast<Bytef*>(out.data() + out_used);
    stream->avail_out = static_cast<uInt>(out_step);
    int status = inflate(stream.get(), Z_NO_FLUSH);
    in_used += in_step - stream->avail_in;
    out_used += out_step - stream->avail_out;
    if (status == Z_STREAM_END) {
      std::string_view rest = bytes.substr(in_used);
      // Zero padding after the last member is common and harmless.
      if (rest.find_first_not_of('\0') == std::string_view::npos) break;
      if (!starts_with(rest, kGzipMagic))
        throw data_error(name + ": expected another gzip member or end of input at byte " +
                         std::to_string(in_used) + ", found " + std::to_string(rest.size()) +
                         " bytes of other data");
      inflateReset(stream.get());  // concatenated members (cat a.gz b.gz, pigz)
      continue;
    }
    if (status != Z_OK && status != Z_BUF_ERROR)
      throw data_error(name + ": expected valid gzip data, found corrupt data near byte " +
                       std::to_string(in_used) + " (zlib: " +
                       (stream->msg ? stream->msg : "error " + std::to_string(status)) + ")");
    if (in_used == bytes.size() && stream->avail_out > 0)
      throw data_error(name + ": expected the rest of the gzip stream, found end of input after " +
                       std::to_string(bytes.size()) + " bytes (truncated file?)");
  }
  out.resize(out_used);
  return out;
}

using ZstdDecoder = std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)>;

std::size_t zstd_size_hint(std::string_view bytes) {
  unsigned long long size = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR)
    return plausible_size(4 * bytes.size(), bytes.size());
  return plausible_size(static_cast<std::size_t>(std::min<unsigned long long>(size + 1, kMaxSizeHint)), bytes.size());
}

// Streaming, because frames need not record their content size; several
// concatenated frames decode as one stream.
std::string unzstd(std::string_view bytes, const std::string& name) {
  ZstdDecoder decoder(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!decoder) throw failure("zstd: cannot create a decompression context");
  std::string out(zstd_size_hint(bytes), '\0');
  std::size_t out_used = 0;
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  for (;;) {
    make_room(out, out_used);
    ZSTD_outBuffer chunk{out.data() + out_used, out.size() - out_used, 0};
    std::size_t status = ZSTD_decompressStream(decoder.get(), &chunk, &in);
    if (ZSTD_isError(status))
      throw data_error(name + ": expected valid zstd data, found corrupt data near byte " +
                       std::to_string(in.pos) + " (zstd: " + ZSTD_getErrorName(status) + ")");
    out_used += chunk.pos;
    if (in.pos == in.size && status == 0) break;
    if (in.pos == in.size && chunk.pos < chunk.size)
      throw data_error(name + ": expected the rest of the zstd stream, found end of input after " +
                       std::to_string(bytes.size()) + " bytes (truncated file?)");
  }
  out.resize(out_used);
  return out;
}

}  // namespace

bool is_compressed_input(std::string_view bytes) {
  return starts_with(bytes, kGzipMagic) || starts_with(bytes, kZstdMagic);
}

std::string decompress_input(std::string_view bytes, const std::string& display_name) {
  if (starts_with(bytes, kGzipMagic)) return gunzip(bytes, display_name);
  if (starts_with(bytes, kZstdMagic)) return unzstd(bytes, display_name);
  return std::string(bytes);
}

}  // namespace anneal
