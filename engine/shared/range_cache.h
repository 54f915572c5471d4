// RangeCache: blocks of the store's segment and data files that this host
// serves its peers (docs/SHARED.md, "Peers"), kept in memory within a bound
// so that the shared storage serves each byte once however many hosts ask
// for it. Blocks are kBlockBytes of a file at aligned offsets, loaded once
// (callers that want a block being loaded wait for it) and dropped least
// recently used first. A block that the file ended in holds what there was;
// a read past its end loads it again (another host may have appended).
// InDirectory keeps the blocks in a file on a local disk instead (an
// unnamed one, which goes with the process), memory holding their table.
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
  // Keeps up to `capacity` bytes in an unnamed file in directory `dir`
  // (O_TMPFILE); a block the file cannot take (a full disk) is not kept.
  static Result<std::unique_ptr<RangeCache>> InDirectory(uint64_t capacity, Loader load,
                                                         const std::string& dir);
  ~RangeCache();
  RangeCache(const RangeCache&) = delete;
  RangeCache& operator=(const RangeCache&) = delete;

  // Up to `len` bytes of `name` at `offset` into `dst`, from the blocks
  // kept or loaded now: fewer only where the file ends.
  Result<size_t> Read(const std::string& name, uint64_t offset, size_t len, char* dst)
      EXCLUDES(mu_);

  struct Stats {
    uint64_t hits = 0;        // blocks a read found kept
    uint64_t loads = 0;       // blocks read from the storage
    uint64_t load_bytes = 0;  // their bytes
    uint64_t held_bytes = 0;  // what the kept blocks hold in memory now
    uint64_t file_bytes = 0;  // what they hold in the file (InDirectory)
  };
  Stats stats() const EXCLUDES(mu_);
  // Drops every block kept (loads under way go on).
  void Clear() EXCLUDES(mu_);
  uint64_t capacity() const { return capacity_; }
  // Slots of the file beyond `capacity`: blocks dropped while a read still
  // copies out of them hold theirs until it is done.
  static constexpr uint64_t kSpareSlots = 64;
  // The most memory a cache of `capacity` holds: its blocks, or with the
  // blocks in a file (InDirectory) their table, a few dozen bytes a block
  // counted at 256.
  static uint64_t MemoryBound(uint64_t capacity, bool in_file) {
    return in_file ? (capacity / kBlockBytes + kSpareSlots) * 256 : capacity;
  }

 private:
  class SlotFile;
  // A loaded block: its bytes in memory, or a slot of the file, which is
  // free again once the block is dropped and no read copies out of it.
  struct Kept {
    std::string bytes;
    uint64_t size = 0;
    std::shared_ptr<SlotFile> file;  // null: in memory
    uint64_t slot = 0;
    ~Kept();
    // Copies `n` bytes from `at` in the block into `dst`.
    Status CopyOut(uint64_t at, size_t n, char* dst) const;
  };
  struct Block {
    std::shared_ptr<const Kept> kept;  // null while it loads
    std::list<std::pair<std::string, uint64_t>>::iterator lru;
  };
  using Key = std::pair<std::string, uint64_t>;  // file, block index
  RangeCache(uint64_t capacity, Loader load, std::shared_ptr<SlotFile> file);
  // Block `index` of `name` holding at least `need` bytes (or all the file
  // has there).
  Result<std::shared_ptr<const Kept>> Get(const std::string& name, uint64_t index, uint64_t need)
      EXCLUDES(mu_);
  // `bytes` as a block: in a slot of the file where there is one; null when
  // the file cannot take it.
  std::shared_ptr<const Kept> Keep(std::string* bytes);
  void EvictLocked() REQUIRES(mu_);

  const uint64_t capacity_;
  const Loader load_;
  const std::shared_ptr<SlotFile> file_;  // null: blocks in memory
  mutable Mutex mu_;
  CondVar loaded_;
  std::map<Key, Block> blocks_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);  // most recent first; loaded blocks only
  uint64_t held_ GUARDED_BY(mu_) = 0;
  uint64_t hits_ GUARDED_BY(mu_) = 0, loads_ GUARDED_BY(mu_) = 0, load_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs::engine
