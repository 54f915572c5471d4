// InflightReads: at most one claimed backing read at a time over any byte
// range of a segment. FetchRecords claims the reads that coalescing stretched
// past the records they need: threads reading neighbouring small files at once
// (a thread pool restoring a checkpoint) plan overlapping stretched reads; the
// later ones wait for the first and then find its records in the record
// cache, instead of reading the same bytes again.
#pragma once

#include <cstdint>
#include <vector>

#include "base/mutex.h"

namespace ckptfs {

class InflightReads {
 public:
  // Registers a read of [offset, offset + length) of `segment` for the scope
  // of the object, after waiting until no overlapping read is registered.
  // Holders must not create a second Claim in the same thread.
  class Claim {
   public:
    Claim(InflightReads* set, uint64_t segment, uint64_t offset, uint64_t length)
        : set_(set), range_{segment, offset, offset + length} {
      MutexLock l(&set_->mu_);
      while (set_->OverlapsLocked(range_)) set_->cv_.Wait(&set_->mu_);
      set_->ranges_.push_back(range_);
    }
    ~Claim() {
      {
        MutexLock l(&set_->mu_);
        for (size_t i = 0; i < set_->ranges_.size(); ++i) {
          if (set_->ranges_[i] == range_) {
            set_->ranges_[i] = set_->ranges_.back();
            set_->ranges_.pop_back();
            break;
          }
        }
      }
      set_->cv_.SignalAll();
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    InflightReads* set_;
    struct Range {
      uint64_t segment, begin, end;
      bool operator==(const Range&) const = default;
    } range_;
    friend class InflightReads;
  };

 private:
  using Range = Claim::Range;
  bool OverlapsLocked(const Range& r) const REQUIRES(mu_) {
    for (const Range& o : ranges_) {
      if (o.segment == r.segment && o.begin < r.end && r.begin < o.end) return true;
    }
    return false;
  }
  // A leaf lock, held only to look at ranges_.
  Mutex mu_;
  CondVar cv_;  // a claim ended
  std::vector<Range> ranges_ GUARDED_BY(mu_);  // at most one per reading thread
};

}  // namespace ckptfs
