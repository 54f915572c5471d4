// Extent maps of StoreImpl: collecting a file's extents (the cache of
// recent ones, then the index), punching ranges out of them, the index
// entries of new extents, SEEK_DATA and the layout that GetExtents and
// the kernel's passthrough read.
#include <sys/stat.h>

#include <algorithm>
#include <optional>

#include "engine/store_impl.h"

namespace ckptfs::engine {

void StoreImpl::EmitDeltas(const StatDeltas& deltas, meta::Writes* b) {
  for (const auto& [id, d] : deltas) {
    b->Merge(Space::kSegments, format::SegmentKey(id), format::EncodeSegmentStat(d));
  }
}

void StoreImpl::MergeDeltas(const StatDeltas& from, StatDeltas* to) {
  for (const auto& [id, d] : from) {
    format::SegmentStat& t = (*to)[id];
    t = format::MergeSegmentStat(t, d);
  }
}

Status StoreImpl::CollectExtents(Ino ino, uint64_t start, uint64_t end, std::vector<Extent>* out) {
  if (closed_) return Status(EIO, "store is closed");
  if (extent_maps_.Collect(ino, start, end, out) == ExtentMapCache::Lookup::kHeld) {
    return Status::OK();
  }
  return CollectIndexExtents(ino, start, end, out);
}

Status StoreImpl::CollectExtentsLocked(InodeState* s, uint64_t start, uint64_t end,
                                       std::vector<Extent>* out) {
  if (closed_) return Status(EIO, "store is closed");
  switch (extent_maps_.Collect(s->ino, start, end, out)) {
    case ExtentMapCache::Lookup::kHeld:
      return Status::OK();
    case ExtentMapCache::Lookup::kTooLarge:
      return CollectIndexExtents(s->ino, start, end, out);
    case ExtentMapCache::Lookup::kAbsent:
      break;
  }
  if (mode_->RemoteIndex() && s->loaded && s->attr.size == 0) {
    // An empty file has no extents (a truncation punches them): no index
    // read, a round trip to the server of a shared store.
    extent_maps_.Insert(s->ino, {});
    return Status::OK();
  }
  // No batch of this inode commits while s->mu is held: the map loaded now
  // stays equal to the index until Commit applies the next one.
  std::vector<Extent> all;
  CKPTFS_RETURN_IF_ERROR(CollectIndexExtents(s->ino, 0, UINT64_MAX, &all));
  for (const Extent& e : all) {
    if (e.offset < end && e.offset + e.value.length > start) out->push_back(e);
  }
  extent_maps_.Insert(s->ino, std::move(all));
  return Status::OK();
}

Status StoreImpl::CollectIndexExtents(Ino ino, uint64_t start, uint64_t end,
                                      std::vector<Extent>* out) {
  if (closed_) return Status(EIO, "store is closed");
  const size_t base = out->size();
  if (std::shared_ptr<meta::SnapshotFile> held = snapshots_.Find(ino)) {
    return CollectExtentsIn(held.get(), ino, start, end, out);
  }
  // One snapshot: the extent before `start` and those after it as of one
  // moment.
  return meta::RunReads(kv(), [&](meta::ReadTxn* t) -> Status {
    out->resize(base);
    return CollectExtentsIn(t, ino, start, end, out);
  });
}

Status StoreImpl::CollectExtentsIn(meta::ReadTxn* t, Ino ino, uint64_t start, uint64_t end,
                                   std::vector<Extent>* out) {
  const std::string prefix = format::ExtentPrefix(ino);
  const std::string key = format::ExtentKey(ino, start);
  // From the extent at or before `start`, which may reach into the range.
  CKPTFS_ASSIGN_OR_RETURN(std::optional<meta::KeyValue> before,
                          t->Last(Space::kExtents, prefix, key + '\0'));
  Status bad;
  CKPTFS_RETURN_IF_ERROR(t->Scan(
      Space::kExtents, before.has_value() ? before->key : key, format::ExtentPrefix(ino + 1),
      [&](std::string_view k, std::string_view v) {
        if (k.size() != 16) {
          bad = Status::Corruption("extent key is not 16 bytes");
          return false;
        }
        Extent e;
        e.offset = format::GetBE64(k.data() + 8);
        if (e.offset >= end) return false;
        Status s = format::DecodeExtent(v, &e.value);
        if (!s.ok()) {
          bad = s.Annotate("inode " + std::to_string(ino) + " extent at " +
                           std::to_string(e.offset));
          return false;
        }
        if (e.offset + e.value.length > start) out->push_back(std::move(e));
        return true;
      }));
  return bad;
}

Result<bool> StoreImpl::ExtentCovering(Ino ino, uint64_t start, uint64_t end,
                                       std::vector<Extent>* out) {
  if (closed_) return Status(EIO, "store is closed");
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> value,
                          IndexGet(Space::kExtents, format::ExtentKey(ino, start)));
  if (!value.has_value()) return false;
  Extent e;
  e.offset = start;
  Status s = format::DecodeExtent(*value, &e.value);
  if (!s.ok()) {
    return s.Annotate("inode " + std::to_string(ino) + " extent at " + std::to_string(start));
  }
  if (start + e.value.length < end) return false;
  out->push_back(std::move(e));
  return true;
}

Status StoreImpl::CountDataBytesLocked(InodeState* s) {
  if (s->attr.data_bytes_known) return Status::OK();
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, 0, kMaxFileSize, &ex));
  uint64_t n = 0;
  for (const Extent& e : ex) n += e.value.length;
  s->attr.data_bytes = n;
  s->attr.data_bytes_known = true;
  return Status::OK();
}

Status StoreImpl::PunchLocked(InodeState* s, uint64_t start, uint64_t end, meta::Writes* b,
                              StatDeltas* deltas, uint64_t* removed) {
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, start, end, &ex));
  for (const Extent& e : ex) {
    const uint64_t e_end = e.offset + e.value.length;
    const uint64_t ov_start = std::max(start, e.offset);
    const uint64_t ov_end = std::min(end, e_end);
    *removed += ov_end - ov_start;
    b->Delete(Space::kExtents, format::ExtentKey(s->ino, e.offset));
    if (!e.value.is_inline && !e.value.in_data_file) {
      auto& d = (*deltas)[e.value.segment_id];
      d.live -= static_cast<int64_t>(ov_end - ov_start);
      d.dead += static_cast<int64_t>(ov_end - ov_start);
    }
    if (e.offset < start) {  // left piece keeps its key
      format::ExtentValue left = e.value;
      left.length = static_cast<uint32_t>(start - e.offset);
      if (left.is_inline) left.inline_data.resize(left.length);
      b->Put(Space::kExtents, format::ExtentKey(s->ino, e.offset), format::EncodeExtent(left));
    }
    if (end < e_end) {  // right piece starts at `end`
      format::ExtentValue right = e.value;
      const uint32_t cut = static_cast<uint32_t>(end - e.offset);
      right.length = static_cast<uint32_t>(e_end - end);
      if (right.is_inline) {
        right.inline_data = e.value.inline_data.substr(cut);
      } else {
        right.skip += cut;
      }
      b->Put(Space::kExtents, format::ExtentKey(s->ino, end), format::EncodeExtent(right));
    }
  }
  return Status::OK();
}

void StoreImpl::PutDataFileExtents(uint64_t ino, uint64_t offset, std::string_view data,
                                   meta::Writes* b) {
  const uint64_t max = options_.max_record_bytes;
  for (size_t pos = 0, len = 0; pos < data.size(); pos += len) {
    const uint64_t at = offset + pos;
    len = std::min<uint64_t>(data.size() - pos, max - at % max);
    PutDataFileExtent(ino, at, len, format::Checksum(data.substr(pos, len)), b);
  }
}

void StoreImpl::PutDataFileExtent(uint64_t ino, uint64_t at, uint64_t len, uint64_t checksum,
                                  meta::Writes* b) {
  format::ExtentValue e;
  e.in_data_file = true;
  e.length = e.stored_len = e.raw_len = static_cast<uint32_t>(len);
  e.record_offset = at;
  e.checksum = checksum;
  b->Put(Space::kExtents, format::ExtentKey(ino, at), format::EncodeExtent(e));
}

void StoreImpl::PutInlineExtent(uint64_t ino, std::string content, meta::Writes* b) {
  format::ExtentValue iv;
  iv.is_inline = true;
  iv.length = static_cast<uint32_t>(content.size());
  iv.inline_data = std::move(content);
  b->Put(Space::kExtents, format::ExtentKey(ino, 0), format::EncodeExtent(iv));
}

Result<std::vector<ExtentInfo>> StoreImpl::GetExtents(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(GetAttr(ino).status());
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtents(ino, 0, kMaxFileSize, &ex));
  std::vector<ExtentInfo> out;
  out.reserve(ex.size());
  for (Extent& e : ex) out.push_back(ExtentInfo{e.offset, std::move(e.value)});
  return out;
}

Result<std::optional<WholeDataFile>> StoreImpl::WholeDataFileOf(Ino ino) {
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  const uint64_t size = s->attr.size;
  if (objects_ != nullptr || !S_ISREG(s->attr.mode) || size == 0 || s->attr.data_file_end != size) {
    return std::optional<WholeDataFile>();
  }
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s.get(), 0, size, &ex));
  uint64_t next = 0;
  for (const Extent& e : ex) {
    const format::ExtentValue& v = e.value;
    if (!v.in_data_file || e.offset != next || v.record_offset + v.skip != e.offset) {
      return std::optional<WholeDataFile>();
    }
    next += v.length;
  }
  if (next != size) return std::optional<WholeDataFile>();
  return std::optional<WholeDataFile>(WholeDataFile{data_files_->Path(ino), size});
}

Result<uint64_t> StoreImpl::SeekData(Ino ino, uint64_t offset, bool hole) {
  CKPTFS_ASSIGN_OR_RETURN(Attr a, GetAttr(ino));
  if (offset >= a.size) return Status(ENXIO, "offset past the end of the file");
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtents(ino, offset, a.size, &ex));
  if (!hole) {
    for (const Extent& e : ex) {
      if (e.offset + e.value.length > offset) return std::max(offset, e.offset);
    }
    return Status(ENXIO, "no data after offset");
  }
  uint64_t pos = offset;
  for (const Extent& e : ex) {
    if (e.offset > pos) break;  // a gap before this extent
    pos = std::max(pos, e.offset + e.value.length);
  }
  return std::min(pos, a.size);
}

}  // namespace ckptfs::engine
