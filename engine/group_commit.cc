#include "engine/group_commit.h"

namespace ckptfs::engine {

Status GroupCommit::Sync() {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t ticket = ++requested_;
  for (;;) {
    if (done_ >= ticket) return last_;
    if (!running_) break;
    cv_.wait(l);
  }
  // Leader: this flush covers every ticket handed out so far.
  running_ = true;
  const uint64_t covers = requested_;
  l.unlock();
  Status s = flush_();
  l.lock();
  running_ = false;
  ++flushes_;
  last_ = s;
  if (s.ok()) {
    done_ = covers;
  }
  cv_.notify_all();
  // A failed flush fails this caller; waiters retry with a flush of their own.
  return s;
}

uint64_t GroupCommit::flushes() const {
  std::lock_guard<std::mutex> l(mu_);
  return flushes_;
}

}  // namespace ckptfs::engine
