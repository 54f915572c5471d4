// Small concurrent maps keyed by inode number, for the per-inode state the
// FUSE layer keeps: kernel lookup counts and what each file looked like when
// it was last opened.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "base/mutex.h"
#include "engine/store.h"

namespace ckptfs::fs {

// A hash map split into kShards independently locked shards so that requests
// for different inodes rarely contend. Thread-safe. Each shard's mutex is a
// leaf lock: no other lock is taken while it is held.
template <typename V, size_t kShards = 64>
class ShardedMap {
 public:
  std::optional<V> Get(engine::Ino ino) const {
    const Shard& s = ShardOf(ino);
    MutexLock lock(&s.mu);
    auto it = s.map.find(ino);
    if (it == s.map.end()) return std::nullopt;
    return it->second;
  }

  // Runs fn(V& value, bool existed) under the shard lock; erases the entry when
  // fn returns false. Returns what fn returned.
  template <typename Fn>
  bool Update(engine::Ino ino, Fn&& fn) {
    Shard& s = ShardOf(ino);
    MutexLock lock(&s.mu);
    auto [it, inserted] = s.map.try_emplace(ino);
    const bool keep = fn(it->second, !inserted);
    if (!keep) s.map.erase(it);
    return keep;
  }

  void Erase(engine::Ino ino) {
    Shard& s = ShardOf(ino);
    MutexLock lock(&s.mu);
    s.map.erase(ino);
  }

  size_t Size() const {
    size_t n = 0;
    for (const Shard& s : shards_) {
      MutexLock lock(&s.mu);
      n += s.map.size();
    }
    return n;
  }

 private:
  struct alignas(64) Shard {
    mutable Mutex mu;  // a leaf lock (see ShardedMap)
    std::unordered_map<engine::Ino, V> map GUARDED_BY(mu);
  };

  Shard& ShardOf(engine::Ino ino) { return shards_[Mix(ino) % kShards]; }
  const Shard& ShardOf(engine::Ino ino) const { return shards_[Mix(ino) % kShards]; }
  // Inode numbers are sequential; spread neighbours over shards.
  static uint64_t Mix(uint64_t x) { return (x * 0x9E3779B97F4A7C15ull) >> 32; }

  std::array<Shard, kShards> shards_;
};

// How many times the kernel has been handed each inode (by lookup, create,
// mkdir, mknod, symlink, link and readdirplus) minus what it has forgotten.
// Inodes with a zero count are not stored. Thread-safe.
class LookupCounts {
 public:
  void Add(engine::Ino ino, uint64_t n = 1) {
    counts_.Update(ino, [n](uint64_t& c, bool) {
      c += n;
      return true;
    });
  }
  // Returns true when the count reached zero (the kernel forgot the inode).
  bool Forget(engine::Ino ino, uint64_t n) {
    return !counts_.Update(ino, [n](uint64_t& c, bool) {
      c = c > n ? c - n : 0;
      return c > 0;
    });
  }
  uint64_t Get(engine::Ino ino) const { return counts_.Get(ino).value_or(0); }
  // Inodes the kernel currently knows.
  size_t Size() const { return counts_.Size(); }

 private:
  ShardedMap<uint64_t> counts_;
};

}  // namespace ckptfs::fs
