// Transparent decompression of gzip and zstd inputs.
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <span>
#include <limits>
#include <memory>
#include <string>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"

namespace anneal {

namespace {

// zlib counts in 32-bit uInt: feed it at most this much at a time.
constexpr std::size_t kZlibStep = std::size_t{1} << 30;
// Decompressed bytes are produced this many at a time.
constexpr std::size_t kOutputPiece = std::size_t{1} << 20;

bool starts_with(std::string_view bytes, std::string_view magic) {
  return bytes.substr(0, magic.size()) == magic;
}

constexpr std::string_view kGzipMagic("\x1f\x8b", 2);
constexpr std::string_view kZstdMagic("\x28\xb5\x2f\xfd", 4);
constexpr std::size_t kLongestMagic = 4;  // what fill() must be able to make available

// The compressed bytes, in memory or read from a file a piece at a time:
// what the decoders consume.
class CompressedInput {
 public:
  explicit CompressedInput(std::string_view whole) : whole_(whole), size_(whole.size()) {}
  CompressedInput(const FileReader& file, std::size_t piece_bytes)
      : file_(&file), size_(file.size()), buffer_(std::max(piece_bytes, kLongestMagic), '\0') {}

  // Bytes read and not yet consumed.
  std::string_view available() const {
    if (!file_) return whole_.substr(static_cast<std::size_t>(consumed_));
    return std::string_view(buffer_).substr(begin_, end_ - begin_);
  }
  void consume(std::size_t n) {
    consumed_ += n;
    begin_ += n;
  }
  // Makes at least `n` (at most a piece or kLongestMagic) bytes available, or all that
  // remain; false when fewer than `n` remain.
  bool fill(std::size_t n) {
    if (file_ && end_ - begin_ < n && read_ < size_) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      const auto step = static_cast<std::size_t>(std::min<std::uint64_t>(buffer_.size() - end_, size_ - read_));
      file_->read_at(read_, std::span<char>(buffer_.data() + end_, step));
      read_ += step;
      end_ += step;
    }
    return available().size() >= n;
  }
  std::uint64_t consumed() const { return consumed_; }
  std::uint64_t size() const { return size_; }

 private:
  std::string_view whole_;
  const FileReader* file_ = nullptr;
  std::uint64_t size_ = 0, consumed_ = 0, read_ = 0;
  std::string buffer_;
  std::size_t begin_ = 0, end_ = 0;
};

// Passes decoded bytes on, throwing once more than the limits allow have
// come. The size recorded in a stream is not trusted for anything: a
// hostile header must not decide what is allocated.
class BoundedSink {
 public:
  BoundedSink(std::uint64_t input_bytes, const DecompressLimits& limits, const std::string& name,
              const std::function<void(std::string_view)>& sink)
      : name_(name), input_bytes_(input_bytes), limits_(limits), sink_(sink) {
    std::uint64_t by_ratio = limits.max_ratio > std::numeric_limits<std::uint64_t>::max() / std::max<std::uint64_t>(1, input_bytes)
                                 ? std::numeric_limits<std::uint64_t>::max()
                                 : limits.max_ratio * input_bytes;
    limit_ = std::min(limits.max_bytes, by_ratio);
  }

  // Passes on `bytes`; throws kBadData instead once past the limit.
  void write(std::string_view bytes) {
    passed_ += bytes.size();
    if (passed_ > limit_) {
      if (limit_ == limits_.max_bytes)
        throw data_error(name_ + ": expected at most " + std::to_string(limits_.max_bytes) +
                         " bytes once decompressed, found more")
            .with(Remedy::kRaiseDecompressedSize);
      throw data_error(name_ + ": expected at most " + std::to_string(limits_.max_ratio) + " times its " +
                       std::to_string(input_bytes_) + " compressed bytes once decompressed, found more")
          .with(Remedy::kRaiseDecompressionRatio);
    }
    if (!bytes.empty()) sink_(bytes);
  }

 private:
  const std::string& name_;
  std::uint64_t input_bytes_;
  DecompressLimits limits_;
  const std::function<void(std::string_view)>& sink_;
  std::uint64_t limit_ = 0, passed_ = 0;
};

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

void gunzip(CompressedInput& in, const std::string& name, BoundedSink& out) {
  Inflater stream = open_gzip_inflater();
  std::string piece(kOutputPiece, '\0');
  for (;;) {
    in.fill(1);
    const std::string_view input = in.available();
    const std::size_t in_step = std::min(input.size(), kZlibStep);
    stream->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
    stream->avail_in = static_cast<uInt>(in_step);
    stream->next_out = reinterpret_cast<Bytef*>(piece.data());
    stream->avail_out = static_cast<uInt>(piece.size());
    int status = inflate(stream.get(), Z_NO_FLUSH);
    in.consume(in_step - stream->avail_in);
    out.write(std::string_view(piece.data(), piece.size() - stream->avail_out));
    if (status == Z_STREAM_END) {
      // Zero padding after the last member is common and harmless.
      const std::uint64_t end = in.consumed();
      while (in.fill(1) && in.available().find_first_not_of('\0') == std::string_view::npos)
        in.consume(in.available().size());
      if (!in.fill(1)) break;
      in.fill(kGzipMagic.size());
      if (in.consumed() != end || !starts_with(in.available(), kGzipMagic))
        throw data_error(name + ": expected another gzip member or end of input at byte " + std::to_string(end) +
                         ", found " + std::to_string(in.size() - end) + " bytes of other data");
      inflateReset(stream.get());  // concatenated members (cat a.gz b.gz, pigz)
      continue;
    }
    if (status != Z_OK && status != Z_BUF_ERROR)
      throw data_error(name + ": expected valid gzip data, found corrupt data near byte " +
                       std::to_string(in.consumed()) + " (zlib: " +
                       (stream->msg ? stream->msg : "error " + std::to_string(status)) + ")");
    if (!in.fill(1) && stream->avail_out > 0)
      throw data_error(name + ": expected the rest of the gzip stream, found end of input after " +
                       std::to_string(in.size()) + " bytes (truncated file?)");
  }
}

using ZstdDecoder = std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)>;

// Streaming, because frames need not record their content size; several
// concatenated frames decode as one stream.
void unzstd(CompressedInput& in, const std::string& name, BoundedSink& out) {
  ZstdDecoder decoder(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!decoder) throw failure("zstd: cannot create a decompression context");
  // A frame may ask for a window of up to 2 GiB (or more with long mode),
  // which the decoder would allocate: 128 MiB is what zstd --long=27 and
  // every level up to 19 use.
  ZSTD_DCtx_setParameter(decoder.get(), ZSTD_d_windowLogMax, 27);
  std::string piece(kOutputPiece, '\0');
  for (;;) {
    in.fill(1);
    const std::string_view input = in.available();
    ZSTD_inBuffer from{input.data(), input.size(), 0};
    ZSTD_outBuffer chunk{piece.data(), piece.size(), 0};
    std::size_t status = ZSTD_decompressStream(decoder.get(), &chunk, &from);
    in.consume(from.pos);
    if (ZSTD_isError(status))
      throw data_error(name + ": expected valid zstd data, found corrupt data near byte " +
                       std::to_string(in.consumed()) + " (zstd: " + ZSTD_getErrorName(status) + ")");
    out.write(std::string_view(piece.data(), chunk.pos));
    const bool input_done = !in.fill(1);
    if (input_done && status == 0) break;
    if (input_done && chunk.pos < chunk.size)
      throw data_error(name + ": expected the rest of the zstd stream, found end of input after " +
                       std::to_string(in.size()) + " bytes (truncated file?)");
  }
}

void decompress(CompressedInput& in, const std::string& name, const DecompressLimits& limits,
                const std::function<void(std::string_view)>& sink) {
  BoundedSink out(in.size(), limits, name, sink);
  in.fill(kZstdMagic.size());
  if (starts_with(in.available(), kGzipMagic)) return gunzip(in, name, out);
  if (starts_with(in.available(), kZstdMagic)) return unzstd(in, name, out);
  while (in.fill(1)) {  // plain: no decompression, so no limit
    sink(in.available());
    in.consume(in.available().size());
  }
}

}  // namespace

NonFinite parse_nonfinite_name(std::string_view name) {
  if (name == "error") return NonFinite::kError;
  if (name == "missing") return NonFinite::kMissing;
  throw usage_error(Subject::kNonFinitePolicy, "'" + std::string(name) + "': expected error or missing");
}

bool is_compressed_input(std::string_view bytes) {
  return starts_with(bytes, kGzipMagic) || starts_with(bytes, kZstdMagic);
}

std::string decompress_input(std::string_view bytes, const std::string& display_name,
                             const DecompressLimits& limits) {
  if (!is_compressed_input(bytes)) return std::string(bytes);
  CompressedInput in(bytes);
  std::string out;
  decompress(in, display_name, limits, [&](std::string_view piece) { out += piece; });
  out.shrink_to_fit();
  return out;
}

void decompress_file(const FileReader& file, const std::string& display_name, const DecompressLimits& limits,
                     const std::function<void(std::string_view)>& sink, std::size_t piece_bytes) {
  CompressedInput in(file, piece_bytes);
  decompress(in, display_name, limits, sink);
}

}  // namespace anneal
