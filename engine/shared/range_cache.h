// RangeCache: blocks of the store's segment and data files that this host
// serves its peers (docs/SHARED.md, "Peers"), kept in memory within a bound
// so that the shared storage serves each byte once however many hosts ask
// for it. Blocks are kBlockBytes of a file at aligned offsets, loaded once
// (callers that want a block being loaded wait for it) and dropped least
// recently used first. A block that the file ended in holds what there was;
// a read past its end loads it again (another host may have appended).
//
// Thread safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace ckptfs::engine {

class RangeCache {
 public:
  static constexpr uint64_t kBlockBytes = 1 << 20;

  // Reads up to `len` bytes of file `name` at `offset` into `dst` from the
  // storage: how many there were.
  using Loader = std::function<Result<size_t>(const std::string& name, uint64_t offset, size_t len,
                                              char* dst)>;

  // `capacity` bytes at most (0: nothing kept; every read goes to `load`).
  RangeCache(uint64_t capacity, Loader load) : capacity_(capacity), load_(std::move(load)) {}

  // Up to `len` bytes of `name` at `offset` into `dst`, from the blocks
  // kept or loaded now: fewer only where the file ends.
  Result<size_t> Read(const std::string& name, uint64_t offset, size_t len, char* dst)
      EXCLUDES(mu_);

  struct Stats {
    uint64_t hits = 0;        // blocks a read found kept
    uint64_t loads = 0;       // blocks read from the storage
    uint64_t load_bytes = 0;  // their bytes
    uint64_t held_bytes = 0;  // what the kept blocks hold now
  };
  Stats stats() const EXCLUDES(mu_);
  // Drops every block kept (loads under way go on).
  void Clear() EXCLUDES(mu_);
  uint64_t capacity() const { return capacity_; }

 private:
  struct Block {
    std::shared_ptr<const std::string> bytes;  // null while it loads
    std::list<std::pair<std::string, uint64_t>>::iterator lru;
  };
  using Key = std::pair<std::string, uint64_t>;  // file, block index
  // The bytes of block `index` of `name` holding at least `need` bytes (or
  // all the file has there).
  Result<std::shared_ptr<const std::string>> Get(const std::string& name, uint64_t index,
                                                 uint64_t need) EXCLUDES(mu_);
  void EvictLocked() REQUIRES(mu_);

  const uint64_t capacity_;
  const Loader load_;
  mutable Mutex mu_;
  CondVar loaded_;
  std::map<Key, Block> blocks_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);  // most recent first; loaded blocks only
  uint64_t held_ GUARDED_BY(mu_) = 0;
  uint64_t hits_ GUARDED_BY(mu_) = 0, loads_ GUARDED_BY(mu_) = 0, load_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs::engine
