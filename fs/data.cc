// Open files and their bytes: open/read/write/flush/release/fsync/fallocate/
// lseek/ioctl/poll/copy_file_range, for store files and control files.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/page_aligned_buffer.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/ops.h"
#include "fs/set_id_bits.h"

namespace ckptfs::fs {

using engine::Attr;
using engine::Ino;
using engine::Result;
using engine::Status;

namespace {

// Gives back what an open got (OpenFiles::Release); the last passthrough
// open of an inode closes its backing id.
void ReleaseOpen(fuse_req_t req, Filesystem& fs, Ino ino, uint64_t handle) {
  fs.open_files().Release(ino, handle, [req](int id) { fuse_passthrough_close(req, id); });
}

// Without passthrough opens cost no request. OPEN is declined with ENOSYS,
// after which the kernel opens regular files by itself (no_open): no OPEN
// and no RELEASE, and it keeps the cached pages (FOPEN_KEEP_CACHE), which is
// right because every change to a file comes through this mount. A file's
// data stays pinned for as long as the kernel knows the inode
// (LookupCounts), which covers every open file. O_TRUNC arrives as a SETATTR
// (no FUSE_CAP_ATOMIC_O_TRUNC), O_DIRECT is served by the kernel's
// fuse_direct_IO through READ and WRITE, and control files are read and
// written without handles (control.h).
//
// On a shared store every open is answered too, without FOPEN_KEEP_CACHE,
// and the store forgets what it remembers of the file (Store::Reread):
// another host may have written it since (close-to-open, docs/SHARED.md).
// A sealed file (Store::Seal) keeps its pages, and an open of it for
// writing fails with EROFS, wherever OPEN is sent.
//
// With passthrough (Filesystem::passthrough) every open is answered:
// read-only opens of files whole in their data file get a backing file, the
// others keep the kernel's cache as above (fs/open_files.h). Control files
// are opened for direct I/O, so that reads ask for the current snapshot.
// O_TRUNC then comes with the OPEN (Filesystem::atomic_o_trunc), and the
// truncation is done before the open picks its backing: an overwrite of an
// existing file is written by the kernel directly as a new file is. The
// kernel sends it also for the file it has just created (MKNOD: no CREATE),
// where it only sets the times.
void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kOpen, [&](Request& r) {
    Filesystem& fs = r.fs();
    // Declined once, OPEN is never sent again (no_open): a shared store
    // answers every one, control files' too.
    const bool shared = fs.store().Shared();
    if (!fs.passthrough() && !shared) return r.Err(ENOSYS);
    const bool truncate = fs.atomic_o_trunc() && (fi->flags & O_TRUNC) != 0;
    if (IsControl(ino)) {
      if (truncate) {
        // As SetAttr: only the config file can be emptied.
        if (ControlKind(ino) != kConfigIno) return r.Err(EPERM);
        if (Result<Attr> a = fs.control().Truncate(ino, 0); !a.ok()) return r.Fail(a.status());
      }
      fi->fh = 0;
      fi->direct_io = 1;
      r.Open(fi);
      return;
    }
    const bool sealed = fs.store().KnownSealed(ino);
    if (sealed && (fi->flags & O_ACCMODE) != O_RDONLY) return r.Err(EROFS);
    if (shared) {
      // Another host may have written the file since this one read it:
      // the kernel drops its pages and the store what it remembers;
      // a sealed file's stay.
      if (!sealed) fs.store().Reread(ino);
      fs.OpenShared(fi, sealed);
      r.Open(fi);
      return;
    }
    const bool read_only = (fi->flags & O_ACCMODE) == O_RDONLY;
    const OpenFiles::Mode mode =
        fs.passthrough_writes() ? OpenFiles::Mode::kReadsAndWrites : OpenFiles::Mode::kReads;
    OpenFiles::Truncate truncation;
    if (truncate) {
      truncation = [&]() -> Status {
        // As a SETATTR from open(2) with O_TRUNC: the file's capabilities,
        // and its set-ID bits when the kernel flagged the caller.
        CKPTFS_RETURN_IF_ERROR(fs.killpriv().ForWrite(r, ino).status());
        engine::SetAttrRequest q;
        q.size = 0;
        q.mtime_now = true;
        return fs.store().SetAttr(ino, q).status();
      };
    }
    Result<OpenFiles::Opened> opened = fs.open_files().Open(
        ino, read_only, mode, [req](int fd) { return fuse_passthrough_open(req, fd); }, truncation);
    if (!opened.ok()) return r.Fail(opened.status());
    if (truncate) {
      if (Status st = fs.SyncChange(ino, /*directory_change=*/false); !st.ok()) {
        ReleaseOpen(req, fs, ino, opened->handle);
        return r.Fail(st);
      }
    }
    fi->fh = opened->handle;
    // Only direct writers need FLUSH (Flush below).
    fi->noflush = opened->handle != OpenFiles::kDirectWrite;
    if (opened->handle != OpenFiles::kDaemon) {
      fi->backing_id = opened->backing_id;
      fi->keep_cache = 0;  // not allowed with FOPEN_PASSTHROUGH
    } else {
      fi->keep_cache = 1;
    }
    // Not taken (interrupted): the kernel sends no RELEASE for it.
    if (!r.Open(fi)) ReleaseOpen(req, fs, ino, fi->fh);
  });
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Serve(req, Op::kRead, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (off < 0) return r.Err(EINVAL);
    if (IsControl(ino)) {
      Result<std::string> bytes = fs.control().Read(ino, static_cast<uint64_t>(off), size);
      if (!bytes.ok()) return r.Fail(bytes.status());
      r.Buf(bytes->data(), bytes->size());
      return;
    }
    // One buffer per session thread, grown to the largest read seen;
    // page-aligned, so that the store can read into it with direct I/O.
    thread_local PageAlignedBuffer buf;
    Result<size_t> n = fs.store().Read(ino, static_cast<uint64_t>(off), size, buf.Reserve(size));
    if (!n.ok()) return r.Fail(n.status());
    fs.op_stats().AddReadBytes(*n);
    if (off == 0) fs.op_stats().CountFileRead();
    // Before the reply: the kernel drops its cached access time once the
    // read completes, and the next stat must find the new one. The kernel
    // passes the file's open flags along; O_NOATIME opted out.
    if (fi == nullptr || (fi->flags & O_NOATIME) == 0) fs.Accessed(ino, /*directory=*/false);
    r.Buf(buf.data(), *n);
  });
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
           fuse_file_info* fi) {
  Serve(req, Op::kWrite, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (off < 0) return r.Err(EINVAL);
    if (IsControl(ino)) {
      Status st = fs.control().Write(ino, static_cast<uint64_t>(off), std::string_view(data, size),
                                     r.ctx().uid);
      if (!st.ok()) return r.Fail(st);
      return r.Write(size);
    }
    Result<bool> killed = fs.killpriv().ForWrite(r, ino);
    if (!killed.ok()) return r.Fail(killed.status());
    // With "sync" the kernel follows every write(2) with an FSYNC itself.
    // The kernel keeps the times of what its write-back cache writes.
    const bool from_cache = fs.options().UsesWritebackCache() && fi != nullptr && fi->writepage;
    Result<size_t> n = fs.store().Write(
        ino, static_cast<uint64_t>(off), {data, size},
        from_cache ? engine::Store::WriteTimes::kKeep : engine::Store::WriteTimes::kStamp);
    // After a write-through WRITE the kernel refreshes the size and times
    // it caches, not the mode (see Fallocate). A WRITE that carries the
    // kernel's flag comes from a write(2), whose open file holds the inode,
    // never from the write-back of cached pages: safe to wait for.
    if (*killed && fi != nullptr && fi->writepage == 0) fs.attr_invalidator().Now(ino);
    // A sealed file's bytes that a write(2) left in the kernel's cache are
    // refused here, after that write(2) returned: they go, and its close
    // and fsync report the error.
    if (!n.ok() && n.status().code() == EROFS && from_cache) fs.attr_invalidator().QueuePages(ino);
    if (!n.ok()) return r.Fail(n.status());
    fs.op_stats().AddWriteBytes(*n);
    // An O_DIRECT write(2), not one from the kernel's cache: what readers
    // cached meanwhile goes before the write completes.
    if (fi != nullptr && (fi->flags & O_DIRECT) != 0 && fi->writepage == 0) {
      fs.attr_invalidator().PagesNow(ino, static_cast<uint64_t>(off), *n);
    }
    r.Write(*n);
    if (fs.options().UsesWritebackCache()) fs.attr_invalidator().Queue(ino);
  });
}

// Writes are in the store when they return: close needs no FLUSH. Declined,
// the kernel stops sending it (no_flush); with the write-back cache it still
// writes dirty pages back at close before it would have sent the FLUSH.
// Except with passthrough_writes: each close of a direct writer (the only
// opens without FOPEN_NOFLUSH) adopts what the kernel wrote, so that a
// closed file is in the store as with the daemon's writes.
// A shared store whose data is in an object store asks for it at the close
// of each open for writing (Filesystem::OpenShared), and sends what the
// host's writes left waiting there.
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kFlush, [&](Request& r) {
    if (r.fs().store().SendsAtClose()) {
      if (IsControl(ino)) return r.Ok();
      return r.Fail(r.fs().store().Closed(ino));
    }
    if (!r.fs().passthrough_writes()) return r.Err(ENOSYS);
    if (IsControl(ino) || fi == nullptr || fi->fh != OpenFiles::kDirectWrite) return r.Ok();
    r.Fail(r.fs().store().AdoptDirectWrites(ino));
  });
}

// Handles come only from an OPEN answered with passthrough on.
void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kRelease, [&](Request& r) {
    if (!IsControl(ino) && fi != nullptr && fi->fh != 0) ReleaseOpen(req, r.fs(), ino, fi->fh);
    if (!IsControl(ino)) {
      if (Status st = r.fs().auto_seal().Released(r.fs().store(), ino); !st.ok()) {
        std::fprintf(stderr, "ckptfs: seal after closing a marker: %s\n", st.ToString().c_str());
      }
    }
    r.Ok();
  });
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info*) {
  Serve(req, Op::kFsync, [&](Request& r) {
    if (IsControl(ino)) return r.Ok();
    Status st = r.fs().store().Fsync(ino, datasync != 0);
    // Writes from the kernel's cache came before this FSYNC: st_blocks as
    // the caller sees it when fsync returns counts them.
    if (st.ok() && r.fs().options().UsesWritebackCache()) {
      r.fs().attr_invalidator().Now(ino);
    }
    r.Fail(st);
  });
}

void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               fuse_file_info*) {
  Serve(req, Op::kFallocate, [&](Request& r) {
    if (IsControl(ino)) return r.Err(EOPNOTSUPP);
    if (offset < 0 || length <= 0) return r.Err(EINVAL);
    Filesystem& fs = r.fs();
    Result<bool> killed = fs.killpriv().ForFallocate(r, ino);
    if (!killed.ok()) return r.Fail(killed.status());
    // The store answers EOPNOTSUPP for the modes it does not support.
    Status st = fs.store().Fallocate(ino, mode, static_cast<uint64_t>(offset),
                                     static_cast<uint64_t>(length));
    if (st.ok()) st = fs.SyncChange(ino, /*directory_change=*/false);
    // After a FALLOCATE the kernel refreshes the size and times it caches,
    // not the mode: a stat of the mode alone, or an exec (which honours
    // the set-ID bits on a suid mount), would find the bits just cleared.
    // The caller's open file holds the inode: safe to wait for.
    if (*killed) fs.attr_invalidator().Now(ino);
    r.Fail(st);
  });
}

// No file here is a terminal or a device: isatty()'s probe and every other
// ioctl get ENOTTY.
void Ioctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*,
           size_t, size_t) {
  Serve(req, Op::kIoctl, [&](Request& r) { r.Err(ENOTTY); });
}

// Declined: the kernel then answers poll itself (no_poll), and copies with
// its own reads and writes (no_copy_file_range).
void Poll(fuse_req_t req, fuse_ino_t, fuse_file_info*, fuse_pollhandle* ph) {
  if (ph != nullptr) fuse_pollhandle_destroy(ph);
  Serve(req, Op::kPoll, [&](Request& r) { r.Err(ENOSYS); });
}

void CopyFileRange(fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t,
                   fuse_file_info*, size_t, int) {
  Serve(req, Op::kCopyFileRange, [&](Request& r) { r.Err(ENOSYS); });
}

void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
  Serve(req, Op::kLseek, [&](Request& r) {
    if (whence != SEEK_DATA && whence != SEEK_HOLE) return r.Err(EINVAL);
    if (off < 0) return r.Err(ENXIO);
    if (IsControl(ino)) return r.Err(EINVAL);
    Result<uint64_t> pos =
        r.fs().store().SeekData(ino, static_cast<uint64_t>(off), whence == SEEK_HOLE);
    if (!pos.ok()) return r.Fail(pos.status());
    r.Lseek(static_cast<off_t>(*pos));
  });
}

}  // namespace

void AddDataOps(fuse_lowlevel_ops* ops) {
  ops->open = Open;
  ops->read = Read;
  ops->write = Write;
  ops->flush = Flush;
  ops->release = Release;
  ops->fsync = Fsync;
  ops->fallocate = Fallocate;
  ops->lseek = Lseek;
  ops->ioctl = Ioctl;
  ops->poll = Poll;
  ops->copy_file_range = CopyFileRange;
}

}  // namespace ckptfs::fs
