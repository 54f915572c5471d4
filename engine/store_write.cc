// The write path of StoreImpl: records appended to segments, data files
// (and the move of a growing file into one), and writes the kernel makes
// straight into a data file (BeginDirectWrite, Adopt, EndDirectWrite).
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

// Writes of one file may arrive out of order (the kernel's write-back sends
// up to 64 MiB of a file's pages at once, and threads race for them): one
// past the end leaves a gap that an earlier one fills later, so the file can
// pass data_file_min without a write at its end that crosses it. Such a
// file still moves to its data file at its next write at its end while it
// is at most this many bytes past data_file_min (which bounds the copy).
constexpr uint64_t kLateMoveBytes = 64ull << 20;

// Records at least this large (of files of a few MiB and more, whose pages
// the kernel caches) leave the OS's cache once synced with
// direct_io (SegmentSet::Append's cached_elsewhere): their
// bytes are cached once. Through the cache and then dropped rather than
// direct: a file's writes are written one at a time, and direct ones would
// each wait for the disk.
constexpr uint64_t kCachedElsewhereRecordBytes = 256 << 10;

}  // namespace

Status StoreImpl::AppendRecords(uint64_t ino, uint64_t offset, std::string_view data,
                                meta::Writes* b, StatDeltas* deltas) {
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
        options_.direct_io && payload.size() >= kCachedElsewhereRecordBytes;
    CKPTFS_ASSIGN_OR_RETURN(AppendResult r,
                            segments_->Append(rec.header_bytes, payload, cached_elsewhere));
    if (r.sealed_id != 0) {
      auto& d = (*deltas)[r.sealed_id];
      d.sealed = 1;
      d.size = static_cast<int64_t>(r.sealed_size);
    }
    format::ExtentValue e;
    e.length = static_cast<uint32_t>(chunk.size());
    format::PointExtentAt(rec.header, r.segment_id, r.offset, &e);
    b->Put(Space::kExtents, format::ExtentKey(ino, offset + pos), format::EncodeExtent(e));
    (*deltas)[r.segment_id].live += static_cast<int64_t>(chunk.size());
    counters_.records_written++;
    counters_.stored_bytes += rec.header.stored_len;
  }
  return Status::OK();
}

Status StoreImpl::AppendDataFile(uint64_t ino, uint64_t offset, std::string_view data,
                                 meta::Writes* b) {
  CKPTFS_RETURN_IF_ERROR(data_files_->Write(ino, offset, data));
  counters_.data_file_writes++;
  counters_.data_file_write_bytes += data.size();
  PutDataFileExtents(ino, offset, data, b);
  return Status::OK();
}

Status StoreImpl::MoveToDataFileLocked(InodeState* s, uint64_t upto, format::InodeValue* v,
                                       meta::Writes* b, StatDeltas* deltas) {
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
  CKPTFS_RETURN_IF_ERROR(MayChange(ino));
  InodeRef s(&inodes_, ino);
  // Concurrent writes of the file append in offset order (write_order.h).
  WriteOrder::Turn turn(&s->write_order, offset);
  MutexLock l(&s->mu);
  // On a shared store, what this mount does not trust is read again: a
  // write keeps every attribute but size and times as the index has them.
  CKPTFS_RETURN_IF_ERROR(FreshLocked(s.get()));
  if (S_ISDIR(s->attr.mode)) return Status(EISDIR, "is a directory");
  if (!S_ISREG(s->attr.mode)) return Status(EINVAL, "not a regular file");
  CKPTFS_RETURN_IF_ERROR(Unsealed(ino, s->attr, "write"));
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
  meta::Writes b;
  StatDeltas deltas;

  bool stored = false;
  if (new_size <= options_.inline_max) {
    CKPTFS_ASSIGN_OR_RETURN(stored, WriteInlineLocked(s, offset, data, new_size, &v, &b));
  }
  if (!stored) {
    CKPTFS_RETURN_IF_ERROR(
        WriteStoredLocked(s, offset, data, moved_may_be_synced, &v, &b, &deltas));
  }
  v.size = new_size;
  if (times == WriteTimes::kStamp) SetMtime(&v, Now());
  PutInode(&b, s->ino, v);
  EmitDeltas(deltas, &b);
  CKPTFS_RETURN_IF_ERROR(CommitAttrs(s, &b));
  s->attr = v;
  s->first_write_syncs = first_write_syncs;
  counters_.writes++;
  counters_.write_bytes += data.size();
  return data.size();
}

Result<bool> StoreImpl::WriteInlineLocked(InodeState* s, uint64_t offset, std::string_view data,
                                          uint64_t new_size, format::InodeValue* v,
                                          meta::Writes* b) {
  // Small file: keep all of it in one inline extent, if it has no records.
  std::vector<Extent> ex;
  CKPTFS_RETURN_IF_ERROR(CollectExtentsLocked(s, 0, kMaxFileSize, &ex));
  if (!std::all_of(ex.begin(), ex.end(), [](const Extent& e) { return e.value.is_inline; })) {
    return false;
  }
  std::string content(new_size, '\0');
  for (const Extent& e : ex) {
    if (e.offset >= new_size) continue;
    size_t n = std::min<uint64_t>(e.value.inline_data.size(), new_size - e.offset);
    std::memcpy(content.data() + e.offset, e.value.inline_data.data(), n);
    b->Delete(Space::kExtents, format::ExtentKey(s->ino, e.offset));
  }
  std::memcpy(content.data() + offset, data.data(), data.size());
  PutInlineExtent(s->ino, std::move(content), b);
  v->data_bytes = new_size;  // one extent holds all of the file
  counters_.inline_writes++;
  return true;
}

Status StoreImpl::FoldInlineHead(uint64_t ino, uint64_t offset, std::string_view data,
                                 std::string* folded) {
  if (offset == 0) return Status::OK();  // the write covers the head's start: nothing folds
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> head,
                          IndexGet(Space::kExtents, format::ExtentKey(ino, 0)));
  if (!head.has_value()) return Status::OK();
  format::ExtentValue hv;
  Status ds = format::DecodeExtent(*head, &hv);
  if (!ds.ok()) {
    return Status(ds.code(), "inode " + std::to_string(ino) + " extent at 0: " + ds.message());
  }
  if (hv.is_inline && offset > 0 && offset <= hv.length) {
    *folded = std::move(hv.inline_data);
    const uint64_t end = offset + data.size();
    if (folded->size() < end) folded->resize(end);
    std::memcpy(folded->data() + offset, data.data(), data.size());
  }
  return Status::OK();
}

Status StoreImpl::WriteStoredLocked(InodeState* s, uint64_t offset, std::string_view data,
                                    bool moved_may_be_synced, format::InodeValue* v,
                                    meta::Writes* b, StatDeltas* deltas) {
  const uint64_t ino = s->ino;
  // A small inline head that this write touches moves into the record.
  std::string folded;
  CKPTFS_RETURN_IF_ERROR(FoldInlineHead(ino, offset, data, &folded));
  const bool folds = !folded.empty();
  const uint64_t w_off = folds ? 0 : offset;
  const std::string_view w_data = folds ? std::string_view(folded) : data;
  uint64_t removed = 0;
  const uint64_t w_end = w_off + w_data.size();
  CKPTFS_RETURN_IF_ERROR(PunchLocked(s, w_off, w_end, b, deltas, &removed));
  // A file that this write at its end takes past data_file_min moves to
  // a data file of its own (its bytes so far are copied once); so does one
  // that writes out of order took past it (kLateMoveBytes). After the
  // punch, which puts the left piece of an extent cut at w_off.
  const uint64_t threshold = options_.data_file_min;
  const bool move = v->data_file_end == 0 && threshold != 0 && w_end >= threshold &&
                    w_off <= v->size && w_end > v->size && v->size <= threshold + kLateMoveBytes;
  if (move) CKPTFS_RETURN_IF_ERROR(MoveToDataFileLocked(s, w_off, v, b, deltas));
  // Bytes at or past the data file's end go there; the data file is never
  // written in place, so bytes below it go to segments.
  const uint64_t split = v->data_file_end == 0 && !move
                             ? w_end
                             : std::clamp(v->data_file_end, w_off, w_end);
  if (split > w_off) {
    CKPTFS_RETURN_IF_ERROR(AppendRecords(ino, w_off, w_data.substr(0, split - w_off), b, deltas));
  }
  if (split < w_end) {
    CKPTFS_RETURN_IF_ERROR(AppendDataFile(ino, split, w_data.substr(split - w_off), b));
    v->data_file_end = w_end;
  }
  v->data_bytes = v->data_bytes - removed + w_data.size();
  // Bytes that may have been synced where they were are synced where they
  // go before the batch that points there is written: the kernel may
  // write the index log's pages back before the store's, and a power cut
  // must not leave them pointing at lost bytes.
  if (moved_may_be_synced && move) CKPTFS_RETURN_IF_ERROR(data_files_->SyncDirty());
  if (moved_may_be_synced && folds) CKPTFS_RETURN_IF_ERROR(segments_->SyncDirty());
  return Status::OK();
}

Result<std::optional<std::string>> StoreImpl::BeginDirectWrite(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(MayChange(ino));
  InodeState* s = inodes_.Pin(ino);  // held until EndDirectWrite
  Status st;
  bool began = false;
  {
    MutexLock l(&s->mu);
    st = LoadLocked(s);
    if (st.ok()) st = Unsealed(ino, s->attr, "write");
    if (st.ok() && !s->direct && S_ISREG(s->attr.mode) && (s->attr.mode & (S_ISUID | S_ISGID)) == 0 &&
        s->attr.size == 0 && s->attr.data_file_end == 0 && options_.data_file_min != 0 &&
        objects_ == nullptr) {
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
  // it again. A file smaller than data_file_min is stored as a small file
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
    copy = look.size < options_.data_file_min;
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
  meta::Writes b;
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
  } else if (bytes.size() <= options_.inline_max) {
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
  SetMtime(&v, FromNanos(look.modified_ns));
  PutInode(&b, ino, v);
  EmitDeltas(deltas, &b);
  // Before the commit: a sync, or a flush of the index's memtable, that
  // finds the commit syncs the data file first.
  if (!copy) CKPTFS_RETURN_IF_ERROR(data_files_->MarkWritten(ino));
  if (Status c = CommitAttrs(s, &b); !c.ok()) {
    // Sealed by another host since this mount last adopted: nothing to
    // adopt when the seal holds the data file as it is (an adoption again
    // of bytes not yet settled, or a close after the seal).
    const int64_t sealed_ns = s->attr.mtime_sec * int64_t{1'000'000'000} + s->attr.mtime_nsec;
    if (c.code() != EROFS || s->attr.size != look.size || sealed_ns != look.modified_ns) return c;
    v = s->attr;
  }
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
