// ExtentMapCache: the extents of recently written inodes, in memory.
//
// An overwrite replaces extent keys in the index; RocksDB keeps every
// replaced key as a tombstone until a flush and a compaction drop it, and a
// range scan over one inode's extents steps over all of them. Small random
// overwrites of one file would then make each scan longer than the last.
// The store therefore keeps, for inodes it writes, a copy of their extents:
// an ordered map from file offset to extent, answering range lookups in
// O(log n) whatever the index holds.
//
// Contract (StoreImpl keeps it):
//   - A held map equals the inode's extents in the index as of the last
//     batch that committed: every committed batch is passed to Apply, in
//     commit order per inode, before the committing thread lets go of the
//     inode's mutex.
//   - Only a caller that holds the inode's mutex (so that no batch of that
//     inode commits meanwhile) inserts its map, built from the index.
//   - Anything that changes extents behind the store's back (none today)
//     must call ForgetAll.
// When a batch could not be applied (an undecodable value, a failed
// commit), the inode's map is dropped and the index answers again.
//
// Bounded memory: at most `max_extents` extents in all, counting each inode
// as one more, and at most `max_inline_bytes` of small files' data kept in
// their inline extents; the inodes written least recently go first. An inode
// with more than `max_inode_extents` is remembered as too large and answered
// by the index. Each extent costs at most kBytesPerExtent besides its inline
// data, so the whole is at most MaxBytes().
//
// Thread safety: all methods may be called concurrently. Lock order: mu_ is
// a leaf (taken under inode mutexes, nothing taken under it).
#pragma once


#include <cstdint>
#include <list>
#include <map>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "format/format.h"
#include "meta/kv.h"

namespace ckptfs::engine {

// One extent of a file: where its bytes from `offset` on are.
struct Extent {
  uint64_t offset = 0;
  format::ExtentValue value;
};

class ExtentMapCache {
 public:
  // Default bounds of the store: about 16 MiB of extents in all, and files of
  // up to 65536 extents (64 GiB in records of 1 MiB).
  static constexpr size_t kDefaultMaxExtents = 1 << 17;
  static constexpr size_t kDefaultMaxInodeExtents = 1 << 16;
  static constexpr size_t kDefaultMaxInlineBytes = 8 << 20;
  // One extent in a map: the tree node, its key and ExtentValue, and the
  // allocator's header; an entry (an inode) costs no more.
  static constexpr size_t kBytesPerExtent = 128;
  static constexpr size_t MaxBytes(size_t max_extents, size_t max_inline_bytes) {
    return max_extents * kBytesPerExtent + max_inline_bytes;
  }

  enum class Lookup {
    kHeld,      // the map is held: the answer is complete
    kTooLarge,  // the inode has too many extents: ask the index
    kAbsent,    // nothing known: ask the index (and Insert, if holding its mutex)
  };

  ExtentMapCache(size_t max_extents, size_t max_inode_extents,
                 size_t max_inline_bytes = kDefaultMaxInlineBytes);
  ExtentMapCache(const ExtentMapCache&) = delete;
  ExtentMapCache& operator=(const ExtentMapCache&) = delete;

  // When the map of `ino` is held, appends its extents that overlap
  // [start, end) to `*out`, in offset order.
  Lookup Collect(uint64_t ino, uint64_t start, uint64_t end, std::vector<Extent>* out);

  // Holds `extents` (all of the inode's, in offset order, as the index has
  // them) as the map of `ino`, or marks it too large.
  // REQUIRES: the caller holds the mutex of `ino`'s InodeState.
  void Insert(uint64_t ino, std::vector<Extent> extents);

  // Applies a batch that committed; an inode whose key the batch deletes is
  // forgotten.
  void Apply(const meta::Writes& batch);
  // Forgets the inodes a batch touches, for a batch whose commit failed (and
  // that may or may not be in the index).
  void ForgetTouched(const meta::Writes& batch);
  void Forget(uint64_t ino);
  void ForgetAll();

  // What is held, for tests and statistics.
  size_t inodes();
  size_t extents();
  size_t inline_bytes();
  // The memory held, as MaxBytes() counts it.
  size_t bytes();

 private:
  class BatchReader;
  struct Entry {
    uint64_t ino = 0;
    bool too_large = false;
    std::map<uint64_t, format::ExtentValue> map;
    size_t inline_bytes = 0;  // of the inline extents in `map`
  };
  static size_t InlineBytes(const format::ExtentValue& v) {
    return v.is_inline ? v.inline_data.size() : 0;
  }
  using List = std::list<Entry>;

  // Moves the entry to the front (most recently written).
  void TouchLocked(List::iterator it) REQUIRES(mu_);
  void EraseLocked(List::iterator it) REQUIRES(mu_);
  // Forgets inodes first..last (inclusive).
  void ForgetRangeLocked(uint64_t first, uint64_t last) REQUIRES(mu_);
  void ForgetAllLocked() REQUIRES(mu_);
  // Marks the entry too large when it is, then evicts from the back until
  // the bounds hold.
  void EnforceBoundsLocked(List::iterator it) REQUIRES(mu_);

  const size_t max_extents_;
  const size_t max_inode_extents_;
  const size_t max_inline_bytes_;
  Mutex mu_;
  List lru_ GUARDED_BY(mu_);  // most recently written first
  std::unordered_map<uint64_t, List::iterator> by_ino_ GUARDED_BY(mu_);
  size_t total_ GUARDED_BY(mu_) = 0;  // sum of map sizes plus one per entry
  size_t inline_bytes_ GUARDED_BY(mu_) = 0;  // sum of the entries' inline_bytes
};

}  // namespace ckptfs::engine
