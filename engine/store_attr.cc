// Attributes and the life of open files in StoreImpl: SETATTR (and
// truncation), fallocate, access times, open and release.
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

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

Result<Attr> StoreImpl::SetAttr(Ino ino, const SetAttrRequest& in) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(MayChange(ino));
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(FreshLocked(s.get()));
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
  meta::Writes b;
  StatDeltas deltas;
  Timespec now = Now();
  if (req.mode) v.mode = (v.mode & S_IFMT) | (*req.mode & 07777);
  if (req.uid) v.uid = *req.uid;
  if (req.gid) v.gid = *req.gid;
  if (req.kill_suidgid && !S_ISDIR(v.mode)) v.mode = WithoutSuidSgid(v.mode);
  if (req.kill_sgid && !S_ISDIR(v.mode)) v.mode &= ~static_cast<uint32_t>(S_ISGID);
  if (OnlyKillsSuidSgid(req) && v.mode == s->attr.mode) return ToAttr(ino, v);
  CKPTFS_RETURN_IF_ERROR(Unsealed(ino, s->attr, "setattr"));
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
    if (*req.size != v.size) SetMtime(&v, now);
    v.size = *req.size;
  }
  if (req.atime_now) {
    SetAtime(&v, now);
  } else if (req.atime) {
    SetAtime(&v, *req.atime);
  }
  // SetMtime stamps the change time too; SetCtime below sets the one that stays.
  if (req.mtime_now) {
    SetMtime(&v, now);
  } else if (req.mtime) {
    SetMtime(&v, *req.mtime);
  }
  if (req.ctime) KernelStamped(*req.ctime);
  SetCtime(&v, req.ctime.value_or(now));
  PutInode(&b, ino, v);
  EmitDeltas(deltas, &b);
  // Writes go into the data file from its (new) end on: the index that
  // lowers the end must be durable before a write lands there, or a power
  // loss could bring back extents whose bytes that write replaced.
  const bool cuts_data_file = v.data_file_end < s->attr.data_file_end;
  CKPTFS_RETURN_IF_ERROR(CommitAttrs(s.get(), &b, /*sync=*/cuts_data_file));
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
  CKPTFS_RETURN_IF_ERROR(MayChange(ino));
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(FreshLocked(s.get()));
  CKPTFS_RETURN_IF_ERROR(Unsealed(ino, s->attr, "fallocate"));
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
  const Reservations::Range blocks = Reservations::Blocks(offset, end);
  if (!punch) CKPTFS_RETURN_IF_ERROR(Reserve(ino, blocks.start, blocks.end));
  if (!punch && !zero && !extend) return Status::OK();  // reserved: nothing to store

  Status st = CountDataBytesLocked(s.get());
  format::InodeValue v = s->attr;
  meta::Writes b;
  StatDeltas deltas;
  if (st.ok() && clear) {
    uint64_t removed = 0;
    st = PunchLocked(s.get(), offset, std::min(end, v.size), &b, &deltas, &removed);
    v.data_bytes -= removed;
  }
  Timespec now = Now();
  if (extend) v.size = end;
  if (punch || zero) {
    SetMtime(&v, now);
  } else {
    SetCtime(&v, now);
  }
  if (st.ok()) {
    PutInode(&b, ino, v);
    EmitDeltas(deltas, &b);
    st = CommitAttrs(s.get(), &b);
  }
  if (!st.ok()) {
    if (!punch) Unreserve(ino, blocks.start, blocks.end);  // nothing changed
    return st;
  }
  s->attr = v;
  if (punch) Unreserve(ino, offset, end);  // a punch frees preallocated space too
  return Status::OK();
}

Status StoreImpl::Accessed(Ino ino, AtimeRule rule) {
  if (options_.read_only) return Status::OK();
  if (closed_) return Status(EIO, "store is closed");
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(FreshLocked(s.get()));
  if (s->attr.flags & format::kInodeSealed) return Status::OK();
  const Timespec now = Now();
  if (!AtimeNeedsUpdate(s->attr, now, rule)) return Status::OK();
  if (mode_->OthersWrite()) {
    // A directory nobody owns keeps its access time: a listing would
    // otherwise take every other host's read grant of it.
    if (S_ISDIR(s->attr.mode) && !host_.ownership().Owns(ino)) return Status::OK();
    // The owner keeps the access times of what it owns.
    CKPTFS_ASSIGN_OR_RETURN(const bool elsewhere, host_.ownership().OwnedElsewhere(ino));
    if (elsewhere) return Status::OK();
  }
  format::InodeValue v = s->attr;
  SetAtime(&v, now);
  meta::Writes b;
  PutInode(&b, ino, v);
  // Volatile: with RocksDB a memtable insert without the log, no I/O under
  // s->mu, flushed when the index closes.
  Status c = CommitAttrs(s.get(), &b, /*sync=*/false, meta::Durability::kVolatile);
  // Sealed or removed by another host meanwhile: no access time to keep.
  if (c.code() == EROFS || c.code() == ENOENT) return Status::OK();
  CKPTFS_RETURN_IF_ERROR(c);
  s->attr = v;
  return Status::OK();
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

void StoreImpl::Reread(Ino ino) {
  if (!mode_->OthersWrite()) return;
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  // What this mount trusts changed only through it, its extents included.
  if (TrustedLocked(s.get())) return;
  s->loaded = false;
  extent_maps_.Forget(ino);
}

Status StoreImpl::Release(Ino ino) {
  InodeRef ref(&inodes_, ino);
  InodeState* s = ref.get();
  MutexLock l(&s->mu);
  if (s->open_count.load() <= 0) return Status(EBADF, "inode " + std::to_string(ino) + " is not open");
  Status result;
  // Another host's orphan (it removed the file while open there) is its
  // own to purge.
  if (--s->open_count == 0 && s->loaded && s->attr.nlink == 0 && !s->purged && !options_.read_only &&
      !closed_ && (s->orphaned_here || !mode_->OthersWrite())) {
    meta::Writes b;
    StatDeltas deltas;
    // On failure the inode stays an orphan: fsck reports it, and the next
    // open tries the purge again.
    result = PurgeLocked(s, &b, &deltas, kLatest);
    if (result.ok()) {
      EmitDeltas(deltas, &b);
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

}  // namespace ckptfs::engine
