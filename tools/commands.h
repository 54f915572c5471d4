// Subcommands of the `ckptfs` tool. Each returns the process exit status and
// prints its own one-line errors ("ckptfs: ...") on stderr.
#pragma once

#include <string>

#include "fs/mount.h"

namespace ckptfs::tools {

// `ckptfs mount`: checks, then serves `options` in this process (foreground)
// or in a daemon child; returns 0 once the mount is ready.
int RunMount(fs::MountOptions options, bool foreground);
// `ckptfs umount`: unmounts and waits for the daemon to close the store.
int RunUmount(const std::string& mountpoint);
// `ckptfs stat`: prints MOUNT/.ckptfs/stats for people, or raw with json.
int RunStat(const std::string& mountpoint, bool json);
// `ckptfs fsck` (tools/fsck_command.cc): exit status as fsck(8).
int RunFsck(const std::string& store, bool repair, bool quick, bool json);
// `ckptfs compact` (tools/compact_command.cc): offline on a store, online
// through MOUNT/.ckptfs/config on a mountpoint.
int RunCompact(const std::string& path, double dead_ratio, bool dry_run);

}  // namespace ckptfs::tools
