#include "engine/shared/range_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace ckptfs::engine {

class RangeCache::SlotFile {
 public:
  SlotFile(int fd, uint64_t slots) : fd_(fd), slots_(slots) {}
  ~SlotFile() { ::close(fd_); }
  SlotFile(const SlotFile&) = delete;
  SlotFile& operator=(const SlotFile&) = delete;
  int fd() const { return fd_; }
  std::optional<uint64_t> Take() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (!free_.empty()) {
      const uint64_t slot = free_.back();
      free_.pop_back();
      return slot;
    }
    if (next_ < slots_) return next_++;
    return std::nullopt;
  }
  void Give(uint64_t slot) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    free_.push_back(slot);
  }

 private:
  const int fd_;
  const uint64_t slots_;
  Mutex mu_;  // a leaf lock
  std::vector<uint64_t> free_ GUARDED_BY(mu_);
  uint64_t next_ GUARDED_BY(mu_) = 0;
};

RangeCache::Kept::~Kept() {
  if (file != nullptr) file->Give(slot);
}

Status RangeCache::Kept::CopyOut(uint64_t at, size_t n, char* dst) const {
  if (file == nullptr) {
    std::memcpy(dst, bytes.data() + at, n);
    return Status::OK();
  }
  for (size_t done = 0; done < n;) {
    const ssize_t r = ::pread(file->fd(), dst + done, n - done,
                              static_cast<off_t>(slot * kBlockBytes + at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : EIO;
      return Status::Errno(e, std::string("read the peer cache's file: ") +
                                  (r < 0 ? std::strerror(e) : "it ends early"));
    }
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

RangeCache::RangeCache(uint64_t capacity, Loader load, std::shared_ptr<SlotFile> file)
    : capacity_(capacity), load_(std::move(load)), file_(std::move(file)) {}

RangeCache::~RangeCache() = default;

Result<std::unique_ptr<RangeCache>> RangeCache::InDirectory(uint64_t capacity, Loader load,
                                                            const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
    // A filesystem without unnamed files: a named one, unlinked at once.
    std::string path = dir + "/.ckptfs-peer-cache-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(path.c_str());
  }
  if (fd < 0) {
    const int e = errno;
    return Status::Errno(e, "a file for the peer cache in " + dir + ": " + std::strerror(e));
  }
  auto file = std::make_shared<SlotFile>(fd, capacity / kBlockBytes + kSpareSlots);
  return std::unique_ptr<RangeCache>(new RangeCache(capacity, std::move(load), std::move(file)));
}

std::shared_ptr<const RangeCache::Kept> RangeCache::Keep(std::string* bytes) {
  auto kept = std::make_shared<Kept>();
  kept->size = bytes->size();
  if (file_ == nullptr) {
    bytes->shrink_to_fit();
    kept->bytes = std::move(*bytes);
    return kept;
  }
  const std::optional<uint64_t> slot = file_->Take();
  if (!slot.has_value()) return nullptr;
  for (size_t done = 0; done < bytes->size();) {
    const ssize_t w = ::pwrite(file_->fd(), bytes->data() + done, bytes->size() - done,
                               static_cast<off_t>(*slot * kBlockBytes + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {  // a full disk: the block is not kept
      file_->Give(*slot);
      return nullptr;
    }
    done += static_cast<size_t>(w);
  }
  kept->file = file_;
  kept->slot = *slot;
  return kept;
}

Result<size_t> RangeCache::Read(const std::string& name, uint64_t offset, size_t len, char* dst) {
  size_t done = 0;
  while (done < len) {
    const uint64_t at = offset + done;
    const uint64_t index = at / kBlockBytes;
    const uint64_t in_block = at - index * kBlockBytes;
    const uint64_t need = std::min<uint64_t>(kBlockBytes, in_block + (len - done));
    CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const Kept> block, Get(name, index, need));
    if (block->size <= in_block) break;  // the file ends before
    const size_t n = std::min<size_t>(len - done, block->size - in_block);
    CKPTFS_RETURN_IF_ERROR(block->CopyOut(in_block, n, dst + done));
    done += n;
    if (block->size < kBlockBytes) break;  // and in this block
  }
  return done;
}

Result<std::shared_ptr<const RangeCache::Kept>> RangeCache::Get(const std::string& name,
                                                                uint64_t index, uint64_t need) {
  const Key key{name, index};
  MutexLock l(&mu_);
  for (;;) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) break;
    if (it->second.kept == nullptr) {  // another caller loads it
      loaded_.Wait(&mu_);
      continue;
    }
    const std::shared_ptr<const Kept> kept = it->second.kept;
    if (kept->size >= need) {
      hits_++;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return kept;
    }
    // The file ended in it when it was read: read it again.
    held_ -= kept->size;
    lru_.erase(it->second.lru);
    blocks_.erase(it);
    break;
  }
  blocks_.emplace(key, Block{nullptr, lru_.end()});
  l.Unlock();
  std::string bytes(kBlockBytes, '\0');
  Result<size_t> n = load_(name, index * kBlockBytes, kBlockBytes, bytes.data());
  std::shared_ptr<const Kept> kept;
  if (n.ok()) {
    bytes.resize(*n);
    kept = Keep(&bytes);
  }
  l.Lock();
  loaded_.SignalAll();
  auto it = blocks_.find(key);
  if (!n.ok()) {
    blocks_.erase(it);
    return n.status();
  }
  loads_++;
  load_bytes_ += *n;
  if (kept == nullptr) {
    // The file could not take it: for this read alone.
    blocks_.erase(it);
    auto only = std::make_shared<Kept>();
    only->size = bytes.size();
    only->bytes = std::move(bytes);
    return std::shared_ptr<const Kept>(std::move(only));
  }
  it->second.kept = kept;
  lru_.push_front(key);
  it->second.lru = lru_.begin();
  held_ += kept->size;
  EvictLocked();
  return kept;
}

void RangeCache::EvictLocked() {
  while (held_ > capacity_ && !lru_.empty()) {
    auto it = blocks_.find(lru_.back());
    held_ -= it->second.kept->size;
    blocks_.erase(it);
    lru_.pop_back();
  }
}

void RangeCache::Clear() {
  MutexLock l(&mu_);
  for (const Key& k : lru_) blocks_.erase(k);
  lru_.clear();
  held_ = 0;
}

RangeCache::Stats RangeCache::stats() const {
  MutexLock l(&mu_);
  return Stats{hits_, loads_, load_bytes_, file_ == nullptr ? held_ : 0,
               file_ == nullptr ? 0 : held_};
}

}  // namespace ckptfs::engine
