// Names and attributes: lookup/forget/getattr/setattr and the requests that
// create, link, remove and rename entries.
#include <fcntl.h>
#include <stdio.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE

#include <string>
#include <string_view>

#include "fs/control.h"
#include "fs/filesystem.h"
#include "fs/ops.h"
#include "fs/set_id_bits.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace ckptfs::fs {
namespace {

using engine::Attr;
using engine::Ino;
using engine::Result;
using engine::Status;

// Changing entries in the control directory, or the root's ".ckptfs" entry, is
// refused: EEXIST when creating that name, EPERM otherwise. 0 when allowed.
int ControlConflict(Ino parent, std::string_view name, bool creating) {
  if (IsControl(parent)) return EPERM;
  if (IsControlName(parent, name)) return creating ? EEXIST : EPERM;
  return 0;
}

struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// New inodes belong to the caller, with the caller's umask applied to `*mode`
// (in a set-group-ID directory the store gives them its group: Store::Mkdir).
Owner OwnerFor(Request& r, uint32_t* mode) {
  const fuse_ctx& ctx = r.ctx();
  *mode &= ~static_cast<uint32_t>(ctx.umask);
  return Owner{static_cast<uint32_t>(ctx.uid), static_cast<uint32_t>(ctx.gid)};
}

// The attributes of what "." (`dotdot` false) or ".." of `ino` names, for
// the kernel's export operations: it asks for "." of an inode it has
// forgotten to open a file handle (open_by_handle_at, NFS), and for ".." of a
// directory to connect one to the tree. Inode numbers are never reused, so a
// handle names one inode for good; once that inode is removed the answer is
// ENOENT, which the kernel turns into ESTALE. Control files get a new inode
// number per lookup (control.h): their handles go stale too.
Result<Attr> LookupDot(Filesystem& fs, Ino ino, bool dotdot) {
  if (IsControl(ino)) {
    if (ControlKind(ino) != kControlDirIno) return Status(ENOENT, "a control file has no handle");
    return dotdot ? fs.store().GetAttr(engine::kRootIno) : fs.control().GetAttr(ino);
  }
  CKPTFS_ASSIGN_OR_RETURN(Attr a, fs.store().GetAttr(ino));
  if (a.nlink == 0) return Status(ENOENT, "inode " + std::to_string(ino) + " was removed");
  if (!dotdot) return a;
  if (!S_ISDIR(a.mode)) return Status(ENOTDIR, "inode " + std::to_string(ino) + " is not a directory");
  const Ino up = ino == engine::kRootIno || a.parent == 0 ? engine::kRootIno : a.parent;
  return fs.store().GetAttr(up);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Serve(req, Op::kLookup, [&](Request& r) {
    Filesystem& fs = r.fs();
    const std::string_view n(name);
    if (n == "." || n == "..") {
      Result<Attr> a = LookupDot(fs, parent, n == "..");
      if (!a.ok()) return r.Fail(a.status());
      return fs.ReplyEntry(r, *a, 0);
    }
    const bool control = IsControl(parent) || IsControlName(parent, name);
    Result<Attr> a = control ? fs.control().Lookup(parent, name) : fs.store().Lookup(parent, name);
    if (a.ok()) return fs.ReplyEntry(r, *a, parent);
    if (a.status().code() == ENOENT && !control) {
      // A negative entry: the kernel remembers the miss for
      // negative_timeout. Creating the name goes through the kernel, which
      // drops it then.
      fuse_entry_param e{};
      e.ino = 0;
      e.entry_timeout = fs.NegativeTimeout();
      r.Entry(e);
      return;
    }
    r.Fail(a.status());
  });
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  ServeNoReply(req, Op::kForget, [&](Request& r) { r.fs().Forget(ino, nlookup); });
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  ServeNoReply(req, Op::kForget, [&](Request& r) {
    for (size_t i = 0; i < count; ++i) r.fs().Forget(forgets[i].ino, forgets[i].nlookup);
  });
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Serve(req, Op::kGetattr, [&](Request& r) {
    Filesystem& fs = r.fs();
    Result<Attr> a = fs.GetAttr(ino);
    if (!a.ok()) return r.Fail(a.status());
    r.Attr(fs.ToStat(*a), fs.AttrTimeout(ino));
  });
}

engine::Timespec ToTimespec(const struct timespec& ts) {
  return {static_cast<int64_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec)};
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  Serve(req, Op::kSetattr, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (IsControl(ino)) {
      // Truncating the config file (echo x > config) empties what this
      // lookup's snapshot shows; the settings stay.
      const int allowed =
          FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
      if (ControlKind(ino) != kConfigIno || (to_set & ~allowed) != 0) return r.Err(EPERM);
      Result<Attr> a = (to_set & FUSE_SET_ATTR_SIZE)
                           ? fs.control().Truncate(ino, static_cast<uint64_t>(attr->st_size))
                           : fs.GetAttr(ino);
      if (!a.ok()) return r.Fail(a.status());
      return r.Attr(fs.ToStat(*a), 0.0);
    }
    engine::SetAttrRequest q;
    if (to_set & FUSE_SET_ATTR_MODE) q.mode = attr->st_mode & 07777;
    if (to_set & FUSE_SET_ATTR_UID) q.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) q.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) {
      // The data file must not change under passthrough readers.
      if (fs.passthrough() && !fs.open_files().WaitForReleases(ino)) return r.Err(ETXTBSY);
      q.size = static_cast<uint64_t>(attr->st_size);
    }
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
      q.atime_now = true;
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
      q.atime = ToTimespec(attr->st_atim);
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
      q.mtime_now = true;
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
      q.mtime = ToTimespec(attr->st_mtim);
    }
    if (to_set & FUSE_SET_ATTR_CTIME) q.ctime = ToTimespec(attr->st_ctim);
    // With FUSE_CAP_HANDLE_KILLPRIV_V2 a truncate by a caller without
    // CAP_FSETID carries FATTR_KILL_SUIDGID (libfuse's FUSE_SET_ATTR_KILL_SUID
    // bit), and a change of owner clears set-user-ID, and set-group-ID with
    // group execute, whoever makes it, as on Linux. Both, whoever makes
    // them, remove the file's capabilities.
    if (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
      if (Status st = fs.killpriv().KillCapability(ino); !st.ok()) return r.Fail(st);
    }
    if (fs.kills_suidgid() && (to_set & FUSE_SET_ATTR_KILL_SUID)) {
      Result<bool> killed = fs.killpriv().KillSuidSgid(r, ino);
      if (!killed.ok()) return r.Fail(killed.status());
    }
    if (fs.kills_suidgid() && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
      q.kill_suidgid = true;
    }
    Result<Attr> a = fs.store().SetAttr(ino, q);
    if (!a.ok()) return r.Fail(a.status());
    if (Status st = fs.SyncChange(ino, /*directory_change=*/false); !st.ok()) return r.Fail(st);
    r.Attr(fs.ToStat(*a), fs.AttrTimeout(ino));
  });
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Serve(req, Op::kMkdir, [&](Request& r) {
    if (int err = ControlConflict(parent, name, true)) return r.Err(err);
    uint32_t m = S_IFDIR | (mode & 07777);
    const Owner owner = OwnerFor(r, &m);
    Result<Attr> a = r.fs().store().Mkdir(parent, name, m, owner.uid, owner.gid);
    if (!a.ok()) return r.Fail(a.status());
    if (Status st = r.fs().SyncChange(parent, /*directory_change=*/true); !st.ok()) return r.Fail(st);
    r.fs().ReplyEntry(r, *a, parent);
  });
}

// What MKNOD and CREATE make: a file (or a fifo, socket or device node)
// named `name` in `parent`.
Result<Attr> MakeFile(Request& r, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  if (int err = ControlConflict(parent, name, true)) return Status(err, "a control file's name");
  uint32_t m = mode;
  if ((m & S_IFMT) == 0) m |= S_IFREG;
  const Owner owner = OwnerFor(r, &m);
  CKPTFS_ASSIGN_OR_RETURN(Attr a, r.fs().store().Create(parent, name, m, owner.uid, owner.gid,
                                                        static_cast<uint32_t>(rdev)));
  CKPTFS_RETURN_IF_ERROR(r.fs().SyncChange(parent, /*directory_change=*/true));
  if (S_ISREG(a.mode)) {
    r.fs().op_stats().CountFileCreated();
    r.fs().auto_seal().Made(parent, name, a.ino);
  }
  return a;
}

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Serve(req, Op::kMknod, [&](Request& r) {
    Result<Attr> a = MakeFile(r, parent, name, mode, rdev);
    if (!a.ok()) return r.Fail(a.status());
    r.fs().ReplyEntry(r, *a, parent);
  });
}

// A shared store answers every OPEN (close-to-open): a CREATE makes and
// opens a file in one request, as its OPEN would (fs/data.cc). Elsewhere
// declined: the kernel then creates files with MKNOD and opens them without
// a request (no_create, no_open), where a CREATE would hand out a handle
// that costs a RELEASE at close; with passthrough an open picks a backing
// file, which OPEN does.
void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            fuse_file_info* fi) {
  Serve(req, Op::kCreate, [&](Request& r) {
    Filesystem& fs = r.fs();
    if (!fs.store().Shared() || fs.passthrough()) return r.Err(ENOSYS);
    Result<Attr> a = MakeFile(r, parent, name, mode, 0);
    if (!a.ok()) return r.Fail(a.status());
    fs.OpenShared(fi, /*sealed=*/false);
    const fuse_entry_param e = fs.ToEntry(*a, parent);
    if (Status st = fs.CountLookup(*a); !st.ok()) return r.Fail(st);
    // Not taken (interrupted): no lookup and no handle were handed out.
    if (!r.Create(e, fi)) fs.Forget(a->ino, 1);
  });
}

// Only sent without default_permissions, which ckptfs always mounts with.
void Access(fuse_req_t req, fuse_ino_t, int) {
  Serve(req, Op::kAccess, [&](Request& r) { r.Err(ENOSYS); });
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Serve(req, Op::kSymlink, [&](Request& r) {
    if (int err = ControlConflict(parent, name, true)) return r.Err(err);
    uint32_t m = S_IFLNK | 0777;
    const Owner owner = OwnerFor(r, &m);
    Result<Attr> a = r.fs().store().Symlink(parent, name, target, owner.uid, owner.gid);
    if (!a.ok()) return r.Fail(a.status());
    if (Status st = r.fs().SyncChange(parent, /*directory_change=*/true); !st.ok()) return r.Fail(st);
    r.fs().ReplyEntry(r, *a, parent);
  });
}

void ReadLink(fuse_req_t req, fuse_ino_t ino) {
  Serve(req, Op::kReadlink, [&](Request& r) {
    if (IsControl(ino)) return r.Err(EINVAL);
    Result<std::string> target = r.fs().store().ReadLink(ino);
    if (!target.ok()) return r.Fail(target.status());
    r.Readlink(target->c_str());
  });
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  Serve(req, Op::kLink, [&](Request& r) {
    if (IsControl(ino)) return r.Err(EPERM);
    if (int err = ControlConflict(new_parent, new_name, true)) return r.Err(err);
    Result<Attr> a = r.fs().store().Link(ino, new_parent, new_name);
    if (!a.ok()) return r.Fail(a.status());
    if (Status st = r.fs().SyncChange(new_parent, /*directory_change=*/true); !st.ok()) return r.Fail(st);
    r.fs().ReplyEntry(r, *a, new_parent);
  });
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Serve(req, Op::kUnlink, [&](Request& r) {
    if (int err = ControlConflict(parent, name, false)) return r.Err(err);
    Status st = r.fs().store().Unlink(parent, name);
    if (st.ok()) st = r.fs().SyncChange(parent, /*directory_change=*/true);
    r.Fail(st);
  });
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Serve(req, Op::kRmdir, [&](Request& r) {
    if (int err = ControlConflict(parent, name, false)) return r.Err(err);
    Status st = r.fs().store().Rmdir(parent, name);
    if (st.ok()) st = r.fs().SyncChange(parent, /*directory_change=*/true);
    r.Fail(st);
  });
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned int flags) {
  Serve(req, Op::kRename, [&](Request& r) {
    engine::RenameMode mode = engine::RenameMode::kReplace;
    if (flags == RENAME_NOREPLACE) {
      mode = engine::RenameMode::kNoReplace;
    } else if (flags == RENAME_EXCHANGE) {
      mode = engine::RenameMode::kExchange;
    } else if (flags != 0) {
      return r.Err(EINVAL);
    }
    if (int err = ControlConflict(parent, name, false)) return r.Err(err);
    if (int err = ControlConflict(new_parent, new_name, false)) return r.Err(err);
    Status st = r.fs().store().Rename(parent, name, new_parent, new_name, mode);
    if (st.ok()) st = r.fs().SyncChange(parent, /*directory_change=*/true);
    // The rename stands whatever the seal it calls for does.
    if (st.ok() && mode != engine::RenameMode::kExchange) {
      if (Status sealed = r.fs().auto_seal().Renamed(r.fs().store(), name, new_parent, new_name);
          !sealed.ok()) {
        std::fprintf(stderr, "ckptfs: seal after renaming \"%s\" to \"%s\": %s\n", name, new_name,
                     sealed.ToString().c_str());
      }
    }
    r.Fail(st);
  });
}

}  // namespace

void AddEntryOps(fuse_lowlevel_ops* ops) {
  ops->lookup = Lookup;
  ops->forget = Forget;
  ops->forget_multi = ForgetMulti;
  ops->getattr = GetAttr;
  ops->setattr = SetAttr;
  ops->mkdir = Mkdir;
  ops->mknod = Mknod;
  ops->create = Create;
  ops->access = Access;
  ops->symlink = Symlink;
  ops->readlink = ReadLink;
  ops->link = Link;
  ops->unlink = Unlink;
  ops->rmdir = Rmdir;
  ops->rename = Rename;
}

}  // namespace ckptfs::fs
