#include "engine/record_cache.h"

namespace ckptfs::engine {

void RecordCache::Shard::EvictLocked() {
  while (bytes > capacity && !lru.empty()) {
    bytes -= lru.back().second->Held();
    map.erase(lru.back().first);
    lru.pop_back();
  }
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
  if (data->Held() > s.capacity) return;
  auto it = s.map.find(k);
  if (it != s.map.end()) {
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return;
  }
  s.bytes += data->Held();
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
