// WriteOrder: the writes of one inode that wait for it go in file-offset
// order.
//
// The kernel's write-back sends a file's dirty pages in ascending order,
// many WRITE requests at once. The session threads that take them race for
// the inode, and the records of a file written in order would land in its
// segment shuffled, which makes the file slower to read back in sequence.
// Each writer takes a Turn before the inode's mutex; when a turn ends, the
// waiting writer with the lowest offset goes next. A writer that kMaxBypass
// others have passed since it arrived goes next whatever its offset, so no
// writer waits without bound. Writers never wait for writes
// that have not arrived.
//
// Thread safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace ckptfs {

class WriteOrder {
 public:
  static constexpr uint64_t kMaxBypass = 32;

  // Holds the turn from construction (which waits for it) to destruction.
  class Turn {
   public:
    Turn(WriteOrder* order, uint64_t offset) : order_(order) { order_->Acquire(offset); }
    ~Turn() { order_->Release(); }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    WriteOrder* const order_;
  };

  // Writers waiting for a turn (for tests).
  size_t waiting() const EXCLUDES(mu_);

 private:
  struct Waiter {
    CondVar cv;
    bool granted = false;  // guarded by mu_
    uint64_t offset = 0;
    uint64_t arrival = 0;
    uint64_t turns_then = 0;  // turns taken when it arrived
  };

  void Acquire(uint64_t offset) EXCLUDES(mu_);
  // Hands the turn to the next waiter (one wake-up), or ends it.
  void Release() EXCLUDES(mu_);
  // The waiter whose turn is next.
  Waiter* NextLocked() const REQUIRES(mu_);

  mutable Mutex mu_;
  bool busy_ GUARDED_BY(mu_) = false;
  uint64_t arrivals_ GUARDED_BY(mu_) = 0;
  uint64_t turns_ GUARDED_BY(mu_) = 0;  // turns taken so far
  // Waiters by (offset, arrival number), and by arrival number.
  std::map<std::pair<uint64_t, uint64_t>, Waiter*> by_offset_ GUARDED_BY(mu_);
  std::map<uint64_t, Waiter*> by_arrival_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
