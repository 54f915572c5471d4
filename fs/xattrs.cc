// Extended attributes, stored by the engine. A request with size 0 asks for
// the size; a buffer too small is ERANGE.
#include <string>
#include <string_view>
#include <vector>

#include "fs/control.h"
#include "fs/extents_xattr.h"
#include "fs/filesystem.h"
#include "fs/ops.h"

namespace ckptfs::fs {
namespace {

using engine::Result;

// The kernel hands FUSE every name; a local filesystem's xattr handlers would
// refuse some. Do as ext4 does: names in the user, trusted and security
// namespaces need a non-empty suffix (EINVAL); other namespaces, system.*
// included (no POSIX ACLs here), are not supported. 0 when acceptable.
int CheckName(std::string_view name) {
  for (std::string_view ns : {"user.", "trusted.", "security."}) {
    if (name.substr(0, ns.size()) == ns) return name.size() > ns.size() ? 0 : EINVAL;
  }
  return EOPNOTSUPP;
}

// Answers a getxattr/listxattr-style request with `value`.
void ReplySized(Request& r, const std::string& value, size_t size) {
  if (size == 0) return r.Xattr(value.size());
  if (size < value.size()) return r.Err(ERANGE);
  r.Buf(value.data(), value.size());
}

// "user.ckptfs.extents[.N]" (fs/extents_xattr.h): computed, never stored.
void GetExtentsXattr(Request& r, fuse_ino_t ino, std::string_view name, size_t size) {
  uint64_t from = 0;
  if (!format::ParseExtentsXattrName(name, &from)) return r.Err(ENODATA);
  Result<std::string> value = ExtentsXattrValue(r.fs().store(), ino, from);
  if (!value.ok()) return r.Fail(value.status());
  ReplySized(r, *value, size);
}

// "user.ckptfs.seal": computed, never stored. Setting it (any value) seals
// the tree under the inode (Store::Seal); it reads "1" on a sealed inode.
constexpr std::string_view kSealXattr = "user.ckptfs.seal";

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  Serve(req, Op::kSetxattr, [&](Request& r) {
    if (IsControl(ino)) return r.Err(ENOTSUP);
    if (int err = CheckName(name)) return r.Err(err);
    if (format::IsExtentsXattrName(name)) return r.Err(EPERM);  // virtual, read-only
    if (name == kSealXattr) return r.Fail(r.fs().store().Seal(ino).status());
    engine::Status st = r.fs().store().SetXattr(ino, name, {value, size}, flags);
    if (st.ok() && name == kCapabilityXattr) r.fs().killpriv().CapabilitySet(ino);
    if (st.ok()) st = r.fs().SyncChange(ino, /*directory_change=*/false);
    r.Fail(st);
  });
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Serve(req, Op::kGetxattr, [&](Request& r) {
    if (int err = CheckName(name)) return r.Err(err);
    if (IsControl(ino)) return r.Err(ENODATA);
    if (format::IsExtentsXattrName(name)) return GetExtentsXattr(r, ino, name, size);
    if (name == kSealXattr) {
      Result<engine::Attr> a = r.fs().GetAttr(ino);
      if (!a.ok()) return r.Fail(a.status());
      if (!a->sealed) return r.Err(ENODATA);
      return ReplySized(r, "1", size);
    }
    Result<std::string> value = r.fs().store().GetXattr(ino, name);
    if (!value.ok()) return r.Fail(value.status());
    ReplySized(r, *value, size);
  });
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Serve(req, Op::kListxattr, [&](Request& r) {
    if (IsControl(ino)) return ReplySized(r, std::string(), size);
    Result<std::vector<std::string>> names = r.fs().store().ListXattr(ino);
    if (!names.ok()) return r.Fail(names.status());
    std::string list;  // each name followed by a NUL
    for (const std::string& n : *names) {
      list.append(n);
      list.push_back('\0');
    }
    ReplySized(r, list, size);
  });
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Serve(req, Op::kRemovexattr, [&](Request& r) {
    if (int err = CheckName(name)) return r.Err(err);
    if (IsControl(ino)) return r.Err(ENODATA);
    if (format::IsExtentsXattrName(name)) return r.Err(EPERM);  // virtual, read-only
    engine::Status st = r.fs().store().RemoveXattr(ino, name);
    if (st.ok()) st = r.fs().SyncChange(ino, /*directory_change=*/false);
    r.Fail(st);
  });
}

}  // namespace

void AddXattrOps(fuse_lowlevel_ops* ops) {
  ops->setxattr = SetXattr;
  ops->getxattr = GetXattr;
  ops->listxattr = ListXattr;
  ops->removexattr = RemoveXattr;
}

}  // namespace ckptfs::fs
