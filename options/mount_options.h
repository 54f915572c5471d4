// The settings of a mount: the options of `ckptfs mount -o ...` and of
// MOUNT/.ckptfs/config, parsed by the one option table
// (options/option_table.h). A room between the engine, whose settings
// (engine/store_options.h) it names and bounds as the engine does, and fs/,
// which serves a mount with them; tools/ read and print them without fs/.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/store.h"

namespace ckptfs::options {

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

  // Engine settings. The option table (options/option_table.cc) names each field
  // that a mount option sets, by its name. Defaults:
  // engine::MountStoreDefaults(). read_only, holder and direct_io are
  // filled in by ServeMount().
  engine::StoreOptions store = engine::MountStoreDefaults();

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
  // direct_io). Each write then waits for the disk: fewer
  // CPU seconds per GiB, but concurrent writers of separate files went
  // slower on the benchmark's disk (docs/LARGE_FILES.md). Default: on.
  bool direct_io = true;
  // Seals the mount makes by itself (fs/auto_seal.h), fnmatch(3) patterns
  // of names; empty: none. "seal_renamed": a directory renamed from a
  // matching name is sealed (orbax: *.orbax-checkpoint-tmp-*).
  // "seal_marker": a file that gets a matching name, by a rename or made
  // and closed where closes are seen, seals its directory (DCP:
  // .metadata). Default: off, since code that writes into a step after
  // its framework committed it would get EROFS.
  std::string seal_renamed;
  std::string seal_marker;
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
  // the kernel's default. Default: kReadaheadByStore, which the mount turns
  // into ReadaheadFor(the store) once the store is open.
  static constexpr uint64_t kReadaheadByStore = UINT64_MAX;
  uint64_t readahead = kReadaheadByStore;
  // The default window: 1 MiB, or 16 MiB where the store's data is in an
  // object store, where a read waits longer for its bytes and the kernel
  // then asks for several of a large file's reads at once.
  static uint64_t ReadaheadFor(bool data_in_object_store) {
    return data_in_object_store ? uint64_t{16} << 20 : uint64_t{1} << 20;
  }
  // libfuse request tracing on stderr (`ckptfs mount -d`). Default: off.
  bool debug = false;
};

// Parses one "key=value" (or "key" for flags) into `options`; the key is an
// option's name or one of its older names (options/option_table.h). Sizes take
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

// The settings of `o` as the stats file's "options" object: every option by
// its name, in table order.
nlohmann::ordered_json OptionsJson(const MountOptions& o);
// The same for a mount with every option at its default, as JSON object
// text: what `ckptfs stat` compares a mount's options with to name those
// that were changed.
std::string DefaultOptionsJson();

// The value of the config's compact=VALUE: "R[ dry_run]", R the dead ratio
// between 0 and 1. EINVAL with a one-line message otherwise.
engine::Result<engine::CompactOptions> ParseCompactRequest(std::string_view value);

}  // namespace ckptfs::options
