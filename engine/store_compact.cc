// Compaction: rewrites the live data of segments with much dead space
// into new records and deletes the old segment files, on an open store.
//
// Protocol (each step is crash-safe on its own):
//   1. Pick victims (ChooseVictims, compact_victims.cc): segments whose
//      dead fraction reaches dead_ratio or that hold nothing live; the
//      active segment and the newest file only when they have dead bytes.
//      Accounting that cannot be read (ListSegments fails) stops here. A
//      victim that is the active segment or the newest file is sealed and
//      the next segment started (its file is on disk first, so segment ids
//      stay above every id ever used once the victim is deleted); appends
//      go to the new segment from then on.
//   2. io_gate_.Drain(): every write that reserved space in a victim before
//      it was sealed has now committed its extent. Then the sealed state of
//      a segment sealed in step 1 is committed; a crash before that leaves
//      it unsealed but no longer the newest file, which Open treats as
//      sealed too.
//   3. Scan the extents family for the inodes with extents in the victims.
//      Per inode, under its mutex, re-read its extents and copy each record
//      they use (read, verify, append through SegmentSet), building the
//      batch of writes that repoints the extents plus the segment accounting.
//      Every 64 MiB of copies, and at the end of the round, the segments
//      are synced, then each inode's batch is committed under its mutex if
//      its extents are still those copied; an inode changed meanwhile has
//      its copies counted as dead space and is copied again, synced and
//      committed under its mutex. So no batch reaches the index log before
//      its copies are durable, whatever order the kernel writes pages back
//      in. A crash before the commit leaves only unreferenced records (dead
//      space); after it, the old records are unreferenced instead. No other
//      operation adds a reference into a sealed segment: writes append to
//      the active segment, and splitting an extent (overwrite, truncate)
//      happens under the same inode mutex and changes the extents, so once
//      an inode is done it stays done.
//   4. Sync the new segments and the index log (group commit).
//   5. io_gate_.Drain(): no read that looked up an old extent still runs.
//   6. Check that no extent points into the victim, delete its segments key
//      (synced), then its file. A crash in between leaves a file without a
//      key and without references, which the next compaction deletes. An
//      extent that cannot be decoded might point anywhere: it stops the
//      compaction (in step 3 already) before anything is deleted.
// The record cache is keyed by (segment, offset) and segment ids are never
// reused, so cached records of a deleted segment are merely unreachable.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

constexpr size_t kRoundSegments = 8;              // victims deleted per round
constexpr uint64_t kBatchBytes = 64ull << 20;     // copied per inode batch
constexpr uint64_t kMaxExtentEnd = UINT64_MAX;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

namespace {

// Open + Compact + Close with `so`.
Result<CompactReport> OpenAndCompact(const std::string& dir, const StoreOptions& so,
                                     const CompactOptions& options) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(dir, so));
  Result<CompactReport> r = store->Compact(options);
  Status cs = store->Close();
  if (!r.ok()) return r;
  if (!cs.ok()) return cs;
  return r;
}

void AddReport(CompactReport r, CompactReport* total) {
  total->segments_rewritten += r.segments_rewritten;
  total->bytes_reclaimed += r.bytes_reclaimed;
  total->bytes_copied += r.bytes_copied;
  total->seconds += r.seconds;
  total->segments.insert(total->segments.end(), r.segments.begin(), r.segments.end());
  for (KeptSegment& k : r.kept) total->kept.push_back(std::move(k));
  for (std::string& e : r.errors) total->errors.push_back(std::move(e));
}

}  // namespace

Result<CompactReport> Store::CompactOffline(const std::string& dir, const CompactOptions& options) {
  StoreOptions so;
  so.create_if_missing = false;
  so.holder = "ckptfs compact (pid " + std::to_string(::getpid()) + ")";
  struct stat st;
  if (::stat((dir + "/" + format::kSharedFileName).c_str(), &st) != 0) {
    return OpenAndCompact(dir, so, options);
  }
  // A shared store: its hosts and segments as they are now, from a
  // read-only open (which takes no host).
  std::vector<HostInfo> hosts;
  std::vector<SegmentInfo> segments;
  {
    StoreOptions ro = so;
    ro.read_only = true;
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(dir, ro));
    Result<std::vector<HostInfo>> h = store->Hosts();
    Result<std::vector<SegmentInfo>> s = store->ListSegments();
    Status cs = store->Close();
    CKPTFS_RETURN_IF_ERROR(h.status());
    CKPTFS_RETURN_IF_ERROR(s.status());
    CKPTFS_RETURN_IF_ERROR(cs);
    hosts = std::move(*h);
    segments = std::move(*s);
  }
  CompactReport total;
  const HostInfo* mounted = nullptr;  // the first host kept for its mount
  bool compacted = false;
  for (const HostInfo& h : hosts) {
    if (!h.mounted) {
      StoreOptions as_host = so;
      as_host.host = h.name;
      Result<CompactReport> r = OpenAndCompact(dir, as_host, options);
      if (r.ok()) {
        AddReport(std::move(*r), &total);
        compacted = true;
        continue;
      }
      if (r.status().code() != EBUSY) return r.status().Annotate("host \"" + h.name + "\"");
      // A mount took it meanwhile.
    }
    if (mounted == nullptr) mounted = &h;
    for (const SegmentInfo& s : segments) {
      if (s.id >> format::kHostIdShift != h.id) continue;
      KeptSegment k;
      k.id = s.id;
      k.reason = KeptSegment::Reason::kHostMounted;
      k.live_bytes = static_cast<uint64_t>(std::max<int64_t>(s.live_bytes, 0));
      k.dead_bytes = static_cast<uint64_t>(std::max<int64_t>(s.dead_bytes, 0));
      const uint64_t all = k.live_bytes + k.dead_bytes;
      k.dead_fraction = all == 0 ? 0 : static_cast<double>(k.dead_bytes) / static_cast<double>(all);
      k.host = h.name;
      total.kept.push_back(std::move(k));
    }
  }
  if (!compacted && mounted != nullptr) {
    // Every host is mounted: refused, as an embedded store in use is.
    return Status(EBUSY, "store " + dir + " is in use by " + mounted->holder + " (host \"" +
                             mounted->name + "\")")
        .WithPayload(StoreHolder{mounted->holder, static_cast<pid_t>(mounted->pid)});
  }
  std::sort(total.kept.begin(), total.kept.end(),
            [](const KeptSegment& a, const KeptSegment& b) { return a.id < b.id; });
  return total;
}

Result<CompactReport> StoreImpl::Compact(const CompactOptions& options) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  if (!(options.dead_ratio >= 0 && options.dead_ratio <= 1)) {
    return Status(EINVAL, "dead_ratio must be between 0 and 1");
  }
  MutexLock one_at_a_time(&compaction_->mu);
  return CompactLocked(options);
}

Result<std::vector<SegmentInfo>> StoreImpl::OwnSegments() {
  CKPTFS_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, ListSegments());
  std::erase_if(segments, [&](const SegmentInfo& s) { return !segments_->Owns(s.id); });
  return segments;
}

Result<CompactReport> StoreImpl::CompactLocked(const CompactOptions& options) {
  CompactionState& cs = *compaction_;
  if (cs.cancel || closed_) return Status(ECANCELED, "store is closing");
  CompactRun run;
  run.options = options;
  run.start = std::chrono::steady_clock::now();
  CompactReport rep;

  // 1. Victims. Accounting that cannot be read fails the whole compaction:
  // a segment whose live bytes are unknown is never taken for empty.
  CKPTFS_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, OwnSegments());
  // The segments sealed trees' snapshots point into stay as they are: a
  // snapshot is never rewritten, and hosts read its records there.
  CKPTFS_ASSIGN_OR_RETURN(const std::set<uint64_t> sealed, SnapshotSegments());
  std::vector<KeptSegment> kept_sealed;
  std::erase_if(segments, [&](const SegmentInfo& s) {
    if (!sealed.count(s.id)) return false;
    const uint64_t live = static_cast<uint64_t>(s.live_bytes);
    const uint64_t dead = static_cast<uint64_t>(s.dead_bytes);
    kept_sealed.push_back({s.id, KeptSegment::Reason::kSealed, live, dead,
                           live + dead == 0 ? 0.0 : double(dead) / double(live + dead), ""});
    return true;
  });
  VictimChoice choice = ChooseVictims(segments, segments_->active_id(), segments_->max_id(),
                                options.dead_ratio);
  const std::vector<Victim>& victims = choice.victims;
  for (const Victim& v : victims) run.total += v.live;
  rep.kept = std::move(choice.kept);
  rep.kept.insert(rep.kept.end(), kept_sealed.begin(), kept_sealed.end());

  if (options.dry_run) {
    uint64_t freed = 0;
    for (const Victim& v : victims) {
      rep.segments.push_back(v.id);
      freed += v.file_bytes;
    }
    rep.segments_rewritten = victims.size();
    rep.bytes_copied = run.total;  // estimate: live bytes, before headers
    rep.bytes_reclaimed = freed > run.total ? freed - run.total : 0;
    return FinishCompaction(run, rep);
  }
  if (victims.empty()) return FinishCompaction(run, rep);
  if (options.progress) options.progress(0, run.total);
  CKPTFS_RETURN_IF_ERROR(SealVictims(victims));

  uint64_t freed = 0;
  for (size_t first = 0; first < victims.size(); first += kRoundSegments) {
    std::set<uint64_t> round;
    for (size_t i = first; i < std::min(victims.size(), first + kRoundSegments); ++i) {
      round.insert(victims[i].id);
    }
    CKPTFS_RETURN_IF_ERROR(CompactRound(round, victims, &run, &rep, &freed));
  }
  rep.bytes_copied = run.copied;
  rep.bytes_reclaimed = freed > run.copied ? freed - run.copied : 0;
  rep.errors = run.errors;
  // Backups taken before point at segment files that are gone now: the
  // newest backup follows the records to where they moved.
  if (rep.segments_rewritten > 0) {
    if (Status b = BackupIndex(0); !b.ok()) rep.errors.push_back(b.ToString());
  }
  if (options.progress) options.progress(run.total, run.total);
  return FinishCompaction(run, rep);
}

CompactReport StoreImpl::FinishCompaction(const CompactRun& run, CompactReport r) {
  r.seconds = Seconds(run.start);
  std::sort(r.kept.begin(), r.kept.end(),
            [](const KeptSegment& x, const KeptSegment& y) { return x.id < y.id; });
  MutexLock l(&compaction_->last_mu);
  compaction_->last =
      CompactionRecord{run.options.dead_ratio, run.options.dry_run, Now(), r};
  return r;
}

Status StoreImpl::SealVictims(const std::vector<Victim>& victims) {
  // 1b. A victim that is the active segment (or the newest file) is sealed
  // and the next segment started, so appends go elsewhere from now on.
  meta::Writes seal;
  for (const Victim& v : victims) {
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t sealed_size, segments_->SealForCompaction(v.id));
    if (sealed_size == 0) continue;
    format::SegmentStat st;
    st.sealed = 1;
    st.size = static_cast<int64_t>(sealed_size);
    EmitDeltas(StatDeltas{{v.id, st}}, &seal);
  }
  // 2. Writes into the victims have all committed after this, those into a
  // segment just sealed included.
  io_gate_.Drain();
  // Its sealed state, once every byte reserved in it is written. A crash
  // before this commit leaves it unsealed but no longer the newest file:
  // the next open does not append to it, and compaction takes it as sealed.
  if (seal.size() > 0) CKPTFS_RETURN_IF_ERROR(Commit(&seal));
  return Status::OK();
}

Status StoreImpl::CompactRound(const std::set<uint64_t>& round,
                               const std::vector<Victim>& victims, CompactRun* run,
                               CompactReport* rep, uint64_t* freed) {
  // 3. Inodes with extents in this round's victims.
  std::set<uint64_t> inos, unused;
  CKPTFS_RETURN_IF_ERROR(FindExtentsIn(round, &inos, &unused));
  // Copies already made are committed (or accounted as dead) before an
  // error returns.
  auto compact = [&](uint64_t ino, bool now = false) {
    Status st = CompactInode(ino, round, run, now);
    std::set<uint64_t> ignored;
    if (!st.ok()) (void)CommitCopies(round, run, &ignored);
    return st;
  };
  for (uint64_t ino : inos) {
    if (compaction_->cancel) return Status(ECANCELED, "store is closing");
    CKPTFS_RETURN_IF_ERROR(compact(ino));
    if (run->pending_bytes >= kBatchBytes) {
      std::set<uint64_t> changed;
      CKPTFS_RETURN_IF_ERROR(CommitCopies(round, run, &changed));
      for (uint64_t again : changed) CKPTFS_RETURN_IF_ERROR(compact(again, /*now=*/true));
    }
  }
  // An inode changed between its copy and its commit is copied again,
  // this time synced and committed under its mutex.
  std::set<uint64_t> changed;
  CKPTFS_RETURN_IF_ERROR(CommitCopies(round, run, &changed));
  for (uint64_t again : changed) CKPTFS_RETURN_IF_ERROR(compact(again, /*now=*/true));
  // 4. The new records and the index batches that point at them are
  // durable before any old file goes.
  CKPTFS_RETURN_IF_ERROR(syncer_->Sync());
  // 5. Reads that may still use old extents have finished after this.
  io_gate_.Drain();
  // 6. Delete what nothing references any more.
  std::set<uint64_t> still_used = run->failed;
  inos.clear();
  CKPTFS_RETURN_IF_ERROR(FindExtentsIn(round, &inos, &still_used));
  for (uint64_t id : round) {
    if (still_used.count(id)) {
      const auto v = std::find_if(victims.begin(), victims.end(),
                                  [id](const Victim& x) { return x.id == id; });
      KeptSegment k{id, KeptSegment::Reason::kUnreadable, v->live, 0, v->dead_fraction, ""};
      if (!run->failed.count(id)) {
        k.reason = KeptSegment::Reason::kStillReferenced;
        run->errors.push_back("segment " + std::to_string(id) + " is still referenced; kept");
      }
      rep->kept.push_back(k);
      continue;
    }
    const uint64_t bytes = segments_->Size(id);
    meta::Writes b;
    b.Delete(Space::kSegments, format::SegmentKey(id));
    CKPTFS_RETURN_IF_ERROR(Commit(&b, /*sync=*/true));
    CKPTFS_RETURN_IF_ERROR(segments_->Remove(id));
    cache_->EraseSegment(id);
    rep->segments_rewritten++;
    rep->segments.push_back(id);
    *freed += bytes;
  }
  return Status::OK();
}

Status StoreImpl::FindExtentsIn(const std::set<uint64_t>& segments, std::set<uint64_t>* inos,
                                std::set<uint64_t>* used) {
  Status bad;
  CKPTFS_RETURN_IF_ERROR(
      IndexScan(Space::kExtents, "", "", [&](std::string_view k, std::string_view v) {
        if (k.size() != 16) {
          bad = Status::Corruption("an extent key is not 16 bytes; no segment can be shown unused");
          return false;
        }
        const uint64_t ino = format::GetBE64(k.data());
        format::ExtentValue e;
        Status ds = format::DecodeExtent(v, &e);
        if (!ds.ok()) {
          bad = Status(ds.code(), "inode " + std::to_string(ino) + " extent at " +
                                      std::to_string(format::GetBE64(k.data() + 8)) + ": " +
                                      ds.message() + "; it may point into any segment");
          return false;
        }
        if (e.is_inline || e.in_data_file || !segments.count(e.segment_id)) return true;
        inos->insert(ino);
        used->insert(e.segment_id);
        return true;
      }));
  return bad;
}

Status StoreImpl::CompactInode(uint64_t ino, const std::set<uint64_t>& victims, CompactRun* run,
                               bool now) {
  for (;;) {
    bool more = false;
    {
      InodeRef s(&inodes_, ino);
      MutexLock l(&s->mu);
      if (s->purged) return Status::OK();
      std::vector<Extent> ex;
      CKPTFS_RETURN_IF_ERROR(CollectExtents(ino, 0, kMaxExtentEnd, &ex));
      // The windows of each victim record, in file order.
      std::map<std::pair<uint64_t, uint64_t>, std::vector<const Extent*>> groups;
      for (const Extent& e : ex) {
        if (e.value.is_inline || e.value.in_data_file || !victims.count(e.value.segment_id) ||
            run->failed.count(e.value.segment_id)) {
          continue;
        }
        groups[{e.value.segment_id, e.value.record_offset}].push_back(&e);
      }
      if (groups.empty()) return Status::OK();
      PendingRepoint p;
      p.ino = ino;
      const uint64_t copied_before = run->copied;
      for (const auto& [where, group] : groups) {
        if (compaction_->cancel) return Status(ECANCELED, "store is closing");
        if (run->copied - copied_before >= kBatchBytes) {
          more = true;
          break;
        }
        if (run->failed.count(where.first)) continue;
        SourceRecord src;
        if (Status st = ReadSourceRecord(ino, group, run, &src); !st.ok()) {
          // Unreadable or damaged: keep the extent and its segment (fsck names it).
          run->failed.insert(where.first);
          run->errors.push_back("inode " + std::to_string(ino) + ": " + st.ToString() + "; segment " +
                                std::to_string(where.first) + " kept");
          continue;
        }
        CopiedRecord r;
        CKPTFS_RETURN_IF_ERROR(CopyRecord(ino, group, src, &r.puts, &r.deltas, run));
        for (const Extent* e : group) {
          r.expect.emplace_back(format::ExtentKey(ino, e->offset), format::EncodeExtent(e->value));
        }
        p.records.push_back(std::move(r));
      }
      if (!p.records.empty() && now) {
        CKPTFS_RETURN_IF_ERROR(segments_->SyncDirty());
        meta::Writes b;
        StatDeltas deltas;
        for (const CopiedRecord& r : p.records) AddCopy(r, &b, &deltas);
        EmitDeltas(deltas, &b);
        CKPTFS_RETURN_IF_ERROR(Commit(&b));
      } else if (!p.records.empty()) {
        run->pending.push_back(std::move(p));
        run->pending_bytes += run->copied - copied_before;
      }
    }
    // The next batch of this inode re-reads its extents: this one is
    // committed first.
    if (more && !now) {
      std::set<uint64_t> changed;
      CKPTFS_RETURN_IF_ERROR(CommitCopies(victims, run, &changed));
    }
    // Bandwidth limit, outside the inode lock.
    if (run->options.bytes_per_sec > 0) {
      const double due = double(run->copied) / double(run->options.bytes_per_sec);
      while (!compaction_->cancel && Seconds(run->start) < due) {
        const double left = due - Seconds(run->start);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
      }
    }
    if (!more) return Status::OK();
  }
}

Status StoreImpl::CommitCopies(const std::set<uint64_t>& victims, CompactRun* run,
                               std::set<uint64_t>* changed) {
  std::vector<PendingRepoint> pending = std::move(run->pending);
  run->pending.clear();
  run->pending_bytes = 0;
  if (pending.empty()) return Status::OK();
  Status synced = segments_->SyncDirty();
  for (const PendingRepoint& p : pending) {
    InodeRef s(&inodes_, p.ino);
    MutexLock l(&s->mu);
    meta::Writes b;
    bool was_changed = false;
    const bool live = synced.ok() && !s->purged;
    if (live && mode_->OthersWrite()) {
      // Another host may change the inode's extents meanwhile: they are
      // read, and the repointing committed, in one transaction, run again
      // when another host's change conflicts with it.
      Status st = meta::RunTxn(
          kv(),
          [&](meta::Txn* t) -> Status {
            std::vector<Extent> ex;
            CKPTFS_RETURN_IF_ERROR(CollectExtentsIn(t, p.ino, 0, kMaxExtentEnd, &ex));
            b.Clear();
            was_changed = PlanRepoint(p, victims, /*live=*/true, ex, &b);
            t->writes().Append(b);
            return Status::OK();
          },
          meta::Durability::kLogged);
      if (!st.ok()) {
        extent_maps_.ForgetTouched(b);
        return st;
      }
      extent_maps_.Apply(b);
    } else {
      // The inode's extents now, read once: no batch of it commits while
      // its mutex is held.
      std::vector<Extent> ex;
      if (live) CKPTFS_RETURN_IF_ERROR(CollectExtents(p.ino, 0, kMaxExtentEnd, &ex));
      was_changed = PlanRepoint(p, victims, live, ex, &b);
      if (b.size() > 0) CKPTFS_RETURN_IF_ERROR(Commit(&b));
    }
    if (was_changed && live) changed->insert(p.ino);
  }
  return synced;
}

bool StoreImpl::PlanRepoint(const PendingRepoint& p, const std::set<uint64_t>& victims,
                            bool live, const std::vector<Extent>& ex, meta::Writes* b) {
  StatDeltas deltas;
  bool was_changed = false;
  std::unordered_map<uint64_t, const Extent*> at;  // offset -> extent
  at.reserve(ex.size());
  for (const Extent& e : ex) at.emplace(e.offset, &e);
  for (const CopiedRecord& r : p.records) {
    const bool same =
        live && std::all_of(r.expect.begin(), r.expect.end(), [&at](const auto& kv) {
          const auto it = at.find(format::GetBE64(kv.first.data() + 8));
          return it != at.end() && format::EncodeExtent(it->second->value) == kv.second;
        });
    if (same) {
      AddCopy(r, b, &deltas);
      continue;
    }
    // The copy stays unreferenced and the victim as it is; the accounting
    // says so.
    was_changed = true;
    StatDeltas dead;
    for (const auto& [id, st] : r.deltas) {
      if (victims.count(id)) continue;
      format::SegmentStat& d = dead[id];
      d.dead = st.live + st.dead;  // every byte appended, none referenced
      d.sealed = st.sealed;
      d.size = st.size;
    }
    MergeDeltas(dead, &deltas);
  }
  EmitDeltas(deltas, b);
  return was_changed;
}

void StoreImpl::AddCopy(const CopiedRecord& r, meta::Writes* b, StatDeltas* deltas) {
  for (const auto& [key, value] : r.puts) b->Put(Space::kExtents, key, value);
  MergeDeltas(r.deltas, deltas);
}

Status StoreImpl::ReadSourceRecord(uint64_t ino, const std::vector<const Extent*>& group,
                                   CompactRun* run, SourceRecord* out) {
  const format::ExtentValue& ev = group.front()->value;
  const size_t n = format::kRecordHeaderSize + ev.stored_len;
  run->scratch.resize(n);
  const std::string where =
      "segment " + std::to_string(ev.segment_id) + " offset " + std::to_string(ev.record_offset);
  Status s = segments_->Read(ev.segment_id, ev.record_offset, n, run->scratch.data());
  if (s.ok()) s = format::DecodeRecord(std::string_view(run->scratch.data(), n), &out->rec, &out->decoded);
  for (size_t i = 0; s.ok() && i < group.size(); ++i) {
    s = format::CheckRecordForExtent(out->rec.header, group[i]->value, ino, group[i]->offset);
  }
  return s.ok() ? s : s.Annotate(where);
}

Status StoreImpl::CopyRecord(uint64_t ino, const std::vector<const Extent*>& group,
                             const SourceRecord& src,
                             std::vector<std::pair<std::string, std::string>>* puts,
                             StatDeltas* deltas, CompactRun* run) {
  const uint64_t old_seg = group.front()->value.segment_id;
  const format::RecordHeader& h = src.rec.header;
  const std::string_view payload = src.rec.payload;
  const std::string_view raw = src.rec.data;
  const size_t n = format::kRecordHeaderSize + h.stored_len;
  CKPTFS_RETURN_IF_ERROR(CheckSpace(n));

  uint64_t referenced = 0;
  for (const Extent* e : group) referenced += e->value.length;
  // Deltas only once every append succeeded: a failed append fails the batch.
  StatDeltas local;
  local[old_seg].live -= static_cast<int64_t>(referenced);
  local[old_seg].dead += static_cast<int64_t>(referenced);
  auto note_sealed = [&](const AppendResult& ar) {
    if (ar.sealed_id != 0) {
      auto& d = local[ar.sealed_id];
      d.sealed = 1;
      d.size = static_cast<int64_t>(ar.sealed_size);
    }
  };

  if (2 * referenced >= h.raw_len) {
    // Mostly live: the same record bytes, in a new place.
    CKPTFS_ASSIGN_OR_RETURN(AppendResult ar,
                            segments_->Append(std::string_view(run->scratch.data(), format::kRecordHeaderSize), payload));
    note_sealed(ar);
    for (const Extent* e : group) {
      format::ExtentValue nv = e->value;
      nv.segment_id = ar.segment_id;
      nv.record_offset = ar.offset;
      puts->emplace_back(format::ExtentKey(ino, e->offset), format::EncodeExtent(nv));
    }
    auto& d = local[ar.segment_id];
    d.live += static_cast<int64_t>(referenced);
    d.dead += static_cast<int64_t>(h.raw_len - referenced);
    run->copied += n;
  } else {
    // Mostly dead: new records holding only the live windows. Each contiguous
    // run of windows becomes one record written for its own file offset.
    const int level = h.codec == format::Codec::kNone ? 0 : std::max(1, compression_level_.load());
    std::vector<const Extent*> sorted = group;
    std::sort(sorted.begin(), sorted.end(),
              [](const Extent* x, const Extent* y) { return x->value.skip < y->value.skip; });
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i + 1;
      while (j < sorted.size() &&
             sorted[j]->value.skip == sorted[j - 1]->value.skip + sorted[j - 1]->value.length) {
        ++j;
      }
      const uint32_t a = sorted[i]->value.skip;
      const uint32_t z = sorted[j - 1]->value.skip + sorted[j - 1]->value.length;
      format::PreparedRecord pr = format::PrepareRecord(ino, h.file_offset + a, raw.substr(a, z - a), level);
      const std::string_view body = pr.header.codec == format::Codec::kZstd
                                        ? std::string_view(pr.compressed)
                                        : raw.substr(a, z - a);
      CKPTFS_ASSIGN_OR_RETURN(AppendResult ar, segments_->Append(pr.header_bytes, body));
      note_sealed(ar);
      for (size_t k = i; k < j; ++k) {
        format::ExtentValue nv = sorted[k]->value;
        format::PointExtentAt(pr.header, ar.segment_id, ar.offset, &nv);
        nv.skip = sorted[k]->value.skip - a;
        puts->emplace_back(format::ExtentKey(ino, sorted[k]->offset), format::EncodeExtent(nv));
      }
      local[ar.segment_id].live += static_cast<int64_t>(z - a);
      run->copied += format::kRecordHeaderSize + pr.header.stored_len;
      i = j;
    }
  }
  MergeDeltas(local, deltas);
  run->done += referenced;
  if (run->options.progress) run->options.progress(run->done, run->total);
  return Status::OK();
}

std::optional<CompactionRecord> StoreImpl::LastCompaction() {
  MutexLock l(&compaction_->last_mu);
  return compaction_->last;
}

}  // namespace ckptfs::engine
