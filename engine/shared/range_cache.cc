#include "engine/shared/range_cache.h"

#include <algorithm>
#include <cstring>

namespace ckptfs::engine {

Result<size_t> RangeCache::Read(const std::string& name, uint64_t offset, size_t len, char* dst) {
  size_t done = 0;
  while (done < len) {
    const uint64_t at = offset + done;
    const uint64_t index = at / kBlockBytes;
    const uint64_t in_block = at - index * kBlockBytes;
    const uint64_t need = std::min<uint64_t>(kBlockBytes, in_block + (len - done));
    CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const std::string> block, Get(name, index, need));
    if (block->size() <= in_block) break;  // the file ends before
    const size_t n = std::min<size_t>(len - done, block->size() - in_block);
    std::memcpy(dst + done, block->data() + in_block, n);
    done += n;
    if (block->size() < kBlockBytes) break;  // and in this block
  }
  return done;
}

Result<std::shared_ptr<const std::string>> RangeCache::Get(const std::string& name, uint64_t index,
                                                           uint64_t need) {
  const Key key{name, index};
  MutexLock l(&mu_);
  for (;;) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) break;
    if (it->second.bytes == nullptr) {  // another caller loads it
      loaded_.Wait(&mu_);
      continue;
    }
    const std::shared_ptr<const std::string> bytes = it->second.bytes;
    if (bytes->size() >= need) {
      hits_++;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return bytes;
    }
    // The file ended in it when it was read: read it again.
    held_ -= bytes->size();
    lru_.erase(it->second.lru);
    blocks_.erase(it);
    break;
  }
  blocks_.emplace(key, Block{nullptr, lru_.end()});
  Result<size_t> n = Status::OK();
  auto bytes = std::make_shared<std::string>();
  l.Unlock();
  bytes->resize(kBlockBytes);
  n = load_(name, index * kBlockBytes, kBlockBytes, bytes->data());
  if (n.ok()) bytes->resize(*n);
  l.Lock();
  loaded_.SignalAll();
  auto it = blocks_.find(key);
  if (!n.ok()) {
    blocks_.erase(it);
    return n.status();
  }
  bytes->shrink_to_fit();
  it->second.bytes = bytes;
  lru_.push_front(key);
  it->second.lru = lru_.begin();
  held_ += bytes->size();
  loads_++;
  load_bytes_ += bytes->size();
  EvictLocked();
  return std::shared_ptr<const std::string>(std::move(bytes));
}

void RangeCache::EvictLocked() {
  while (held_ > capacity_ && !lru_.empty()) {
    auto it = blocks_.find(lru_.back());
    held_ -= it->second.bytes->size();
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
  return Stats{hits_, loads_, load_bytes_, held_};
}

}  // namespace ckptfs::engine
