// The handler table of the low-level FUSE session, filled by concern. The
// handlers serve the mount's state (fs/filesystem.h); mount.cc hands the
// table to the session.
#pragma once

#include <fuse_lowlevel.h>

namespace ckptfs::fs {

void AddEntryOps(fuse_lowlevel_ops* ops);  // entries.cc: names and attributes
void AddDirOps(fuse_lowlevel_ops* ops);    // dirs.cc: listing, statfs
void AddDataOps(fuse_lowlevel_ops* ops);   // data.cc: open files and their bytes
void AddXattrOps(fuse_lowlevel_ops* ops);  // xattrs.cc
// All of them, plus init and destroy (Filesystem::Init, Filesystem::Destroy).
fuse_lowlevel_ops MakeLowLevelOps();

}  // namespace ckptfs::fs
