// State of StoreImpl's compaction (engine/store_compact.cc; the background
// thread in store_background.cc): the lock that lets one compaction run at
// a time, the background thread, and the result of the latest run for
// LastCompaction.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "engine/store.h"
#include "format/format.h"

namespace ckptfs::engine {

struct CompactionState {
  // Held for the length of one compaction. Lock order: mu, then (one at a
  // time) InodeState::mu, then SegmentSet's lock. Never held by a Guard of
  // StoreImpl::io_gate_, so Drain() under it cannot deadlock.
  Mutex mu;
  // Set by Close(): a running compaction stops at the next record.
  std::atomic<bool> cancel{false};

  Mutex last_mu;  // a leaf lock
  std::optional<CompactionRecord> last GUARDED_BY(last_mu);

  std::thread thread;  // background compaction, when enabled
  Mutex thread_mu;     // a leaf lock; never held while compacting
  CondVar thread_cv;   // thread_stop was set
  bool thread_stop GUARDED_BY(thread_mu) = false;
};

// One victim record's copy, appended and not yet pointed at: committed
// once the copies are synced, and only if the extents that used the record
// are still those copied.
struct CopiedRecord {
  std::vector<std::pair<std::string, std::string>> expect;  // extent key -> value copied
  std::vector<std::pair<std::string, std::string>> puts;    // extent key -> value repointed
  std::map<uint64_t, format::SegmentStat> deltas;           // the accounting of the move
};

// The copies of one inode's records (StoreImpl::CommitCopies).
struct PendingRepoint {
  uint64_t ino = 0;
  std::vector<CopiedRecord> records;
};

// A segment that a compaction takes: its live bytes are copied elsewhere
// and its file deleted.
struct Victim {
  uint64_t id;
  uint64_t live;
  double dead_fraction;
  uint64_t file_bytes;
};

// What a compaction with a dead ratio would take, and what it would keep.
struct VictimChoice {
  std::vector<Victim> victims;
  std::vector<KeptSegment> kept;
};

// The segments Compact takes, empty ones first (free to delete), then the
// emptiest: those whose dead fraction reaches `dead_ratio` or that hold
// nothing live. The active segment and the newest file qualify only with
// dead bytes (otherwise taking them would reclaim nothing but start another
// segment); Compact seals them first. `segments` comes from ListSegments,
// which has checked every counter.
VictimChoice ChooseVictims(const std::vector<SegmentInfo>& segments, uint64_t active,
                           uint64_t newest, double dead_ratio);

// Bookkeeping of one Compact() call.
struct CompactRun {
  CompactOptions options;
  std::chrono::steady_clock::time_point start;
  uint64_t total = 0;          // live bytes of the victims
  uint64_t done = 0;           // live bytes moved so far
  uint64_t copied = 0;         // record bytes appended
  std::set<uint64_t> failed;   // victims with unreadable data: kept
  std::vector<std::string> errors;
  std::string scratch;         // read buffer
  std::vector<PendingRepoint> pending;  // copied, not committed (StoreImpl::CommitCopies)
  uint64_t pending_bytes = 0;           // record bytes those copies appended
};

}  // namespace ckptfs::engine
