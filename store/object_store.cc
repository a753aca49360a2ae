#include "anneal/object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
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

#include "anneal/encryption.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/hash.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

// Object file header (docs/STORE.md, "Objects"): 16 bytes, little-endian.
// Version 1 is a plaintext object; version 2 an encrypted one, whose header
// goes on with the key id and the secretstream header (48 bytes in all).
constexpr char kMagic[4] = {'A', 'N', 'O', 'B'};
constexpr std::uint8_t kFormatPlain = 1;
constexpr std::uint8_t kFormatEncrypted = 2;
constexpr std::uint8_t kCodecZstd = 1;
constexpr std::size_t kHeaderSize = 16;
constexpr std::size_t kStreamHeaderBytes = crypto_secretstream_xchacha20poly1305_HEADERBYTES;
constexpr std::size_t kSealBytes = crypto_secretstream_xchacha20poly1305_ABYTES;
constexpr std::size_t kEncryptedHeaderSize = kHeaderSize + sizeof(KeyId) + kStreamHeaderBytes;
// The zstd frame is encrypted in messages of this many bytes (the last one
// shorter): a reader checks each before using it, and a message is the
// most a reader must hold unverified.
constexpr std::size_t kSealChunk = std::size_t{64} << 10;
static_assert(kEncryptedHeaderSize == 48);
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

std::size_t sealed_size(std::size_t frame_bytes) {
  const std::size_t messages = std::max<std::size_t>(1, (frame_bytes + kSealChunk - 1) / kSealChunk);
  return frame_bytes + messages * kSealBytes;
}

// The object's id as the 32 bytes it spells, the additional data that ties
// an encrypted file to its name.
std::optional<Digest> id_bytes(std::string_view id) {
  if (!is_hex_digest(id)) return std::nullopt;
  Digest out;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(nibble(id[2 * i]) << 4 | nibble(id[2 * i + 1]));
  return out;
}

// An object file's header, checked.
struct Parsed {
  bool encrypted = false;
  std::uint64_t raw_size = 0;
  KeyId key_id{};
  std::size_t frame_bytes = 0;  // the zstd frame's size (inside the ciphertext when encrypted)
};

// Checks an object file's header and what its size implies, or returns an
// error description.
std::optional<std::string> check_header(std::string_view file, Parsed& parsed) {
  if (file.size() < kHeaderSize || std::memcmp(file.data(), kMagic, 4) != 0)
    return "not an anneal object (bad header)";
  const auto version = static_cast<std::uint8_t>(file[4]);
  if (version != kFormatPlain && version != kFormatEncrypted)
    return "unsupported object format version " + std::to_string(version);
  if (static_cast<std::uint8_t>(file[5]) != kCodecZstd)
    return "unsupported codec " + std::to_string(std::uint8_t(file[5]));
  parsed.encrypted = version == kFormatEncrypted;
  parsed.raw_size = get_u64le(file.data() + 8);
  if (!parsed.encrypted) {
    parsed.frame_bytes = file.size() - kHeaderSize;
  } else {
    if (file.size() < kEncryptedHeaderSize + kSealBytes) return "encrypted object truncated (shorter than its header)";
    std::memcpy(parsed.key_id.data(), file.data() + kHeaderSize, parsed.key_id.size());
    // Every message but the last holds kSealChunk bytes; the last one at
    // least one byte unless it is the only one.
    const std::size_t sealed = file.size() - kEncryptedHeaderSize;
    const std::size_t messages = (sealed + kSealChunk + kSealBytes - 1) / (kSealChunk + kSealBytes);
    const std::size_t last = sealed - (messages - 1) * (kSealChunk + kSealBytes);
    if (last < kSealBytes || (last == kSealBytes && messages > 1)) return "encrypted object truncated (a partial message)";
    parsed.frame_bytes = sealed - messages * kSealBytes;
  }
  // A damaged header must not make us allocate terabytes: no object is
  // larger than kMaxObjectSize (the largest chunk is 4 MiB), none can
  // expand more than kMaxZstdRatio, and the length must be the one the zstd
  // frame itself declares (checked once the frame is at hand).
  if (parsed.raw_size > kMaxObjectSize || parsed.raw_size / kMaxZstdRatio > parsed.frame_bytes)
    return "header claims " + std::to_string(parsed.raw_size) + " bytes, implausible from a " +
           std::to_string(parsed.frame_bytes) + "-byte zstd frame (no object holds more than " +
           std::to_string(kMaxObjectSize) + ")";
  return std::nullopt;
}

// Encrypts `frame` into out[kEncryptedHeaderSize...], whose first 24 bytes
// (the common header and key id) are already written, and writes the
// secretstream header; out holds kEncryptedHeaderSize + sealed_size(frame).
void seal(std::string_view frame, const StoreKey& key, const Digest& id, char* out) {
  crypto_secretstream_xchacha20poly1305_state state;
  auto* header = reinterpret_cast<unsigned char*>(out + kHeaderSize + sizeof(KeyId));
  crypto_secretstream_xchacha20poly1305_init_push(&state, header, key.bytes());
  // The first message authenticates the header before it and the object id.
  unsigned char ad[kHeaderSize + sizeof(KeyId) + sizeof(Digest)];
  std::memcpy(ad, out, kHeaderSize + sizeof(KeyId));
  std::memcpy(ad + kHeaderSize + sizeof(KeyId), id.data(), id.size());
  auto* cursor = reinterpret_cast<unsigned char*>(out + kEncryptedHeaderSize);
  std::size_t offset = 0;
  bool first = true;
  do {
    const std::size_t n = std::min(kSealChunk, frame.size() - offset);
    const bool last = offset + n == frame.size();
    unsigned long long written = 0;
    crypto_secretstream_xchacha20poly1305_push(
        &state, cursor, &written, reinterpret_cast<const unsigned char*>(frame.data() + offset), n,
        first ? ad : nullptr, first ? sizeof ad : 0,
        last ? crypto_secretstream_xchacha20poly1305_TAG_FINAL : crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
    cursor += written;
    offset += n;
    first = false;
  } while (offset < frame.size());
  sodium_memzero(&state, sizeof state);
}

// Decrypts and authenticates the frame of an encrypted file check_header
// accepted into `frame` (resized to parsed.frame_bytes).
std::optional<std::string> unseal(std::string_view file, const Parsed& parsed, const KeyRing* keys,
                                  std::string_view id, std::string& frame) {
  if (!keys)
    return "encrypted (key " + key_id_hex(parsed.key_id) + "), but the store is not: no key to read it with";
  const StoreKey* key = keys->find(parsed.key_id);
  if (!key) return "encrypted with key " + key_id_hex(parsed.key_id) + ", not with the store's key";
  auto digest = id_bytes(id);
  if (!digest) return "not an object name: " + std::string(id);
  crypto_secretstream_xchacha20poly1305_state state;
  const auto* header = reinterpret_cast<const unsigned char*>(file.data() + kHeaderSize + sizeof(KeyId));
  if (crypto_secretstream_xchacha20poly1305_init_pull(&state, header, key->bytes()) != 0)
    return "cannot decrypt: bad stream header";
  unsigned char ad[kHeaderSize + sizeof(KeyId) + sizeof(Digest)];
  std::memcpy(ad, file.data(), kHeaderSize + sizeof(KeyId));
  std::memcpy(ad + kHeaderSize + sizeof(KeyId), digest->data(), digest->size());
  frame.resize(parsed.frame_bytes);
  std::size_t in = kEncryptedHeaderSize, out = 0;
  bool first = true;
  std::optional<std::string> problem;
  for (;;) {
    const std::size_t n = std::min(kSealChunk + kSealBytes, file.size() - in);
    unsigned long long got = 0;
    unsigned char tag = 0;
    if (crypto_secretstream_xchacha20poly1305_pull(
            &state, reinterpret_cast<unsigned char*>(frame.data() + out), &got, &tag,
            reinterpret_cast<const unsigned char*>(file.data() + in), n, first ? ad : nullptr,
            first ? sizeof ad : 0) != 0) {
      problem = "cannot decrypt: authentication failed (the ciphertext was altered, or belongs to another object)";
      break;
    }
    in += n;
    out += got;
    first = false;
    const bool final = tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL;
    if (final != (in == file.size())) {
      problem = "cannot decrypt: the stream ends where the file does not (truncated or extended)";
      break;
    }
    if (final) break;
  }
  sodium_memzero(&state, sizeof state);
  return problem;
}

// The zstd frame of a file check_header accepted: in place for a plaintext
// object, decrypted into `scratch` for an encrypted one.
std::optional<std::string> frame_of(std::string_view file, const Parsed& parsed, const KeyRing* keys,
                                    std::string_view id, std::string& scratch, std::string_view& frame) {
  if (!parsed.encrypted) {
    frame = file.substr(kHeaderSize);
  } else {
    if (auto problem = unseal(file, parsed, keys, id, scratch)) return problem;
    frame = scratch;
  }
  const unsigned long long frame_size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (frame_size == ZSTD_CONTENTSIZE_ERROR) return "cannot decompress: not a zstd frame";
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != parsed.raw_size)
    return "decompressed size does not match the header: the header says " + std::to_string(parsed.raw_size) +
           " bytes, the zstd frame " + std::to_string(frame_size);
  return std::nullopt;
}

// Decompresses a frame into `out`, which holds exactly the size the header
// records.
std::optional<std::string> decompress(std::string_view frame, ZSTD_DCtx* dctx, std::span<char> out) {
  std::size_t n = ZSTD_decompressDCtx(dctx, out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) return std::string("cannot decompress: ") + ZSTD_getErrorName(n);
  if (n != out.size()) return "decompressed size does not match the header";
  return std::nullopt;
}

// Decodes an object file into its raw bytes, or returns an error description.
std::optional<std::string> decode(std::string_view file, const KeyRing* keys, std::string_view id,
                                  ZSTD_DCtx* dctx, std::string& scratch, std::string& raw) {
  Parsed parsed;
  if (auto problem = check_header(file, parsed)) return problem;
  std::string_view frame;
  if (auto problem = frame_of(file, parsed, keys, id, scratch, frame)) return problem;
  raw.resize(parsed.raw_size);
  return decompress(frame, dctx, std::span<char>(raw.data(), raw.size()));
}

// Encodes `raw` as an object file into `file` (grown as needed; `frame` is
// scratch for an encrypted one) and returns its size: plaintext when `key`
// is null, else encrypted with it.
std::size_t encode(std::string_view raw, const std::string& id, const StoreKey* key, ZSTD_CCtx* cctx, int level,
                   std::string& file, std::string& frame) {
  std::string& compressed = key ? frame : file;
  const std::size_t offset = key ? 0 : kHeaderSize;
  const std::size_t bound = offset + ZSTD_compressBound(raw.size());
  if (compressed.size() < bound) compressed.resize(bound);
  const std::size_t n = ZSTD_compressCCtx(cctx, compressed.data() + offset, compressed.size() - offset, raw.data(),
                                          raw.size(), level);
  if (ZSTD_isError(n)) throw failure(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
  const std::size_t size = key ? kEncryptedHeaderSize + sealed_size(n) : kHeaderSize + n;
  if (file.size() < size) file.resize(size);
  std::memcpy(file.data(), kMagic, 4);
  file[4] = static_cast<char>(key ? kFormatEncrypted : kFormatPlain);
  file[5] = static_cast<char>(kCodecZstd);
  file[6] = file[7] = 0;
  put_u64le(file.data() + 8, raw.size());
  if (key) {
    const KeyId key_id = key->id();
    std::memcpy(file.data() + kHeaderSize, key_id.data(), key_id.size());
    auto digest = id_bytes(id);
    if (!digest) throw failure("object id " + id + ": not a hash");
    seal(std::string_view(frame.data(), n), *key, *digest, file.data());
  }
  return size;
}

void write_new_file(const fs::path& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw failure(errno_message(path, "cannot create"));
  while (!bytes.empty()) {
    ssize_t w = ::write(fd, bytes.data(), bytes.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int error = errno;
      ::close(fd);
      errno = error;
      throw failure(errno_message(path, "write failed"));
    }
    bytes.remove_prefix(static_cast<std::size_t>(w));
  }
  // Start writing the file back now, without waiting: the fsync before it
  // is linked into place (ObjectStaging::publish) then finds it written
  // rather than writing a whole import's objects at the end. Only a hint;
  // the fsync is what makes the file durable.
  ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  ::close(fd);
}

}  // namespace

std::optional<std::string> decode_object_file(std::string_view file, std::string& raw) {
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx(ZSTD_createDCtx());
  if (!dctx) throw failure("zstd: cannot create a decompression context");
  std::string scratch;
  return decode(file, nullptr, "", dctx.get(), scratch, raw);
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
  // Per-thread zstd frame of an encrypted object, on its way in or out.
  mutable tbb::enumerable_thread_specific<std::string> frame;
  // Null for a store that is not encrypted.
  std::shared_ptr<const KeyRing> keys;
};

ObjectStore::ObjectStore(fs::path root, int level) : impl_(std::make_unique<Impl>()) {
  impl_->root = std::move(root);
  impl_->objects = impl_->root / "objects";
  impl_->tmp = impl_->root / "tmp";
  impl_->level = level;
}

ObjectStore::~ObjectStore() = default;

void ObjectStore::set_keys(std::shared_ptr<const KeyRing> keys) { impl_->keys = std::move(keys); }

bool ObjectStore::encrypted() const { return impl_->keys && impl_->keys->write; }

bool ObjectStore::stored_encrypted(const std::string& id) const {
  int fd = ::open(path_of(id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char header[5];
  const bool read = ::pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
  ::close(fd);
  return read && std::memcmp(header, kMagic, 4) == 0 && static_cast<std::uint8_t>(header[4]) == kFormatEncrypted;
}

fs::path ObjectStore::path_of(const std::string& id) const {
  return impl_->objects / id.substr(0, 2) / id;
}

bool ObjectStore::contains(const std::string& id) const {
  return ::access(path_of(id).c_str(), F_OK) == 0;
}

void ObjectStore::check_key_current() const {
  // Under the writer lock the record cannot change (encrypt and rekey hold
  // the gc lock), so what it says now holds until this commit ends: a
  // process that opened the store before `anneal encrypt` or `anneal rekey`
  // must not add plaintext objects, or objects under the retired key.
  const StoreKey* key = impl_->keys ? impl_->keys->write.get() : nullptr;
  auto record = read_encryption_record(impl_->root);
  const std::string store = impl_->root.string();
  if (record && !key)
    throw failure(store + ": the store was encrypted after this process opened it; run the command again with its key");
  if (!record && key)
    throw corrupt(encryption_record_path(impl_->root).string() +
                  ": missing, yet this process opened the store as encrypted; the store is damaged")
        .with(Remedy::kCheckStore);
  if (record && key && sodium_memcmp(record->check.data(), key->check().data(), 32) != 0)
    throw failure(store + ": the store's key was rotated after this process opened it; run the command again "
                  "with the new key");
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

struct ObjectStaging::Staged {
  std::string id;
  fs::path tmp;
  std::uint64_t size = 0;
  bool replace = false;  // a damaged copy is on disk: the new file takes its name
};

ObjectStaging::ObjectStaging(const ObjectStore& store)
    : store_(&store), batch_(std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}())) {}

ObjectStaging::~ObjectStaging() {
  for (const Staged& s : staged_) ::unlink(s.tmp.c_str());
}

void ObjectStaging::stage(const std::vector<const PreparedObject*>& objects) {
  const ObjectStore::Impl& impl = *store_->impl_;
  std::vector<const PreparedObject*> unique;
  {
    std::lock_guard lock(mutex_);
    if (published_) throw std::logic_error("ObjectStaging::stage after publish");
    for (const PreparedObject* object : objects)
      if (ids_.insert(object->id).second) unique.push_back(object);
  }
  // What is on disk is decided here, under the caller's writer lock (gc
  // cannot run), not when the object was prepared: an object that existed
  // then, unreferenced, may have been collected since. An object file that
  // exists but fails verification is written again and replaces the damaged
  // copy, so importing the same data heals it.
  enum class OnDisk : std::uint8_t { kIntact, kMissing, kDamaged };
  std::vector<OnDisk> state(unique.size());
  tbb::parallel_for(std::size_t(0), unique.size(), [&](std::size_t i) {
    if (!store_->contains(unique[i]->id)) state[i] = OnDisk::kMissing;
    else state[i] = store_->check(unique[i]->id) ? OnDisk::kDamaged : OnDisk::kIntact;
  });
  std::vector<const PreparedObject*> to_write;
  std::vector<Staged> batch;
  for (std::size_t i = 0; i < unique.size(); ++i) {
    if (state[i] == OnDisk::kIntact) continue;
    to_write.push_back(unique[i]);
    batch.push_back({unique[i]->id, {}, 0, state[i] == OnDisk::kDamaged});
  }
  if (to_write.empty()) return;
  store_->check_key_current();
  std::size_t first = 0;
  {
    std::lock_guard lock(mutex_);
    first = files_named_;
    files_named_ += batch.size();
  }
  for (std::size_t i = 0; i < batch.size(); ++i)
    batch[i].tmp = impl.tmp / (batch[i].id + "." + batch_ + "-" + std::to_string(first + i) + ".tmp");
  try {
    tbb::parallel_for(std::size_t(0), to_write.size(), [&](std::size_t i) {
      Staged& s = batch[i];
      std::string& file = impl.scratch.local();
      s.size = encode(to_write[i]->raw, s.id, impl.keys ? impl.keys->write.get() : nullptr, impl.cctx.local().get(),
                      impl.level, file, impl.frame.local());
      write_new_file(s.tmp, std::string_view(file.data(), s.size));
    });
  } catch (...) {
    for (const Staged& s : batch) ::unlink(s.tmp.c_str());  // a name never created: a no-op
    throw;
  }
  std::lock_guard lock(mutex_);
  staged_.insert(staged_.end(), batch.begin(), batch.end());
}

std::uint64_t ObjectStaging::publish() {
  {
    std::lock_guard lock(mutex_);
    if (published_) throw std::logic_error("ObjectStaging::publish called twice");
    published_ = true;
  }
  fault_point("objects.tmp-written");
  // Make each durable and link it into place: waits on the disk.
  std::vector<std::uint8_t> written(staged_.size(), 0);  // one byte each: set from several threads
  std::set<fs::path> dirs;
  for (const Staged& s : staged_) dirs.insert(store_->path_of(s.id).parent_path());
  parallel_io(staged_.size(), kIoThreads, [&](std::size_t i) {
    const Staged& s = staged_[i];
    fsync_path(s.tmp, O_RDONLY);
    fs::path final_path = store_->path_of(s.id);
    if (s.replace) {
      if (::rename(s.tmp.c_str(), final_path.c_str()) != 0)
        throw failure(errno_message(final_path, "cannot replace damaged object"));
      written[i] = 1;
      return;
    }
    // link() fails with EEXIST rather than replacing: an object a
    // concurrent writer stored first is kept as it is.
    int rc = ::link(s.tmp.c_str(), final_path.c_str());
    if (rc != 0 && errno == ENOENT) {  // a fan-out directory init did not create
      make_private_dir(final_path.parent_path());
      rc = ::link(s.tmp.c_str(), final_path.c_str());
    }
    if (rc == 0) written[i] = 1;
    else if (errno != EEXIST) throw failure(errno_message(final_path, "link failed"));
  });
  // Make the new names durable.
  std::vector<fs::path> dir_list(dirs.begin(), dirs.end());
  parallel_io(dir_list.size(), kIoThreads, [&](std::size_t i) { fsync_path(dir_list[i], O_RDONLY | O_DIRECTORY); });
  std::uint64_t added = 0;
  for (std::size_t i = 0; i < staged_.size(); ++i) added += written[i] ? staged_[i].size : 0;
  for (const Staged& s : staged_) ::unlink(s.tmp.c_str());  // the linked name keeps the file
  staged_.clear();
  return added;
}

std::uint64_t ObjectStore::commit(const std::vector<const PreparedObject*>& objects) const {
  ObjectStaging staging(*this);
  staging.stage(objects);
  return staging.publish();
}

std::string ObjectStore::put(std::string_view raw) const {
  PreparedObject object = prepare(raw);
  commit({&object});
  return object.id;
}

namespace {

// Reads, decodes and re-hashes an object file; returns what is wrong with it.
std::optional<std::string> read_verified(const fs::path& path, const std::string& id, const KeyRing* keys,
                                         ZSTD_DCtx* dctx, std::string& scratch, std::string& raw) {
  std::optional<std::string> problem;
  try {
    FileSnapshot file(path);
    problem = decode(file.bytes(), keys, id, dctx, scratch, raw);
  } catch (const Error& e) {
    problem = e.kind() == ErrorKind::kNotFound ? std::string("missing") : std::string(e.what());
  }
  if (!problem && to_hex(hash_bytes(raw)) != id) problem = "content does not match its hash";
  return problem;
}

}  // namespace

std::string ObjectStore::get(const std::string& id, std::string_view owner) const {
  std::string raw;
  if (auto problem = read_verified(path_of(id), id, impl_->keys.get(), impl_->dctx.local().get(),
                                   impl_->frame.local(), raw))
    throw corrupt("object " + id + " (" + std::string(owner) + "): " + *problem +
                  "; the store is damaged")
        .with(Remedy::kCheckStore);
  return raw;
}

void ObjectStore::get_into(const std::string& id, std::string_view owner, std::span<char> out) const {
  std::optional<std::string> problem;
  try {
    FileSnapshot file(path_of(id));
    Parsed parsed;
    std::string_view frame;
    problem = check_header(file.bytes(), parsed);
    if (!problem && parsed.raw_size != out.size())
      problem = "it holds " + std::to_string(parsed.raw_size) + " bytes, the catalog says " + std::to_string(out.size());
    if (!problem) problem = frame_of(file.bytes(), parsed, impl_->keys.get(), id, impl_->frame.local(), frame);
    if (!problem) problem = decompress(frame, impl_->dctx.local().get(), out);
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
  return read_verified(path_of(id), id, impl_->keys.get(), impl_->dctx.local().get(), impl_->frame.local(), raw);
}

ObjectStore::Rewrite ObjectStore::rewrite(const std::string& id, std::string& problem) const {
  const StoreKey* key = impl_->keys ? impl_->keys->write.get() : nullptr;
  const fs::path path = path_of(id);
  std::string raw;
  {
    std::optional<std::string> trouble;
    try {
      FileSnapshot file(path);
      Parsed parsed;
      if (!check_header(file.bytes(), parsed) && (parsed.encrypted == (key != nullptr)) &&
          (!key || parsed.key_id == key->id()))
        return Rewrite::kAlready;  // verified below only when rewritten: fsck is the check
      trouble = decode(file.bytes(), impl_->keys.get(), id, impl_->dctx.local().get(), impl_->frame.local(), raw);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kNotFound) return Rewrite::kAlready;  // collected meanwhile: nothing to do
      trouble = e.what();
    }
    if (!trouble && to_hex(hash_bytes(raw)) != id) trouble = "content does not match its hash";
    if (trouble) {
      problem = *trouble;
      return Rewrite::kDamaged;
    }
  }
  std::string& file = impl_->scratch.local();
  const std::size_t size = encode(raw, id, key, impl_->cctx.local().get(), impl_->level, file, impl_->frame.local());
  const fs::path tmp = impl_->tmp / (id + "." + std::to_string(::getpid()) + "-rewrite.tmp");
  try {
    write_new_file(tmp, std::string_view(file.data(), size));
    fsync_path(tmp, O_RDONLY);
    // rename() replaces the old file in one step: a reader sees either
    // file whole, and a crash leaves one of them in place.
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw failure(errno_message(path, "cannot replace object"));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  return Rewrite::kRewritten;
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
