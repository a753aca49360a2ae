// gzip/zstd input decompression, under limits small enough that every input
// stays cheap: the limits themselves are what is being tested. The same
// input read from a file through DecompressingReader (the streamed IDX
// import's reader), in small reads, must give the same content, or fail
// too (its message may name a byte a few bytes off).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/input_stream.h"
#include "fuzz_target.h"

namespace {

// A file holding `bytes`, removed on destruction.
class TempFile {
 public:
  explicit TempFile(std::string_view bytes) {
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/anneal-fuzz-decompress-XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    path_ = name;
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("write failed");
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  anneal::DecompressLimits limits;
  limits.max_bytes = 8 << 20;
  limits.max_ratio = 1000;
  const std::string_view bytes = anneal::fuzz::as_text(data, size);
  std::optional<std::string> whole;
  try {
    whole = anneal::decompress_input(bytes, "fuzz.gz", limits);
  } catch (const anneal::Error&) {
  }
  if (!anneal::is_compressed_input(bytes)) return 0;
  const TempFile file(bytes);
  std::optional<std::string> streamed;
  try {
    const anneal::FileReader reader(file.path());
    anneal::DecompressingReader stream(reader, "fuzz.gz", limits);
    std::string content, piece(4099, '\0');
    for (std::size_t n; (n = stream.read(piece)) > 0;) content.append(piece, 0, n);
    streamed = std::move(content);
  } catch (const anneal::Error&) {
  }
  if (whole != streamed)
    throw std::logic_error(std::string("DecompressingReader ") + (streamed ? "read" : "refused") +
                           " what decompress_input " + (whole ? "read" : "refused") + (whole && streamed ? " differently" : ""));
  return 0;
}
