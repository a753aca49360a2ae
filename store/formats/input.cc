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
#include "formats/input_stream.h"

namespace anneal {

namespace {

// zlib counts in 32-bit uInt: feed it at most this much at a time.
constexpr std::size_t kZlibStep = std::size_t{1} << 30;
// The output buffer starts this small and doubles.
constexpr std::size_t kMinGrowth = std::size_t{64} << 10;

bool starts_with(std::string_view bytes, std::string_view magic) {
  return bytes.substr(0, magic.size()) == magic;
}

constexpr std::string_view kGzipMagic("\x1f\x8b", 2);
constexpr std::string_view kZstdMagic("\x28\xb5\x2f\xfd", 4);

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

// The output a stream may produce and the buffer it is decoded into. The
// size recorded in a stream is not trusted for anything: a hostile header
// must not decide what is allocated.
class BoundedOutput {
 public:
  BoundedOutput(std::size_t input_bytes, const DecompressLimits& limits, const std::string& name)
      : name_(name), input_bytes_(input_bytes), limits_(limits), limit_(output_limit(input_bytes, limits)) {}

  // Room to write at least one more byte: doubles the buffer, but never to
  // more than one byte past the limit (that byte is how passing the limit
  // is noticed). So memory in use stays within the limit plus one byte
  // (the allocation may reserve up to twice that in address space).
  void make_room() {
    if (used_ < out_.size()) return;
    std::uint64_t cap = limit_ == std::numeric_limits<std::uint64_t>::max() ? limit_ : limit_ + 1;
    std::size_t growth = std::max(out_.size(), kMinGrowth);
    out_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out_.size() + growth, cap)));
  }
  char* next() { return out_.data() + used_; }
  std::size_t room() const { return out_.size() - used_; }

  // Records `n` bytes written at next(); throws kBadData once past the limit.
  void wrote(std::size_t n) {
    used_ += n;
    if (used_ > limit_) throw past_limit(name_, input_bytes_, limits_, limit_);
  }
  std::size_t used() const { return used_; }

  std::string take() {
    out_.resize(used_);
    out_.shrink_to_fit();
    return std::move(out_);
  }

 private:
  const std::string& name_;
  std::size_t input_bytes_;
  DecompressLimits limits_;
  std::uint64_t limit_;
  std::string out_;
  std::size_t used_ = 0;
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

std::string gunzip(std::string_view bytes, const std::string& name, const DecompressLimits& limits) {
  Inflater stream = open_gzip_inflater();
  BoundedOutput out(bytes.size(), limits, name);
  std::size_t in_used = 0;
  for (;;) {
    out.make_room();
    std::size_t in_step = std::min(bytes.size() - in_used, kZlibStep);
    std::size_t out_step = std::min(out.room(), kZlibStep);
    stream->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + in_used));
    stream->avail_in = static_cast<uInt>(in_step);
    stream->next_out = reinterpret_cast<Bytef*>(out.next());
    stream->avail_out = static_cast<uInt>(out_step);
    int status = inflate(stream.get(), Z_NO_FLUSH);
    in_used += in_step - stream->avail_in;
    out.wrote(out_step - stream->avail_out);
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
  return out.take();
}

using ZstdDecoder = std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)>;

// Streaming, because frames need not record their content size; several
// concatenated frames decode as one stream.
std::string unzstd(std::string_view bytes, const std::string& name, const DecompressLimits& limits) {
  ZstdDecoder decoder(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!decoder) throw failure("zstd: cannot create a decompression context");
  // A frame may ask for a window of up to 2 GiB (or more with long mode),
  // which the decoder would allocate: 128 MiB is what zstd --long=27 and
  // every level up to 19 use.
  ZSTD_DCtx_setParameter(decoder.get(), ZSTD_d_windowLogMax, 27);
  BoundedOutput out(bytes.size(), limits, name);
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  for (;;) {
    out.make_room();
    ZSTD_outBuffer chunk{out.next(), out.room(), 0};
    std::size_t status = ZSTD_decompressStream(decoder.get(), &chunk, &in);
    if (ZSTD_isError(status))
      throw data_error(name + ": expected valid zstd data, found corrupt data near byte " +
                       std::to_string(in.pos) + " (zstd: " + ZSTD_getErrorName(status) + ")");
    out.wrote(chunk.pos);
    if (in.pos == in.size && status == 0) break;
    if (in.pos == in.size && chunk.pos < chunk.size)
      throw data_error(name + ": expected the rest of the zstd stream, found end of input after " +
                       std::to_string(bytes.size()) + " bytes (truncated file?)");
  }
  return out.take();
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
  if (starts_with(bytes, kGzipMagic)) return gunzip(bytes, display_name, limits);
  if (starts_with(bytes, kZstdMagic)) return unzstd(bytes, display_name, limits);
  return std::string(bytes);
}

namespace {
// Compressed bytes read from the file at a time.
constexpr std::size_t kCompressedPieceBytes = std::size_t{1} << 20;
}  // namespace

// The file read a piece at a time into `buffer` (the unconsumed bytes at
// [at, buffer.size())); `consumed` counts the file's bytes the decoder has
// taken, as decompress_input counts its position.
struct DecompressingReader::Impl {
  const FileReader& file;
  std::string name;
  DecompressLimits limits;
  std::function<void(std::string_view)> on_compressed;
  bool gzip = false;
  Inflater inflater{nullptr};
  ZstdDecoder zstd{nullptr, &ZSTD_freeDCtx};
  std::string buffer;
  std::size_t at = 0;
  std::uint64_t next_offset = 0;  // of the file's next unread byte
  std::uint64_t consumed = 0;
  std::uint64_t produced = 0;
  std::uint64_t limit = 0;
  bool ended = false;

  Impl(const FileReader& f, std::string display_name, const DecompressLimits& l,
       std::function<void(std::string_view)> callback)
      : file(f), name(std::move(display_name)), limits(l), on_compressed(std::move(callback)) {
    limit = output_limit(file.size(), limits);
    refill();
    gzip = starts_with(unread(), kGzipMagic);
    if (gzip) {
      inflater = open_gzip_inflater();
    } else {
      zstd.reset(ZSTD_createDCtx());
      if (!zstd) throw failure("zstd: cannot create a decompression context");
      ZSTD_DCtx_setParameter(zstd.get(), ZSTD_d_windowLogMax, 27);  // as unzstd
    }
  }

  std::string_view unread() const { return std::string_view(buffer).substr(at); }
  bool file_done() const { return next_offset == file.size(); }

  // Reads the file's next piece after what is still unread.
  void refill() {
    buffer.erase(0, at);
    at = 0;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kCompressedPieceBytes, file.size() - next_offset));
    const std::size_t old = buffer.size();
    buffer.resize(old + n);
    file.read_at(next_offset, std::span<char>(buffer.data() + old, n));
    next_offset += n;
    if (next_offset == file.size()) file.check_end();
    if (on_compressed && n > 0) on_compressed(std::string_view(buffer).substr(old, n));
  }

  void count_output(std::size_t n) {
    produced += n;
    if (produced > limit) throw past_limit(name, file.size(), limits, limit);
  }

  // After a gzip member: another member, zero padding to the end, or bad input.
  void after_gzip_member() {
    while (unread().size() < kGzipMagic.size() && !file_done()) refill();
    if (starts_with(unread(), kGzipMagic)) {
      inflateReset(inflater.get());  // concatenated members (cat a.gz b.gz, pigz)
      return;
    }
    for (;;) {
      if (unread().find_first_not_of('\0') != std::string_view::npos)
        throw data_error(name + ": expected another gzip member or end of input at byte " + std::to_string(consumed) +
                         ", found " + std::to_string(file.size() - consumed) + " bytes of other data");
      at = buffer.size();
      if (file_done()) break;
      refill();
    }
    ended = true;
  }

  std::size_t read_gzip(std::span<char> out) {
    std::size_t done = 0;
    while (done < out.size() && !ended) {
      if (unread().empty() && !file_done()) refill();
      const std::size_t in_step = std::min(unread().size(), kZlibStep);
      const std::size_t out_step = std::min(out.size() - done, kZlibStep);
      inflater->next_in = reinterpret_cast<Bytef*>(buffer.data() + at);
      inflater->avail_in = static_cast<uInt>(in_step);
      inflater->next_out = reinterpret_cast<Bytef*>(out.data() + done);
      inflater->avail_out = static_cast<uInt>(out_step);
      const int status = inflate(inflater.get(), Z_NO_FLUSH);
      const std::size_t used = in_step - inflater->avail_in;
      at += used;
      consumed += used;
      const std::size_t wrote = out_step - inflater->avail_out;
      count_output(wrote);
      done += wrote;
      if (status == Z_STREAM_END) {
        after_gzip_member();
        continue;
      }
      if (status != Z_OK && status != Z_BUF_ERROR)
        throw data_error(name + ": expected valid gzip data, found corrupt data near byte " + std::to_string(consumed) +
                         " (zlib: " + (inflater->msg ? inflater->msg : "error " + std::to_string(status)) + ")");
      if (consumed == file.size() && inflater->avail_out > 0)
        throw data_error(name + ": expected the rest of the gzip stream, found end of input after " +
                         std::to_string(file.size()) + " bytes (truncated file?)");
    }
    return done;
  }

  std::size_t read_zstd(std::span<char> out) {
    std::size_t done = 0;
    while (done < out.size() && !ended) {
      if (unread().empty() && !file_done()) refill();
      ZSTD_inBuffer in{buffer.data() + at, buffer.size() - at, 0};
      ZSTD_outBuffer chunk{out.data() + done, out.size() - done, 0};
      const std::size_t status = ZSTD_decompressStream(zstd.get(), &chunk, &in);
      at += in.pos;
      consumed += in.pos;
      if (ZSTD_isError(status))
        throw data_error(name + ": expected valid zstd data, found corrupt data near byte " + std::to_string(consumed) +
                         " (zstd: " + ZSTD_getErrorName(status) + ")");
      count_output(chunk.pos);
      done += chunk.pos;
      const bool input_done = unread().empty() && file_done();
      if (input_done && status == 0) {
        ended = true;
      } else if (input_done && chunk.pos < chunk.size) {
        throw data_error(name + ": expected the rest of the zstd stream, found end of input after " +
                         std::to_string(file.size()) + " bytes (truncated file?)");
      }
    }
    return done;
  }
};

DecompressingReader::DecompressingReader(const FileReader& file, std::string display_name,
                                         const DecompressLimits& limits,
                                         std::function<void(std::string_view)> on_compressed)
    : impl_(std::make_unique<Impl>(file, std::move(display_name), limits, std::move(on_compressed))) {}

DecompressingReader::~DecompressingReader() = default;

std::size_t DecompressingReader::read(std::span<char> out) {
  return impl_->gzip ? impl_->read_gzip(out) : impl_->read_zstd(out);
}

}  // namespace anneal
