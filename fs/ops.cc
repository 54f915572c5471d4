#include "fs/ops.h"

#include <cstring>

#include "fs/filesystem.h"

namespace ckptfs::fs {

fuse_lowlevel_ops MakeLowLevelOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = &Filesystem::Init;
  ops.destroy = &Filesystem::Destroy;
  AddEntryOps(&ops);
  AddDirOps(&ops);
  AddDataOps(&ops);
  AddXattrOps(&ops);
  return ops;
}

}  // namespace ckptfs::fs
