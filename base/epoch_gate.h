// EpochGate: lets one thread wait until every operation that was already
// running when it started waiting has finished, without making operations
// wait for each other (a tiny grace-period mechanism, as in RCU).
//
// StoreImpl brackets each Read and each data write with a Guard. Compaction
// calls Drain() (1) after choosing its victim segments, so that every write
// that reserved space in one of them has committed its extent before the
// extents are scanned, and (2) after repointing extents and before deleting
// a victim's file, so that no read that looked up an old extent still runs.
//
// Thread safety: Guards from any threads; Drain() from one thread at a time
// (the caller serializes: CompactionState::mu). A Guard never waits
// on Drain(); Drain() waits only for Guards older than itself.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace ckptfs {

class EpochGate {
 public:
  class Guard {
   public:
    explicit Guard(EpochGate* gate) : gate_(gate) { gate_->Enter(&shard_, &parity_); }
    ~Guard() { gate_->slots_[shard_].count[parity_].fetch_sub(1); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    EpochGate* gate_;
    unsigned shard_ = 0;
    unsigned parity_ = 0;
  };

  // Returns once every Guard constructed before this call has been destroyed.
  void Drain() {
    const uint64_t old = epoch_.fetch_add(1);
    const unsigned p = static_cast<unsigned>(old & 1);
    for (int spins = 0;; ++spins) {
      int64_t n = 0;
      for (Slot& s : slots_) n += s.count[p].load();
      if (n == 0) return;
      if (spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

 private:
  static constexpr unsigned kShards = 16;
  struct alignas(64) Slot {
    std::atomic<int64_t> count[2] = {0, 0};
  };

  void Enter(unsigned* shard, unsigned* parity) {
    *shard = static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id()) %
                                   kShards);
    for (;;) {
      const uint64_t e = epoch_.load();
      const unsigned p = static_cast<unsigned>(e & 1);
      slots_[*shard].count[p].fetch_add(1);
      // Counted in the epoch that is still current: a Drain that starts
      // later sees the count. Otherwise retry in the new epoch.
      if (epoch_.load() == e) {
        *parity = p;
        return;
      }
      slots_[*shard].count[p].fetch_sub(1);
    }
  }

  std::atomic<uint64_t> epoch_{0};
  Slot slots_[kShards];
};

}  // namespace ckptfs
