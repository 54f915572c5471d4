// Extended attributes of StoreImpl: one index key per attribute, each
// change one commit of the index with the inode's ctime.
#include <sys/xattr.h>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

constexpr size_t kMaxXattrValue = 64 << 10;

}  // namespace

Status StoreImpl::SetXattr(Ino ino, std::string_view name, std::string_view value, int flags) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  if (name.empty() || name.size() > 255) return Status(ERANGE, "bad xattr name length");
  if (value.size() > kMaxXattrValue) return Status(E2BIG, "xattr value too large");
  return RunChange([&](Txn& t) -> Status {
    CKPTFS_RETURN_IF_ERROR(t.Lock({ino}));
    CKPTFS_RETURN_IF_ERROR(Unsealed(ino, t.Edit(ino), "setxattr"));
    std::string key = format::XattrKey(ino, name);
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> old,
                            IndexGet(t.reader(), Space::kXattrs, key));
    if ((flags & XATTR_CREATE) && old.has_value()) return Status(EEXIST, "xattr exists");
    if ((flags & XATTR_REPLACE) && !old.has_value()) return Status(ENODATA, "no such xattr");
    t.XattrsChanged(ino);
    t.batch.Put(Space::kXattrs, key, value);
    SetCtime(&t.Edit(ino), Now());
    return t.Commit();
  });
}

Result<std::string> StoreImpl::GetXattr(Ino ino, std::string_view name) {
  InodeRef s(&inodes_, ino);
  // Held across the read: a change of the attributes (which forgets what
  // is known absent) waits for it.
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));  // it exists
  const uint64_t epoch = host_.TrustEpoch(ino);  // before the read
  if (KnownAbsentLocked(s.get(), name, epoch)) return Status(ENODATA, "no such xattr");
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                          IndexGet(Space::kXattrs, format::XattrKey(ino, name)));
  if (!v.has_value()) {
    s->absent_xattr_epoch = epoch;
    s->absent_xattr.assign(name);
    return Status(ENODATA, "no such xattr");
  }
  return std::move(*v);
}

bool StoreImpl::KnownAbsentLocked(InodeState* s, std::string_view name, uint64_t epoch) {
  return epoch != 0 && (s->no_xattrs_epoch == epoch ||
                        (s->absent_xattr_epoch == epoch && s->absent_xattr == name));
}

Result<std::vector<std::string>> StoreImpl::ListXattr(Ino ino) {
  InodeRef s(&inodes_, ino);
  // Held across the scan: a change of the attributes (which clears
  // no_xattrs_epoch) waits for it.
  MutexLock l(&s->mu);
  CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
  const uint64_t epoch = host_.TrustEpoch(ino);  // before the scan
  std::vector<std::string> names;
  if (epoch != 0 && s->no_xattrs_epoch == epoch) return names;
  const std::string prefix = format::XattrKey(ino, "");
  CKPTFS_RETURN_IF_ERROR(IndexScan(Space::kXattrs, prefix, format::XattrKey(ino + 1, ""),
                                   [&](std::string_view k, std::string_view) {
                                     names.emplace_back(k.substr(prefix.size()));
                                     return true;
                                   }));
  if (names.empty()) s->no_xattrs_epoch = epoch;
  return names;
}


Status StoreImpl::RemoveXattr(Ino ino, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  {
    InodeRef s(&inodes_, ino);
    MutexLock l(&s->mu);
    CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
    if (KnownAbsentLocked(s.get(), name, host_.TrustEpoch(ino))) return Status(ENODATA, "no such xattr");
  }
  return RunChange([&](Txn& t) -> Status {
    CKPTFS_RETURN_IF_ERROR(t.Lock({ino}));
    CKPTFS_RETURN_IF_ERROR(Unsealed(ino, t.Edit(ino), "removexattr"));
    std::string key = format::XattrKey(ino, name);
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> old,
                            IndexGet(t.reader(), Space::kXattrs, key));
    if (!old.has_value()) return Status(ENODATA, "no such xattr");
    t.batch.Delete(Space::kXattrs, key);
    SetCtime(&t.Edit(ino), Now());
    return t.Commit();
  });
}

}  // namespace ckptfs::engine
