// Mounting a store: the checks made before anything is created
// (fs/mount_checks.h), and the FUSE session that serves the mount, with the
// options of `ckptfs mount -o ...` (fs/mount_options.h). This is the only
// fs/ header that tools/ include; it names no FUSE types.
#pragma once

#include <functional>

#include "base/status.h"
#include "fs/mount_checks.h"
#include "fs/mount_options.h"

namespace ckptfs::fs {

// Called exactly once by ServeMount(): with OK once the filesystem is mounted,
// or with the reason it could not be.
using ReadyCallback = std::function<void(const engine::Status&)>;

// Opens (creating when missing or empty) the store, mounts it and serves
// requests until the filesystem is unmounted or SIGTERM/SIGINT/SIGHUP
// arrives; then unmounts and closes the store, on every path. Returns the
// process exit status (0 on a clean shutdown).
int ServeMount(const MountOptions& options, const ReadyCallback& on_ready);

}  // namespace ckptfs::fs
