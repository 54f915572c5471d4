#include "engine/data/record_cache.h"

#include <iterator>

namespace ckptfs::engine {

void RecordCache::Shard::EraseLocked(std::list<std::pair<Key, RecordData>>::iterator it) {
  bytes -= Cost(it->second);
  map.erase(it->first);
  lru.erase(it);
}

void RecordCache::Shard::EvictLocked() {
  while (bytes > capacity && !lru.empty()) EraseLocked(std::prev(lru.end()));
}

RecordData RecordCache::Lookup(uint64_t segment_id, uint64_t offset) {
  Key k{segment_id, offset};
  Shard& s = ShardFor(k);
  MutexLock l(&s.mu);
  auto it = s.map.find(k);
  if (it == s.map.end()) return nullptr;
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  return it->second->second;
}

void RecordCache::Insert(uint64_t segment_id, uint64_t offset, RecordData data) {
  Key k{segment_id, offset};
  Shard& s = ShardFor(k);
  MutexLock l(&s.mu);
  if (Cost(data) > s.capacity) return;
  auto it = s.map.find(k);
  if (it != s.map.end()) {
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return;
  }
  s.bytes += Cost(data);
  s.lru.emplace_front(k, std::move(data));
  s.map[k] = s.lru.begin();
  s.EvictLocked();
}

void RecordCache::SetCapacity(uint64_t capacity_bytes) {
  capacity_ = capacity_bytes;
  for (Shard& s : shards_) {
    MutexLock l(&s.mu);
    s.capacity = capacity_bytes / kShards;
    s.EvictLocked();
  }
}

void RecordCache::Clear() {
  for (Shard& s : shards_) {
    MutexLock l(&s.mu);
    s.lru.clear();
    s.map.clear();
    s.bytes = 0;
  }
}

}  // namespace ckptfs::engine

namespace ckptfs::engine {

void RecordCache::EraseSegment(uint64_t segment_id) {
  for (Shard& s : shards_) {
    MutexLock l(&s.mu);
    for (auto it = s.lru.begin(); it != s.lru.end();) {
      auto next = std::next(it);
      if (it->first.segment_id == segment_id) s.EraseLocked(it);
      it = next;
    }
  }
}

uint64_t RecordCache::bytes() {
  uint64_t total = 0;
  for (Shard& s : shards_) {
    MutexLock l(&s.mu);
    total += s.bytes;
  }
  return total;
}

}  // namespace ckptfs::engine
