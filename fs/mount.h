// Mounting a store: the checks made before anything is created, and the
// FUSE session that serves the mount, with the options of `ckptfs mount -o
// ...` (options/mount_options.h). This is the only fs/ header that tools/
// include; it names no FUSE types.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/store.h"
#include "options/mount_options.h"

namespace ckptfs::fs {

// The mount's settings (options/mount_options.h), by their fs/ names.
using options::AtimeMode;
using options::AtimeRuleOf;
using options::CheckPrivileges;
using options::HumanSize;
using options::IsSizeOption;
using options::MountOptions;
using options::MountOptionsHelp;
using options::ParseMountOption;
using options::ParseMountOptions;


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

// Checks made before forking, each with a one-line message for people:
// /dev/fuse is usable; the mountpoint is an existing, empty directory; the
// store directory is missing, empty or a store.
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

// Called exactly once by ServeMount(): with OK once the filesystem is mounted,
// or with the reason it could not be.
using ReadyCallback = std::function<void(const engine::Status&)>;

// Opens (creating when missing or empty) the store, mounts it and serves
// requests until the filesystem is unmounted or SIGTERM/SIGINT/SIGHUP
// arrives; then unmounts and closes the store, on every path. Returns the
// process exit status (0 on a clean shutdown).
int ServeMount(const MountOptions& options, const ReadyCallback& on_ready);


}  // namespace ckptfs::fs
