// VerifiedBlocks: the data-file blocks that reads have read and verified but
// not yet taken whole. A reader whose requests do not line up with the
// blocks (torch.load, np.load, dd with an odd block size, page faults of an
// mmap) takes most blocks in two or more pieces, and torch.load, which loads
// tensors in another order than they lie, leaves about a sixth of a file's
// blocks half taken until late in the load.
//
// For each such block an entry tracks the ranges taken so far, and for the
// most recently used ones (up to kBytes) it also keeps the block's bytes,
// so that the next piece comes from memory. The caller reads a block through
// the OS's cache and drops its pages once the block has been taken whole
// (Taken::whole): a piece whose entry no longer holds the bytes reads them
// again from the cache, not the disk, and the checksum is checked again on
// that read.
//
// An entry is keyed by what the extent says of its block: inode, offset in
// the data file, length and checksum. A data file is never written in place
// below its end, and a block that a later write replaced (or a new data file
// of the same inode) has an extent with another checksum or length, so a hit
// is exactly the bytes the extent describes, verified. An entry goes once
// its block has been taken whole, or, least recently used first, when there
// are more than kEntries.
//
// Thread safety: thread-safe; one mutex, held for a scan of the entries
// (never during a read).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>

#include "base/mutex.h"
#include "base/status.h"

namespace ckptfs::engine {

class VerifiedBlocks {
 public:
  // The bytes the entries keep at most (16 blocks of 1 MiB), and how many
  // blocks they track.
  static constexpr uint64_t kBytes = 16ull << 20;
  static constexpr size_t kEntries = 4096;

  struct Key {
    uint64_t ino = 0;
    uint64_t offset = 0;  // in the data file
    uint64_t length = 0;
    uint64_t checksum = 0;
    bool operator==(const Key&) const = default;
  };

  using Bytes = std::shared_ptr<const char[]>;

  // The OS's cache may hold a data file's pages in folios of up to this
  // many bytes (2 MiB, x86-64's PMD), naturally aligned: a folio goes only
  // when all of it does.
  static constexpr uint64_t kFolioBytes = 2ull << 20;

  struct Taken {
    Bytes bytes;
    // This take completed the block: the pages of [evict_offset,
    // evict_offset + evict_length) of the data file may go. That is the
    // block's folio-aligned span when no other block there is half taken,
    // else the block itself (whose larger folios then go with the last
    // block of the span).
    bool whole = false;
    uint64_t evict_offset = 0, evict_length = 0;
  };

  // The bytes of the blocks kept (or being read).
  uint64_t bytes() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return held_;
  }

  // The block of `k`, of which the caller takes bytes [from, to): kept, or
  // read by `read` (which verifies it; k.length bytes) and kept. Threads
  // that ask for a block being read wait for that read rather than read it
  // again; when it fails, each reads for itself.
  Result<Taken> Get(const Key& k, uint64_t from, uint64_t to,
                    const std::function<Result<Bytes>()>& read) EXCLUDES(mu_) {
    std::shared_future<Bytes> pending;
    std::promise<Bytes> mine;
    bool reading = false;
    {
      MutexLock l(&mu_);
      auto it = Find(k);
      if (it == lru_.end()) {
        lru_.push_front(Entry{k, {}, {}, 0});
        it = lru_.begin();
        while (lru_.size() > kEntries) Drop(std::prev(lru_.end()));
      } else {
        lru_.splice(lru_.begin(), lru_, it);
      }
      if (it->bytes.valid()) {
        pending = it->bytes;
      } else {
        it->bytes = mine.get_future().share();
        held_ += k.length;
        reading = true;
        Release();
      }
    }
    Bytes got;
    if (pending.valid()) got = pending.get();
    if (got == nullptr) {  // not read yet, or that read failed
      Result<Bytes> r = read();
      if (reading) mine.set_value(r.ok() ? *r : nullptr);
      if (!r.ok()) {
        MutexLock l(&mu_);
        auto it = Find(k);
        // Another thread's read of k may be pending: never wait under mu_.
        if (it != lru_.end() && it->bytes.valid() && IsReady(it->bytes) &&
            it->bytes.get() == nullptr) {
          Drop(it);
        }
        return r.status();
      }
      got = *r;
    }
    Taken t{std::move(got)};
    MutexLock l(&mu_);
    auto it = Find(k);
    if (it != lru_.end() && Take(&*it, from, to)) {
      t.whole = true;
      Drop(it);
      const uint64_t lo = k.offset / kFolioBytes * kFolioBytes;
      const uint64_t hi = (k.offset + k.length + kFolioBytes - 1) / kFolioBytes * kFolioBytes;
      const bool alone = std::none_of(lru_.begin(), lru_.end(), [&](const Entry& e) {
        return e.key.ino == k.ino && e.key.offset < hi && e.key.offset + e.key.length > lo;
      });
      t.evict_offset = alone ? lo : k.offset;
      t.evict_length = alone ? hi - lo : k.length;
    }
    return t;
  }

 private:
  struct Entry {
    Key key;
    std::shared_future<Bytes> bytes;     // invalid once released; null once its read failed
    std::map<uint64_t, uint64_t> taken;  // [from, to) ranges taken, merged
    uint64_t taken_bytes = 0;
  };
  static bool IsReady(const std::shared_future<Bytes>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Adds [from, to) to what was taken of `e`; true once that is all of it.
  static bool Take(Entry* e, uint64_t from, uint64_t to) {
    to = std::min(to, e->key.length);
    if (from < to) {
      // Merged with every range that overlaps or touches [from, to).
      auto it = e->taken.upper_bound(from);
      if (it != e->taken.begin() && std::prev(it)->second >= from) --it;
      while (it != e->taken.end() && it->first <= to) {
        from = std::min(from, it->first);
        to = std::max(to, it->second);
        e->taken_bytes -= it->second - it->first;
        it = e->taken.erase(it);
      }
      e->taken.emplace(from, to);
      e->taken_bytes += to - from;
    }
    return e->taken_bytes >= e->key.length;
  }
  std::list<Entry>::iterator Find(const Key& k) REQUIRES(mu_) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->key == k) return it;
    }
    return lru_.end();
  }
  // Lets go of the bytes of the least recently used entries that hold
  // them (keeping what was taken of them) until held_ is within kBytes;
  // the newest entry keeps its bytes.
  void Release() REQUIRES(mu_) {
    for (auto it = std::prev(lru_.end()); held_ > kBytes && it != lru_.begin(); --it) {
      if (!it->bytes.valid()) continue;
      held_ -= it->key.length;
      it->bytes = {};
    }
  }
  void Drop(std::list<Entry>::iterator it) REQUIRES(mu_) {
    if (it->bytes.valid()) held_ -= it->key.length;
    lru_.erase(it);
  }

  Mutex mu_;
  std::list<Entry> lru_ GUARDED_BY(mu_);  // front: most recently used
  uint64_t held_ GUARDED_BY(mu_) = 0;     // lengths of the entries that keep bytes
};

}  // namespace ckptfs::engine
