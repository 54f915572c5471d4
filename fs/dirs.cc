// Directory listing (readdir, readdirplus), directory handles, statfs.
//
// Store::ReadDir resumes after a name, while the kernel resumes at an offset.
// Offsets are a 1-based count of the entries handed out: "." is 1, ".." is 2,
// the n-th stored entry is 2+n. Each handle remembers the (offset, name) pairs
// of its last reply, so that the usual request for the next offset, and the
// kernel re-asking for part of the last reply when a getdents buffer filled
// up, both resume by name. Any other offset (rewinddir, seekdir) restarts from
// the first entry, counting.
#include <sys/statvfs.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/ops.h"

namespace ckptfs::fs {
namespace {

using engine::Attr;
using engine::DirEntry;
using engine::Ino;
using engine::Result;
using engine::Status;

constexpr uint64_t kDotOffset = 1;
constexpr uint64_t kDotDotOffset = 2;

struct DirHandle {
  Ino ino = 0;
  Ino parent = 0;
  // Held for the whole of one readdir (FillDir), store calls included.
  // Lock order: before every engine lock.
  Mutex mu;
  // The position the last reply started after, then each entry it returned:
  // (offset, name). Offsets are consecutive.
  std::vector<std::pair<uint64_t, std::string>> last_reply GUARDED_BY(mu);
};

DirHandle* DirHandleOf(const fuse_file_info* fi) {
  return reinterpret_cast<DirHandle*>(static_cast<uintptr_t>(fi->fh));
}

// Lists stored entries of `dir` after `after`, hiding the control directory's
// name in the root.
Status List(Filesystem& fs, Ino dir, std::string_view after,
            const std::function<bool(const DirEntry&)>& fn) {
  if (dir == kControlDirIno) {
    fs.control().List(after, fn);
    return Status::OK();
  }
  if (dir != engine::kRootIno) return fs.store().ReadDir(dir, after, fn);
  return fs.store().ReadDir(
      dir, after, [&](const DirEntry& e) { return e.name == kControlDirName ? true : fn(e); });
}

// The name of the stored entry with offset `off` (> kDotDotOffset), or nullopt
// when the directory has fewer entries. "" stands for the start.
Result<std::optional<std::string>> NameAt(Filesystem& fs, DirHandle& h, uint64_t off)
    REQUIRES(h.mu) {
  if (off <= kDotDotOffset) return std::optional<std::string>(std::string());
  for (const auto& [o, name] : h.last_reply) {
    if (o == off) return std::optional<std::string>(name);
  }
  uint64_t at = kDotDotOffset;
  std::optional<std::string> found;
  Status st = List(fs, h.ino, "", [&](const DirEntry& e) {
    if (++at == off) {
      found = e.name;
      return false;
    }
    return true;
  });
  if (!st.ok()) return st;
  return found;
}

// Adds one entry to `buf`; false when it does not fit.
bool Add(Request& r, std::vector<char>& buf, size_t& used, bool plus, const char* name,
         const fuse_entry_param& e, uint64_t off) {
  const size_t room = buf.size() - used;
  const size_t need = plus
                          ? fuse_add_direntry_plus(r.req(), buf.data() + used, room, name, &e, off)
                          : fuse_add_direntry(r.req(), buf.data() + used, room, name, &e.attr, off);
  if (need > room) return false;
  used += need;
  return true;
}

// Fills `buf` with the entries from offset `off` on; returns the bytes used,
// or an error. Readdirplus lookups handed out are added to `*counted`.
Result<size_t> FillDir(Request& r, DirHandle& h, uint64_t off, bool plus, std::vector<char>& buf,
                       std::vector<Ino>* counted) REQUIRES(h.mu) {
  Filesystem& fs = r.fs();
  size_t used = 0;
  uint64_t next = off;  // offset of the last entry added
  std::vector<std::pair<uint64_t, std::string>> reply;

  // "." and "..": never counted as lookups (the kernel skips them).
  auto dot = [&](const char* name, Ino target) {
    fuse_entry_param e{};
    e.attr.st_ino = target;
    e.attr.st_mode = S_IFDIR;
    if (!Add(r, buf, used, plus, name, e, next + 1)) return false;
    ++next;
    return true;
  };
  if (next < kDotOffset && !dot(".", h.ino)) return Status::Errno(EINVAL, "buffer too small");
  if (next < kDotDotOffset && !dot("..", h.parent))
    return Status::Errno(EINVAL, "buffer too small");

  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> after, NameAt(fs, h, next));
  reply.emplace_back(next, after.value_or(std::string()));
  if (after.has_value()) {
    // Collect first (no store calls inside ReadDir's callback), a little more
    // than can fit.
    const size_t per_entry = plus ? 160 : 32;
    const size_t max_entries = buf.size() / per_entry + 2;
    std::vector<DirEntry> entries;
    CKPTFS_RETURN_IF_ERROR(List(fs, h.ino, *after, [&](const DirEntry& e) {
      entries.push_back(e);
      return entries.size() < max_entries;
    }));
    for (const DirEntry& d : entries) {
      fuse_entry_param e{};
      // A file the kernel already knows gets its name only (no nodeid: the
      // kernel then leaves its inode alone). Its attributes could be older
      // than a write that lands while this reply is on its way; if the
      // kernel evicted the inode meanwhile it would build a new one from
      // them, and with the write-back cache it trusts that size from then
      // on. A file it does not know could only go so if a LOOKUP, a write,
      // a close and an eviction all fell within the reply's way.
      const bool known_file = plus && S_ISREG(d.type) && fs.lookups().Get(d.ino) > 0;
      if (plus && !known_file) {
        Result<Attr> a = fs.GetAttr(d.ino);
        if (!a.ok()) {
          const int err = a.status().code();
          if (err == ENOENT || err == ESTALE) continue;  // removed since listed
          return a.status();
        }
        e = fs.ToEntry(*a, h.ino);
        // Counted before it is added: the entry hands the kernel a lookup.
        CKPTFS_RETURN_IF_ERROR(fs.CountLookup(*a));
        counted->push_back(d.ino);
      } else {
        e.attr.st_ino = d.ino;
        e.attr.st_mode = d.type;
      }
      if (!Add(r, buf, used, plus, d.name.c_str(), e, next + 1)) {
        if (plus && !known_file) {
          counted->pop_back();
          fs.Forget(d.ino, 1);
        }
        break;
      }
      ++next;
      reply.emplace_back(next, d.name);
    }
  }
  h.last_reply = std::move(reply);
  return used;
}

void DoReadDir(Request& r, off_t off, size_t size, fuse_file_info* fi, bool plus) {
  std::vector<char> buf(size);
  std::vector<Ino> counted;  // lookups handed to the kernel by readdirplus
  Result<size_t> used = size_t{0};
  Ino dir = 0;
  {
    DirHandle& h = *DirHandleOf(fi);
    dir = h.ino;
    MutexLock lock(&h.mu);
    used = FillDir(r, h, off < 0 ? 0 : static_cast<uint64_t>(off), plus, buf, &counted);
  }
  // On failure, the entries counted so far were not handed out.
  // Once answered, the kernel may release the handle at any moment: nothing
  // here touches it after the reply.
  if (!used.ok()) {
    for (Ino i : counted) r.fs().Forget(i, 1);
    return r.Fail(used.status());
  }
  r.fs().Accessed(dir, /*directory=*/true);
  if (!r.Buf(buf.data(), *used)) {
    for (Ino i : counted) r.fs().Forget(i, 1);
  }
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Serve(req, Op::kOpendir, [&](Request& r) {
    Filesystem& fs = r.fs();
    Result<Attr> a = fs.GetAttr(ino);
    if (!a.ok()) return r.Fail(a.status());
    if (!S_ISDIR(a->mode)) return r.Err(ENOTDIR);
    auto h = std::make_unique<DirHandle>();
    h->ino = ino;
    h->parent = ino == engine::kRootIno || a->parent == 0 ? engine::kRootIno : a->parent;
    fi->fh = reinterpret_cast<uintptr_t>(h.get());
    // The kernel may keep the listing in its page cache across opens: it
    // drops it when it passes a change to the directory on to us (an entry
    // created, removed or renamed: fuse_dir_changed), and every change comes
    // through this mount. The control directory never changes.
    // Not on a shared store, whose directories other hosts change, unless
    // the directory is sealed.
    fi->cache_readdir = !fs.store().Shared() || fs.store().KnownSealed(ino) ? 1 : 0;
    fi->keep_cache = fi->cache_readdir;
    fs.open_dirs.fetch_add(1, std::memory_order_relaxed);
    if (r.Open(fi)) {
      h.release();  // owned by the kernel's handle until releasedir
    } else {
      fs.open_dirs.fetch_sub(1, std::memory_order_relaxed);
    }
  });
}

void ReadDir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Serve(req, Op::kReaddir, [&](Request& r) { DoReadDir(r, off, size, fi, false); });
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Serve(req, Op::kReaddirplus, [&](Request& r) { DoReadDir(r, off, size, fi, true); });
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Serve(req, Op::kReleasedir, [&](Request& r) {
    std::unique_ptr<DirHandle> h(DirHandleOf(fi));
    r.fs().open_dirs.fetch_sub(1, std::memory_order_relaxed);
    r.Ok();
  });
}

void FsyncDir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  Serve(req, Op::kFsyncdir, [&](Request& r) {
    if (IsControl(ino)) return r.Ok();
    r.Fail(r.fs().store().SyncAll());
  });
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Serve(req, Op::kStatfs, [&](Request& r) {
    Result<engine::FsStats> s = r.fs().store().StatFs();
    if (!s.ok()) return r.Fail(s.status());
    struct statvfs st {};
    const uint64_t bs = s->block_size ? s->block_size : 4096;
    st.f_bsize = bs;
    st.f_frsize = bs;
    st.f_blocks = s->total_bytes / bs;
    st.f_bfree = s->free_bytes / bs;
    st.f_bavail = s->avail_bytes / bs;
    // Inodes are index entries: there is no fixed table to run out of.
    const uint64_t kFreeInodes = 1ull << 32;
    st.f_files = s->inodes + kFreeInodes;
    st.f_ffree = kFreeInodes;
    st.f_favail = kFreeInodes;
    st.f_namemax = engine::kMaxNameLen;
    r.Statfs(st);
  });
}

}  // namespace

void AddDirOps(fuse_lowlevel_ops* ops) {
  ops->opendir = OpenDir;
  ops->readdir = ReadDir;
  ops->readdirplus = ReadDirPlus;
  ops->releasedir = ReleaseDir;
  ops->fsyncdir = FsyncDir;
  ops->statfs = StatFs;
}

}  // namespace ckptfs::fs
