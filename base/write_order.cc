#include "base/write_order.h"

namespace ckptfs {

size_t WriteOrder::waiting() const {
  MutexLock l(&mu_);
  return by_arrival_.size();
}

WriteOrder::Waiter* WriteOrder::NextLocked() const {
  Waiter* oldest = by_arrival_.begin()->second;
  if (turns_ - oldest->turns_then >= kMaxBypass) return oldest;  // passed over often enough
  return by_offset_.begin()->second;
}

void WriteOrder::Acquire(uint64_t offset) {
  MutexLock l(&mu_);
  if (!busy_) {
    busy_ = true;
    turns_++;
    return;
  }
  Waiter w;
  w.offset = offset;
  w.turns_then = turns_;
  w.arrival = arrivals_++;
  by_offset_.emplace(std::make_pair(offset, w.arrival), &w);
  by_arrival_.emplace(w.arrival, &w);
  while (!w.granted) w.cv.Wait(&mu_);
}

void WriteOrder::Release() {
  MutexLock l(&mu_);
  if (by_arrival_.empty()) {
    busy_ = false;
    return;
  }
  Waiter* next = NextLocked();
  by_offset_.erase({next->offset, next->arrival});
  by_arrival_.erase(next->arrival);
  turns_++;
  next->granted = true;
  next->cv.Signal();
}

}  // namespace ckptfs
