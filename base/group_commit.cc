#include "base/group_commit.h"

namespace ckptfs {

Status GroupCommit::Sync() {
  MutexLock l(&mu_);
  const uint64_t ticket = ++requested_;
  for (;;) {
    if (done_ >= ticket) return last_;
    if (!running_) break;
    cv_.Wait(&mu_);
  }
  // Leader: this flush covers every ticket handed out so far.
  running_ = true;
  const uint64_t covers = requested_;
  l.Unlock();
  Status s = flush_();
  l.Lock();
  running_ = false;
  ++flushes_;
  last_ = s;
  if (s.ok()) {
    done_ = covers;
  }
  cv_.SignalAll();
  // A failed flush fails this caller; waiters retry with a flush of their own.
  return s;
}

uint64_t GroupCommit::flushes() const {
  MutexLock l(&mu_);
  return flushes_;
}

}  // namespace ckptfs
