// VerifiedBlocks: the data-file blocks that reads read and verified last,
// kept so that the next read that needs the rest of a block takes it from
// memory. A reader whose requests do not line up with the blocks (torch.load,
// np.load, dd with an odd block size, page faults of an mmap) needs most
// blocks twice or more, and each time the whole block would be read from the
// disk and verified again.
//
// An entry is keyed by what the extent says of its block: inode, offset in
// the data file, length and checksum. A data file is never written in place
// below its end, and a block that a later write replaced (or a new data file
// of the same inode) has an extent with another checksum or length, so a hit
// is exactly the bytes the extent describes, verified. Entries are not
// dropped when a file changes; they fall out, least recently used first, as
// new blocks come (at most kBlocks blocks, kBlocks × max_record_bytes bytes).
//
// Thread safety: thread-safe; one mutex, held for a scan of kBlocks entries
// (never during a read).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>

#include "base/mutex.h"
#include "base/status.h"

namespace ckptfs::engine {

class VerifiedBlocks {
 public:
  static constexpr size_t kBlocks = 16;

  struct Key {
    uint64_t ino = 0;
    uint64_t offset = 0;  // in the data file
    uint64_t length = 0;
    uint64_t checksum = 0;
    bool operator==(const Key&) const = default;
  };

  using Bytes = std::shared_ptr<const char[]>;

  // The block of `k`: kept, or read by `read` (which verifies it; k.length
  // bytes) and kept. Threads that ask for a block being read wait for that
  // read rather than read it again; when it fails, each reads for itself.
  // The bytes of the blocks kept (or being read).
  uint64_t bytes() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    uint64_t total = 0;
    for (const Entry& e : lru_) total += e.key.length;
    return total;
  }

  Result<Bytes> Get(const Key& k, const std::function<Result<Bytes>()>& read) EXCLUDES(mu_) {
    std::shared_future<Bytes> pending;
    std::promise<Bytes> mine;
    {
      MutexLock l(&mu_);
      auto it = Find(k);
      if (it != lru_.end()) {
        lru_.splice(lru_.begin(), lru_, it);
        pending = it->bytes;
      } else {
        lru_.push_front(Entry{k, mine.get_future().share()});
        if (lru_.size() > kBlocks) lru_.pop_back();
      }
    }
    if (pending.valid()) {
      Bytes b = pending.get();
      if (b != nullptr) return b;
      return read();  // that read failed
    }
    Result<Bytes> got = read();
    mine.set_value(got.ok() ? *got : nullptr);
    if (!got.ok()) {
      MutexLock l(&mu_);
      auto it = Find(k);
      // Another thread's entry for k may be pending: never wait under mu_.
      if (it != lru_.end() && IsReady(it->bytes) && it->bytes.get() == nullptr) lru_.erase(it);
    }
    return got;
  }

 private:
  struct Entry {
    Key key;
    std::shared_future<Bytes> bytes;  // null once its read failed
  };
  static bool IsReady(const std::shared_future<Bytes>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  std::list<Entry>::iterator Find(const Key& k) REQUIRES(mu_) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->key == k) return it;
    }
    return lru_.end();
  }

  Mutex mu_;
  std::list<Entry> lru_ GUARDED_BY(mu_);  // front: most recently used
};

}  // namespace ckptfs::engine
