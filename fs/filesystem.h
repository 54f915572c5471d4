// The state of one mount, shared by every request handler (through the
// libfuse session's userdata). The handlers (fs/ops.h) serve it; it owns
// the parts below it: control files, open files, set-ID bits, counters.
#pragma once

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "engine/store.h"
#include "fs/attr_invalidator.h"
#include "fs/auto_seal.h"
#include "fs/control.h"
#include "fs/memory.h"
#include "fs/mount_options.h"
#include "fs/op_stats.h"
#include "fs/open_files.h"
#include "fs/request.h"
#include "fs/set_id_bits.h"
#include "fs/sharded_map.h"

namespace ckptfs::fs {

// Thread safety: the store, the options and the owner never change after
// construction; the maps and counters are internally synchronized. Handlers
// run on any number of session threads at once.
class Filesystem final : public MountReport {
 public:
  // "*store" must outlive this Filesystem.
  Filesystem(engine::Store* store, const MountOptions& options);
  ~Filesystem() override;
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // The session's userdata (SessionData), for fuse_session_new.
  void* userdata() { return &session_data_; }
  engine::Store& store() const { return *store_; }
  const MountOptions& options() const { return options_; }
  Control& control() const { return *control_; }
  LookupCounts& lookups() { return lookups_; }
  OpStats& op_stats() { return op_stats_; }
  // Set-ID bits and capabilities cleared where Linux clears them.
  KillPriv& killpriv() { return killpriv_; }
  OpenFiles& open_files() { return open_files_; }
  // Stale st_blocks after writes from the kernel's write-back cache, stale
  // pages after direct writes (see attr_invalidator.h); started by the
  // session.
  AttrInvalidator& attr_invalidator() { return attr_invalidator_; }
  // The seals the mount makes by itself (seal_renamed, seal_marker).
  AutoSeal& auto_seal() { return auto_seal_; }
  // Gives memory back once the mount is idle (fs/memory.h); started by the
  // session.
  IdleRelease& idle_release() { return idle_release_; }
  // MountReport: what the control files show of the mount.
  uid_t owner_uid() const override { return owner_uid_; }
  gid_t owner_gid() const override { return owner_gid_; }
  nlohmann::ordered_json MemoryJson() override;
  nlohmann::ordered_json RequestsJson() override;

  // Attributes of any inode, control inodes included.
  engine::Result<engine::Attr> GetAttr(engine::Ino ino);
  struct stat ToStat(const engine::Attr& a) const;
  // How long the kernel may trust attributes and names. Control files change
  // with every read: their attributes and entries are never cached, so that
  // each open looks them up again (see control.h).
  double AttrTimeout(engine::Ino ino) const;
  // Of the name of `ino` in directory `parent` (0: not one to keep).
  double EntryTimeout(engine::Ino parent, engine::Ino ino) const;
  double NegativeTimeout() const;
  fuse_entry_param ToEntry(const engine::Attr& a, engine::Ino parent) const;
  // The open file a shared store hands out at OPEN and CREATE
  // (close-to-open, fs/data.cc): no handle, and the kernel's pages kept
  // only for a sealed file. FLUSH only from a close of an open for writing
  // where the store sends its writes at close (Store::SendsAtClose).
  void OpenShared(fuse_file_info* fi, bool sealed) {
    fi->fh = 0;
    fi->keep_cache = sealed ? 1 : 0;
    fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY || !store().SendsAtClose();
  }

  // Answers a request that hands `a`, named in `parent` (0: "." or ".."),
  // to the kernel (lookup, mkdir, ...): counts the lookup (pinning the
  // inode, see LookupCounts), and takes it back when the kernel does not
  // take the reply.
  void ReplyEntry(Request& r, const engine::Attr& a, engine::Ino parent);
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
  // write, truncate and chown to us (KillPriv::enabled).
  bool kills_suidgid() const { return killpriv_.enabled(); }
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

  // Session callbacks; `userdata` is userdata().
  static void Init(void* userdata, fuse_conn_info* conn);
  // The session ends: the kernel's references are gone, pins are released.
  static void Destroy(void* userdata);

 private:
  static Filesystem* Of(void* userdata) { return static_cast<SessionData*>(userdata)->fs; }
  // Init's steps: what the kernel is asked for besides passthrough, and
  // what is made of passthrough (a PassthroughState).
  static void WantFeatures(fuse_conn_info* conn, const MountOptions& o);
  static int ChoosePassthrough(fuse_conn_info* conn, const MountOptions& o);

  engine::Store* const store_;
  const MountOptions options_;
  const uid_t owner_uid_;
  const gid_t owner_gid_;
  std::unique_ptr<Control> control_;
  OpStats op_stats_;
  SessionData session_data_{this, &op_stats_};
  KillPriv killpriv_;
  AttrInvalidator attr_invalidator_;
  AutoSeal auto_seal_;
  IdleRelease idle_release_;
  std::atomic<bool> atomic_o_trunc_{false};
  // What Init made of passthrough (PassthroughText).
  enum PassthroughState { kNotAsked, kVerifyReads, kNoKernel, kNoPrivilege, kActive };
  std::atomic<int> passthrough_{kNotAsked};
  OpenFiles open_files_;
  std::atomic<uint32_t> kernel_protocol_{0};  // major << 16 | minor, from Init
  LookupCounts lookups_;  // destroyed first: releases its pins into the store
};

}  // namespace ckptfs::fs
