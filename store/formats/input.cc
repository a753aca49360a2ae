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
#include "anneal/input_stream.h"

namespace anneal {

namespace {

// zlib counts in 32-bit uInt: feed it at most this much at a time.
constexpr std::size_t kZlibStep = std::size_t{1} << 30;
// decompress_input decodes this many bytes at a time.
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
  // `on_compressed` gets every byte of the file once, in order, as it is read.
  CompressedInput(const FileReader& file, std::size_t piece_bytes, std::function<void(std::string_view)> on_compressed)
      : file_(&file), size_(file.size()), buffer_(std::max(piece_bytes, kLongestMagic), '\0'),
        on_compressed_(std::move(on_compressed)) {}

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
      if (on_compressed_ && step > 0) on_compressed_(std::string_view(buffer_.data() + end_, step));
      read_ += step;
      end_ += step;
      if (read_ == size_) file_->check_end();
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
  std::function<void(std::string_view)> on_compressed_;
};

// The most output `input_bytes` compressed bytes may produce.
std::uint64_t output_limit(std::uint64_t input_bytes, const DecompressLimits& limits) {
  std::uint64_t by_ratio = limits.max_ratio > std::numeric_limits<std::uint64_t>::max() / std::max<std::uint64_t>(1, input_bytes)
                               ? std::numeric_limits<std::uint64_t>::max()
                               : limits.max_ratio * input_bytes;
  return std::min(limits.max_bytes, by_ratio);
}

// The error for output past output_limit(), naming the limit and its flag.
Error past_limit(const std::string& name, std::uint64_t input_bytes, const DecompressLimits& limits,
                 std::uint64_t limit) {
  if (limit == limits.max_bytes)
    return data_error(name + ": expected at most " + std::to_string(limits.max_bytes) +
                      " bytes once decompressed, found more")
        .with(Remedy::kRaiseDecompressedSize);
  return data_error(name + ": expected at most " + std::to_string(limits.max_ratio) + " times its " +
                    std::to_string(input_bytes) + " compressed bytes once decompressed, found more")
      .with(Remedy::kRaiseDecompressionRatio);
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

using ZstdDecoder = std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)>;

}  // namespace

// The decoder, pulled a piece of output at a time; its input is a
// CompressedInput (bytes in memory, or a file read a piece at a time).
struct DecompressingReader::Impl {
  CompressedInput in;
  std::string name;
  DecompressLimits limits;
  std::uint64_t limit = 0, produced = 0;
  bool gzip = false, ended = false;
  Inflater inflater{nullptr};
  ZstdDecoder zstd{nullptr, &ZSTD_freeDCtx};

  Impl(CompressedInput input, std::string display_name, const DecompressLimits& l)
      : in(std::move(input)), name(std::move(display_name)), limits(l), limit(output_limit(in.size(), l)) {
    in.fill(kLongestMagic);
    gzip = starts_with(in.available(), kGzipMagic);
    if (gzip) {
      inflater = open_gzip_inflater();
    } else {
      // Streaming, because frames need not record their content size;
      // several concatenated frames decode as one stream.
      zstd.reset(ZSTD_createDCtx());
      if (!zstd) throw failure("zstd: cannot create a decompression context");
      // A frame may ask for a window of up to 2 GiB (or more with long
      // mode), which the decoder would allocate: 128 MiB is what zstd
      // --long=27 and every level up to 19 use.
      ZSTD_DCtx_setParameter(zstd.get(), ZSTD_d_windowLogMax, 27);
    }
  }

  // The size recorded in a stream is not trusted for anything: a hostile
  // header must not decide what is allocated, and output stops at the limit.
  void count_output(std::size_t n) {
    produced += n;
    if (produced > limit) throw past_limit(name, in.size(), limits, limit);
  }

  // After a gzip member: another member, zero padding to the end (common
  // and harmless), or bad input.
  void after_gzip_member() {
    const std::uint64_t end = in.consumed();
    in.fill(kGzipMagic.size());
    if (starts_with(in.available(), kGzipMagic)) {
      inflateReset(inflater.get());  // concatenated members (cat a.gz b.gz, pigz)
      return;
    }
    while (in.fill(1)) {
      if (in.available().find_first_not_of('\0') != std::string_view::npos)
        throw data_error(name + ": expected another gzip member or end of input at byte " + std::to_string(end) +
                         ", found " + std::to_string(in.size() - end) + " bytes of other data");
      in.consume(in.available().size());
    }
    ended = true;
  }

  std::size_t read_gzip(std::span<char> out) {
    std::size_t done = 0;
    while (done < out.size() && !ended) {
      in.fill(1);
      const std::string_view input = in.available();
      const std::size_t in_step = std::min(input.size(), kZlibStep);
      const std::size_t out_step = std::min(out.size() - done, kZlibStep);
      inflater->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input.data()));
      inflater->avail_in = static_cast<uInt>(in_step);
      inflater->next_out = reinterpret_cast<Bytef*>(out.data() + done);
      inflater->avail_out = static_cast<uInt>(out_step);
      const int status = inflate(inflater.get(), Z_NO_FLUSH);
      in.consume(in_step - inflater->avail_in);
      const std::size_t wrote = out_step - inflater->avail_out;
      count_output(wrote);
      done += wrote;
      if (status == Z_STREAM_END) {
        after_gzip_member();
        continue;
      }
      if (status != Z_OK && status != Z_BUF_ERROR)
        throw data_error(name + ": expected valid gzip data, found corrupt data near byte " +
                         std::to_string(in.consumed()) + " (zlib: " +
                         (inflater->msg ? inflater->msg : "error " + std::to_string(status)) + ")");
      if (!in.fill(1) && inflater->avail_out > 0)
        throw data_error(name + ": expected the rest of the gzip stream, found end of input after " +
                         std::to_string(in.size()) + " bytes (truncated file?)");
    }
    return done;
  }

  std::size_t read_zstd(std::span<char> out) {
    std::size_t done = 0;
    while (done < out.size() && !ended) {
      in.fill(1);
      const std::string_view input = in.available();
      ZSTD_inBuffer from{input.data(), input.size(), 0};
      ZSTD_outBuffer chunk{out.data() + done, out.size() - done, 0};
      const std::size_t status = ZSTD_decompressStream(zstd.get(), &chunk, &from);
      in.consume(from.pos);
      if (ZSTD_isError(status))
        throw data_error(name + ": expected valid zstd data, found corrupt data near byte " +
                         std::to_string(in.consumed()) + " (zstd: " + ZSTD_getErrorName(status) + ")");
      count_output(chunk.pos);
      done += chunk.pos;
      const bool input_done = !in.fill(1);
      if (input_done && status == 0) {
        ended = true;
      } else if (input_done && chunk.pos < chunk.size) {
        throw data_error(name + ": expected the rest of the zstd stream, found end of input after " +
                         std::to_string(in.size()) + " bytes (truncated file?)");
      }
    }
    return done;
  }
};

DecompressingReader::DecompressingReader(const FileReader& file, std::string display_name,
                                         const DecompressLimits& limits,
                                         std::function<void(std::string_view)> on_compressed, std::size_t piece_bytes)
    : impl_(std::make_unique<Impl>(CompressedInput(file, piece_bytes, std::move(on_compressed)),
                                   std::move(display_name), limits)) {}

DecompressingReader::DecompressingReader(std::string_view bytes, std::string display_name,
                                         const DecompressLimits& limits)
    : impl_(std::make_unique<Impl>(CompressedInput(bytes), std::move(display_name), limits)) {}

DecompressingReader::~DecompressingReader() = default;

std::size_t DecompressingReader::read(std::span<char> out) {
  return impl_->gzip ? impl_->read_gzip(out) : impl_->read_zstd(out);
}

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
  DecompressingReader reader(bytes, display_name, limits);
  std::string out;
  for (;;) {
    // Grows by pieces (the string doubling its capacity), never to more
    // than a piece past the limit.
    const std::size_t had = out.size();
    out.resize(had + kOutputPiece);
    const std::size_t n = reader.read(std::span<char>(out.data() + had, kOutputPiece));
    out.resize(had + n);
    if (n < kOutputPiece) break;
  }
  out.shrink_to_fit();
  return out;
}

}  // namespace anneal
