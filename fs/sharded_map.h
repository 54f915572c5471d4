// Small concurrent maps keyed by inode number, for the per-inode state the
// FUSE layer keeps: the kernel's lookup counts and the pins they hold on
// inodes.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "base/mutex.h"
#include "engine/store.h"

namespace ckptfs::fs {

// A hash map split into kShards independently locked shards so that requests
// for different inodes rarely contend. Thread-safe. Each shard's mutex is
// taken before every engine lock (functions run under it may call the
// store) and no other ShardedMap's lock is taken while it is held.
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

  // Runs fn(ino, V&) for every entry under its shard's lock, then removes
  // them all.
  template <typename Fn>
  void EraseAll(Fn&& fn) {
    for (Shard& s : shards_) {
      MutexLock lock(&s.mu);
      for (auto& [ino, v] : s.map) fn(ino, v);
      s.map.clear();
    }
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
    mutable Mutex mu;  // before every engine lock (see ShardedMap)
    std::unordered_map<engine::Ino, V> map GUARDED_BY(mu);
  };

  Shard& ShardOf(engine::Ino ino) { return shards_[Mix(ino) % kShards]; }
  const Shard& ShardOf(engine::Ino ino) const { return shards_[Mix(ino) % kShards]; }
  // Inode numbers are sequential; spread neighbours over shards.
  static uint64_t Mix(uint64_t x) { return (x * 0x9E3779B97F4A7C15ull) >> 32; }

  std::array<Shard, kShards> shards_;
};

// How many times the kernel has been handed each inode (by lookup, create,
// mkdir, mknod, symlink, link and readdirplus) minus what it has forgotten,
// and the pin that count holds on the inode.
//
// The kernel opens files without telling us (no OPEN, no RELEASE: see
// data.cc), and answers fstat of an open file or directory with a GETATTR
// of its inode, so an inode is in use for as long as the kernel knows it.
// The first lookup of a store inode pins it (Store::OpenFile) and the
// forget that brings the count to zero unpins it (Store::Release): an
// unlinked or renamed-over file that is still open keeps its attributes
// and bytes until then, and a removed directory its attributes. Pin and unpin run under the shard lock together with the count
// change, so a forget to zero racing a new lookup of the same inode cannot
// unpin after the new lookup counted (and purge a live inode). Inodes with a
// zero count are not stored. Thread-safe.
class LookupCounts {
 public:
  // "*store" must outlive this LookupCounts.
  explicit LookupCounts(engine::Store* store) : store_(store) {}
  LookupCounts(const LookupCounts&) = delete;
  LookupCounts& operator=(const LookupCounts&) = delete;

  // Counts one lookup of `ino`. With `pin` (an inode of the store) the
  // first one pins it; when that fails nothing is counted and the error is
  // returned.
  engine::Status Add(engine::Ino ino, bool pin) {
    engine::Status st;
    counts_.Update(ino, [&](Entry& e, bool existed) {
      if (!existed && pin) {
        st = store_->OpenFile(ino);
        if (!st.ok()) return false;
        e.pinned = true;
        pinned_.fetch_add(1, std::memory_order_relaxed);
      }
      e.count++;
      return true;
    });
    return st;
  }

  // The kernel forgot `n` lookups of `ino`. At zero the entry goes, the pin
  // is released and `*gone` (when given) is set; returns what that Release
  // returned (OK otherwise).
  engine::Status Forget(engine::Ino ino, uint64_t n, bool* gone = nullptr) {
    engine::Status st;
    const bool kept = counts_.Update(ino, [&](Entry& e, bool) {
      e.count = e.count > n ? e.count - n : 0;
      if (e.count > 0) return true;
      if (e.pinned) st = Unpin(ino);
      return false;
    });
    if (gone != nullptr) *gone = !kept;
    return st;
  }

  // Forgets everything (the session ended: the kernel knows no inode any
  // more) and releases every pin. Returns the first failed Release.
  engine::Status ReleaseAll() {
    engine::Status first;
    counts_.EraseAll([&](engine::Ino ino, Entry& e) {
      if (!e.pinned) return;
      engine::Status st = Unpin(ino);
      if (first.ok()) first = st;
    });
    return first;
  }

  uint64_t Get(engine::Ino ino) const {
    std::optional<Entry> e = counts_.Get(ino);
    return e ? e->count : 0;
  }
  // Inodes the kernel currently knows.
  size_t Size() const { return counts_.Size(); }
  // Store inodes the kernel's references keep.
  int64_t pinned() const { return pinned_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    uint64_t count = 0;
    bool pinned = false;  // Store::OpenFile succeeded; Release owed
  };

  engine::Status Unpin(engine::Ino ino) {
    pinned_.fetch_sub(1, std::memory_order_relaxed);
    return store_->Release(ino);
  }

  engine::Store* const store_;
  std::atomic<int64_t> pinned_{0};
  ShardedMap<Entry> counts_;
};

}  // namespace ckptfs::fs
