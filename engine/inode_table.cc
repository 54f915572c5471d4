#include "engine/inode_table.h"

namespace ckptfs::engine {

InodeState* InodeTable::Pin(uint64_t ino) {
  Shard& sh = shards_[ino % kShards];
  MutexLock l(&sh.mu);
  auto& slot = sh.map[ino];
  if (slot == nullptr) slot = std::make_unique<InodeState>(ino);
  ++slot->pins;
  return slot.get();
}

void InodeTable::Unpin(InodeState* s) {
  Shard& sh = shards_[s->ino % kShards];
  MutexLock l(&sh.mu);
  if (--s->pins == 0) sh.map.erase(s->ino);
}

size_t InodeTable::size() {
  size_t n = 0;
  for (Shard& sh : shards_) {
    MutexLock l(&sh.mu);
    n += sh.map.size();
  }
  return n;
}

}  // namespace ckptfs::engine
