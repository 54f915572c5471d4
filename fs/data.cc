// Open files and their bytes: open/read/write/flush/release/fsync/fallocate/
// lseek, for store files and control files.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/set_id_bits.h"

namespace ckptfs::fs {

using engine::Attr;
using engine::Ino;
using engine::Result;
using engine::Status;

namespace {

// ReplyOpen after Store::OpenFile succeeded. Returns whether the kernel took
// the handle; false means the caller must release the inode again.
bool FinishOpen(Request& r, const Attr& attr, fuse_file_info* fi, OpenKind kind) {
  Filesystem& fs = r.fs();
  engine::Store& store = fs.store();
  const Ino ino = attr.ino;
  Attr a = attr;
  if (kind != OpenKind::kCreated && (fi->flags & O_TRUNC) && S_ISREG(a.mode)) {
    // FUSE_CAP_ATOMIC_O_TRUNC: the kernel leaves truncation to open.
    if (Status st = KillPrivilegesForWrite(r, ino); !st.ok()) {
      r.Fail(st);
      return false;
    }
    engine::SetAttrRequest q;
    q.size = 0;
    q.mtime_now = true;
    Result<Attr> t = store.SetAttr(ino, q);
    if (!t.ok()) {
      r.Fail(t.status());
      return false;
    }
    a = *t;
  }
  const bool direct = (fi->flags & O_DIRECT) != 0;
  const bool unchanged = fs.UnchangedSinceLastOpen(a);
  fi->fh = 0;
  fi->direct_io = direct ? 1 : 0;
  fi->keep_cache = (!direct && kind == OpenKind::kOpen && unchanged) ? 1 : 0;
  // Writes are in the store when they return: close needs no flush request,
  // unless the kernel's write-back cache holds dirty pages.
  fi->noflush = fs.options().writeback_cache ? 0 : 1;
  if (kind == OpenKind::kOpen) {
    fs.open_files.fetch_add(1, std::memory_order_relaxed);
    if (r.Open(fi)) return true;
  } else {
    const fuse_entry_param e = fs.ToEntry(a);
    fs.lookups().Add(ino);
    fs.open_files.fetch_add(1, std::memory_order_relaxed);
    if (r.Create(e, fi)) return true;
    fs.Forget(ino, 1);
  }
  // No release will come for a handle the kernel never saw.
  fs.open_files.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

}  // namespace

void ReplyOpen(Request& r, const Attr& attr, fuse_file_info* fi, OpenKind kind) {
  engine::Store& store = r.fs().store();
  if (Status st = store.OpenFile(attr.ino); !st.ok()) return r.Fail(st);
  // The inode is open now: whatever happens, keep it so only if the kernel
  // holds a handle that will be released.
  bool taken = false;
  try {
    taken = FinishOpen(r, attr, fi, kind);
  } catch (...) {
    (void)store.Release(attr.ino);
    throw;  // answered by Serve()
  }
  if (!taken) (void)store.Release(attr.ino);
}

namespace {

ControlHandle* ControlHandleOf(const fuse_file_info* fi) {
  return reinterpret_cast<ControlHandle*>(static_cast<uintptr_t>(fi->fh));
}

void OpenControl(Request& r, Ino ino, fuse_file_info* fi) {
  Filesystem& fs = r.fs();
  Result<std::unique_ptr<ControlHandle>> h = fs.control().Open(ino, fi->flags, r.ctx().uid);
  if (!h.ok()) return r.Fail(h.status());
  fi->fh = reinterpret_cast<uintptr_t>(h->get());
  fi->direct_io = 1;  // sizes are not known in advance; read to EOF
  fi->keep_cache = 0;
  if (r.Open(fi)) h->release();  // owned by the kernel's handle until release
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kOpen, [&](Request& r) {
    if (IsControl(ino)) return OpenControl(r, ino, fi);
    Result<Attr> a = r.fs().store().GetAttr(ino);
    if (!a.ok()) return r.Fail(a.status());
    ReplyOpen(r, *a, fi, OpenKind::kOpen);
  });
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Serve(req, Op::kRead, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (off < 0) return r.Err(EINVAL);
    if (IsControl(ino)) {
      ControlHandle* h = ControlHandleOf(fi);
      if (h == nullptr) return r.Err(EBADF);
      const std::string bytes = fs.control().Read(*h, off, size);
      r.Buf(bytes.data(), bytes.size());
      return;
    }
    // One buffer per session thread, grown to the largest read seen.
    thread_local std::vector<char> buf;
    if (buf.size() < size) buf.resize(size);
    Result<size_t> n = fs.store().Read(ino, static_cast<uint64_t>(off), size, buf.data());
    if (!n.ok()) return r.Fail(n.status());
    fs.op_stats().AddReadBytes(*n);
    r.Buf(buf.data(), *n);
  });
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
           fuse_file_info* fi) {
  Serve(req, Op::kWrite, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (off < 0) return r.Err(EINVAL);
    if (IsControl(ino)) {
      ControlHandle* h = ControlHandleOf(fi);
      if (h == nullptr) return r.Err(EBADF);
      Status st = fs.control().Write(*h, std::string_view(data, size));
      if (!st.ok()) return r.Fail(st);
      return r.Write(size);
    }
    if (Status st = KillPrivilegesForWrite(r, ino); !st.ok()) return r.Fail(st);
    Result<size_t> n = fs.store().Write(ino, static_cast<uint64_t>(off), {data, size});
    if (!n.ok()) return r.Fail(n.status());
    fs.op_stats().AddWriteBytes(*n);
    r.Write(*n);
  });
}

void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kFlush, [&](Request& r) {
    if (ino == kConfigIno && ControlHandleOf(fi) != nullptr) {
      return r.Fail(r.fs().control().Flush(*ControlHandleOf(fi)));
    }
    // Writes reached the store before they returned: nothing to do.
    r.Ok();
  });
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kRelease, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (IsControl(ino)) {
      std::unique_ptr<ControlHandle> h(ControlHandleOf(fi));
      return r.Ok();
    }
    fs.open_files.fetch_sub(1, std::memory_order_relaxed);
    r.Fail(fs.store().Release(ino));
  });
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info*) {
  Serve(req, Op::kFsync, [&](Request& r) {
    if (IsControl(ino)) return r.Ok();
    r.Fail(r.fs().store().Fsync(ino, datasync != 0));
  });
}

void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               fuse_file_info*) {
  Serve(req, Op::kFallocate, [&](Request& r) {
    if (IsControl(ino) || mode != 0) return r.Err(EOPNOTSUPP);
    if (offset < 0 || length <= 0) return r.Err(EINVAL);
    r.Fail(r.fs().store().Fallocate(ino, 0, static_cast<uint64_t>(offset),
                                    static_cast<uint64_t>(length)));
  });
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
}

}  // namespace ckptfs::fs
