// Clearing set-user-ID and set-group-ID bits where Linux clears them (write,
// truncate, chown), which the kernel leaves to us once the mount has
// negotiated FUSE_CAP_HANDLE_KILLPRIV_V2 (Filesystem::kills_suidgid()).
#pragma once

#include <fuse_lowlevel.h>

#include "engine/store.h"
#include "fs/request.h"

namespace ckptfs::fs {

// The kernel flags the writes, opens and creates of callers without
// CAP_FSETID (FUSE_WRITE_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID), but libfuse
// does not pass these flags on. This makes the session read requests from
// /dev/fuse through a hook that notes the flag for the request that the
// reading thread serves next: libfuse's loop reads and serves each request
// on one thread (clone_fd off). Returns 0, or -errno.
// REQUIRES: `se` is mounted and its loop has not started.
int InstallKillFlagHook(fuse_session* se);

// Whether the write, open or create being served on this thread carries the
// kernel's flag. False for every other request.
bool RequestKillsSuidSgid();

// When the mount kills set-ID bits and the request being served carries the
// flag (a write, or an open or create with O_TRUNC): see KillSuidSgid.
engine::Status KillSuidSgidIfFlagged(Request& r, engine::Ino ino);

// What Linux does to `ino` when a caller without CAP_FSETID writes or
// truncates it: clears set-user-ID, and set-group-ID when group execute is
// set or the caller is not in the file's group. Costs one GetAttr when the
// file has neither bit.
engine::Status KillSuidSgid(Request& r, engine::Ino ino);

}  // namespace ckptfs::fs
