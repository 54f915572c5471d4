// The control files under MOUNT/.ckptfs/:
//   stats   read-only JSON: engine counters, request counts, the settings in
//           effect, the last compaction
//   metrics read-only: the numbers of stats in the Prometheus text format
//           (counters and gauges named ckptfs_*, with HELP and TYPE lines)
//   config  read: the settings in effect as name=value lines, one per option
//           of options/option_table.h, then the last compaction's result as
//           last_compaction.* lines; write: name=value lines, each changing
//           a run-time setting (Store::UpdateOptions), or compact=R[ dry_run]
//           that runs a compaction (Store::Compact) and returns when it ends.
//           Each write(2) is whole lines: a last line without a newline is
//           applied at the end of the write that carries it.
// The directory is not listed in the root but can be looked up there. Control
// inodes have the top bit set; the engine never allocates those numbers.
//
// Files are opened without any request reaching us (data.cc), so there are
// no handles: each file has one current snapshot of its content. A lookup of
// the file makes a new one (the kernel looks control files up at every open:
// their entries are never cached, Filesystem::EntryTimeout) with a size and an
// mtime of its own; getattr and read serve the current one. The new mtime
// and size make the kernel drop the pages it cached from the previous
// snapshot (FUSE_CAP_AUTO_INVAL_DATA), so every open reads fresh content, and
// reads through one open see one snapshot unless another open looks the file
// up meanwhile.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <map>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include <chrono>

#include "base/mutex.h"
#include "engine/store.h"
#include "fs/mount_options.h"

namespace ckptfs::fs {

inline constexpr engine::Ino kControlBit = 1ull << 63;
inline constexpr engine::Ino kControlDirIno = kControlBit | 1;
inline constexpr engine::Ino kStatsIno = kControlBit | 2;
inline constexpr engine::Ino kConfigIno = kControlBit | 3;
inline constexpr engine::Ino kMetricsIno = kControlBit | 4;
inline constexpr std::string_view kControlDirName = ".ckptfs";

inline bool IsControl(engine::Ino ino) { return (ino & kControlBit) != 0; }
// Which control inode `ino` is: kControlDirIno, kStatsIno, kConfigIno or
// kMetricsIno.
// Every lookup of a control file hands the kernel a new inode number of the
// same kind (a serial above the low byte), so that the kernel never serves
// an earlier snapshot from its page cache, whatever it trusts about cached
// attributes (with the write-back cache it keeps its own mtime and size).
inline engine::Ino ControlKind(engine::Ino ino) { return IsControl(ino) ? (ino & 0xff) | kControlBit : 0; }
// A control file (not the control directory): content that changes by itself.
inline bool IsControlFile(engine::Ino ino) { return IsControl(ino) && ControlKind(ino) != kControlDirIno; }
// The root entry under which the control directory appears.
inline bool IsControlName(engine::Ino parent, std::string_view name) {
  return parent == engine::kRootIno && name == kControlDirName;
}

// What the control files show of the mount besides its store and its
// options: implemented by the mount's state (Filesystem). Called from any
// thread.
class MountReport {
 public:
  virtual ~MountReport() = default;
  // The user who mounted: the control files' owner; with root the only
  // one who may write the config.
  virtual uid_t owner_uid() const = 0;
  virtual gid_t owner_gid() const = 0;
  // The stats file's "memory" object: the daemon's resident size, its
  // bound (fs/memory.h) by owner, and what the engine's owners hold.
  virtual nlohmann::ordered_json MemoryJson() = 0;
  // Its "fs" object: the mount's requests, files, kernel inodes, open
  // files and the features the kernel granted.
  virtual nlohmann::ordered_json RequestsJson() = 0;
};

class Control {
 public:
  // "*store", "*options" and "*mount" must outlive this Control. The
  // mount's uptime counts from here.
  Control(engine::Store* store, const MountOptions* options, MountReport* mount)
      : store_(store),
        options_(options),
        mount_(mount),
        started_(std::chrono::steady_clock::now()) {}

  // The settings in effect: the mount's, with the engine's current values.
  MountOptions EffectiveOptions() const;

  // `parent` is the root (name ".ckptfs") or the control directory. A
  // control file gets a new snapshot.
  engine::Result<engine::Attr> Lookup(engine::Ino parent, std::string_view name);
  // The current snapshot's attributes (a first snapshot when none is yet).
  engine::Result<engine::Attr> GetAttr(engine::Ino ino);
  // The control directory's entries after `after`, in name order.
  void List(std::string_view after, const std::function<bool(const engine::DirEntry&)>& fn) const;

  // Bytes of the current snapshot at [offset, offset+size).
  engine::Result<std::string> Read(engine::Ino ino, uint64_t offset, size_t size);
  // Applies the lines of `data`, written at `offset` by a caller with uid
  // `uid`, to the config: for the mount's owner and root (EACCES otherwise);
  // stats is read-only. EINVAL on an unknown key, a setting fixed while
  // mounted or a bad value; the lines after it are not applied. Bytes that
  // repeat what the snapshot already holds at their offset are not applied
  // again: the kernel's write-back cache writes whole pages, so a page's
  // earlier lines (or the text read before an append) come back with the
  // new ones. The written bytes then become part of the snapshot.
  engine::Status Write(engine::Ino ino, uint64_t offset, std::string_view data, uid_t uid);
  // Truncation of the config (open with O_TRUNC): the snapshot of `ino` is
  // cut to `size` bytes (never extended), so that what follows is written
  // to an empty file and not merged with the settings it showed.
  engine::Result<engine::Attr> Truncate(engine::Ino ino, uint64_t size);

  // The files' contents. The stats file's fails (EIO naming what) when the
  // store's accounting or namespace cannot be read, so that reading the
  // stats file fails rather than show zeros for what is unknown.
  std::string ConfigText() const;
  engine::Result<std::string> StatsJson() const;
  engine::Result<std::string> MetricsText() const;

 private:
  // The stats file's content before it is printed.
  engine::Result<nlohmann::ordered_json> StatsObject() const;

  struct Snapshot {
    std::string content;
    engine::Timespec mtime;
  };

  engine::Attr MakeAttr(engine::Ino ino) const;
  engine::Attr MakeAttr(engine::Ino ino, const Snapshot& s) const;
  // A snapshot and the inode number it is served under.
  struct Made {
    engine::Ino ino;
    std::shared_ptr<const Snapshot> snapshot;
  };
  // Makes a new snapshot of the control file of kind `kind` under a new
  // inode number.
  engine::Result<Made> Refresh(engine::Ino kind);
  // The snapshot of control inode `ino`; for one no longer kept (or never
  // looked up, such as the numbers readdir shows) the newest of its kind,
  // made when there is none.
  engine::Result<std::shared_ptr<const Snapshot>> SnapshotOf(engine::Ino ino);
  engine::Status Apply(std::string_view line);
  // Serves `s` as the snapshot of `ino` from now on.
  void Keep(engine::Ino ino, std::shared_ptr<const Snapshot> s) EXCLUDES(mu_);
  void KeepLocked(engine::Ino ino, std::shared_ptr<const Snapshot> s) REQUIRES(mu_);

  engine::Store* const store_;
  const MountOptions* const options_;
  MountReport* const mount_;
  const std::chrono::steady_clock::time_point started_;
  // A leaf lock, held only to swap or copy the pointers.
  mutable Mutex mu_;
  // The snapshots of the latest kMaxSnapshots lookups, by inode number
  // (the serial grows, so the first entries are the oldest).
  static constexpr size_t kMaxSnapshots = 256;
  std::map<engine::Ino, std::shared_ptr<const Snapshot>> snapshots_ GUARDED_BY(mu_);
  // The newest snapshot of each kind, by the kind's low byte.
  std::map<engine::Ino, std::shared_ptr<const Snapshot>> newest_ GUARDED_BY(mu_);
  uint64_t serial_ GUARDED_BY(mu_) = 0;
  engine::Timespec last_mtime_ GUARDED_BY(mu_);  // of the newest snapshot
  // The last config line refused and why; the config shows it as a comment,
  // since with the write-back cache a refusal reaches the writer only as
  // EIO from close(2) or fsync(2).
  std::string last_refusal_ GUARDED_BY(mu_);
  // Serializes config writes: lines apply in the order they were written.
  // Lock order: before every engine lock.
  Mutex write_mu_;
};

}  // namespace ckptfs::fs
