// Extended attributes of StoreImpl: one index key per attribute, each
// change one atomic WriteBatch with the inode's ctime.
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
  Txn t(this);
  CKPTFS_RETURN_IF_ERROR(t.Lock({ino}));
  std::string key = format::XattrKey(ino, name);
  std::string old;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), cf_xattrs_, key, &old);
  if (!rs.ok() && !rs.IsNotFound()) return FromRocks(rs, "read xattr");
  if ((flags & XATTR_CREATE) && rs.ok()) return Status(EEXIST, "xattr exists");
  if ((flags & XATTR_REPLACE) && rs.IsNotFound()) return Status(ENODATA, "no such xattr");
  t.batch.Put(cf_xattrs_, key, rocksdb::Slice(value.data(), value.size()));
  SetCtime(&t.Edit(ino), Now());
  return t.Commit();
}

Result<std::string> StoreImpl::GetXattr(Ino ino, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(GetAttr(ino).status());
  std::string v;
  rocksdb::Status rs =
      db_->Get(rocksdb::ReadOptions(), cf_xattrs_, format::XattrKey(ino, name), &v);
  if (rs.IsNotFound()) return Status(ENODATA, "no such xattr");
  CKPTFS_RETURN_IF_ERROR(FromRocks(rs, "read xattr"));
  return v;
}

Result<std::vector<std::string>> StoreImpl::ListXattr(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(GetAttr(ino).status());
  std::string prefix = format::XattrKey(ino, "");
  std::string upper = format::XattrKey(ino + 1, "");
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf_xattrs_));
  std::vector<std::string> names;
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    names.emplace_back(it->key().data() + prefix.size(), it->key().size() - prefix.size());
  }
  CKPTFS_RETURN_IF_ERROR(FromRocks(it->status(), "list xattrs"));
  return names;
}

Status StoreImpl::RemoveXattr(Ino ino, std::string_view name) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  Txn t(this);
  CKPTFS_RETURN_IF_ERROR(t.Lock({ino}));
  std::string key = format::XattrKey(ino, name);
  std::string old;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), cf_xattrs_, key, &old);
  if (rs.IsNotFound()) return Status(ENODATA, "no such xattr");
  CKPTFS_RETURN_IF_ERROR(FromRocks(rs, "read xattr"));
  t.batch.Delete(cf_xattrs_, key);
  SetCtime(&t.Edit(ino), Now());
  return t.Commit();
}

}  // namespace ckptfs::engine
