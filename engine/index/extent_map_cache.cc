#include "engine/index/extent_map_cache.h"

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs::engine {

// Lists a batch's changes of extents and inodes; skips everything else.
class ExtentMapCache::BatchReader {
 public:
  struct Change {
    // An extent key written (`value` set) or deleted, or (`forget`) the
    // inodes first..last to forget whole.
    bool forget = false;
    uint64_t first = 0, last = 0;
    uint64_t offset = 0;
    const std::string* value = nullptr;  // points into the batch
  };

  static std::vector<Change> Read(const meta::Writes& batch) {
    BatchReader reader;
    for (const meta::Write& w : batch.list()) {
      if (w.space == meta::Space::kExtents) {
        switch (w.kind) {
          case meta::Write::Kind::kPut:
          case meta::Write::Kind::kInsert: reader.Extent(w.key, &w.value); break;
          case meta::Write::Kind::kDelete: reader.Extent(w.key, nullptr); break;
          // Extents take no merges; forget rather than guess.
          case meta::Write::Kind::kMerge: reader.Inode(w.key); break;
        }
      } else if (w.space == meta::Space::kInodes && (w.kind == meta::Write::Kind::kDelete ||
                                                     w.kind == meta::Write::Kind::kMerge)) {
        reader.Inode(w.key);
      }
    }
    return std::move(reader.changes_);
  }

 private:
  void Extent(std::string_view key, const std::string* value) {
    if (key.size() != 16) {
      Inode(key);
      return;
    }
    Change c;
    c.first = c.last = format::GetBE64(key.data());
    c.offset = format::GetBE64(key.data() + 8);
    c.value = value;
    changes_.push_back(c);
  }
  void Inode(std::string_view key) {
    Change c;
    c.forget = true;
    c.first = key.size() >= 8 ? format::GetBE64(key.data()) : 0;
    c.last = key.size() >= 8 ? c.first : UINT64_MAX;
    changes_.push_back(c);
  }

  std::vector<Change> changes_;
};

ExtentMapCache::ExtentMapCache(size_t max_extents, size_t max_inode_extents,
                               size_t max_inline_bytes)
    : max_extents_(max_extents),
      max_inode_extents_(max_inode_extents),
      max_inline_bytes_(max_inline_bytes) {}

ExtentMapCache::Lookup ExtentMapCache::Collect(uint64_t ino, uint64_t start, uint64_t end,
                                               std::vector<Extent>* out) {
  MutexLock l(&mu_);
  auto found = by_ino_.find(ino);
  if (found == by_ino_.end()) return Lookup::kAbsent;
  const Entry& e = *found->second;
  if (e.too_large) return Lookup::kTooLarge;
  if (start >= end) return Lookup::kHeld;
  // Extents never overlap: the one before `start` may reach into the range.
  auto it = e.map.upper_bound(start);
  if (it != e.map.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.length > start) it = prev;
  }
  for (; it != e.map.end() && it->first < end; ++it) {
    out->push_back(Extent{it->first, it->second});
  }
  return Lookup::kHeld;
}

void ExtentMapCache::Insert(uint64_t ino, std::vector<Extent> extents) {
  MutexLock l(&mu_);
  auto found = by_ino_.find(ino);
  if (found != by_ino_.end()) EraseLocked(found->second);
  lru_.emplace_front();
  Entry& e = lru_.front();
  e.ino = ino;
  if (extents.size() > max_inode_extents_) {
    e.too_large = true;
  } else {
    for (Extent& x : extents) {
      e.inline_bytes += InlineBytes(x.value);
      e.map.emplace_hint(e.map.end(), x.offset, std::move(x.value));
    }
  }
  by_ino_[ino] = lru_.begin();
  total_ += e.map.size() + 1;
  inline_bytes_ += e.inline_bytes;
  EnforceBoundsLocked(lru_.begin());
}

void ExtentMapCache::Apply(const meta::Writes& batch) {
  {
    MutexLock l(&mu_);
    if (by_ino_.empty()) return;
  }
  const std::vector<BatchReader::Change> changes = BatchReader::Read(batch);
  MutexLock l(&mu_);
  std::set<uint64_t> written;
  for (const BatchReader::Change& c : changes) {
    if (c.forget) {
      ForgetRangeLocked(c.first, c.last);
      continue;
    }
    auto found = by_ino_.find(c.first);
    if (found == by_ino_.end() || found->second->too_large) continue;
    Entry& e = *found->second;
    format::ExtentValue v;
    if (c.value && !format::DecodeExtent(*c.value, &v).ok()) {
      EraseLocked(found->second);  // the index answers, and reports the damage
      continue;
    }
    written.insert(c.first);
    auto old = e.map.find(c.offset);
    if (old != e.map.end()) {
      e.inline_bytes -= InlineBytes(old->second);
      inline_bytes_ -= InlineBytes(old->second);
    }
    if (!c.value) {
      if (old != e.map.end()) {
        e.map.erase(old);
        total_--;
      }
      continue;
    }
    e.inline_bytes += InlineBytes(v);
    inline_bytes_ += InlineBytes(v);
    if (old != e.map.end()) {
      old->second = std::move(v);
    } else {
      e.map.emplace(c.offset, std::move(v));
      total_++;
    }
  }
  for (uint64_t ino : written) {
    auto found = by_ino_.find(ino);
    if (found == by_ino_.end()) continue;
    TouchLocked(found->second);
    EnforceBoundsLocked(found->second);
  }
}

void ExtentMapCache::ForgetTouched(const meta::Writes& batch) {
  const std::vector<BatchReader::Change> changes = BatchReader::Read(batch);
  MutexLock l(&mu_);
  for (const BatchReader::Change& c : changes) ForgetRangeLocked(c.first, c.last);
}

void ExtentMapCache::Forget(uint64_t ino) {
  MutexLock l(&mu_);
  auto found = by_ino_.find(ino);
  if (found != by_ino_.end()) EraseLocked(found->second);
}

void ExtentMapCache::ForgetAll() {
  MutexLock l(&mu_);
  ForgetAllLocked();
}

size_t ExtentMapCache::inodes() {
  MutexLock l(&mu_);
  return by_ino_.size();
}

size_t ExtentMapCache::extents() {
  MutexLock l(&mu_);
  return total_ - by_ino_.size();
}

size_t ExtentMapCache::inline_bytes() {
  MutexLock l(&mu_);
  return inline_bytes_;
}

size_t ExtentMapCache::bytes() {
  MutexLock l(&mu_);
  return total_ * kBytesPerExtent + inline_bytes_;
}

void ExtentMapCache::ForgetAllLocked() {
  lru_.clear();
  by_ino_.clear();
  total_ = 0;
  inline_bytes_ = 0;
}

void ExtentMapCache::ForgetRangeLocked(uint64_t first, uint64_t last) {
  if (first == last) {
    auto found = by_ino_.find(first);
    if (found != by_ino_.end()) EraseLocked(found->second);
    return;
  }
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (it->ino >= first && it->ino <= last) EraseLocked(it);
    it = next;
  }
}

void ExtentMapCache::TouchLocked(List::iterator it) { lru_.splice(lru_.begin(), lru_, it); }

void ExtentMapCache::EraseLocked(List::iterator it) {
  total_ -= it->map.size() + 1;
  inline_bytes_ -= it->inline_bytes;
  by_ino_.erase(it->ino);
  lru_.erase(it);
}

void ExtentMapCache::EnforceBoundsLocked(List::iterator it) {
  if (!it->too_large && it->map.size() > max_inode_extents_) {
    total_ -= it->map.size();
    inline_bytes_ -= it->inline_bytes;
    it->map.clear();
    it->inline_bytes = 0;
    it->too_large = true;
  }
  while ((total_ > max_extents_ || inline_bytes_ > max_inline_bytes_) && !lru_.empty()) {
    EraseLocked(std::prev(lru_.end()));
  }
}

}  // namespace ckptfs::engine
