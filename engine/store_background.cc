// Background compaction of StoreImpl: a thread that wakes every
// background_interval_ms, runs the index's upkeep (meta::Kv::Maintain), and
// compacts (engine/store_compact.cc) when the dead space passes the
// threshold the options set (compact_dead, compact_min), or, with
// free_empty, deletes segments nothing live is in.
#include <algorithm>
#include <chrono>
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
  if (options_.compact_dead == 0 && !options_.free_empty && !shared_.has_value()) return;
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
      log(RenewLeaseIfDue());
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

Status StoreImpl::RenewLeaseIfDue() {
  if (host_id_ == 0 || host_lost_) return Status::OK();
  const int64_t now = meta::WallMs();
  if (now - lease_renewed_ms_.load() < kHostLeaseMs / 3) return Status::OK();
  Status s = meta::RenewHost(kv(), host_name_, kHostLeaseMs);
  if (s.ok()) {
    lease_renewed_ms_ = now;
  } else if (s.code() == EBUSY) {
    host_lost_ = true;  // another mount took the host: its segments are its own now
  }
  return s.Annotate("lease of host \"" + host_name_ + "\"");
}

namespace {
int64_t SteadyNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Result<bool> StoreImpl::WatchHostsOnce() {
  // The grant runs from before the read: a host that claimed its record
  // after the read's snapshot waits kJoinWaitMs, past the grant's end.
  const auto started = std::chrono::steady_clock::now();
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<HostInfo> hosts, Hosts());
  const bool others = std::any_of(hosts.begin(), hosts.end(), [&](const HostInfo& h) {
    return h.mounted && h.name != host_name_;
  });
  if (others || host_lost_) {
    solo_until_ns_ = 0;
    return others;
  }
  // A new epoch when the last grant ran out: readers load solo_until_ns_
  // first, so one that sees the new grant sees the new epoch.
  const int64_t from = SteadyNs(started);
  if (solo_until_ns_.load() <= from) solo_epoch_.fetch_add(1);
  solo_until_ns_ = from + int64_t{kSoloGrantMs} * 1'000'000;
  return false;
}

bool StoreImpl::SoloFreshLocked(const InodeState* s) const {
  const uint64_t epoch = SoloEpoch();
  return epoch != 0 && s->loaded && !s->purged && s->solo_epoch == epoch;
}

uint64_t StoreImpl::SoloEpoch() const {
  const int64_t until = solo_until_ns_.load();
  if (until <= SteadyNs(std::chrono::steady_clock::now())) return 0;
  return solo_epoch_.load();
}

double StoreImpl::CacheSeconds() const {
  if (!shared_.has_value()) return std::numeric_limits<double>::infinity();
  const int64_t left = solo_until_ns_.load() - SteadyNs(std::chrono::steady_clock::now());
  return left > 0 ? static_cast<double>(left) / 1e9 : 0.0;
}

void StoreImpl::StartHostsWatch() {
  hosts_watch_ = std::thread([this] {
    for (;;) {
      {
        MutexLock l(&hosts_watch_mu_);
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(kHostsWatchMs);
        while (!hosts_watch_stop_ && hosts_watch_cv_.WaitUntil(&hosts_watch_mu_, deadline)) {
        }
        if (hosts_watch_stop_) return;
      }
      // A read that fails grants nothing more: the grant runs out.
      (void)WatchHostsOnce();
    }
  });
}

void StoreImpl::StopHostsWatch() {
  solo_until_ns_ = 0;
  if (!hosts_watch_.joinable()) return;
  {
    MutexLock l(&hosts_watch_mu_);
    hosts_watch_stop_ = true;
    hosts_watch_cv_.SignalAll();
  }
  hosts_watch_.join();
}

Status StoreImpl::DropGoneSegments() {
  if (!shared_.has_value()) return Status::OK();
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
