// GroupCommit: makes writes durable with as few device flushes as possible.
//
// A caller of Sync() returns once everything written before its call is
// durable. While one caller (the leader) runs the flush, later callers wait;
// the next leader's flush covers all of them at once.
//
// Thread safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>

#include "base/mutex.h"
#include "base/status.h"

namespace ckptfs {

class GroupCommit {
 public:
  // `flush` makes everything written so far durable.
  explicit GroupCommit(std::function<Status()> flush) : flush_(std::move(flush)) {}

  Status Sync();
  uint64_t flushes() const;

 private:
  const std::function<Status()> flush_;
  // Not held while flush_ runs. A leaf lock: nothing else is taken under it.
  mutable Mutex mu_;
  CondVar cv_;                             // a flush finished
  uint64_t requested_ GUARDED_BY(mu_) = 0;  // tickets handed out
  uint64_t done_ GUARDED_BY(mu_) = 0;       // tickets covered by a finished flush
  bool running_ GUARDED_BY(mu_) = false;
  Status last_ GUARDED_BY(mu_);             // result of the latest flush
  uint64_t flushes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
