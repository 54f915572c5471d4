// What is known before mounting: the checks of paths, /dev/fuse and mounts
// made before anything is created, each with a one-line message for people,
// and what this process and kernel offer (libfuse, passthrough).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "fs/mount_options.h"

namespace ckptfs::fs {

// The version of the libfuse linked in (fuse_pkgversion()), e.g. "3.17.2".
std::string LibfuseVersion();
// "" when this process may register backing files for kernel passthrough
// (CAP_SYS_ADMIN), else why not.
std::string PassthroughPrivilege();
// Whether a mount by this process could use kernel passthrough: "yes, ..."
// or "no: " and why (kernel release, privilege). The kernel's own answer
// comes at mount time (the stats file's fs.passthrough).
std::string PassthroughSupport();

// The filesystem type of a ckptfs mount in /proc/self/mounts.
inline constexpr std::string_view kMountType = "fuse.ckptfs";

// `path` made absolute, with its symlinks resolved where it exists, as
// /proc/self/mounts shows a mountpoint. `what` names it in the error.
engine::Result<std::string> ResolvePath(const std::string& path, const std::string& what);
// Makes store_dir and mountpoint absolute. EINVAL when either is empty.
engine::Status ResolvePaths(MountOptions* options);

// Checks made before forking: /dev/fuse is usable; the mountpoint is an
// existing, empty directory; the store directory is missing, empty or a
// store.
engine::Status CheckFuseDevice();
engine::Status CheckMountpoint(const std::string& mountpoint);
engine::Status CheckStoreDir(const std::string& store_dir);
// The source (store) of a ckptfs mount on `mountpoint` (a resolved path),
// or "" when there is none.
std::string CkptfsMountedOn(const std::string& mountpoint);
// Checked before `ckptfs umount`: the topmost mount on `mountpoint` (a
// resolved path) is a ckptfs one. ENOENT when the path does not exist,
// EINVAL when nothing or another filesystem is mounted there (named).
engine::Status CheckUnmountable(const std::string& mountpoint);

}  // namespace ckptfs::fs
