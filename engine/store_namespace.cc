// Namespace operations of StoreImpl: each one change (StoreImpl::Txn) that
// commits in one transaction of the index.
#include <sys/stat.h>

#include <algorithm>
#include <tuple>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

Status ValidateName(std::string_view name) {
  if (name.size() > kMaxNameLen) {
    return Status(ENAMETOOLONG, "name is longer than " + std::to_string(kMaxNameLen) + " bytes");
  }
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string_view("/\0", 2)) != std::string_view::npos) {
    return Status(EINVAL, "invalid name \"" + std::string(name) + "\"");
  }
  return Status::OK();
}

uint8_t TypeOf(uint32_t mode) { return static_cast<uint8_t>((mode & S_IFMT) >> 12); }

Status NotADirectory(uint64_t ino) {
  return Status(ENOTDIR, "inode " + std::to_string(ino) + " is not a directory");
}

}  // namespace

Attr ToAttr(uint64_t ino, const format::InodeValue& v) {
  Attr a;
  a.ino = ino;
  a.mode = v.mode;
  a.uid = v.uid;
  a.gid = v.gid;
  a.nlink = v.nlink;
  a.size = v.size;
  a.data_bytes = S_ISREG(v.mode) && v.data_bytes_known ? v.data_bytes : v.size;
  a.rdev = v.rdev;
  a.atime = {v.atime_sec, v.atime_nsec};
  a.mtime = {v.mtime_sec, v.mtime_nsec};
  a.ctime = {v.ctime_sec, v.ctime_nsec};
  a.generation = v.generation;
  a.parent = v.parent;
  a.sealed = (v.flags & format::kInodeSealed) != 0;
  return a;
}

// ---- helpers ----

Status StoreImpl::LoadLocked(InodeState* s) {
  if (s->loaded && !s->purged && !closed_) return Status::OK();
  return RefreshLocked(s, kLatest);
}

Status StoreImpl::RefreshLocked(InodeState* s, meta::ReadTxn* in, const ReadValue* read,
                                std::optional<uint64_t> read_epoch) {
  if (closed_) return Status(EIO, "store is closed");
  if (s->purged) return Status(ENOENT, "inode " + std::to_string(s->ino) + " was removed");
  // Taken before the read.
  const uint64_t epoch = read_epoch.has_value() ? *read_epoch : host_.TrustEpoch(s->ino);
  std::optional<HostSession::Made> m =
      mode_->OthersWrite() ? host_.TakeMade(s->ino) : std::nullopt;
  if (m.has_value() && in == nullptr && epoch != 0 && m->epoch == epoch) {
    // Made by this host in the epoch that runs: the index holds this.
    s->attr = std::move(m->attr);
    s->loaded = true;
    s->trust_epoch = epoch;
    s->no_xattrs_epoch = epoch;
    return Status::OK();
  }
  if (in == kLatest && read == nullptr && mode_->OthersWrite()) {
    // A directory read under a grant: as the index holds it.
    if (std::optional<Ownership::HeldRead> held = host_.ownership().ReadValue(s->ino)) {
      format::InodeValue iv;
      if (format::DecodeInode(held->value, &iv).ok()) {
        s->attr = std::move(iv);
        s->loaded = true;
        s->trust_epoch = held->token;
        return Status::OK();
      }
    }
  }
  std::optional<std::string> v;
  if (read != nullptr) {
    v = *read;
  } else {
    CKPTFS_ASSIGN_OR_RETURN(v, IndexGet(in, Space::kInodes, format::InodeKey(s->ino)));
  }
  if (!v.has_value()) {
    s->loaded = false;
    return Status(ENOENT, "inode " + std::to_string(s->ino) + " does not exist");
  }
  format::InodeValue iv;
  Status ds = format::DecodeInode(*v, &iv);
  if (!ds.ok()) return Status(ds.code(), "inode " + std::to_string(s->ino) + ": " + ds.message());
  NoteSealed(s->ino, iv);
  if (in == kLatest) HoldSnapshotOf(s->ino, iv);
  s->attr = std::move(iv);
  s->loaded = true;
  // A change's transaction reads a snapshot that may predate a change this
  // mount committed while it waited for s->mu: trusted only once read
  // under s->mu in a transaction of its own.
  s->trust_epoch = in == kLatest ? epoch : 0;
  if (in == kLatest && S_ISDIR(s->attr.mode) && mode_->OthersWrite() &&
      (s->attr.flags & format::kInodeSealed) == 0 &&
      host_.ownership().Quiet(s->ino, s->attr)) {
    ReadUnderGrant(s);
  }
  return Status::OK();
}

void StoreImpl::ReadUnderGrant(InodeState* s) {
  // What was read stands whatever the request for a grant finds.
  Result<Ownership::ReadGrant> g = host_.ownership().AskRead(s->ino);
  if (!g.ok() || g->token == 0 || !g->inode.has_value()) return;
  format::InodeValue iv;
  if (!format::DecodeInode(*g->inode, &iv).ok() || !S_ISDIR(iv.mode)) return;
  s->attr = std::move(iv);
  s->trust_epoch = g->token;
}

Status StoreImpl::FreshLocked(InodeState* s) {
  if (!mode_->OthersWrite()) return LoadLocked(s);
  // Nothing of a sealed inode changes but its link count and change time,
  // by its removal, which its next read after the kernel's cache finds.
  if (s->loaded && !s->purged && (s->attr.flags & format::kInodeSealed) != 0) return Status::OK();
  return TrustedLocked(s) ? Status::OK() : RefreshLocked(s, kLatest);
}

Result<std::optional<std::string>> StoreImpl::IndexGet(meta::ReadTxn* in, Space s,
                                                       std::string_view key) {
  if (in == nullptr) return IndexGet(s, key);
  return in->Get(s, key);
}

Status StoreImpl::IndexScan(meta::ReadTxn* in, Space s, std::string_view begin,
                            std::string_view end, const meta::ScanFn& fn) {
  if (in == nullptr) return IndexScan(s, begin, end, fn);
  return in->Scan(s, begin, end, fn);
}

void StoreImpl::PutInode(meta::Writes* b, uint64_t ino, const format::InodeValue& v) {
  b->Put(Space::kInodes, format::InodeKey(ino), format::EncodeInode(v));
}

Result<uint64_t> StoreImpl::AllocIno(meta::Writes* b) {
  MutexLock l(&ino_mu_);
  if (next_ino_ >= ino_limit_ && mode_->InoBlocksAlone()) {
    uint64_t start = 0;
    CKPTFS_RETURN_IF_ERROR(meta::RunTxn(
        kv(),
        [&](meta::Txn* t) -> Status {
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                                  t->Get(Space::kMeta, format::kMetaNextIno));
          if (!v.has_value() || v->size() != 8) {
            return Status::Corruption("index has no 8-byte next_ino");
          }
          start = format::GetLE64(v->data());
          std::string lim;
          format::PutLE64(&lim, start + kInoBlock);
          t->Put(Space::kMeta, format::kMetaNextIno, lim);
          return Status::OK();
        },
        meta::Durability::kLogged));
    next_ino_ = start;
    ino_limit_ = start + kInoBlock;
  } else if (next_ino_ >= ino_limit_) {
    ino_limit_ = next_ino_ + kInoBlock;
    std::string lim;
    format::PutLE64(&lim, ino_limit_);
    b->Put(Space::kMeta, format::kMetaNextIno, lim);
  }
  return next_ino_++;
}

Result<format::DentryValue> StoreImpl::GetDentry(Ino parent, std::string_view name,
                                                 meta::ReadTxn* in) {
  if (closed_) return Status(EIO, "store is closed");
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                          IndexGet(in, Space::kDentries, format::DentryKey(parent, name)));
  if (!v.has_value()) return Status(ENOENT, "no entry \"" + std::string(name) + "\"");
  format::DentryValue d;
  CKPTFS_RETURN_IF_ERROR(format::DecodeDentry(*v, &d));
  return d;
}

Result<Attr> StoreImpl::GetAttrOf(InodeState* s) {
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(FreshLocked(s));
  return AttrLocked(s);
}

Result<Attr> StoreImpl::AttrLocked(InodeState* s) {
  Attr a = ToAttr(s->ino, s->attr);
  if (s->direct && !s->purged) {
    // The kernel writes the data file: its size and mtime are the file's.
    CKPTFS_ASSIGN_OR_RETURN(DataFiles::Look look, data_files_->LookAt(s->ino));
    a.size = a.data_bytes = look.size;
    const Timespec modified = FromNanos(look.modified_ns);
    if (std::tie(modified.sec, modified.nsec) > std::tie(a.mtime.sec, a.mtime.nsec)) {
      a.mtime = a.ctime = modified;
    }
  }
  return a;
}

Status StoreImpl::PurgeLocked(InodeState* s, meta::Writes* b, StatDeltas* deltas,
                              meta::ReadTxn* in) {
  const uint64_t ino = s->ino;
  {
    MutexLock l(&space_mu_);
    reservations_.RemoveInode(ino);
    reserved_bytes_.store(reservations_.bytes());
  }
  b->Delete(Space::kInodes, format::InodeKey(ino));
  b->Delete(Space::kMeta, format::OrphanKey(ino));
  // The record of a sealed tree goes with its root.
  if (s->attr.flags & format::kInodeSealed) b->Delete(Space::kMeta, format::SealKey(ino));
  if (mode_->OthersWrite()) {
    b->Delete(Space::kMeta, format::OwnerKey(ino));
    if (host_.id() != 0) b->Delete(Space::kMeta, format::ReaderKey(ino, host_.id()));
    host_.ownership().Forget(ino);
  }
  b->Merge(Space::kMeta, format::kMetaInodeCount, meta::CounterOperand(-1));
  const std::string lower = format::ExtentPrefix(ino);
  const std::string upper = format::ExtentPrefix(ino + 1);
  std::unique_ptr<meta::ReadTxn> own;
  meta::ReadTxn* t = in;
  if (t == nullptr) {
    CKPTFS_ASSIGN_OR_RETURN(own, kv()->BeginRead());
    t = own.get();
  }
  Status bad;
  CKPTFS_RETURN_IF_ERROR(
      t->Scan(Space::kExtents, lower, upper, [&](std::string_view k, std::string_view v) {
        // An extent that cannot be read still holds live bytes of some
        // segment: dropping it uncounted would leave them live forever.
        if (k.size() != 16) {
          bad = Status::Corruption("inode " + std::to_string(ino) + ": extent key is not 16 bytes");
          return false;
        }
        format::ExtentValue e;
        Status ds = format::DecodeExtent(v, &e);
        if (!ds.ok()) {
          bad = Status(ds.code(), "inode " + std::to_string(ino) + " extent at " +
                                      std::to_string(format::GetBE64(k.data() + 8)) + ": " +
                                      ds.message());
          return false;
        }
        if (!e.is_inline && !e.in_data_file) {
          auto& d = (*deltas)[e.segment_id];
          d.live -= e.length;
          d.dead += e.length;
        }
        b->Delete(Space::kExtents, k);
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(bad);
  // Extended attributes' keys start with the inode number as extents' do.
  return t->Scan(Space::kXattrs, lower, upper, [&](std::string_view k, std::string_view) {
    b->Delete(Space::kXattrs, k);
    return true;
  });
}

Status StoreImpl::CheckNameFree(Txn* t, Ino parent, std::string_view name) {
  // A shared store's AddName checks at the commit: reading a name that is
  // not there would make creates of neighbouring names conflict.
  if (t->index != nullptr) return Status::OK();
  Result<format::DentryValue> existing = GetDentry(parent, name, kLatest);
  if (existing.ok()) return Status(EEXIST, "\"" + std::string(name) + "\" exists");
  return existing.status().code() == ENOENT ? Status::OK() : existing.status();
}

void StoreImpl::AddName(Txn* t, Ino parent, std::string_view name,
                        const format::DentryValue& d) {
  const std::string key = format::DentryKey(parent, name);
  if (t->index != nullptr) {
    t->batch.Insert(Space::kDentries, key, format::EncodeDentry(d));  // EEXIST at the commit
  } else {
    t->batch.Put(Space::kDentries, key, format::EncodeDentry(d));
  }
}

Result<bool> StoreImpl::DirIsEmpty(Ino dir, meta::ReadTxn* in) {
  bool empty = true;
  CKPTFS_RETURN_IF_ERROR(IndexScan(in, Space::kDentries, format::DentryPrefix(dir),
                                   format::DentryPrefix(dir + 1),
                                   [&](std::string_view, std::string_view) {
                                     empty = false;
                                     return false;
                                   }));
  return empty;
}

Result<bool> StoreImpl::IsInSubtree(Ino ino, Ino ancestor, meta::ReadTxn* in) {
  // Parent pointers change only under ns_mu_, which the caller holds
  // exclusively on an embedded store; on a shared one, only in
  // transactions that conflict with this one, `in`. Read them from the
  // index without taking inode locks.
  for (int depth = 0; depth < 100000; ++depth) {
    if (ino == ancestor) return true;
    if (ino == kRootIno) return false;
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                            IndexGet(in, Space::kInodes, format::InodeKey(ino)));
    if (!v.has_value()) return Status(EIO, "read inode " + std::to_string(ino) + ": not found");
    format::InodeValue iv;
    CKPTFS_RETURN_IF_ERROR(format::DecodeInode(*v, &iv));
    ino = iv.parent;
  }
  return Status::Corruption("directory parent chain does not reach the root");
}

// ---- queries ----

Result<uint32_t> StoreImpl::CachedMode(Ino ino) {
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  return s->attr.mode;
}

Result<Attr> StoreImpl::GetAttr(Ino ino) {
  InodeRef s(&inodes_, ino);
  return GetAttrOf(s.get());
}

Result<Attr> StoreImpl::Lookup(Ino parent, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(ValidateName(name));
  if (mode_->OthersWrite()) {
    // A directory this mount owns: every name in it came through here.
    if (std::optional<uint64_t> known = host_.ownership().FindName(parent, name)) {
      if (*known == 0) return Status(ENOENT, "no entry \"" + std::string(name) + "\"");
      return GetAttr(*known);
    }
  }
  if (mode_->RemoteIndex()) {
    std::string entry_key = format::DentryKey(parent, name);
    if (HeldFor(Space::kDentries, entry_key, std::nullopt) == nullptr) {
      return LookupRemote(parent, name, entry_key);
    }
  }
  CKPTFS_ASSIGN_OR_RETURN(const uint32_t mode, CachedMode(parent));
  if (!S_ISDIR(mode)) return NotADirectory(parent);
  CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, GetDentry(parent, name, kLatest));
  return GetAttr(d.ino);
}

namespace {

// Of a lookup's values read in one snapshot (`name`: the name's; `parent`:
// the parent's inode, null when not read): the name's entry, or why none.
Result<format::DentryValue> EntryOf(Ino parent, std::string_view name,
                                    const std::optional<std::string>& entry,
                                    const std::optional<std::string>* parent_value) {
  if (parent_value != nullptr) {
    if (!parent_value->has_value()) {
      return Status(ENOENT, "inode " + std::to_string(parent) + " does not exist");
    }
    format::InodeValue iv;
    Status ds = format::DecodeInode(**parent_value, &iv);
    if (!ds.ok()) return Status(ds.code(), "inode " + std::to_string(parent) + ": " + ds.message());
    if (!S_ISDIR(iv.mode)) return NotADirectory(parent);
  }
  if (!entry.has_value()) return Status(ENOENT, "no entry \"" + std::string(name) + "\"");
  format::DentryValue d;
  CKPTFS_RETURN_IF_ERROR(format::DecodeDentry(*entry, &d));
  return d;
}

}  // namespace

Result<Attr> StoreImpl::LookupRemote(Ino parent, std::string_view name,
                                     const std::string& entry_key) {
  if (closed_) return Status(EIO, "store is closed");
  const std::string parent_key = format::InodeKey(parent);
  // Before the reads: what they find of the name stays exact while the
  // parent's read grant runs.
  const Ownership::ReadStamp stamp = host_.ownership().StampOf(parent);
  // Types never change: a loaded parent's is known.
  bool parent_known = false;
  {
    InodeRef p(&inodes_, parent);
    MutexLock l(&p->mu);
    if (p->loaded && !p->purged) {
      if (!S_ISDIR(p->attr.mode)) return NotADirectory(parent);
      parent_known = true;
    }
  }
  // keys[0]: the name; keys[1]: the parent's inode unless known; last: the
  // hinted inode where it is read.
  std::vector<meta::KeyRef> keys{{Space::kDentries, entry_key}};
  if (!parent_known) keys.push_back({Space::kInodes, parent_key});
  auto read = [&]() -> Result<std::vector<ReadValue>> {
    std::vector<ReadValue> values;
    CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv(), [&](meta::ReadTxn* t) -> Status {
      CKPTFS_ASSIGN_OR_RETURN(values, t->GetMany(keys));
      return Status::OK();
    }));
    return values;
  };
  auto entry = [&](const std::vector<ReadValue>& v) {
    const Result<format::DentryValue> d = EntryOf(parent, name, v[0], parent_known ? nullptr : &v[1]);
    if (!d.ok() && d.status().code() == ENOENT) lookup_hints_.Set(entry_key, 0);
    if (d.ok() || d.status().code() == ENOENT) {
      host_.ownership().ReadName(parent, stamp, name, d.ok() ? d->ino : 0);
    }
    return d;
  };
  const uint64_t hint = lookup_hints_.Find(entry_key);
  uint64_t ino = 0;
  if (hint == 0) {
    CKPTFS_ASSIGN_OR_RETURN(std::vector<ReadValue> v, read());
    CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, entry(v));
    ino = d.ino;
  } else {
    InodeRef c(&inodes_, hint);
    MutexLock l(&c->mu);
    // What FreshLocked would not read again.
    const bool fresh = c->loaded && !c->purged &&
                       ((c->attr.flags & format::kInodeSealed) != 0 || TrustedLocked(c.get()));
    const std::string child_key = format::InodeKey(hint);
    if (!fresh) keys.push_back({Space::kInodes, child_key});
    const uint64_t epoch = host_.TrustEpoch(hint);  // before the read
    CKPTFS_ASSIGN_OR_RETURN(std::vector<ReadValue> v, read());
    CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, entry(v));
    if (d.ino == hint) {
      if (!fresh) CKPTFS_RETURN_IF_ERROR(RefreshLocked(c.get(), kLatest, &v.back(), epoch));
      return AttrLocked(c.get());
    }
    ino = d.ino;  // the name names another inode now
  }
  lookup_hints_.Set(entry_key, ino);
  return GetAttr(ino);
}

Status StoreImpl::ReadDir(Ino ino, std::string_view after,
                          const std::function<bool(const DirEntry&)>& fn) {
  CKPTFS_ASSIGN_OR_RETURN(Attr a, GetAttr(ino));
  if (!S_ISDIR(a.mode)) return NotADirectory(ino);
  const size_t prefix = format::DentryPrefix(ino).size();
  std::string start = format::DentryKey(ino, after);
  // The entries after `after`: from the smallest key greater than it.
  if (!after.empty()) start.push_back('\0');
  Status bad;
  CKPTFS_RETURN_IF_ERROR(IndexScan(
      Space::kDentries, start, format::DentryPrefix(ino + 1),
      [&](std::string_view k, std::string_view v) {
        format::DentryValue d;
        bad = format::DecodeDentry(v, &d);
        if (!bad.ok()) return false;
        DirEntry e;
        e.name.assign(k.substr(prefix));
        e.ino = d.ino;
        e.type = static_cast<uint32_t>(d.type) << 12;
        return fn(e);
      }));
  return bad;
}

Result<std::string> StoreImpl::ReadLink(Ino ino) {
  InodeRef s(&inodes_, ino);
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  if (!S_ISLNK(s->attr.mode)) return Status(EINVAL, "not a symlink");
  return s->attr.symlink_target;
}

// ---- mutations ----

// The two sides of a rename, looked up under ns_mu_ (dst only when
// has_dst), their types read under the Txn's locks.
struct StoreImpl::RenameSides {
  Ino parent;
  std::string_view name;
  Ino new_parent;
  std::string_view new_name;
  format::DentryValue src{};
  format::DentryValue dst{};
  bool has_dst = false;
  bool src_dir = false;
  bool dst_dir = false;
};

Result<Attr> StoreImpl::MakeNode(Ino parent, std::string_view name, format::InodeValue v) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(ValidateName(name));
  CKPTFS_RETURN_IF_ERROR(CheckSpace(0));
  uint64_t epoch = 0;  // the new inode's trust epoch before the commit
  format::InodeValue made;
  Result<Attr> a = ChangeNamespace([&](Txn& t) -> Result<Attr> {
    CKPTFS_RETURN_IF_ERROR(t.Lock({parent}));
    format::InodeValue& p = t.Edit(parent);
    if (!S_ISDIR(p.mode)) return Status(ENOTDIR, "parent is not a directory");
    if (p.nlink == 0) return Status(ENOENT, "parent directory was removed");
    CKPTFS_RETURN_IF_ERROR(Unsealed(parent, p, "create"));
    CKPTFS_RETURN_IF_ERROR(CheckNameFree(&t, parent, name));

    format::InodeValue n = v;
    // In a set-group-ID directory a new inode takes the directory's group,
    // and a new directory the bit too (the kernel leaves this to the
    // filesystem).
    if (p.mode & S_ISGID) {
      n.gid = p.gid;
      if (S_ISDIR(n.mode)) n.mode |= S_ISGID;
    }
    const Timespec now = Now();
    SetAllTimes(&n, now);
    n.generation = 1;
    CKPTFS_ASSIGN_OR_RETURN(uint64_t ino, AllocIno(&t.batch));
    if (S_ISDIR(n.mode)) {
      n.parent = parent;
      p.nlink++;
    }
    SetMtime(&p, now);
    PutInode(&t.batch, ino, n);
    AddName(&t, parent, name, {ino, TypeOf(n.mode)});
    t.batch.Merge(Space::kMeta, format::kMetaInodeCount, meta::CounterOperand(1));
    const bool owned = OwnNew(&t.batch, ino, S_ISDIR(n.mode));
    epoch = host_.TrustEpoch(ino);
    if (Status c = t.Commit(); !c.ok()) {
      if (owned) host_.ownership().Forget(ino);
      return c;
    }
    if (epoch != 0) made = n;
    return ToAttr(ino, n);
  });
  // Alone, or owned, the new inode is known as made, with no extended
  // attributes.
  if (a.ok() && epoch != 0) host_.RememberMade(a->ino, epoch, std::move(made));
  return a;
}

Result<Attr> StoreImpl::Mkdir(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                              uint32_t gid) {
  format::InodeValue v;
  v.mode = S_IFDIR | (mode & 07777);
  v.uid = uid;
  v.gid = gid;
  v.nlink = 2;
  return MakeNode(parent, name, v);
}

Result<Attr> StoreImpl::Create(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                               uint32_t gid, uint32_t rdev) {
  uint32_t type = mode & S_IFMT;
  if (type == 0) type = S_IFREG;
  if (type == S_IFDIR || type == S_IFLNK) return Status(EINVAL, "Create makes no directories or symlinks");
  format::InodeValue v;
  v.mode = type | (mode & 07777);
  v.uid = uid;
  v.gid = gid;
  v.nlink = 1;
  v.rdev = rdev;
  return MakeNode(parent, name, v);
}

Result<Attr> StoreImpl::Symlink(Ino parent, std::string_view name, std::string_view target,
                                uint32_t uid, uint32_t gid) {
  if (target.empty()) return Status(ENOENT, "empty symlink target");
  if (target.size() > kMaxSymlinkLen) return Status(ENAMETOOLONG, "symlink target too long");
  format::InodeValue v;
  v.mode = S_IFLNK | 0777;
  v.uid = uid;
  v.gid = gid;
  v.nlink = 1;
  v.size = target.size();
  v.symlink_target.assign(target);
  return MakeNode(parent, name, v);
}

Result<Attr> StoreImpl::Link(Ino ino, Ino new_parent, std::string_view new_name) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(ValidateName(new_name));
  return ChangeNamespace([&](Txn& t) -> Result<Attr> {
    CKPTFS_RETURN_IF_ERROR(t.Lock({ino, new_parent}));
    format::InodeValue& v = t.Edit(ino);
    format::InodeValue& p = t.Edit(new_parent);
    if (S_ISDIR(v.mode)) return Status(EPERM, "hard links to directories are not allowed");
    if (!S_ISDIR(p.mode)) return Status(ENOTDIR, "parent is not a directory");
    if (v.nlink == 0) return Status(ENOENT, "inode was unlinked");
    if (p.nlink == 0) return Status(ENOENT, "parent directory was removed");
    CKPTFS_RETURN_IF_ERROR(Unsealed(ino, v, "link"));
    CKPTFS_RETURN_IF_ERROR(Unsealed(new_parent, p, "link"));
    CKPTFS_RETURN_IF_ERROR(CheckNameFree(&t, new_parent, new_name));
    Timespec now = Now();
    v.nlink++;
    SetCtime(&v, now);
    SetMtime(&p, now);
    AddName(&t, new_parent, new_name, {ino, TypeOf(v.mode)});
    CKPTFS_RETURN_IF_ERROR(t.Commit());
    return ToAttr(ino, v);
  });
}

Result<format::DentryValue> StoreImpl::LockEntry(Txn& t, Ino parent, std::string_view name) {
  if (t.attempt == 1 || t.reader() == kLatest) {
    CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, GetDentry(parent, name, t.reader()));
    CKPTFS_RETURN_IF_ERROR(t.Lock({parent, d.ino}));
    return d;
  }
  CKPTFS_ASSIGN_OR_RETURN(format::DentryValue seen, GetDentry(parent, name, kLatest));
  CKPTFS_RETURN_IF_ERROR(t.Lock({parent, seen.ino}));
  CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, GetDentry(parent, name, t.reader()));
  if (d.ino != seen.ino) {
    return meta::ConflictStatus("\"" + std::string(name) + "\" changed while its inode was locked");
  }
  return d;
}

Status StoreImpl::Unlink(Ino parent, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(ValidateName(name));
  return ChangeNamespace([&](Txn& t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, LockEntry(t, parent, name));
    if (S_ISDIR(t.Edit(d.ino).mode)) {
      return Status(EISDIR, "\"" + std::string(name) + "\" is a directory");
    }
    Timespec now = Now();
    SetMtime(&t.Edit(parent), now);
    t.batch.Delete(Space::kDentries, format::DentryKey(parent, name));
    CKPTFS_RETURN_IF_ERROR(t.DropLink(d.ino, now));
    return t.Commit();
  });
}

Status StoreImpl::Rmdir(Ino parent, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(ValidateName(name));
  return ChangeNamespace([&](Txn& t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(format::DentryValue d, LockEntry(t, parent, name));
    if (!S_ISDIR(t.Edit(d.ino).mode)) {
      return Status(ENOTDIR, "\"" + std::string(name) + "\" is not a directory");
    }
    CKPTFS_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(d.ino, t.reader()));
    if (!empty) return Status(ENOTEMPTY, "directory \"" + std::string(name) + "\" is not empty");
    Timespec now = Now();
    format::InodeValue& p = t.Edit(parent);
    p.nlink--;
    SetMtime(&p, now);
    t.batch.Delete(Space::kDentries, format::DentryKey(parent, name));
    CKPTFS_RETURN_IF_ERROR(t.DropDir(d.ino, now));
    return t.Commit();
  });
}

Status StoreImpl::Rename(Ino parent, std::string_view name, Ino new_parent,
                         std::string_view new_name, RenameMode mode) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(ValidateName(name));
  CKPTFS_RETURN_IF_ERROR(ValidateName(new_name));
  return ChangeNamespace([&](Txn& t) -> Status {
    ns_mu_.AssertReaderHeld();
    RenameSides r{parent, name, new_parent, new_name};
    CKPTFS_ASSIGN_OR_RETURN(r.src, GetDentry(parent, name, t.reader()));
    Result<format::DentryValue> dst = GetDentry(new_parent, new_name, t.reader());
    if (!dst.ok() && dst.status().code() != ENOENT) return dst.status();
    r.has_dst = dst.ok();
    if (r.has_dst) r.dst = *dst;

    std::vector<uint64_t> inos = {parent, new_parent, r.src.ino};
    if (r.has_dst) inos.push_back(r.dst.ino);
    CKPTFS_RETURN_IF_ERROR(t.Lock(inos));
    if (!S_ISDIR(t.Edit(new_parent).mode)) {
      return Status(ENOTDIR, "target parent is not a directory");
    }
    if (t.Edit(new_parent).nlink == 0) return Status(ENOENT, "target directory was removed");
    // Out of a sealed directory or into one: the root of a sealed tree,
    // whose directory is not sealed, may move.
    CKPTFS_RETURN_IF_ERROR(Unsealed(parent, t.Edit(parent), "rename"));
    CKPTFS_RETURN_IF_ERROR(Unsealed(new_parent, t.Edit(new_parent), "rename"));
    r.src_dir = S_ISDIR(t.Edit(r.src.ino).mode);
    r.dst_dir = r.has_dst && S_ISDIR(t.Edit(r.dst.ino).mode);
    if (mode == RenameMode::kExchange) return ExchangeLocked(r, &t);
    if (r.has_dst && mode == RenameMode::kNoReplace) {
      return Status(EEXIST, "\"" + std::string(new_name) + "\" exists");
    }
    return MoveLocked(r, &t);
  });
}

Status StoreImpl::ExchangeLocked(const RenameSides& r, Txn* t) {
  const format::DentryValue& src = r.src;
  const format::DentryValue& dst = r.dst;
  if (!r.has_dst) return Status(ENOENT, "no entry \"" + std::string(r.new_name) + "\" to exchange");
  if (src.ino == dst.ino) return Status::OK();
  const bool moves = r.parent != r.new_parent;
  if (moves) {
    if (r.src_dir) {
      CKPTFS_ASSIGN_OR_RETURN(bool loop, IsInSubtree(r.new_parent, src.ino, t->reader()));
      if (loop) return Status(EINVAL, "cannot move a directory into its own subtree");
    }
    if (r.dst_dir) {
      CKPTFS_ASSIGN_OR_RETURN(bool loop, IsInSubtree(r.parent, dst.ino, t->reader()));
      if (loop) return Status(EINVAL, "cannot move a directory into its own subtree");
    }
  }
  t->batch.Put(Space::kDentries, format::DentryKey(r.parent, r.name), format::EncodeDentry(dst));
  t->batch.Put(Space::kDentries, format::DentryKey(r.new_parent, r.new_name),
               format::EncodeDentry(src));
  if (moves && r.src_dir) {
    t->Edit(src.ino).parent = r.new_parent;
    t->Edit(r.parent).nlink--;
    t->Edit(r.new_parent).nlink++;
  }
  if (moves && r.dst_dir) {
    t->Edit(dst.ino).parent = r.parent;
    t->Edit(r.new_parent).nlink--;
    t->Edit(r.parent).nlink++;
  }
  const Timespec now = Now();
  SetCtime(&t->Edit(src.ino), now);
  SetCtime(&t->Edit(dst.ino), now);
  SetMtime(&t->Edit(r.parent), now);
  SetMtime(&t->Edit(r.new_parent), now);
  return t->Commit();
}

Status StoreImpl::MoveLocked(const RenameSides& r, Txn* t) {
  const format::DentryValue& src = r.src;
  const format::DentryValue& dst = r.dst;
  const std::string new_name(r.new_name);
  if (r.has_dst) {
    if (dst.ino == src.ino) return Status::OK();  // two names of one inode
    if (r.src_dir && !r.dst_dir) {
      return Status(ENOTDIR, "cannot replace a non-directory with a directory");
    }
    if (!r.src_dir && r.dst_dir) {
      return Status(EISDIR, "cannot replace a directory with a non-directory");
    }
    if (r.dst_dir) {
      CKPTFS_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(dst.ino, t->reader()));
      if (!empty) return Status(ENOTEMPTY, "directory \"" + new_name + "\" is not empty");
    }
  }
  if (r.src_dir && r.parent != r.new_parent) {
    CKPTFS_ASSIGN_OR_RETURN(bool loop, IsInSubtree(r.new_parent, src.ino, t->reader()));
    if (loop) return Status(EINVAL, "cannot move a directory into its own subtree");
  }
  if (r.src_dir && r.has_dst && r.dst_dir) {
    // Replacing an ancestor of the source would detach it.
    CKPTFS_ASSIGN_OR_RETURN(bool loop, IsInSubtree(r.parent, dst.ino, t->reader()));
    if (loop) return Status(ENOTEMPTY, "directory \"" + new_name + "\" is not empty");
  }

  const Timespec now = Now();
  t->batch.Delete(Space::kDentries, format::DentryKey(r.parent, r.name));
  t->batch.Put(Space::kDentries, format::DentryKey(r.new_parent, r.new_name),
               format::EncodeDentry(src));
  if (r.has_dst) {
    if (r.dst_dir) {
      t->Edit(r.new_parent).nlink--;
      CKPTFS_RETURN_IF_ERROR(t->DropDir(dst.ino, now));
    } else {
      CKPTFS_RETURN_IF_ERROR(t->DropLink(dst.ino, now));
    }
  }
  if (r.src_dir && r.parent != r.new_parent) {
    t->Edit(src.ino).parent = r.new_parent;
    t->Edit(r.parent).nlink--;
    t->Edit(r.new_parent).nlink++;
  }
  SetCtime(&t->Edit(src.ino), now);
  SetMtime(&t->Edit(r.parent), now);
  SetMtime(&t->Edit(r.new_parent), now);
  return t->Commit();
}

}  // namespace ckptfs::engine
