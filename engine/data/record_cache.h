// RecordCache: verified, decoded segment records kept in memory, bounded in
// bytes, least recently used first out. Keyed by record location, so a hit
// never needs re-verification. The bound counts what an entry keeps: the
// buffer its bytes live in and the entry's own bookkeeping (kEntryOverhead),
// so many tiny records cannot hold more than the capacity.
//
// Thread safety: thread-safe; sharded so that readers rarely contend.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "format/format.h"

namespace ckptfs::engine {

// A record's decoded bytes. `bytes` points into memory that `owner` keeps
// alive: the buffer of the backing read for an uncompressed record (no copy),
// or the decompressed data.
struct RecordBytes {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
  format::RecordHeader header;  // as read and verified; extents are checked against it
  // The memory that keeping this entry keeps: the size of what `owner`
  // holds (a read buffer may be larger than the record in it). What the
  // cache counts against its capacity; 0 means bytes.size().
  uint64_t held = 0;
  uint64_t Held() const { return held != 0 ? held : bytes.size(); }
};
using RecordData = std::shared_ptr<const RecordBytes>;

class RecordCache {
 public:
  explicit RecordCache(uint64_t capacity_bytes) { SetCapacity(capacity_bytes); }

  // What one entry costs beyond the buffer it keeps: its list and hash-map
  // nodes, the RecordBytes and its shared_ptr's control block, and the
  // allocator's headers of each.
  static constexpr uint64_t kEntryOverhead = 256;

  RecordData Lookup(uint64_t segment_id, uint64_t offset);
  void Insert(uint64_t segment_id, uint64_t offset, RecordData data);
  // Drops every record of a segment file that is gone: nothing can ask for
  // them again.
  void EraseSegment(uint64_t segment_id);
  // Shrinks or grows the budget; evicts at once when shrinking.
  void SetCapacity(uint64_t capacity_bytes);
  void Clear();
  uint64_t capacity() const { return capacity_; }
  // The memory the entries keep, as counted against the capacity.
  uint64_t bytes();

 private:
  static constexpr int kShards = 16;
  struct Key {
    uint64_t segment_id, offset;
    bool operator==(const Key&) const = default;
  };
  // Every bit of the key moves every bit of the hash (murmur3's 64-bit
  // finalizer), so that records at offsets with equal low bits (the 48-byte
  // header and a 16 KiB chunk make multiples of 16) spread over all shards
  // rather than filling one shard's share of the capacity.
  struct KeyHash {
    static uint64_t Mix(uint64_t x) {
      x ^= x >> 33;
      x *= 0xff51afd7ed558ccdull;
      x ^= x >> 33;
      x *= 0xc4ceb9fe1a85ec53ull;
      x ^= x >> 33;
      return x;
    }
    size_t operator()(const Key& k) const {
      return static_cast<size_t>(Mix(k.offset ^ Mix(k.segment_id + 0x9E3779B97F4A7C15ull)));
    }
  };
  struct Shard {
    Mutex mu;  // a leaf lock; one shard's at a time
    std::list<std::pair<Key, RecordData>> lru GUARDED_BY(mu);  // front = most recent
    std::unordered_map<Key, std::list<std::pair<Key, RecordData>>::iterator, KeyHash> map
        GUARDED_BY(mu);
    uint64_t bytes GUARDED_BY(mu) = 0;
    uint64_t capacity GUARDED_BY(mu) = 0;
    void EvictLocked() REQUIRES(mu);
    void EraseLocked(std::list<std::pair<Key, RecordData>>::iterator it) REQUIRES(mu);
  };
  static uint64_t Cost(const RecordData& d) { return d->Held() + kEntryOverhead; }
  Shard& ShardFor(const Key& k) { return shards_[KeyHash()(k) % kShards]; }

  std::atomic<uint64_t> capacity_{0};
  Shard shards_[kShards];
};

}  // namespace ckptfs::engine
