// The background thread of StoreImpl: it wakes every
// background_interval_ms, runs the index's upkeep (meta::Kv::Maintain),
// renews a shared store's host lease (HostSession::RenewIfDue) and lets go of
// other hosts' deleted segments (DropGoneSegments), and compacts
// (engine/store_compact.cc) when the dead space passes the threshold the
// options set (compact_dead, compact_min), or, with free_empty, deletes
// segments nothing live is in. Also the solo-grant questions a shared store
// asks its HostSession (TrustedLocked, CacheSeconds).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string>

#include "engine/store_impl.h"
#include "meta/hosts.h"

namespace ckptfs::engine {

uint64_t BackgroundCompactThreshold(const StoreOptions& o, uint64_t live) {
  if (o.compact_dead == 0) return 0;
  return std::min(o.compact_dead, std::max(live, o.compact_min));
}

void StoreImpl::StartBackgroundCompaction() {
  if (options_.read_only) return;
  // The index's upkeep (a PostgreSQL index folds its merge operands) needs
  // the thread whatever the compaction settings.
  if (options_.compact_dead == 0 && !options_.free_empty && !mode_->NeedsUpkeep()) return;
  CompactionState& cs = *compaction_;
  cs.thread = std::thread([this, &cs] {
    // Errors logged since the last pass without one: a lasting error
    // (damaged accounting waiting for fsck) is logged once, not every pass.
    std::set<std::string> logged;
    auto log = [&](const Status& st) {
      if (st.ok() || st.code() == ECANCELED || !logged.insert(st.message()).second) return;
      std::fprintf(stderr, "ckptfs: background compaction of %s: %s\n", dir_.c_str(),
                   st.ToString().c_str());
    };
    for (;;) {
      {
        MutexLock l(&cs.thread_mu);
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(options_.background_interval_ms);
        while (!cs.thread_stop && cs.thread_cv.WaitUntil(&cs.thread_mu, deadline)) {
        }
        if (cs.thread_stop) return;
      }
      log(kv()->Maintain().Annotate("index upkeep"));
      log(host_.RenewIfDue());
      log(DropGoneSegments());
      if (options_.compact_dead == 0 && !options_.free_empty) continue;
      Result<std::optional<CompactReport>> r = BackgroundPass();
      if (r.ok() && !r->has_value()) {
        logged.clear();
        continue;
      }
      if (r.ok() && (*r)->errors.empty()) logged.clear();
      log(r.status());
      if (r.ok()) {
        for (const std::string& e : (*r)->errors) log(Status(EIO, e));
      }
    }
  });
}

bool StoreImpl::TrustedLocked(const InodeState* s) const {
  const uint64_t epoch = host_.TrustEpoch(s->ino);
  return epoch != 0 && s->loaded && !s->purged && s->trust_epoch == epoch;
}

double StoreImpl::CacheSeconds() const { return mode_->CacheSeconds(); }

Status StoreImpl::DropGoneSegments() {
  if (!mode_->OthersWrite()) return Status::OK();
  const int64_t now = meta::WallMs();
  if (now - segments_dropped_ms_ < kDropGoneSegmentsMs) return Status::OK();
  segments_dropped_ms_ = now;
  std::set<uint64_t> indexed;
  CKPTFS_RETURN_IF_ERROR(
      IndexScan(Space::kSegments, "", "", [&](std::string_view k, std::string_view) {
        if (k.size() == 8) indexed.insert(format::GetBE64(k.data()));
        return true;
      }));
  segments_->DropOthersNotIn(indexed);
  return Status::OK();
}

Result<std::optional<CompactReport>> StoreImpl::BackgroundPass() {
  // Decided under the compaction lock: counts read while another compaction
  // runs would show its victims half moved (nothing live, not yet deleted).
  MutexLock one_at_a_time(&compaction_->mu);
  if (compaction_->cancel || closed_) return Status(ECANCELED, "store is closing");
  const uint64_t active = segments_->active_id();
  const uint64_t newest = segments_->max_id();
  // Nothing is compacted on counts that could not be read.
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<SegmentInfo> segments, OwnSegments());
  uint64_t dead = 0;  // of every segment, the active one included
  uint64_t live = 0;
  for (const SegmentInfo& seg : segments) {
    dead += static_cast<uint64_t>(seg.dead_bytes);
    live += static_cast<uint64_t>(seg.live_bytes);
  }
  // The absolute threshold, or dead space larger than the live data (and the
  // floor): whichever comes first.
  const uint64_t threshold = BackgroundCompactThreshold(options_, live);
  CompactOptions o;
  o.bytes_per_sec = options_.compact_rate;
  // Only when a pass would take something: dead bytes spread thinly over
  // many segments (each below the ratio) do not start one.
  auto worth = [&](double ratio) {
    return !ChooseVictims(segments, active, newest, ratio).victims.empty();
  };
  if (options_.compact_dead != 0 && dead >= threshold && worth(o.dead_ratio)) {
    // CompactOptions' dead_ratio: copies the live rest of mostly dead segments.
  } else if (options_.free_empty && worth(1.0)) {
    o.dead_ratio = 1.0;  // only segments with nothing live: nothing to copy
  } else {
    return std::optional<CompactReport>();
  }
  CKPTFS_ASSIGN_OR_RETURN(CompactReport r, CompactLocked(o));
  return std::optional<CompactReport>(std::move(r));
}

void StoreImpl::StopBackgroundCompaction() {
  CompactionState& cs = *compaction_;
  cs.cancel = true;
  {
    MutexLock l(&cs.thread_mu);
    cs.thread_stop = true;
  }
  cs.thread_cv.SignalAll();
  if (cs.thread.joinable()) cs.thread.join();
  // Waits for a Compact() running in another thread to notice `cancel`.
  MutexLock wait(&cs.mu);
}

}  // namespace ckptfs::engine
