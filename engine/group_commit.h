// GroupCommit: makes writes durable with as few device flushes as possible.
//
// A caller of Sync() returns once everything written before its call is
// durable. While one caller (the leader) runs the flush, later callers wait;
// the next leader's flush covers all of them at once.
//
// Thread safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "base/status.h"

namespace ckptfs::engine {

class GroupCommit {
 public:
  // `flush` makes everything written so far durable.
  explicit GroupCommit(std::function<Status()> flush) : flush_(std::move(flush)) {}

  Status Sync();
  uint64_t flushes() const;

 private:
  const std::function<Status()> flush_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t requested_ = 0;  // GUARDED_BY(mu_): tickets handed out
  uint64_t done_ = 0;       // GUARDED_BY(mu_): tickets covered by a finished flush
  bool running_ = false;    // GUARDED_BY(mu_)
  Status last_;             // GUARDED_BY(mu_): result of the latest flush
  uint64_t flushes_ = 0;    // GUARDED_BY(mu_)
};

}  // namespace ckptfs::engine
