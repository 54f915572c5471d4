// File data operations of StoreImpl: writes, reads, truncation, holes.
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

constexpr uint64_t kMaxFileSize = 1ull << 60;
// Backing reads at least this large start a background read of the next
// kPrefetchBytes of their segment.
constexpr uint64_t kSequentialReadBytes = 512 << 10;
constexpr uint64_t kPrefetchBytes = 4 << 20;
// Writes of one file may arrive out of order (the kernel's write-back sends
// up to 64 MiB of a file's pages at once, and threads race for them): one
// past the end leaves a gap that an earlier one fills later, so the file can
// pass data_file_bytes without a write at its end that crosses it. Such a
// file still moves to its data file at its next write at its end while it
// is at most this many bytes past data_file_bytes (which bounds the copy).
constexpr uint64_t kLateMoveBytes = 64ull << 20;
// Records at least this large (of files of a few MiB and more, whose pages
// the kernel caches) leave the OS's cache once synced with
// bypass_data_file_cache (SegmentSet::Append's cached_elsewhere): their
// bytes are cached once. Through the cache and then dropped rather than
// direct: a file's writes are written one at a time, and direct ones would
// each wait for the disk.
constexpr uint64_t kCachedElsewhereRecordBytes = 256 << 10;

std::string KeyName(uint64_t segment_id, uint64_t offset) {
  return "segment " + std::to_string(segment_id) + " offset " + std::to_string(offset);
}

// `mode` without set-user-ID, and without set-group-ID when group execute
// is set (a set-group-ID bit without it marks mandatory locking, and stays).
uint32_t WithoutSuidSgid(uint32_t mode) {
  mode &= ~static_cast<uint32_t>(S_ISUID);
  if (mode & S_IXGRP) mode &= ~static_cast<uint32_t>(S_ISGID);
  return mode;
}

// Whether `req` asks for nothing but kill_suidgid or kill_sgid.
bool OnlyKillsSuidSgid(const SetAttrRequest& req) {
  return (req.kill_suidgid || req.kill_sgid) && !req.mode && !req.uid && !req.gid && !req.size && !req.atime &&
         !req.mtime && !req.ctime && !req.atime_now && !req.mtime_now;
}

// Whether an access at `now` moves the access time of `v` under `rule`
// (Linux's relatime_need_update for kRelative).
bool AtimeNeedsUpdate(const format::InodeValue& v, const Timespec& now, AtimeRule rule) {
  constexpr int64_t kDaySeconds = 24 * 60 * 60;
  auto not_after = [](int64_t a_sec, uint32_t a_nsec, int64_t b_sec, uint32_t b_nsec) {
    return a_sec < b_sec || (a_sec == b_sec && a_nsec <= b_nsec);
  };
  if (v.atime_sec == now.sec && v.atime_nsec == now.nsec) return false;
  if (rule == AtimeRule::kAlways) return true;
  return not_after(v.atime_sec, v.atime_nsec, v.mtime_sec, v.mtime_nsec) ||
         not_after(v.atime_sec, v.atime_nsec, v.ctime_sec, v.ctime_nsec) ||
         now.sec - v.atime_sec >= kDaySeconds;
}

}  // namespace

void StoreImpl::EmitDeltas(const StatDeltas& deltas, rocksdb::WriteBatch* b,
                           rocksdb::ColumnFamilyHandle* cf) {
  for (const auto& [id, d] : deltas) {
    b->Merge(cf, format::SegmentKey(id), format::EncodeSegmentStat(d));
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
  std::string prefix = format::ExtentPrefix(ino);
  std::string upper = format::ExtentPrefix(ino + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf_extents_));
  std::string key = format::ExtentKey(ino, start);
  it->SeekForPrev(key);
  if (!it->Valid() || !it->key().starts_with(prefix)) it->Seek(key);
  for (; it->Valid(); it->Next()) {
    if (it->key().size() != 16) return Status::Corruption("extent key is not 16 bytes");
    Extent e;
    e.offset = format::GetBE64(it->key().data() + 8);
    if (e.offset >= end) break;
    Status s = format::DecodeExtent(std::string_view(it->value().data(), it->value().size()), &e.value);
    if (!s.ok()) {
      return Status(s.code(), "inode " + std::to_string(ino) + " extent at " +
                                  std::to_string(e.offset) + ": " + s.message());
    }
    if (e.offset + e.value.length > start) out->push_back(std::move(e));
  }
  return FromRocks(it->status(), "read extents");
}

Result<bool> StoreImpl::ExtentCovering(Ino ino, uint64_t start, uint64_t end,
                                       std::vector<Extent>* out) {
  if (closed_) return Status(EIO, "store is closed");
  std::string value;
  rocksdb::Status rs =
      db_->Get(rocksdb::ReadOptions(), cf_extents_, format::ExtentKey(ino, start), &value);
  if (rs.IsNotFound()) return false;
  if (!rs.ok()) return FromRocks(rs, "read extent");
  Extent e;
  e.offset = start;
  Status s = format::DecodeExtent(value, &e.value);
  if (!s.ok()) {
    return Status(s.code(), "inode " + std::to_string(ino) + " extent at " +
                                std::to_string(start) + ": " + s.message());
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

Status StoreImpl::PunchLocked(InodeState* s, uint64_t start, uint64_t end, rocksdb::WriteBatch* b,
                              StatDeltas* deltas, uint64_t* removed) {
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, start, end, &ex));
  for (const Extent& e : ex) {
    const uint64_t e_end = e.offset + e.value.length;
    const uint64_t ov_start = std::max(start, e.offset);
    const uint64_t ov_end = std::min(end, e_end);
    *removed += ov_end - ov_start;
    b->Delete(cf_extents_, format::ExtentKey(s->ino, e.offset));
    if (!e.value.is_inline && !e.value.in_data_file) {
      auto& d = (*deltas)[e.value.segment_id];
      d.live -= static_cast<int64_t>(ov_end - ov_start);
      d.dead += static_cast<int64_t>(ov_end - ov_start);
    }
    if (e.offset < start) {  // left piece keeps its key
      format::ExtentValue left = e.value;
      left.length = static_cast<uint32_t>(start - e.offset);
      if (left.is_inline) left.inline_data.resize(left.length);
      b->Put(cf_extents_, format::ExtentKey(s->ino, e.offset), format::EncodeExtent(left));
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
      b->Put(cf_extents_, format::ExtentKey(s->ino, end), format::EncodeExtent(right));
    }
  }
  return Status::OK();
}

Status StoreImpl::AppendRecords(uint64_t ino, uint64_t offset, std::string_view data,
                                rocksdb::WriteBatch* b, StatDeltas* deltas) {
  const int level = compression_level_.load();
  // Records end at file offsets that are multiples of max_record_bytes:
  // the kernel reads a big file in aligned requests of that size, and each
  // then needs one record, whatever offsets the writes came at (the kernel's
  // write-back cache, for one, writes back from wherever its dirty range
  // begins).
  const uint64_t max = options_.max_record_bytes;
  for (size_t pos = 0, len = 0; pos < data.size(); pos += len) {
    const uint64_t at = offset + pos;
    len = std::min<uint64_t>(data.size() - pos, max - at % max);
    std::string_view chunk = data.substr(pos, len);
    format::PreparedRecord rec = format::PrepareRecord(ino, offset + pos, chunk, level);
    std::string_view payload =
        rec.header.codec == format::Codec::kZstd ? std::string_view(rec.compressed) : chunk;
    const bool cached_elsewhere =
        options_.bypass_data_file_cache && payload.size() >= kCachedElsewhereRecordBytes;
    CKPTFS_ASSIGN_OR_RETURN(AppendResult r,
                            segments_->Append(rec.header_bytes, payload, cached_elsewhere));
    if (r.sealed_id != 0) {
      auto& d = (*deltas)[r.sealed_id];
      d.sealed = 1;
      d.size = static_cast<int64_t>(r.sealed_size);
    }
    format::ExtentValue e;
    e.length = static_cast<uint32_t>(chunk.size());
    e.segment_id = r.segment_id;
    e.record_offset = r.offset;
    e.stored_len = rec.header.stored_len;
    e.raw_len = rec.header.raw_len;
    e.codec = rec.header.codec;
    e.checksum = rec.header.payload_checksum;
    b->Put(cf_extents_, format::ExtentKey(ino, offset + pos), format::EncodeExtent(e));
    (*deltas)[r.segment_id].live += static_cast<int64_t>(chunk.size());
    counters_.records_written++;
    counters_.stored_bytes += rec.header.stored_len;
  }
  return Status::OK();
}

Status StoreImpl::AppendDataFile(uint64_t ino, uint64_t offset, std::string_view data,
                                 rocksdb::WriteBatch* b) {
  CKPTFS_RETURN_IF_ERROR(data_files_->Write(ino, offset, data));
  counters_.data_file_writes++;
  counters_.data_file_write_bytes += data.size();
  PutDataFileExtents(ino, offset, data, b);
  return Status::OK();
}

void StoreImpl::PutDataFileExtents(uint64_t ino, uint64_t offset, std::string_view data,
                                   rocksdb::WriteBatch* b) {
  const uint64_t max = options_.max_record_bytes;
  for (size_t pos = 0, len = 0; pos < data.size(); pos += len) {
    const uint64_t at = offset + pos;
    len = std::min<uint64_t>(data.size() - pos, max - at % max);
    PutDataFileExtent(ino, at, len, format::Checksum(data.substr(pos, len)), b);
  }
}

void StoreImpl::PutDataFileExtent(uint64_t ino, uint64_t at, uint64_t len, uint64_t checksum,
                                  rocksdb::WriteBatch* b) {
  format::ExtentValue e;
  e.in_data_file = true;
  e.length = e.stored_len = e.raw_len = static_cast<uint32_t>(len);
  e.record_offset = at;
  e.checksum = checksum;
  b->Put(cf_extents_, format::ExtentKey(ino, at), format::EncodeExtent(e));
}

void StoreImpl::PutInlineExtent(uint64_t ino, std::string content, rocksdb::WriteBatch* b) {
  format::ExtentValue iv;
  iv.is_inline = true;
  iv.length = static_cast<uint32_t>(content.size());
  iv.inline_data = std::move(content);
  b->Put(cf_extents_, format::ExtentKey(ino, 0), format::EncodeExtent(iv));
}

Status StoreImpl::MoveToDataFileLocked(InodeState* s, uint64_t upto, format::InodeValue* v,
                                       rocksdb::WriteBatch* b, StatDeltas* deltas) {
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, 0, upto, &ex));
  CKPTFS_RETURN_IF_ERROR(data_files_->Create(s->ino));
  std::string bytes;
  for (const Extent& e : ex) {
    const uint64_t end = std::min(upto, e.offset + e.value.length);
    if (e.value.in_data_file) return Status::Corruption("inode " + std::to_string(s->ino) +
                                                        " has data file extents but no data file");
    bytes.resize(end - e.offset);
    CKPTFS_RETURN_IF_ERROR(ReadExtentsInto(s->ino, {e}, e.offset, end, bytes.data()));
    if (!e.value.is_inline) {
      auto& d = (*deltas)[e.value.segment_id];
      d.live -= static_cast<int64_t>(end - e.offset);
      d.dead += static_cast<int64_t>(end - e.offset);
    }
    // Replaces the extent (or, for one that reaches `upto`, the left piece
    // the caller's punch put under its key).
    CKPTFS_RETURN_IF_ERROR(AppendDataFile(s->ino, e.offset, bytes, b));
  }
  v->data_file_end = upto;
  return Status::OK();
}

Result<size_t> StoreImpl::Write(Ino ino, uint64_t offset, std::string_view data,
                                WriteTimes times) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  if (data.empty()) return size_t{0};
  if (offset >= kMaxFileSize || data.size() > kMaxFileSize - offset) {
    return Status(EFBIG, "write past the largest file size");
  }
  InodeRef s(&inodes_, ino);
  // Concurrent writes of the file append in offset order (write_order.h).
  WriteOrder::Turn turn(&s->write_order, offset);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  if (S_ISDIR(s->attr.mode)) return Status(EISDIR, "is a directory");
  if (!S_ISREG(s->attr.mode)) return Status(EINVAL, "not a regular file");
  CKPTFS_RETURN_IF_ERROR(CheckSpace(data.size(), ino, offset));
  if (s->direct) {
    // The data file is the file (BeginDirectWrite).
    CKPTFS_RETURN_IF_ERROR(data_files_->Write(ino, offset, data));
    CKPTFS_RETURN_IF_ERROR(AdoptLocked(s.get()));
    return data.size();
  }
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, WriteLocked(s.get(), offset, data, times));
  Unreserve(ino, offset, offset + data.size());  // drawn on
  return n;
}

Result<size_t> StoreImpl::WriteLocked(InodeState* s, uint64_t offset, std::string_view data,
                                      WriteTimes times) {
  EpochGate::Guard gate(&io_gate_);  // compaction waits for the commit below
  CommitGate::Write commit(&commit_gate_);  // a flush waits for the commit below
  const uint64_t ino = s->ino;
  const uint64_t end = offset + data.size();
  CKPTFS_RETURN_IF_ERROR(CountDataBytesLocked(s));
  format::InodeValue v = s->attr;
  const uint64_t new_size = std::max(v.size, end);
  // Read before the commit: a sync that begins after it counts as having
  // begun after this write.
  const uint64_t syncs = index_syncs_.load();
  const uint64_t first_write_syncs = v.size == 0 ? syncs : s->first_write_syncs;
  // Whether bytes this write moves may be durable where they are.
  const bool moved_may_be_synced = first_write_syncs == 0 || first_write_syncs != syncs;
  rocksdb::WriteBatch b;
  StatDeltas deltas;

  bool stored = false;
  if (new_size <= options_.inline_max_bytes) {
    // Small file: keep all of it in one inline extent, if it has no records.
    std::vector<Extent> ex;
    CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, 0, kMaxFileSize, &ex));
    if (std::all_of(ex.begin(), ex.end(), [](const Extent& e) { return e.value.is_inline; })) {
      std::string content(new_size, '\0');
      for (const Extent& e : ex) {
        if (e.offset >= new_size) continue;
        size_t n = std::min<uint64_t>(e.value.inline_data.size(), new_size - e.offset);
        std::memcpy(content.data() + e.offset, e.value.inline_data.data(), n);
        b.Delete(cf_extents_, format::ExtentKey(ino, e.offset));
      }
      std::memcpy(content.data() + offset, data.data(), data.size());
      PutInlineExtent(ino, std::move(content), &b);
      v.data_bytes = new_size;  // one extent holds all of the file
      counters_.inline_writes++;
      stored = true;
    }
  }
  if (!stored) {
    // A small inline head that this write touches moves into the record.
    std::string folded;
    uint64_t w_off = offset;
    std::string_view w_data = data;
    std::string head;
    rocksdb::Status rs =
        db_->Get(rocksdb::ReadOptions(), cf_extents_, format::ExtentKey(ino, 0), &head);
    format::ExtentValue hv;
    if (rs.ok()) {
      Status ds = format::DecodeExtent(head, &hv);
      if (!ds.ok()) {
        return Status(ds.code(), "inode " + std::to_string(ino) + " extent at 0: " + ds.message());
      }
    }
    if (rs.ok() && hv.is_inline && offset > 0 && offset <= hv.length) {
      folded = std::move(hv.inline_data);
      if (folded.size() < end) folded.resize(end);
      std::memcpy(folded.data() + offset, data.data(), data.size());
      w_off = 0;
      w_data = folded;
    } else if (!rs.ok() && !rs.IsNotFound()) {
      return FromRocks(rs, "read extent");
    }
    uint64_t removed = 0;
    const uint64_t w_end = w_off + w_data.size();
    CKPTFS_RETURN_IF_ERROR(PunchLocked(s, w_off, w_end, &b, &deltas, &removed));
    // A file that this write at its end takes past data_file_bytes moves to
    // a data file of its own (its bytes so far are copied once); so does one
    // that writes out of order took past it (kLateMoveBytes). After the
    // punch, which puts the left piece of an extent cut at w_off.
    const uint64_t threshold = options_.data_file_bytes;
    const bool move = v.data_file_end == 0 && threshold != 0 && w_end >= threshold &&
                      w_off <= v.size && w_end > v.size && v.size <= threshold + kLateMoveBytes;
    if (move) CKPTFS_RETURN_IF_ERROR(MoveToDataFileLocked(s, w_off, &v, &b, &deltas));
    const bool folds = !folded.empty();
    // Bytes at or past the data file's end go there; the data file is never
    // written in place, so bytes below it go to segments.
    const uint64_t split = v.data_file_end == 0 && !move
                               ? w_end
                               : std::clamp(v.data_file_end, w_off, w_end);
    if (split > w_off) {
      CKPTFS_RETURN_IF_ERROR(AppendRecords(ino, w_off, w_data.substr(0, split - w_off), &b, &deltas));
    }
    if (split < w_end) {
      CKPTFS_RETURN_IF_ERROR(AppendDataFile(ino, split, w_data.substr(split - w_off), &b));
      v.data_file_end = w_end;
    }
    v.data_bytes = v.data_bytes - removed + w_data.size();
    // Bytes that may have been synced where they were are synced where they
    // go before the batch that points there is written: the kernel may
    // write the index log's pages back before the store's, and a power cut
    // must not leave them pointing at lost bytes.
    if (moved_may_be_synced && move) CKPTFS_RETURN_IF_ERROR(data_files_->SyncDirty());
    if (moved_may_be_synced && folds) CKPTFS_RETURN_IF_ERROR(segments_->SyncDirty());
  }
  v.size = new_size;
  if (times == WriteTimes::kStamp) {
    const Timespec now = Now();
    v.mtime_sec = v.ctime_sec = now.sec;
    v.mtime_nsec = v.ctime_nsec = now.nsec;
  }
  PutInode(&b, ino, v);
  EmitDeltas(deltas, &b, cf_segments_);
  CKPTFS_RETURN_IF_ERROR(Commit(&b));
  s->attr = v;
  s->first_write_syncs = first_write_syncs;
  counters_.writes++;
  counters_.write_bytes += data.size();
  return data.size();
}

namespace {

// Buffers of one thread that its pass-through reads reuse: a buffer is free
// again once no record of the last request refers to it.
class ScratchBuffers {
 public:
  std::shared_ptr<char[]> Take(uint64_t len) {
    // Sizes round up, so that records of varied sizes settle on few buffers.
    len = (len + kGrain - 1) / kGrain * kGrain;
    for (Buffer& b : buffers_) {
      if (b.bytes.use_count() == 1 && b.len >= len) return b.bytes;
    }
    for (Buffer& b : buffers_) {
      if (b.bytes.use_count() == 1) {
        b = Buffer{std::shared_ptr<char[]>(new char[len]), len};
        return b.bytes;
      }
    }
    if (buffers_.size() >= kMaxBuffers) return std::shared_ptr<char[]>(new char[len]);
    buffers_.push_back(Buffer{std::shared_ptr<char[]>(new char[len]), len});
    return buffers_.back().bytes;
  }

 private:
  static constexpr size_t kMaxBuffers = 8;
  static constexpr uint64_t kGrain = 256 << 10;
  struct Buffer {
    std::shared_ptr<char[]> bytes;
    uint64_t len = 0;
  };
  std::vector<Buffer> buffers_;
};

ScratchBuffers& ThreadScratch() {
  thread_local ScratchBuffers scratch;
  return scratch;
}

}  // namespace

Status StoreImpl::FetchRecords(const std::vector<RecordRef>& want, RecordUse use,
                               std::map<std::pair<uint64_t, uint64_t>, RecordData>* out) {
  ScratchBuffers& scratch = ThreadScratch();
  std::vector<RecordRef> needed;
  std::set<std::pair<uint64_t, uint64_t>> missing;
  for (const RecordRef& ref : want) {
    auto key = std::make_pair(ref.segment_id, ref.offset);
    if (out->count(key) || !missing.insert(key).second) continue;
    if (RecordData d = cache_->Lookup(ref.segment_id, ref.offset)) {
      counters_.cache_hits++;
      (*out)[key] = std::move(d);
      continue;
    }
    counters_.cache_misses++;
    needed.push_back(ref);
  }
  if (needed.empty()) return Status::OK();

  // Records used whole once are read exactly: neighbours that a stretched
  // read would bring are the rest of the same big file, which the kernel
  // asks for next, in requests of their own.
  CoalesceSettings cs;
  if (use == RecordUse::kMayRepeat) cs = {coalesce_gap_.load(), coalesce_max_.load()};
  for (const BackingRead& br : PlanReads(std::move(needed), cs)) {
    // A read that coalescing stretched past the records it needs may overlap
    // another thread's stretched read: wait for that one, whose records are
    // then in the cache (unless evicted since). Reads of exactly what they
    // need (large sequential reads) go ahead at once.
    std::optional<InflightReads::Claim> claim;
    if (br.length > br.required) {
      claim.emplace(&inflight_, br.segment_id, br.offset, br.length);
      bool all_cached = true;
      for (const RecordRef& r : br.records) {
        RecordData d = cache_->Lookup(r.segment_id, r.offset);
        if (d == nullptr) {
          all_cached = false;
          break;
        }
        (*out)[{r.segment_id, r.offset}] = std::move(d);
      }
      if (all_cached) continue;
    }
    if (br.length >= kSequentialReadBytes) {
      // A large read is most likely one of a sequential series: have the
      // kernel fetch what follows while this one is served.
      segments_->Prefetch(br.segment_id, br.offset + br.length, kPrefetchBytes);
    }
    // A large request that uses each of its records whole is the kernel
    // reading a big file ahead (records end at aligned file offsets:
    // AppendRecords; the write-back cache may cut them shorter): the
    // kernel's page cache keeps those bytes, so the record cache does not
    // keep them again, and each read of exactly its records goes into a
    // buffer of this thread's that the next such request reuses (no fresh
    // pages to fault in). Records that a request cuts (their rest is wanted
    // next) and stretched reads that bring neighbours are cached.
    const bool pass_through = use == RecordUse::kWholeOnce && br.length == br.required;
    std::shared_ptr<char[]> buf;
    if (pass_through) {
      buf = scratch.Take(br.length);
    } else {
      buf.reset(new char[br.length]);
    }
    CKPTFS_ASSIGN_OR_RETURN(size_t n, segments_->ReadUpTo(br.segment_id, br.offset, br.length, buf.get()));
    // The kernel caches what this read returns: the segment file's pages
    // of it need not stay cached too.
    if (pass_through) segments_->Evict(br.segment_id, br.offset, n);
    counters_.backing_reads++;
    counters_.backing_read_bytes += n;
    size_t served = 0;
    // Verifies and decodes the record at `pos` of `bytes` (a buffer of
    // `bytes_held` bytes, `avail` of them read from segment offset `base`)
    // and caches it; nullptr (and `*err`) when it is not intact.
    auto decode_in = [&](const std::shared_ptr<char[]>& bytes, size_t bytes_held, size_t avail,
                         uint64_t base, uint64_t pos, Status* err) -> RecordData {
      format::RecordHeader h;
      std::string_view rest(bytes.get() + pos, avail - pos);
      *err = format::DecodeRecordHeader(rest, &h);
      if (!err->ok()) return nullptr;
      if (format::kRecordHeaderSize + h.stored_len > rest.size()) {
        *err = Status::Corruption(KeyName(br.segment_id, base + pos) + ": record truncated");
        return nullptr;
      }
      std::string_view payload = rest.substr(format::kRecordHeaderSize, h.stored_len);
      auto data = std::make_shared<RecordBytes>();
      data->header = h;
      if (h.codec == format::Codec::kNone) {
        *err = format::VerifyRecordPayload(h, payload);
        if (!pass_through && 2 * payload.size() < bytes_held) {
          // Cached, and a small part of its buffer: a copy of its own, so
          // that the cache, which counts what its entries hold
          // (RecordBytes::held), keeps records rather than read buffers.
          std::shared_ptr<char[]> own(new char[payload.size()]);
          std::memcpy(own.get(), payload.data(), payload.size());
          data->bytes = std::string_view(own.get(), payload.size());
          data->owner = std::move(own);
        } else {
          data->owner = bytes;
          data->bytes = payload;
          data->held = bytes_held;
        }
      } else {
        auto decoded = std::make_shared<std::string>();
        *err = format::DecodeRecordPayload(h, payload, decoded.get());
        data->bytes = *decoded;
        data->owner = std::move(decoded);
      }
      if (!err->ok()) return nullptr;
      if (!pass_through) cache_->Insert(br.segment_id, base + pos, data);
      served++;
      return data;
    };
    // The same for the record at `pos` of this read; `*next` = the byte
    // after it. A neighbour that the stretched read cut short is completed
    // with one more read of its tail, so that the next read of this region
    // does not fetch its head again (a restore in store order then reads
    // each segment byte once).
    auto decode = [&](uint64_t pos, Status* err, uint64_t* next) -> RecordData {
      if (pos + format::kRecordHeaderSize > n) {
        *err = Status::Corruption(KeyName(br.segment_id, br.offset + pos) + ": segment ends early");
        return nullptr;
      }
      format::RecordHeader h;
      *err = format::DecodeRecordHeader(std::string_view(buf.get() + pos, n - pos), &h);
      if (!err->ok()) return nullptr;
      const uint64_t whole = format::kRecordHeaderSize + h.stored_len;
      if (pos + whole <= n) {
        *next = pos + whole;
        return decode_in(buf, br.length, n, br.offset, pos, err);
      }
      const uint64_t missing = pos + whole - n;
      if (n < br.length || missing > cs.max) {  // the segment ends, or not a record we want
        *err = Status::Corruption(KeyName(br.segment_id, br.offset + pos) + ": record truncated");
        return nullptr;
      }
      std::shared_ptr<char[]> rec(new char[whole]);
      std::memcpy(rec.get(), buf.get() + pos, n - pos);
      Result<size_t> m = segments_->ReadUpTo(br.segment_id, br.offset + n, missing, rec.get() + (n - pos));
      if (!m.ok()) {
        *err = m.status();
        return nullptr;
      }
      counters_.backing_reads++;
      counters_.backing_read_bytes += *m;
      *next = pos + whole;
      return decode_in(rec, whole, (n - pos) + *m, br.offset + pos, 0, err);
    };
    for (size_t i = 0; i < br.records.size(); ++i) {
      const RecordRef& r = br.records[i];
      const uint64_t pos = r.offset - br.offset;
      Status err;
      uint64_t next = 0;
      RecordData d = decode(pos, &err, &next);
      if (d == nullptr) {
        counters_.checksum_errors++;
        return Status(EIO, err.message());
      }
      (*out)[{r.segment_id, r.offset}] = d;
      // Neighbouring records in the same read go into the cache too.
      const uint64_t stop = i + 1 < br.records.size() ? br.records[i + 1].offset - br.offset : n;
      while (next < stop) {
        Status ignore;
        if (decode(next, &ignore, &next) == nullptr) break;
      }
    }
    if (served > 1) counters_.coalesced_reads++;
  }
  return Status::OK();
}

Status StoreImpl::Accessed(Ino ino, AtimeRule rule) {
  if (options_.read_only) return Status::OK();
  if (closed_) return Status(EIO, "store is closed");
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  const Timespec now = Now();
  if (!AtimeNeedsUpdate(s->attr, now, rule)) return Status::OK();
  format::InodeValue v = s->attr;
  v.atime_sec = now.sec;
  v.atime_nsec = now.nsec;
  rocksdb::WriteBatch b;
  PutInode(&b, ino, v);
  // Without the log: a memtable insert, no I/O under s->mu. RocksDB flushes
  // such writes when the index closes. An inode batch changes no extent map.
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  CKPTFS_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &b), "index write"));
  s->attr = v;
  return Status::OK();
}

Result<size_t> StoreImpl::Read(Ino ino, uint64_t offset, size_t len, char* buf) {
  uint64_t size;
  {
    InodeRef s(&inodes_, ino);
    MutexLock l(&s->mu);
    CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
    if (S_ISDIR(s->attr.mode)) return Status(EISDIR, "is a directory");
    size = s->attr.size;
  }
  counters_.reads++;
  if (offset >= size || len == 0) return size_t{0};
  EpochGate::Guard gate(&io_gate_);  // compaction keeps our extents' segments meanwhile
  len = static_cast<size_t>(std::min<uint64_t>(len, size - offset));
  const uint64_t end = offset + len;

  if (closed_) return Status(EIO, "store is closed");
  std::vector<Extent> ex;
  if (extent_maps_.Collect(ino, offset, end, &ex) != ExtentMapCache::Lookup::kHeld) {
    CKPTFS_ASSIGN_OR_RETURN(const bool covered, ExtentCovering(ino, offset, end, &ex));
    if (!covered) CKPTFS_RETURN_IF_ERROR(CollectIndexExtents(ino, offset, end, &ex));
  }
  CKPTFS_RETURN_IF_ERROR(ReadExtentsInto(ino, ex, offset, end, buf));
  counters_.read_bytes += len;
  return len;
}

Status StoreImpl::ReadExtentsInto(Ino ino, const std::vector<Extent>& ex, uint64_t offset,
                                  uint64_t end, char* buf) {
  ScratchBuffers& scratch = ThreadScratch();
  const uint64_t len = end - offset;
  std::vector<RecordRef> want;
  // A large request that takes every record whole will not want them again.
  RecordUse use = len >= kSequentialReadBytes ? RecordUse::kWholeOnce : RecordUse::kMayRepeat;
  for (const Extent& e : ex) {
    if (e.value.is_inline || e.value.in_data_file) continue;
    want.push_back(RecordRef{e.value.segment_id, e.value.record_offset,
                             format::kRecordHeaderSize + e.value.stored_len});
    if (e.value.skip != 0 || e.value.length != e.value.raw_len || e.offset < offset ||
        e.offset + e.value.length > end) {
      use = RecordUse::kMayRepeat;
    }
  }
  std::map<std::pair<uint64_t, uint64_t>, RecordData> records;
  CKPTFS_RETURN_IF_ERROR(FetchRecords(want, use, &records));
  // Every extent against the record it points at (cached ones too): a record
  // with a valid checksum is still the wrong data if it is not that record.
  for (const Extent& e : ex) {
    if (e.value.is_inline || e.value.in_data_file) continue;
    const RecordData& d = records[{e.value.segment_id, e.value.record_offset}];
    Status s = format::CheckRecordForExtent(d->header, e.value, ino, e.offset);
    if (!s.ok()) {
      counters_.checksum_errors++;
      return Status(EIO, KeyName(e.value.segment_id, e.value.record_offset) + ": " + s.message());
    }
  }

  uint64_t pos = offset;  // bytes before `pos` are filled
  for (const Extent& e : ex) {
    const uint64_t from = std::max(offset, e.offset);
    const uint64_t to = std::min(end, e.offset + e.value.length);
    if (from >= to) continue;
    if (from > pos) std::memset(buf + (pos - offset), 0, from - pos);  // hole
    if (e.value.in_data_file) {
      // A block read whole lands in place; a window of one comes from the
      // blocks read last (VerifiedBlocks) or is read and kept there, so
      // that a reader whose requests do not line up with the blocks reads
      // each from the disk once. Either way its checksum is checked first.
      const format::ExtentValue& v = e.value;
      const bool whole = v.skip == 0 && v.length == v.stored_len && from == e.offset &&
                         to == e.offset + v.length;
      const bool once = len >= kSequentialReadBytes;
      if (whole) {
        CKPTFS_RETURN_IF_ERROR(ReadDataFileBlock(ino, v, once, buf + (from - offset)));
      } else {
        const VerifiedBlocks::Key key{ino, v.record_offset, v.stored_len, v.checksum};
        CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const char[]> block,
                                verified_blocks_.Get(key, [&]() -> Result<std::shared_ptr<const char[]>> {
                                  std::shared_ptr<char[]> read = scratch.Take(v.stored_len);
                                  CKPTFS_RETURN_IF_ERROR(ReadDataFileBlock(ino, v, once, read.get()));
                                  return std::shared_ptr<const char[]>(std::move(read));
                                }));
        std::memcpy(buf + (from - offset), block.get() + v.skip + (from - e.offset), to - from);
      }
    } else {
      const char* src;
      if (e.value.is_inline) {
        src = e.value.inline_data.data() + (from - e.offset);
      } else {
        const RecordData& d = records[{e.value.segment_id, e.value.record_offset}];
        src = d->bytes.data() + e.value.skip + (from - e.offset);
      }
      std::memcpy(buf + (from - offset), src, to - from);
    }
    pos = std::max(pos, to);
  }
  if (pos < end) std::memset(buf + (pos - offset), 0, end - pos);
  return Status::OK();
}

Status StoreImpl::ReadDataFileBlock(Ino ino, const format::ExtentValue& v, bool once, char* dst) {
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, once ? data_files_->ReadOnce(ino, v.record_offset, v.stored_len, dst)
                                               : data_files_->ReadUpTo(ino, v.record_offset, v.stored_len, dst));
  counters_.data_file_reads++;
  counters_.data_file_read_bytes += n;
  Status cs = format::CheckDataFileBlock(v, std::string_view(dst, n));
  if (!cs.ok()) {
    counters_.checksum_errors++;
    return Status(EIO, "inode " + std::to_string(ino) + " " + cs.message());
  }
  return Status::OK();
}

Result<Attr> StoreImpl::SetAttr(Ino ino, const SetAttrRequest& in) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  SetAttrRequest req = in;
  if (s->direct && req.size && S_ISREG(s->attr.mode)) {
    // The data file is the file: it is cut or extended, then adopted.
    CKPTFS_RETURN_IF_ERROR(data_files_->Truncate(ino, *req.size));
    CKPTFS_RETURN_IF_ERROR(AdoptLocked(s.get()));
    req.size.reset();
  }
  const bool shrinks = req.size && *req.size < s->attr.size && S_ISREG(s->attr.mode);
  if (shrinks) CKPTFS_RETURN_IF_ERROR(CountDataBytesLocked(s.get()));
  format::InodeValue v = s->attr;
  rocksdb::WriteBatch b;
  StatDeltas deltas;
  Timespec now = Now();
  if (req.mode) v.mode = (v.mode & S_IFMT) | (*req.mode & 07777);
  if (req.uid) v.uid = *req.uid;
  if (req.gid) v.gid = *req.gid;
  if (req.kill_suidgid && !S_ISDIR(v.mode)) v.mode = WithoutSuidSgid(v.mode);
  if (req.kill_sgid && !S_ISDIR(v.mode)) v.mode &= ~static_cast<uint32_t>(S_ISGID);
  if (OnlyKillsSuidSgid(req) && v.mode == s->attr.mode) return ToAttr(ino, v);
  if (req.size) {
    if (S_ISDIR(v.mode)) return Status(EISDIR, "is a directory");
    if (!S_ISREG(v.mode)) return Status(EINVAL, "not a regular file");
    if (*req.size > kMaxFileSize) return Status(EFBIG, "size past the largest file size");
    if (*req.size < v.size) {
      uint64_t removed = 0;
      CKPTFS_RETURN_IF_ERROR(PunchLocked(s.get(), *req.size, kMaxFileSize, &b, &deltas, &removed));
      v.data_bytes -= removed;
    }
    if (*req.size < v.data_file_end) {
      // The blocks of the extents that stay keep all their bytes (a
      // checksum covers a whole block, and a window of one may end before
      // it): writes go into the data file only past the last of them.
      uint64_t keep = *req.size;
      std::vector<Extent> cut;
      if (keep > 0) CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s.get(), 0, keep, &cut));
      for (const Extent& e : cut) {
        if (e.value.in_data_file) keep = std::max(keep, e.value.record_offset + e.value.stored_len);
      }
      v.data_file_end = std::min(v.data_file_end, keep);
    }
    if (*req.size != v.size) {
      v.mtime_sec = now.sec;
      v.mtime_nsec = now.nsec;
    }
    v.size = *req.size;
  }
  if (req.atime_now) {
    v.atime_sec = now.sec;
    v.atime_nsec = now.nsec;
  } else if (req.atime) {
    v.atime_sec = req.atime->sec;
    v.atime_nsec = req.atime->nsec;
  }
  if (req.mtime_now) {
    v.mtime_sec = now.sec;
    v.mtime_nsec = now.nsec;
  } else if (req.mtime) {
    v.mtime_sec = req.mtime->sec;
    v.mtime_nsec = req.mtime->nsec;
  }
  if (req.ctime) KernelStamped(*req.ctime);
  const Timespec ctime = req.ctime.value_or(now);
  v.ctime_sec = ctime.sec;
  v.ctime_nsec = ctime.nsec;
  PutInode(&b, ino, v);
  EmitDeltas(deltas, &b, cf_segments_);
  // Writes go into the data file from its (new) end on: the index that
  // lowers the end must be durable before a write lands there, or a power
  // loss could bring back extents whose bytes that write replaced.
  const bool cuts_data_file = v.data_file_end < s->attr.data_file_end;
  CKPTFS_RETURN_IF_ERROR(Commit(&b, /*sync=*/cuts_data_file));
  s->attr = v;
  if (cuts_data_file) {
    CKPTFS_RETURN_IF_ERROR(v.data_file_end == 0 ? data_files_->Remove(ino)
                                                : data_files_->Truncate(ino, v.data_file_end));
  }
  if (shrinks) Unreserve(ino, *req.size, kMaxFileSize);  // as truncate frees preallocated blocks
  return ToAttr(ino, v);
}

Status StoreImpl::Fallocate(Ino ino, int mode, uint64_t offset, uint64_t len) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  const bool keep_size = (mode & FALLOC_FL_KEEP_SIZE) != 0;
  const int op = mode & ~FALLOC_FL_KEEP_SIZE;
  const bool punch = op == FALLOC_FL_PUNCH_HOLE;
  const bool zero = op == FALLOC_FL_ZERO_RANGE;
  if ((op != 0 && !punch && !zero) || (punch && !keep_size)) {
    return Status(EOPNOTSUPP, "fallocate mode " + std::to_string(mode) +
                                  " is not supported (supported: 0, KEEP_SIZE, "
                                  "PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE[|KEEP_SIZE])");
  }
  if (len == 0) return Status(EINVAL, "fallocate of 0 bytes");
  if (offset >= kMaxFileSize || len > kMaxFileSize - offset) return Status(EFBIG, "too large");
  const uint64_t end = offset + len;
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  if (s->direct) {
    return Status(EOPNOTSUPP, "fallocate of a file the kernel writes directly");
  }
  if (!S_ISREG(s->attr.mode)) return Status(S_ISDIR(s->attr.mode) ? EISDIR : ENODEV, "not a file");
  const bool extend = !keep_size && !punch && end > s->attr.size;
  const bool clear = (punch || zero) && offset < s->attr.size;  // bytes to drop
  if (punch && !clear) {  // nothing stored there: only the reservation goes
    Unreserve(ino, offset, end);
    return Status::OK();
  }
  if (!punch) CKPTFS_RETURN_IF_ERROR(Reserve(ino, offset, end));
  if (!punch && !zero && !extend) return Status::OK();  // reserved: nothing to store

  Status st = CountDataBytesLocked(s.get());
  format::InodeValue v = s->attr;
  rocksdb::WriteBatch b;
  StatDeltas deltas;
  if (st.ok() && clear) {
    uint64_t removed = 0;
    st = PunchLocked(s.get(), offset, std::min(end, v.size), &b, &deltas, &removed);
    v.data_bytes -= removed;
  }
  Timespec now = Now();
  if (extend) v.size = end;
  if (punch || zero) {
    v.mtime_sec = now.sec;
    v.mtime_nsec = now.nsec;
  }
  v.ctime_sec = now.sec;
  v.ctime_nsec = now.nsec;
  if (st.ok()) {
    PutInode(&b, ino, v);
    EmitDeltas(deltas, &b, cf_segments_);
    st = Commit(&b);
  }
  if (!st.ok()) {
    if (!punch) Unreserve(ino, offset, end);  // nothing changed
    return st;
  }
  s->attr = v;
  if (punch) Unreserve(ino, offset, end);  // a punch frees preallocated space too
  return Status::OK();
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

Status StoreImpl::OpenFile(Ino ino) {
  InodeState* s = inodes_.Pin(ino);  // held until Release
  Status st;
  {
    MutexLock l(&s->mu);
    st = LoadLocked(s);
    if (st.ok()) s->open_count++;
  }
  // Only once its mutex is unlocked: the last Unpin frees the state.
  if (!st.ok()) inodes_.Unpin(s);
  return st;
}

Status StoreImpl::Release(Ino ino) {
  InodeRef ref(&inodes_, ino);
  InodeState* s = ref.get();
  MutexLock l(&s->mu);
  if (s->open_count.load() <= 0) return Status(EBADF, "inode " + std::to_string(ino) + " is not open");
  Status result;
  if (--s->open_count == 0 && s->loaded && s->attr.nlink == 0 && !s->purged && !options_.read_only &&
      !closed_) {
    rocksdb::WriteBatch b;
    StatDeltas deltas;
    // On failure the inode stays an orphan: fsck reports it, and the next
    // open tries the purge again.
    result = PurgeLocked(s, &b, &deltas);
    if (result.ok()) {
      EmitDeltas(deltas, &b, cf_segments_);
      result = Commit(&b);
    }
    if (result.ok()) {
      if (s->attr.data_file_end != 0 || s->direct) {
        (void)data_files_->RemoveAfterSync(ino, s->attr.data_file_end);
        // (Not while the kernel may hold unwritten pages of it.)
        if (!s->direct) data_files_->EvictSoon(ino);
      }
      s->purged = true;
    }
  }
  inodes_.Unpin(s);  // the pin taken by OpenFile
  return result;
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
  if (!S_ISREG(s->attr.mode) || size == 0 || s->attr.data_file_end != size) return std::optional<WholeDataFile>();
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

Result<std::optional<std::string>> StoreImpl::BeginDirectWrite(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  InodeState* s = inodes_.Pin(ino);  // held until EndDirectWrite
  Status st;
  bool began = false;
  {
    MutexLock l(&s->mu);
    st = LoadLocked(s);
    if (st.ok() && !s->direct && S_ISREG(s->attr.mode) && (s->attr.mode & (S_ISUID | S_ISGID)) == 0 &&
        s->attr.size == 0 && s->attr.data_file_end == 0 && options_.data_file_bytes != 0) {
      st = data_files_->Create(ino);
      began = st.ok();
      if (began) {
        s->direct = true;
        s->adopted_size = 0;
        s->adopted_ns = -1;
      }
    }
  }
  // Only once its mutex is unlocked: the last Unpin frees the state.
  if (!began) inodes_.Unpin(s);
  if (!st.ok()) return st;
  if (!began) return std::optional<std::string>();
  counters_.direct_writes++;
  return std::optional<std::string>(data_files_->Path(ino));
}

Status StoreImpl::AdoptLocked(InodeState* s) {
  const uint64_t ino = s->ino;
  // What the data file holds, read while nothing wrote it: a write during
  // the read (another open of the file writes on) changes its size or
  // mtime, and it is read again, up to kAdoptReads times; then what was
  // read last is adopted as not settled, so that the next adoption reads
  // it again. A file smaller than data_file_bytes is stored as a small file
  // written through the store is: its bytes are copied into segments
  // (inline when tiny) and the index does not use its data file, which goes
  // at the end of the direct writes. Otherwise a checksum per block is
  // taken of it. (Only the daemon shrinks the data file, under the inode's
  // mutex: the copy reads all of look.size.)
  constexpr int kAdoptReads = 3;
  DataFiles::Look look;
  bool copy = false;
  std::string bytes;
  std::vector<uint64_t> sums;
  for (int reads = 1;; ++reads) {
    CKPTFS_ASSIGN_OR_RETURN(look, data_files_->LookAt(ino));
    if (reads == 1 && look.size == s->adopted_size && look.modified_ns == s->adopted_ns) {
      return Status::OK();
    }
    if (look.size > kMaxFileSize) return Status(EFBIG, "data file past the largest file size");
    copy = look.size < options_.data_file_bytes;
    if (copy) {
      bytes.resize(look.size);
      CKPTFS_ASSIGN_OR_RETURN(const size_t n, data_files_->ReadUpTo(ino, 0, bytes.size(), bytes.data()));
      if (n != bytes.size()) return Status(EIO, "data file " + data_files_->Path(ino) + " is short");
    } else {
      CKPTFS_ASSIGN_OR_RETURN(sums, data_files_->BlockChecksums(ino, look.size, options_.max_record_bytes));
    }
    CKPTFS_ASSIGN_OR_RETURN(const DataFiles::Look after, data_files_->LookAt(ino));
    if (after.size == look.size && after.modified_ns == look.modified_ns) break;
    if (reads == kAdoptReads) {
      look.settled = false;
      break;
    }
    counters_.direct_rereads++;
  }
  EpochGate::Guard gate(&io_gate_);
  CommitGate::Write commit(&commit_gate_);
  format::InodeValue v = s->attr;
  rocksdb::WriteBatch b;
  StatDeltas deltas;
  uint64_t removed = 0;
  CKPTFS_RETURN_IF_ERROR(PunchLocked(s, 0, kMaxFileSize, &b, &deltas, &removed));
  if (!copy) {
    const uint64_t max = options_.max_record_bytes;
    for (uint64_t i = 0; i < sums.size(); ++i) {
      PutDataFileExtent(ino, i * max, std::min(max, look.size - i * max), sums[i], &b);
    }
  } else if (bytes.empty()) {
    // No extent.
  } else if (bytes.size() <= options_.inline_max_bytes) {
    PutInlineExtent(ino, std::move(bytes), &b);
    counters_.inline_writes++;
  } else {
    CKPTFS_RETURN_IF_ERROR(AppendRecords(ino, 0, bytes, &b, &deltas));
  }
  counters_.direct_adoptions++;
  counters_.direct_adopted_bytes += look.size;
  v.size = look.size;
  v.data_file_end = copy ? 0 : look.size;
  v.data_bytes = look.size;
  v.data_bytes_known = true;
  const Timespec modified = FromNanos(look.modified_ns);
  v.mtime_sec = v.ctime_sec = modified.sec;
  v.mtime_nsec = v.ctime_nsec = modified.nsec;
  PutInode(&b, ino, v);
  EmitDeltas(deltas, &b, cf_segments_);
  // Before the commit: a sync, or a flush of the index's memtable, that
  // finds the commit syncs the data file first.
  if (!copy) CKPTFS_RETURN_IF_ERROR(data_files_->MarkWritten(ino));
  CKPTFS_RETURN_IF_ERROR(Commit(&b));
  s->attr = v;
  s->adopted_size = look.size;
  // Not settled: a write in the same timestamp step would leave size and
  // mtime as they are, so the next adoption hashes again.
  s->adopted_ns = look.settled ? look.modified_ns : -1;
  return Status::OK();
}

Status StoreImpl::AdoptDirectWrites(Ino ino) { return Adopt(ino, /*sync=*/false); }

Status StoreImpl::Adopt(Ino ino, bool sync) {
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  if (!s->direct || s->purged) return Status::OK();  // direct implies loaded
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  if (!sync) return AdoptLocked(s.get());
  // The data file's bytes go to disk while they are hashed.
  Status synced;
  std::thread syncer([&] { synced = data_files_->SyncOne(ino); });
  Status adopted = AdoptLocked(s.get());
  syncer.join();
  return adopted.ok() ? synced : adopted;
}

Status StoreImpl::EndDirectWrite(Ino ino) {
  InodeRef ref(&inodes_, ino);
  InodeState* s = ref.get();
  Status st;
  bool sync = false;
  {
    MutexLock l(&s->mu);
    if (!s->direct) return Status(EINVAL, "inode " + std::to_string(ino) + " has no direct writes");
    if (!s->purged) {
      st = CheckWritable();
      if (st.ok()) st = AdoptLocked(s);
      // Its bytes are in segments: the data file goes once that is durable.
      if (st.ok() && s->attr.data_file_end == 0) sync = data_files_->RemoveAfterSync(ino, s->attr.size);
    }
    s->direct = false;
  }
  inodes_.Unpin(s);  // the pin taken by BeginDirectWrite
  // Many small files written without an fsync: a sync, so that their data
  // files (copies of bytes in segments) do not pile up.
  if (st.ok() && sync) st = MakeDurable();
  return st;
}

}  // namespace ckptfs::engine
