#include "engine/data/segment_set.h"

#include <algorithm>
#include <utility>

#include "format/format.h"
#include "format/segment_scan.h"

namespace ckptfs::engine {

namespace {
// The largest folio the page cache makes of a file's pages (a PMD on
// x86-64 and arm64 with 4 KiB pages).
constexpr uint64_t kLargestFolio = uint64_t{2} << 20;
}  // namespace

Result<std::unique_ptr<SegmentSet>> SegmentSet::Open(std::shared_ptr<io::Env> env,
                                                     const std::string& segments_dir,
                                                     uint64_t target_bytes, bool read_only,
                                                     const std::vector<uint64_t>& sealed,
                                                     OwnedSegmentIds owned) {
  std::unique_ptr<SegmentSet> set(
      new SegmentSet(env, segments_dir, target_bytes, read_only, owned));
  // Segments never started. Not in a shared store's directory, where other
  // hosts are starting theirs.
  if (!read_only && !owned.shared()) CKPTFS_RETURN_IF_ERROR(env->RemoveLeftovers(segments_dir));
  CKPTFS_ASSIGN_OR_RETURN(std::vector<std::string> names, env->List(segments_dir));
  std::vector<uint64_t> ids;
  for (const std::string& name : names) {
    uint64_t id;
    if (format::ParseSegmentFileName(name, &id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  MutexLock l(&set->mu_);  // not shared yet; taken for the analysis
  set->next_id_ = owned.first;
  uint64_t newest_owned = 0;
  for (uint64_t id : ids) {
    const bool mine = owned.Has(id);
    CKPTFS_ASSIGN_OR_RETURN(set->segments_[id], set->OpenSegment(id, mine && !read_only));
    if (mine) {
      newest_owned = id;
      set->next_id_ = id + 1;
    }
  }
  // The newest unsealed segment continues to take appends.
  if (newest_owned != 0 && !std::binary_search(sealed.begin(), sealed.end(), newest_owned)) {
    set->active_ = set->segments_[newest_owned];
  }
  for (uint64_t id : sealed) {
    if (owned.Has(id)) set->next_id_ = std::max(set->next_id_, id + 1);
  }
  return set;
}

Result<std::shared_ptr<SegmentSet::Segment>> SegmentSet::OpenSegment(uint64_t id,
                                                                    bool writable) const {
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  const std::string path = Path(id);
  CKPTFS_ASSIGN_OR_RETURN(seg->file,
                          env_->Open(path, writable ? io::OpenMode::kReadWrite : io::OpenMode::kRead));
  CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, seg->file->Size());
  const io::File& file = *seg->file;
  Status s = format::ReadSegmentHeader(
      [&file](uint64_t off, size_t len, char* buf) { return file.ReadAt(off, len, buf); }, id);
  if (!s.ok()) return s.Annotate(path);
  seg->end = size;
  return seg;
}

SegmentSet::~SegmentSet() = default;

std::string SegmentSet::Path(uint64_t segment_id) const {
  // dir_ ends in "/segments"; SegmentFileName includes that component.
  std::string parent = dir_.substr(0, dir_.size() - std::string_view(format::kSegmentsDirName).size());
  return parent + format::SegmentFileName(segment_id);
}

Status SegmentSet::StartSegmentLocked(uint64_t id) {
  // The file gets its name only once its header is on disk, so that a crash
  // never leaves a segment file without a valid header (Open would refuse it).
  const std::string hdr = format::EncodeSegmentHeader(id);
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  CKPTFS_ASSIGN_OR_RETURN(seg->file, env_->Create(Path(id), hdr));
  seg->end = hdr.size();
  segments_[id] = seg;
  active_ = seg;
  next_id_ = id + 1;
  return Status::OK();
}

Result<AppendResult> SegmentSet::Append(std::string_view header, std::string_view payload,
                                        bool cached_elsewhere) {
  const uint64_t size = header.size() + payload.size();
  if (read_only_) return Status(EROFS, "store is read-only");
  AppendResult r;
  std::shared_ptr<Segment> seg;
  {
    MutexLock l(&mu_);
    if (active_ != nullptr && active_->end > format::kSegmentHeaderSize &&
        active_->end + size > target_bytes_) {
      r.sealed_id = active_->id;
      r.sealed_size = active_->end;
      active_ = nullptr;
    }
    if (active_ == nullptr) CKPTFS_RETURN_IF_ERROR(StartSegmentLocked(next_id_));
    seg = active_;
    r.offset = seg->end.fetch_add(size);
    r.segment_id = seg->id;
  }
  const std::string_view pieces[] = {header, payload};
  CKPTFS_RETURN_IF_ERROR(seg->file->WriteAt(r.offset, pieces));
  if (cached_elsewhere) {
    // Starts the write-back of its dirty pages (they cannot go yet); the
    // sync that follows drops them.
    seg->file->Evict(r.offset, size);
    MutexLock l(&seg->evict_mu);
    seg->evict_lo = std::min(seg->evict_lo, r.offset);
    seg->evict_hi = std::max(seg->evict_hi, r.offset + size);
  }
  seg->dirty = true;
  return r;
}

Result<uint64_t> SegmentSet::SealForCompaction(uint64_t id) {
  if (read_only_) return Status(EROFS, "store is read-only");
  MutexLock l(&mu_);
  const bool active = active_ != nullptr && active_->id == id;
  const bool newest = MaxOwnedLocked() == id;
  if (!active && !newest) return uint64_t{0};
  const uint64_t size = active ? active_->end.load() : 0;
  std::shared_ptr<Segment> old = active_;
  active_ = nullptr;
  Status s = StartSegmentLocked(next_id_);
  if (!s.ok()) {
    active_ = old;  // appends go on where they were
    return s;
  }
  return size;
}

std::shared_ptr<SegmentSet::Segment> SegmentSet::Find(uint64_t id) const {
  {
    MutexLock l(&mu_);
    auto it = segments_.find(id);
    if (it != segments_.end() || owned_.Has(id) || !owned_.shared()) {
      return it == segments_.end() ? nullptr : it->second;
    }
  }
  // Another host's segment, new since the set was opened.
  Result<std::shared_ptr<Segment>> seg = OpenSegment(id, /*writable=*/false);
  if (!seg.ok()) return nullptr;
  MutexLock l(&mu_);
  return segments_.emplace(id, std::move(*seg)).first->second;
}

void SegmentSet::Prefetch(uint64_t segment_id, uint64_t offset, uint64_t len) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg != nullptr) seg->file->Prefetch(offset, len);
}

void SegmentSet::Evict(uint64_t segment_id, uint64_t offset, uint64_t len) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg != nullptr) seg->file->Evict(offset, len);
}

Status SegmentSet::Refresh(uint64_t segment_id) const {
  std::shared_ptr<Segment> seg;
  {
    MutexLock l(&mu_);
    auto it = segments_.find(segment_id);
    if (it == segments_.end()) return Status::OK();  // the next open asks afresh
    seg = it->second;
  }
  return seg->file->Refresh();
}

Result<size_t> SegmentSet::ReadUpTo(uint64_t segment_id, uint64_t offset, size_t len,
                                    char* buf) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg == nullptr) {
    return Status::Corruption("segment " + std::to_string(segment_id) + " is missing")
        .WithPayload(SegmentMissing{segment_id});
  }
  return seg->file->ReadAt(offset, len, buf);
}

Status SegmentSet::Read(uint64_t segment_id, uint64_t offset, size_t len, char* buf) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg == nullptr) {
    return Status::Corruption("segment " + std::to_string(segment_id) + " is missing")
        .WithPayload(SegmentMissing{segment_id});
  }
  return seg->file->ReadExactly(offset, len, buf);
}

Status SegmentSet::SyncDirty() {
  // One at a time: a caller must not return while another caller's sync of
  // a segment it found dirty is still in progress.
  MutexLock serial(&sync_mu_);
  std::vector<std::shared_ptr<Segment>> segs;
  {
    MutexLock l(&mu_);
    CKPTFS_RETURN_IF_ERROR(sync_error_);
    for (auto& [id, seg] : segments_) segs.push_back(seg);
  }
  for (auto& seg : segs) {
    if (!seg->dirty.exchange(false)) continue;
    uint64_t lo, hi;
    {
      MutexLock l(&seg->evict_mu);  // what was written before the sync
      lo = std::exchange(seg->evict_lo, UINT64_MAX);
      hi = std::exchange(seg->evict_hi, 0);
    }
    Status s = seg->file->Sync();
    if (!s.ok()) {
      seg->dirty = true;
      MutexLock l(&mu_);
      if (sync_error_.ok()) {
        // Full storage stays ENOSPC (an object store tells it only here).
        sync_error_ = Status(s.code() == ENOSPC ? ENOSPC : EIO,
                             s.ToString() + "; data written since the last sync may be lost "
                                            "(reopen the store)");
      }
      return sync_error_;
    }
    if (lo < hi) {
      // The page cache holds a file in folios of up to 2 MiB and drops only
      // those wholly inside the range: rounded out, so that the folios the
      // records share with their neighbours go too (neighbours' clean
      // pages with them: a few MiB at most, read again if asked for).
      lo &= ~(kLargestFolio - 1);
      hi = (hi + kLargestFolio - 1) & ~(kLargestFolio - 1);
      seg->file->Evict(lo, hi - lo);
    }
  }
  return Status::OK();
}

uint64_t SegmentSet::Size(uint64_t segment_id) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  return seg == nullptr ? 0 : seg->end.load();
}

std::vector<uint64_t> SegmentSet::Ids() const {
  MutexLock l(&mu_);
  std::vector<uint64_t> ids;
  for (auto& [id, seg] : segments_) ids.push_back(id);
  return ids;
}

void SegmentSet::DropOthersNotIn(const std::set<uint64_t>& indexed) {
  MutexLock l(&mu_);
  std::erase_if(segments_, [&](const auto& entry) {
    return !owned_.Has(entry.first) && indexed.count(entry.first) == 0;
  });
}

uint64_t SegmentSet::max_id() const {
  MutexLock l(&mu_);
  return MaxOwnedLocked();
}

uint64_t SegmentSet::MaxOwnedLocked() const {
  auto it = segments_.lower_bound(owned_.end);
  if (it == segments_.begin()) return 0;
  --it;
  return owned_.Has(it->first) ? it->first : 0;
}

Status SegmentSet::Remove(uint64_t segment_id) {
  if (read_only_) return Status(EROFS, "store is read-only");
  {
    MutexLock l(&mu_);
    if (active_ != nullptr && active_->id == segment_id) {
      return Status(EBUSY, "segment " + std::to_string(segment_id) + " is the active segment");
    }
    if (segments_.erase(segment_id) == 0) return Status::OK();
  }
  // The file closes when the last reader lets go of the Segment.
  return env_->Remove(Path(segment_id));
}

uint64_t SegmentSet::active_id() const {
  MutexLock l(&mu_);
  return active_ == nullptr ? 0 : active_->id;
}

}  // namespace ckptfs::engine
