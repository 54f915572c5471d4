// CommitGate: orders a durable flush against appends whose index batch is
// not written yet.
//
// A write appends a record to a segment, then commits the index batch that
// points at it. Syncing the index log makes every batch in it durable,
// including batches of other threads written after the segments were synced;
// if such a batch survived a power cut without its record, its extent would
// point at lost bytes. So the flush (FlushDurable) syncs the segments, then
// closes the gate (waiting for writes between their append and their
// commit, and holding new ones back), syncs what was appended meanwhile and
// the index log, and opens the gate again. Only the short second part holds
// writers back.
//
// Writers are preferred over nothing: a waiting flush holds back new writes,
// so a stream of writes cannot starve it.
//
// Thread safety: all methods are thread-safe.
#pragma once

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace ckptfs {

class CommitGate {
 public:
  // Held by a writer from before its first append until its index batch is
  // written (or it gave up).
  class Write {
   public:
    explicit Write(CommitGate* g) : g_(g) { g_->EnterWrite(); }
    ~Write() { g_->ExitWrite(); }
    Write(const Write&) = delete;
    Write& operator=(const Write&) = delete;

   private:
    CommitGate* const g_;
  };
  // Held by the flush while no writer is between an append and its commit.
  class Closed {
   public:
    explicit Closed(CommitGate* g) : g_(g) { g_->Close(); }
    ~Closed() { g_->Open(); }
    Closed(const Closed&) = delete;
    Closed& operator=(const Closed&) = delete;

   private:
    CommitGate* const g_;
  };

 private:
  void EnterWrite() {
    MutexLock l(&mu_);
    while (closed_ || closers_waiting_ > 0) cv_.Wait(&mu_);
    ++writers_;
  }
  void ExitWrite() {
    MutexLock l(&mu_);
    if (--writers_ == 0) cv_.SignalAll();
  }
  void Close() {
    MutexLock l(&mu_);
    ++closers_waiting_;
    while (closed_ || writers_ > 0) cv_.Wait(&mu_);
    --closers_waiting_;
    closed_ = true;
  }
  void Open() {
    MutexLock l(&mu_);
    closed_ = false;
    cv_.SignalAll();
  }

  Mutex mu_;  // a leaf lock
  CondVar cv_;
  int writers_ GUARDED_BY(mu_) = 0;          // writers between an append and its commit
  int closers_waiting_ GUARDED_BY(mu_) = 0;  // flushes waiting to close the gate
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace ckptfs
