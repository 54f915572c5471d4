// Clearing set-user-ID and set-group-ID bits and file capabilities where
// Linux clears them (write, truncate, chown, fallocate), which the kernel
// leaves to us once the mount has negotiated FUSE_CAP_HANDLE_KILLPRIV_V2
// (KillPriv::enabled()).
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "engine/store.h"
#include "fs/request.h"
#include "fs/sharded_map.h"

namespace ckptfs::fs {

// The xattr that holds a file's capabilities. Linux removes it on every
// write, truncate and chown, whoever makes them.
inline constexpr std::string_view kCapabilityXattr = "security.capability";

// The inodes known to have no kCapabilityXattr, so that a write need not
// ask the store (what the kernel's S_NOSEC inode flag does). Thread-safe.
class CapabilityFreeInodes {
 public:
  bool Contains(engine::Ino ino) const { return free_.Get(ino).has_value(); }
  // Take before asking the store whether `ino` has the xattr, and pass to
  // MarkFree when it had none.
  uint64_t Epoch() const { return sets_.load(); }
  // `ino` had no capability when a check that began at `epoch` looked; not
  // recorded when one was set since.
  void MarkFree(engine::Ino ino, uint64_t epoch) {
    free_.Update(ino, [&](bool& v, bool) {
      v = true;
      return sets_.load() == epoch;
    });
  }
  // After kCapabilityXattr of `ino` was set.
  void CapabilitySet(engine::Ino ino) {
    sets_.fetch_add(1);
    free_.Erase(ino);
  }
  // The kernel forgot `ino`.
  void Forget(engine::Ino ino) { free_.Erase(ino); }

 private:
  ShardedMap<bool> free_;
  std::atomic<uint64_t> sets_{0};  // capabilities set since the mount
};

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

// What one mount clears, and when. Thread-safe.
class KillPriv {
 public:
  // "*store" must outlive this KillPriv.
  explicit KillPriv(engine::Store* store) : store_(store) {}
  KillPriv(const KillPriv&) = delete;
  KillPriv& operator=(const KillPriv&) = delete;

  // Whether the kernel left clearing the bits and capabilities to us
  // (FUSE_CAP_HANDLE_KILLPRIV_V2). Set by Init before any other request;
  // off, every method below does nothing.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // Before a write, or the truncation of an open or create with O_TRUNC:
  // removes the file's capabilities, and when the request carries the
  // kernel's flag clears its set-ID bits (see KillSuidSgid). Returns
  // whether the mode changed.
  engine::Result<bool> ForWrite(Request& r, engine::Ino ino);
  // What Linux's file_modified() does before fallocate(2) changes a file
  // (the kernel leaves it to us and flags nothing): removes its
  // capabilities, and when the caller has no CAP_FSETID, clears its set-ID
  // bits as KillSuidSgid. Returns whether the mode changed: the kernel then
  // still holds the old one, and nothing in the FALLOCATE reply tells it
  // otherwise.
  engine::Result<bool> ForFallocate(Request& r, engine::Ino ino);
  // Removes kCapabilityXattr of `ino`. One store lookup the first time
  // after the kernel learns of the file, none after while it has none.
  engine::Status KillCapability(engine::Ino ino);
  // What Linux does to `ino` when a caller without CAP_FSETID writes or
  // truncates it, or anyone changes its owner: clears set-user-ID, and
  // set-group-ID when group execute is set or the caller is neither in
  // the file's group nor holds CAP_FSETID (the kernel's
  // setattr_should_drop_sgid). Costs one GetAttr when the file has neither
  // bit. With `unless_fsetid`, a caller that holds CAP_FSETID keeps both
  // (asked only of set-ID files). Returns whether the mode changed.
  engine::Result<bool> KillSuidSgid(Request& r, engine::Ino ino, bool unless_fsetid = false);

  // After kCapabilityXattr of `ino` was set.
  void CapabilitySet(engine::Ino ino) { capability_free_.CapabilitySet(ino); }
  // The kernel forgot `ino`.
  void Forget(engine::Ino ino) { capability_free_.Forget(ino); }

 private:
  engine::Store* const store_;
  std::atomic<bool> enabled_{false};
  CapabilityFreeInodes capability_free_;
};

// Whether the caller of `r` holds CAP_FSETID in the daemon's user namespace
// (the kernel's capable(CAP_FSETID)), read from /proc/PID/status. False
// when that cannot be read (the caller is gone).
bool CallerHasFsetid(Request& r);

}  // namespace ckptfs::fs
