// The state of one mount, shared by every request handler (the libfuse
// session's userdata), and the handler table.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "engine/store.h"
#include "fs/attr_invalidator.h"
#include "fs/memory.h"
#include "fs/mount.h"
#include "fs/op_stats.h"
#include "fs/open_files.h"
#include "fs/request.h"
#include "fs/set_id_bits.h"
#include "fs/sharded_map.h"

namespace ckptfs::fs {

// Largest WRITE request (conn->max_write); the kernel's largest READ is as
// large (its max_pages, 256 pages).
inline constexpr unsigned kMaxWrite = 1u << 20;
inline constexpr unsigned kMaxRead = 1u << 20;

class Control;

// Thread safety: the store, the options and the owner never change after
// construction; the maps and counters are internally synchronized. Handlers
// run on any number of session threads at once.
class Filesystem {
 public:
  // "*store" must outlive this Filesystem.
  Filesystem(engine::Store* store, const MountOptions& options);
  ~Filesystem();
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  engine::Store& store() const { return *store_; }
  const MountOptions& options() const { return options_; }
  Control& control() const { return *control_; }
  LookupCounts& lookups() { return lookups_; }
  OpStats& op_stats() { return op_stats_; }
  CapabilityFreeInodes& capability_free() { return capability_free_; }
  OpenFiles& open_files() { return open_files_; }
  // Stale st_blocks after writes from the kernel's write-back cache, stale
  // pages after direct writes (see attr_invalidator.h); started by the
  // session.
  AttrInvalidator& attr_invalidator() { return attr_invalidator_; }
  // Gives memory back once the mount is idle (fs/memory.h); started by the
  // session.
  IdleRelease& idle_release() { return idle_release_; }
  // The user who mounted; with root the only one who may write the config.
  uid_t owner_uid() const { return owner_uid_; }
  gid_t owner_gid() const { return owner_gid_; }
  std::chrono::steady_clock::time_point started() const { return started_; }

  // Attributes of any inode, control inodes included.
  engine::Result<engine::Attr> GetAttr(engine::Ino ino);
  struct stat ToStat(const engine::Attr& a) const;
  // How long the kernel may trust attributes and names. Control files change
  // with every read: their attributes and entries are never cached, so that
  // each open looks them up again (see control.h).
  double AttrTimeout(engine::Ino ino) const;
  double EntryTimeout(engine::Ino ino) const;
  double NegativeTimeout() const;
  fuse_entry_param ToEntry(const engine::Attr& a) const;

  // Answers a request that hands `a` to the kernel (lookup, mkdir, ...):
  // counts the lookup (pinning the inode, see LookupCounts), and takes it
  // back when the kernel does not take the reply.
  void ReplyEntry(Request& r, const engine::Attr& a);
  // Counts one lookup of `a` handed to the kernel (LookupCounts::Add); the
  // first one of a store inode pins it.
  engine::Status CountLookup(const engine::Attr& a);
  // The kernel dropped `n` references to `ino`. A failed unpin is counted as
  // an error: a forget has nobody to answer.
  void Forget(engine::Ino ino, uint64_t n);

  // Records a read of a file's data or a listing of directory `ino`
  // (engine::Store::Accessed) under the access-time options (relatime,
  // strictatime, noatime, nodiratime). Control files keep their times. A
  // failure is counted as an error and does not fail the read, as on Linux.
  void Accessed(engine::Ino ino, bool directory);
  // Makes a change durable before its reply where the mount asks for it:
  // every change with "sync", changes of directories (`directory_change`)
  // with "dirsync". OK without either.
  engine::Status SyncChange(engine::Ino ino, bool directory_change);

  // Whether the kernel left clearing set-user-ID and set-group-ID bits on
  // write, truncate and chown to us (FUSE_CAP_HANDLE_KILLPRIV_V2, set by
  // Init before any other request; fs/set_id_bits.h).
  bool kills_suidgid() const { return kills_suidgid_.load(std::memory_order_relaxed); }
  // Whether OPEN is answered and read-only opens of whole data files are
  // passed through (mount option "passthrough", granted by the kernel; set
  // by Init before any other request). Off: OPEN is declined (no_open).
  bool passthrough() const { return passthrough_.load(std::memory_order_relaxed) == kActive; }
  // Whether opens for writing of empty files are passed through too (mount
  // option "passthrough_writes"): the kernel writes their data files.
  bool passthrough_writes() const { return passthrough() && options_.passthrough_writes; }
  // Whether an open with O_TRUNC truncates in the OPEN request instead of a
  // SETATTR after it (FUSE_CAP_ATOMIC_O_TRUNC, set by Init before any other
  // request): only while every OPEN is answered (passthrough) and the
  // kernel leaves clearing set-ID bits to us (kills_suidgid).
  bool atomic_o_trunc() const { return atomic_o_trunc_.load(std::memory_order_relaxed); }
  // "yes", or "no: " and why, for the stats file.
  std::string PassthroughText() const;
  // The FUSE protocol version the kernel speaks, "7.41"; "" before Init.
  std::string KernelProtocol() const;

  // Gauges for the stats file.
  std::atomic<int64_t> open_dirs{0};

  // Session callbacks.
  static void Init(void* userdata, fuse_conn_info* conn);
  // The session ends: the kernel's references are gone, pins are released.
  static void Destroy(void* userdata);

 private:
  engine::Store* const store_;
  const MountOptions options_;
  const uid_t owner_uid_;
  const gid_t owner_gid_;
  const std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Control> control_;
  OpStats op_stats_;
  CapabilityFreeInodes capability_free_;
  AttrInvalidator attr_invalidator_;
  IdleRelease idle_release_;
  std::atomic<bool> kills_suidgid_{false};
  std::atomic<bool> atomic_o_trunc_{false};
  // What Init made of passthrough (PassthroughText).
  enum PassthroughState { kNotAsked, kVerifyReads, kNoKernel, kNoPrivilege, kActive };
  std::atomic<int> passthrough_{kNotAsked};
  OpenFiles open_files_;
  std::atomic<uint32_t> kernel_protocol_{0};  // major << 16 | minor, from Init
  LookupCounts lookups_;  // destroyed first: releases its pins into the store
};

// The handler table, filled by concern.
void AddEntryOps(fuse_lowlevel_ops* ops);  // entries.cc: names and attributes
void AddDirOps(fuse_lowlevel_ops* ops);    // dirs.cc: listing, statfs
void AddDataOps(fuse_lowlevel_ops* ops);   // data.cc: open files and their bytes
void AddXattrOps(fuse_lowlevel_ops* ops);  // xattrs.cc
fuse_lowlevel_ops MakeLowLevelOps();       // all of them, plus init

}  // namespace ckptfs::fs
