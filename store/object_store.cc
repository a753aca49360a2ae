#include "anneal/object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <mutex>
#include <set>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/hash.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

// Object file header (docs/STORE.md, "Objects"): 16 bytes, little-endian.
constexpr char kMagic[4] = {'A', 'N', 'O', 'B'};
constexpr std::uint8_t kFormatVersion = 1;
constexpr std::uint8_t kCodecZstd = 1;
constexpr std::size_t kHeaderSize = 16;
// The largest object anneal writes is a 4 MiB chunk; a reader accepts up to
// 16 times that, so a future larger chunk size still reads.
constexpr std::uint64_t kMaxObjectSize = std::uint64_t{64} << 20;
// A zstd block expands at most 128 KiB from no fewer than 4 bytes (an RLE
// block), so no frame yields more than this many times its size.
constexpr std::uint64_t kMaxZstdRatio = (128 << 10) / 4;

void put_u64le(char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_u64le(const char* in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Checks an object file's header and sets raw_size to the size it records,
// or returns an error description.
std::optional<std::string> check_header(std::string_view file, std::uint64_t& raw_size) {
  if (file.size() < kHeaderSize || std::memcmp(file.data(), kMagic, 4) != 0)
    return "not an anneal object (bad header)";
  if (static_cast<std::uint8_t>(file[4]) != kFormatVersion)
    return "unsupported object format version " + std::to_string(std::uint8_t(file[4]));
  if (static_cast<std::uint8_t>(file[5]) != kCodecZstd)
    return "unsupported codec " + std::to_string(std::uint8_t(file[5]));
  raw_size = get_u64le(file.data() + 8);
  // A damaged header must not make us allocate terabytes: no object is
  // larger than kMaxObjectSize (the largest chunk is 4 MiB), none can
  // expand more than kMaxZstdRatio, and the length must be the one the zstd
  // frame itself declares.
  const std::uint64_t frame_bytes = file.size() - kHeaderSize;
  if (raw_size > kMaxObjectSize || raw_size / kMaxZstdRatio > frame_bytes)
    return "header claims " + std::to_string(raw_size) + " bytes, implausible from a " + std::to_string(frame_bytes) +
           "-byte zstd frame (no object holds more than " + std::to_string(kMaxObjectSize) + ")";
  const unsigned long long frame_size = ZSTD_getFrameContentSize(file.data() + kHeaderSize, frame_bytes);
  if (frame_size == ZSTD_CONTENTSIZE_ERROR) return "cannot decompress: not a zstd frame";
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != raw_size)
    return "decompressed size does not match the header: the header says " + std::to_string(raw_size) +
           " bytes, the zstd frame " + std::to_string(frame_size);
  return std::nullopt;
}

// Decompresses the frame of a file check_header accepted into `out`, which
// holds exactly the size the header records.
std::optional<std::string> decompress(std::string_view file, ZSTD_DCtx* dctx, std::span<char> out) {
  std::size_t n = ZSTD_decompressDCtx(dctx, out.data(), out.size(), file.data() + kHeaderSize,
                                      file.size() - kHeaderSize);
  if (ZSTD_isError(n)) return std::string("cannot decompress: ") + ZSTD_getErrorName(n);
  if (n != out.size()) return "decompressed size does not match the header";
  return std::nullopt;
}

// Decodes an object file into its raw bytes, or returns an error description.
std::optional<std::string> decode(std::string_view file, ZSTD_DCtx* dctx, std::string& raw) {
  std::uint64_t raw_size = 0;
  if (auto problem = check_header(file, raw_size)) return problem;
  raw.resize(raw_size);
  return decompress(file, dctx, std::span<char>(raw.data(), raw.size()));
}

}  // namespace

std::optional<std::string> decode_object_file(std::string_view file, std::string& raw) {
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx(ZSTD_createDCtx());
  if (!dctx) throw failure("zstd: cannot create a decompression context");
  return decode(file, dctx.get(), raw);
}

struct ObjectStore::Impl {
  fs::path root;
  fs::path objects;
  fs::path tmp;
  int level;
  mutable tbb::enumerable_thread_specific<std::unique_ptr<ZSTD_CCtx, CCtxDeleter>> cctx{
      [] { return std::unique_ptr<ZSTD_CCtx, CCtxDeleter>(ZSTD_createCCtx()); }};
  mutable tbb::enumerable_thread_specific<std::unique_ptr<ZSTD_DCtx, DCtxDeleter>> dctx{
      [] { return std::unique_ptr<ZSTD_DCtx, DCtxDeleter>(ZSTD_createDCtx()); }};
  // Per-thread output buffer for compression, grown once and reused: a fresh
  // zero-filled buffer per object costs more in page faults than zstd level 1.
  mutable tbb::enumerable_thread_specific<std::string> scratch;
};

ObjectStore::ObjectStore(fs::path root, int level) : impl_(std::make_unique<Impl>()) {
  impl_->root = std::move(root);
  impl_->objects = impl_->root / "objects";
  impl_->tmp = impl_->root / "tmp";
  impl_->level = level;
}

ObjectStore::~ObjectStore() = default;

fs::path ObjectStore::path_of(const std::string& id) const {
  return impl_->objects / id.substr(0, 2) / id;
}

bool ObjectStore::contains(const std::string& id) const {
  return ::access(path_of(id).c_str(), F_OK) == 0;
}

PreparedObject ObjectStore::prepare(std::string_view raw) const {
  PreparedObject object;
  object.id = to_hex(hash_bytes(raw));
  object.raw = raw;
  return object;
}

namespace {

// Runs fn(i) for i in [0, n) on up to `threads` plain threads. For work that
// blocks in the kernel (fsync): oneTBB's pool is sized for the CPU, and a
// worker blocked on the disk would idle a core.
void parallel_io(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& fn) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = n;  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < std::min(threads, n); ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

void fsync_path(const fs::path& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw failure(errno_message(path, "cannot open"));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw failure(errno_message(path, "fsync failed"));
}

constexpr std::size_t kIoThreads = 16;

}  // namespace

std::uint64_t ObjectStore::commit(const std::vector<const PreparedObject*>& objects) const {
  struct Pending {
    const PreparedObject* object;
    fs::path tmp;
    std::uint64_t size = 0;
    bool written = false;
  };
  // What is on disk is decided here, under the caller's writer lock (gc
  // cannot run), not when the object was prepared: an object that existed
  // then, unreferenced, may have been collected since. An object file that
  // exists but fails verification is written again and replaces the damaged
  // copy, so importing the same data heals it.
  std::vector<const PreparedObject*> unique;
  std::set<std::string> seen;  // the same chunk may appear twice in a batch
  for (const PreparedObject* object : objects)
    if (seen.insert(object->id).second) unique.push_back(object);
  enum class OnDisk : std::uint8_t { kIntact, kMissing, kDamaged };
  std::vector<OnDisk> state(unique.size());
  tbb::parallel_for(std::size_t(0), unique.size(), [&](std::size_t i) {
    if (!contains(unique[i]->id)) state[i] = OnDisk::kMissing;
    else state[i] = check(unique[i]->id) ? OnDisk::kDamaged : OnDisk::kIntact;
  });
  std::vector<Pending> pending;
  std::vector<bool> replace;
  for (std::size_t i = 0; i < unique.size(); ++i) {
    if (state[i] == OnDisk::kIntact) continue;
    pending.push_back({unique[i], {}, 0, false});
    replace.push_back(state[i] == OnDisk::kDamaged);
  }

  // Temporary names unique among concurrent commits in this and other processes.
  const std::string batch = std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());

  // 1. Compress into temporary files: CPU work, on oneTBB.
  try {
    tbb::parallel_for(std::size_t(0), pending.size(), [&](std::size_t i) {
      Pending& p = pending[i];
      std::string& file = impl_->scratch.local();
      std::size_t bound = kHeaderSize + ZSTD_compressBound(p.object->raw.size());
      if (file.size() < bound) file.resize(bound);
      std::memcpy(file.data(), kMagic, 4);
      file[4] = static_cast<char>(kFormatVersion);
      file[5] = static_cast<char>(kCodecZstd);
      file[6] = file[7] = 0;
      put_u64le(file.data() + 8, p.object->raw.size());
      std::size_t n = ZSTD_compressCCtx(impl_->cctx.local().get(), file.data() + kHeaderSize,
                                        file.size() - kHeaderSize, p.object->raw.data(),
                                        p.object->raw.size(), impl_->level);
      if (ZSTD_isError(n))
        throw failure(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
      p.size = kHeaderSize + n;
      p.tmp = impl_->tmp / (p.object->id + "." + batch + "-" + std::to_string(i) + ".tmp");
      int fd = ::open(p.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) throw failure(errno_message(p.tmp, "cannot create"));
      std::string_view bytes(file.data(), p.size);
      while (!bytes.empty()) {
        ssize_t w = ::write(fd, bytes.data(), bytes.size());
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          ::close(fd);
          throw failure(errno_message(p.tmp, "write failed"));
        }
        bytes.remove_prefix(static_cast<std::size_t>(w));
      }
      ::close(fd);
    });
    fault_point("objects.tmp-written");

    // 2. Make each durable and link it into place: waits on the disk.
    std::set<fs::path> dirs;
    for (const Pending& p : pending) dirs.insert(impl_->objects / p.object->id.substr(0, 2));
    parallel_io(pending.size(), kIoThreads, [&](std::size_t i) {
      Pending& p = pending[i];
      fsync_path(p.tmp, O_RDONLY);
      fs::path final_path = path_of(p.object->id);
      if (replace[i]) {  // a damaged copy: the verified new file takes its name
        if (::rename(p.tmp.c_str(), final_path.c_str()) != 0)
          throw failure(errno_message(final_path, "cannot replace damaged object"));
        p.written = true;
        return;
      }
      // link() fails with EEXIST rather than replacing: an object a
      // concurrent writer stored first is kept as it is.
      int rc = ::link(p.tmp.c_str(), final_path.c_str());
      if (rc != 0 && errno == ENOENT) {  // a fan-out directory init did not create
        make_private_dir(final_path.parent_path());
        rc = ::link(p.tmp.c_str(), final_path.c_str());
      }
      if (rc == 0) p.written = true;
      else if (errno != EEXIST) throw failure(errno_message(final_path, "link failed"));
      ::unlink(p.tmp.c_str());
    });

    // 3. Make the new names durable.
    std::vector<fs::path> dir_list(dirs.begin(), dirs.end());
    parallel_io(dir_list.size(), kIoThreads, [&](std::size_t i) { fsync_path(dir_list[i], O_RDONLY | O_DIRECTORY); });
  } catch (...) {
    for (const Pending& p : pending) ::unlink(p.tmp.c_str());
    throw;
  }
  std::uint64_t added = 0;
  for (const Pending& p : pending) added += p.written ? p.size : 0;
  return added;
}

std::string ObjectStore::put(std::string_view raw) const {
  PreparedObject object = prepare(raw);
  commit({&object});
  return object.id;
}

namespace {

// Reads, decodes and re-hashes an object file; returns what is wrong with it.
std::optional<std::string> read_verified(const fs::path& path, const std::string& id,
                                         ZSTD_DCtx* dctx, std::string& raw) {
  std::optional<std::string> problem;
  try {
    FileSnapshot file(path);
    problem = decode(file.bytes(), dctx, raw);
  } catch (const Error& e) {
    problem = e.kind() == ErrorKind::kNotFound ? std::string("missing") : std::string(e.what());
  }
  if (!problem && to_hex(hash_bytes(raw)) != id) problem = "content does not match its hash";
  return problem;
}

}  // namespace

std::string ObjectStore::get(const std::string& id, std::string_view owner) const {
  std::string raw;
  if (auto problem = read_verified(path_of(id), id, impl_->dctx.local().get(), raw))
    throw corrupt("object " + id + " (" + std::string(owner) + "): " + *problem +
                  "; the store is damaged")
        .with(Remedy::kCheckStore);
  return raw;
}

void ObjectStore::get_into(const std::string& id, std::string_view owner, std::span<char> out) const {
  std::optional<std::string> problem;
  try {
    FileSnapshot file(path_of(id));
    std::uint64_t raw_size = 0;
    problem = check_header(file.bytes(), raw_size);
    if (!problem && raw_size != out.size())
      problem = "it holds " + std::to_string(raw_size) + " bytes, the catalog says " + std::to_string(out.size());
    if (!problem) problem = decompress(file.bytes(), impl_->dctx.local().get(), out);
  } catch (const Error& e) {
    problem = e.kind() == ErrorKind::kNotFound ? std::string("missing") : std::string(e.what());
  }
  if (!problem && to_hex(hash_bytes(std::string_view(out.data(), out.size()))) != id)
    problem = "content does not match its hash";
  if (problem)
    throw corrupt("object " + id + " (" + std::string(owner) + "): " + *problem + "; the store is damaged")
        .with(Remedy::kCheckStore);
}

std::optional<std::string> ObjectStore::check(const std::string& id) const {
  std::string raw;
  return read_verified(path_of(id), id, impl_->dctx.local().get(), raw);
}

std::uint64_t ObjectStore::stored_size(const std::string& id) const {
  struct stat st;
  if (::stat(path_of(id).c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

std::vector<std::string> ObjectStore::list() const {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(impl_->objects, ec)) {
    if (!dir.is_directory()) continue;
    for (const auto& entry : fs::directory_iterator(dir.path(), ec)) {
      std::string name = entry.path().filename().string();
      if (is_hex_digest(name) && name.compare(0, 2, dir.path().filename().string()) == 0)
        ids.push_back(std::move(name));
    }
  }
  if (ec) throw failure(impl_->objects.string() + ": cannot list objects: " + ec.message());
  return ids;
}

void ObjectStore::remove(const std::string& id) const {
  fs::path path = path_of(id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw failure(errno_message(path, "cannot remove object"));
}

}  // namespace anneal
