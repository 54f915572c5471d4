// SealedInodes: inode numbers this store has seen sealed (format's
// kInodeSealed), so that the kernel may be told to keep what it learns of
// them with no timeout, and an open of one keeps its cached pages.
//
// A seal is never lifted, and inode numbers are never reused, so an entry
// stays true for as long as the inode lives, and one of a removed inode is
// never asked about again. Forgetting an entry only costs a cache time: the
// set is bounded (kEntries), and a shard that fills is emptied.
//
// Thread safety: thread-safe; one mutex per shard, held for one hash lookup.
#pragma once

#include <cstdint>
#include <unordered_set>

#include "base/mutex.h"

namespace ckptfs::engine {

class SealedInodes {
 public:
  // The most entries kept (about 32 bytes each).
  static constexpr size_t kEntries = 1u << 17;

  void Note(uint64_t ino) {
    Shard& s = shard(ino);
    MutexLock l(&s.mu);
    if (s.set.size() >= kEntries / kShards) s.set.clear();
    s.set.insert(ino);
  }

  bool Contains(uint64_t ino) const {
    Shard& s = shard(ino);
    MutexLock l(&s.mu);
    return s.set.count(ino) != 0;
  }

  size_t size() const {
    size_t n = 0;
    for (Shard& s : shards_) {
      MutexLock l(&s.mu);
      n += s.set.size();
    }
    return n;
  }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    Mutex mu;  // a leaf lock
    std::unordered_set<uint64_t> set GUARDED_BY(mu);
  };
  Shard& shard(uint64_t ino) const { return shards_[ino % kShards]; }
  mutable Shard shards_[kShards];
};

}  // namespace ckptfs::engine
