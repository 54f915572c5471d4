// Mounting a store: the options of `ckptfs mount -o ...`, the checks made
// before anything is created, and the FUSE session that serves the mount.
// This is the only fs/ header that tools/ include; it names no FUSE types.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/store.h"

namespace ckptfs::fs {

// Dead bytes at which a mount starts background compaction by default
// ("compact_dead"); it starts sooner once the dead bytes exceed the live
// bytes and compact_min. Bounds the dead space a mount keeps to about the
// smaller of this and the live bytes, plus what sits in segments below the
// dead ratio; the copying is limited by compact_rate, so that it takes at
// most that much disk bandwidth from a save.
inline constexpr uint64_t kMountCompactDeadBytes = 1ull << 30;

// StoreOptions' defaults, except that a mount frees segment files whose data
// was all deleted (free_empty_segments; mount option "free_empty") and
// compacts in the background once kMountCompactDeadBytes are dead.
inline engine::StoreOptions MountStoreDefaults() {
  engine::StoreOptions o;
  o.free_empty_segments = true;
  o.background_compact_dead_bytes = kMountCompactDeadBytes;
  return o;
}

// When reads move access times (mount options "relatime", "strictatime",
// "noatime").
enum class AtimeMode {
  kRelative,  // once after each change, or when a day old (Linux's relatime)
  kStrict,    // on every read that reaches ckptfs
  kNever,
};

struct MountOptions {
  // Absolute paths (ResolvePaths() makes them so).
  std::string store_dir;
  std::string mountpoint;

  // Engine settings. The option table (fs/option_table.cc) names each field
  // that a mount option sets. Defaults: StoreOptions' defaults, except
  // free_empty_segments and background_compact_dead_bytes (see
  // MountStoreDefaults). read_only and holder are
  // filled in by ServeMount().
  engine::StoreOptions store = MountStoreDefaults();

  // Most worker threads of the FUSE session loop ("threads"). Default: 16.
  unsigned threads = 16;
  // Seconds the kernel caches attributes ("attr_timeout"), names found
  // ("entry_timeout") and names not found ("negative_timeout"). Long, because
  // every change to the store comes through this mount and the kernel updates
  // or drops what it cached as it passes the change on; control files are
  // never cached. Default: 3600 each.
  double attr_timeout = 3600;
  double entry_timeout = 3600;
  double negative_timeout = 3600;
  // Let users other than the mounter in ("allow_other"). Default: off.
  bool allow_other = false;
  // Open the store read-only and mount read-only ("ro"). Default: off.
  bool read_only = false;
  // Reads of files and listings of directories move their access times
  // under this rule (engine::AtimeRule); ckptfs keeps access times itself,
  // the kernel leaves them to a FUSE filesystem. Default: kRelative.
  AtimeMode atime = AtimeMode::kRelative;
  // Listings leave directories' access times alone ("nodiratime"). Default: off.
  bool nodiratime = false;
  // Kernel mount flags. Set-user-ID and set-group-ID bits take effect
  // ("suid") and device nodes open ("dev") only when root mounts (FUSE mounts
  // are nosuid,nodev otherwise); "exec" (off: "noexec") lets programs run.
  // Defaults: suid off, dev off, exec on.
  bool suid = false;
  bool dev = false;
  bool exec = true;
  // "sync": every change is durable (engine::Store::Fsync) before its reply,
  // and the kernel follows every write(2) with an fsync. "dirsync": the same
  // for changes of directories only (entries created, removed, renamed).
  // Both are also kernel flags of the mount. Default: off.
  bool sync = false;
  bool dirsync = false;
  // The kernel's write-back cache ("writeback_cache"; "no_writeback_cache"
  // turns it off). Writes gather in the kernel's pages and reach the store
  // at close, fsync or writeback: a file closed or fsynced is in the store,
  // a write(2) alone is not (see ARCHITECTURE.md). On by default: small
  // writes then cost no request each; each file created costs one more
  // request (the SETATTR of its times that the kernel sends at close).
  bool writeback_cache = true;
  // Kernel passthrough ("passthrough"): OPEN is answered, and read-only
  // opens of files whose data file holds them whole read straight from it
  // (fs/open_files.h), reads and page faults at the disk's speed with no
  // request each. The kernel allows it only without the write-back cache,
  // so it turns the cache off; each open then costs an OPEN and a RELEASE.
  // Needs CAP_SYS_ADMIN and Linux 6.9+; elsewhere every read is the
  // daemon's, and the stats file says why. Default: off.
  bool passthrough = false;
  // Kernel passthrough for writers too ("passthrough_writes", implies
  // "passthrough"): an open for writing of an empty file gets a data file
  // that the kernel writes directly (engine::Store::BeginDirectWrite), at
  // the disk's speed with no request per write; the daemon checksums it at
  // each close and fsync. A file that ends smaller than data_file_min moves
  // into segments at its last close, at the cost of creating and deleting
  // a data file and a durable commit: for stores of few large files.
  // Default: off.
  bool passthrough_writes = false;
  // Without passthrough, the daemon writes large files' data files, and
  // reads them in large reads, with direct I/O ("direct_io";
  // "no_direct_io" turns it off): the kernel caches those files' pages
  // itself, so the daemon neither copies the bytes into the data files'
  // page cache nor keeps a second cached copy (engine::StoreOptions::
  // bypass_data_file_cache). Each write then waits for the disk: fewer
  // CPU seconds per GiB, but concurrent writers of separate files went
  // slower on the benchmark's disk (docs/LARGE_FILES.md). Default: on.
  bool direct_io = true;
  // Every read checks the checksums of what it returns ("verify_reads"),
  // which only the daemon can: turns passthrough off. Default: off.
  bool verify_reads = false;
  // Whether passthrough is asked for (and not ruled out by verify_reads).
  bool AsksPassthrough() const { return (passthrough || passthrough_writes) && !verify_reads; }
  // Whether the kernel's write-back cache is asked for: "sync" syncs every
  // write(2) anyway, so it turns the cache off, as passthrough does.
  bool UsesWritebackCache() const { return writeback_cache && !sync && !AsksPassthrough(); }
  // The kernel's readahead window for this mount ("readahead"), written to
  // /sys/class/bdi/<dev>/read_ahead_kb after mounting when permitted (root);
  // reads then arrive as requests of up to 1 MiB instead of 128 KiB. 0 keeps
  // the kernel's default. Default: 1M.
  uint64_t readahead = 1u << 20;
  // libfuse request tracing on stderr (`ckptfs mount -d`). Default: off.
  bool debug = false;
};

// Parses one "key=value" (or "key" for flags) into `options`; the key is an
// option's name or one of its older names (fs/option_table.h). Sizes take
// K/M/G/T suffixes (powers of 1024). EINVAL with a one-line message naming
// the option when the key is unknown or the value malformed.
engine::Status ParseMountOption(std::string_view option, MountOptions* options);
// The engine's rule for `mode`; nullopt for kNever.
std::optional<engine::AtimeRule> AtimeRuleOf(AtimeMode mode);
// Options only root may use ("suid", "dev"): EPERM with a one-line message
// saying why when `euid` is not 0.
engine::Status CheckPrivileges(const MountOptions& options, uid_t euid);
// Parses a comma-separated list of options, as given to -o.
engine::Status ParseMountOptions(std::string_view list, MountOptions* options);
// The mount options with their defaults and help, for `ckptfs mount --help`.
std::string MountOptionsHelp();
// Whether `name` names a mount option whose value is a size in bytes.
bool IsSizeOption(std::string_view name);
// A size as a mount option takes it, in the largest unit that divides it
// exactly: "4M", "1G", "4097".
std::string HumanSize(uint64_t v);

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

// What the store holds and what it takes on disk, as the JSON object text
// {"namespace": {files, directories, symlinks, other, logical_bytes},
//  "storage": {segments, segment_file_bytes, live_bytes, dead_bytes,
//              reclaimable_bytes, compression_ratio, index_bytes,
//              data_files, data_file_bytes},
//  "last_compaction": {...}}  (only after a compaction in this process)
// where compression_ratio = (live_bytes + dead_bytes) / segment_file_bytes:
// the logical bytes the segment files hold over the bytes they take (record
// headers count as taken, so an uncompressed store shows a little under 1;
// 1 when the segments hold nothing), and reclaimable_bytes are the dead
// bytes of the segments that a compaction at CompactOptions' default dead
// ratio would rewrite (engine::CompactionTakes). The stats file of a mount
// embeds these objects; `ckptfs stat STORE` prints them for a store that is
// not mounted.
// Scans the index's inodes (Store::CountNamespace). Fails with the error of
// CountNamespace or ListSegments, never showing zeros for what is unknown.
engine::Result<std::string> StoreSummaryJson(engine::Store& store);
// The stats file's "options" object for a mount with every option at its
// default, as JSON object text: what `ckptfs stat` compares a mount's
// options with to name those that were changed.
std::string DefaultOptionsJson();

}  // namespace ckptfs::fs
