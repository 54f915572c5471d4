// The settings of a store: one vocabulary with the mount options. Each field
// of StoreOptions has the name of the mount option that sets it (the option
// table, options/option_table.cc, accepts older names as aliases), its default
// is written once, here, and its bounds are checked once, by
// ValidateStoreOptions, which Store::Open and Store::UpdateOptions call and
// whose bounds the option table shows and checks as it parses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "io/env.h"

namespace ckptfs::engine {

// Bounds of the settings that have them.
inline constexpr uint64_t kSegmentSizeMin = 1ull << 20;      // segment_size
inline constexpr uint32_t kInlineMaxLimit = 64u << 10;       // inline_max
inline constexpr uint32_t kMaxRecordBytesLimit = 64u << 20;  // max_record_bytes
inline constexpr int kCompressionMax = 22;                   // compression (zstd's levels)

struct StoreOptions {
  // ---- The store and who opens it ----
  // Create the store when `dir` is missing or empty. Default: true.
  bool create_if_missing = true;
  // Open without writing anything; all mutations fail with EROFS. Default: false.
  bool read_only = false;
  // Written into the store's lock file so that a second opener can say who
  // holds it (e.g. "ckptfs mount /mnt/ckpt"). Default: the process name.
  std::string holder;
  // Where segment files are read and written (and, where it provides one, the
  // filesystem of the index). Default: nullptr, the local filesystem
  // (io::Env::Posix()). Tests pass an io::FaultInjectionEnv. Fixed while open.
  std::shared_ptr<io::Env> env;
  // Where the index of a store that this open creates lives: empty, RocksDB
  // in STORE/index (an embedded store); a libpq connection URI or string,
  // PostgreSQL (docs/SHARED.md), which the store then remembers in
  // STORE/SHARED (without a password). Opening such a store with this set
  // connects with it instead of the remembered one (another host name for
  // the same server, a password); opening an embedded store with it set is
  // EINVAL. Default: empty. Fixed while open.
  std::string meta;
  // A store whose index is in PostgreSQL: how long a call that cannot reach
  // the server waits for it (a restart, a failover), trying again, before
  // it fails with EIO. Default: 60 s. Fixed while open.
  double meta_timeout = 60;
  // Where the segments, data files and snapshots of a store that this open
  // creates live: empty, the store's directory; "rados://POOL[/NAMESPACE]",
  // objects of that RADOS pool; "s3://BUCKET[/PREFIX]", parts in that S3
  // bucket, with s3_endpoint (docs/FORMAT.md, STORAGE), which the store
  // then remembers in STORE/STORAGE. Opening an existing store with it set
  // to another place is EINVAL. Ceph's configuration (monitors, keyring)
  // comes from where Ceph's tools find it: CEPH_CONF, /etc/ceph/ceph.conf;
  // S3's keys from AWS's usual places (AWS_ACCESS_KEY_ID and
  // AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials). Default: empty. Fixed
  // while open.
  std::string data;
  // A store created with data=s3://...: the URL of the S3 service,
  // "http[s]://HOST[:PORT]", which the store remembers with `data`.
  // Default: empty. Fixed while open.
  std::string s3_endpoint;
  // A store whose data is in an object store: how long a request that the
  // cluster does not answer (an OSD down, a monitor or S3 service
  // unreachable) waits before the call fails with EIO. Default: 30 s.
  // Fixed while open.
  double data_timeout = 30;
  // A shared store: the name of the host this mount writes as (docs/SHARED.md,
  // "Hosts and their files"). One mount at a time holds a host; each has its
  // own segments. Default: empty, the machine's name. Fixed while open.
  std::string host;
  // A shared store: where this mount serves the other hosts ranges of the
  // store's files (docs/SHARED.md, "Peers"): "HOST" or "HOST:PORT" to
  // listen on (port 0 or none: one the kernel picks), "off" to serve none.
  // Default: empty, the address by which this machine reaches the index's
  // server (127.0.0.1 when that is a unix socket). Fixed while open.
  std::string peers;
  // A shared store: memory for the blocks of the files this mount serves
  // its peers, kept until other blocks need the room (peers=off: none).
  // Default: 128 MiB. Fixed while open.
  uint64_t peer_cache = 128ull << 20;
  // A shared store: a directory on a local disk where those blocks are kept
  // instead of memory, `peer_cache` bytes of it, in a file that goes with
  // the mount. Default: empty, in memory. Fixed while open.
  std::string peer_cache_dir;
  // A shared store: seconds a peer may take to connect or to send what it
  // was asked for before this mount reads the storage itself. Default: 2.
  // Fixed while open.
  double peer_timeout = 2;

  // ---- Layout: where new bytes go. Fixed while open ----
  // A segment is sealed and a new one started once it reaches this size.
  // At least kSegmentSizeMin. Default: 1 GiB.
  uint64_t segment_size = 1ull << 30;
  // Files whose data fits in this many bytes are kept inline in the index.
  // At most kInlineMaxLimit. Default: 4096.
  uint32_t inline_max = 4096;
  // Largest payload of one record. Bounds the read amplification of a random
  // small read. 1 to kMaxRecordBytesLimit. Default: 1 MiB.
  uint32_t max_record_bytes = 1u << 20;
  // A file that grows past this many bytes by writes at its end moves to a
  // data file of its own (docs/FORMAT.md), in which byte N is its byte N, so
  // that the kernel can read it directly; its first bytes are copied there
  // from segments once. 0 keeps every file in segments. Default: 64 MiB.
  uint64_t data_file_min = 64ull << 20;

  // ---- Reads and caching ----
  // Two reads in one segment merge when the bytes between them are at most
  // this many. 0 turns coalescing off. Default: 256 KiB. Changes at run time.
  uint64_t coalesce_gap = 256u << 10;
  // A merged read never exceeds this many bytes; a small read is extended up to
  // this size to pull neighbouring records into the cache (by at most this
  // many bytes per read request in all). 0 turns coalescing off. Default:
  // 1 MiB. Changes at run time.
  uint64_t coalesce_max = 1u << 20;
  // Bytes of verified, decoded records kept in memory. Default: 128 MiB.
  // Changes at run time.
  uint64_t cache_size = 128ull << 20;
  // Writes of data files go past the OS's page cache where the filesystem
  // allows (direct I/O: io::File::WriteUncachedAt), and the large records
  // of segments (256 KiB and more, those of files of a few MiB and up)
  // leave the page cache once synced. (Reads of data files go through it
  // either way, read ahead by DataFiles, and drop the pages they read.) For a
  // store whose files are cached by someone else (a mount's kernel caches
  // the pages of the files it reads and writes through the daemon, unless
  // it passes reads through to the data files): no second cached copy.
  // Default: false. Fixed while open.
  bool direct_io = false;

  // ---- Writes and space ----
  // zstd level for new records, 0 = no compression, at most kCompressionMax.
  // A record is kept compressed only where that saves space. Default: 0.
  // Changes at run time.
  int compression = 0;
  // Writes fail with ENOSPC while the filesystem under the store has less free
  // space than this, so that the index always has room. Default: 64 MiB.
  // Fixed while open.
  uint64_t min_free = 64ull << 20;

  // ---- Background work. Fixed while open ----
  // Background compaction: a thread checks every few seconds and compacts
  // (CompactOptions defaults) once the dead bytes of all segments together
  // reach this many, or sooner, see below. 0 turns it off. Default: 0 (a
  // mount's default: kMountCompactDead).
  uint64_t compact_dead = 0;
  // With background compaction on, it also starts once the dead bytes exceed
  // both the live bytes and this many: a store then takes at most about
  // twice its live data (plus this floor), however small the live data is
  // next to compact_dead. A pass started this way copies no more than the
  // live bytes, which are fewer than the dead ones. Default: 64 MiB.
  uint64_t compact_min = 64ull << 20;
  // Bandwidth limit of background compaction, in bytes copied per second;
  // 0 = unlimited (a mount always sets a limit). Default: 64 MiB/s.
  uint64_t compact_rate = 64ull << 20;
  // Delete sealed segment files that hold nothing live any more (their files
  // were all deleted or overwritten) from the same background thread, within
  // a few seconds; no data is copied. Default: false (a mount's default: true).
  bool free_empty = false;
  // How often the background thread of the settings above looks at the
  // segments. Default: 1000 ms.
  uint32_t background_interval_ms = 1000;

  bool operator==(const StoreOptions&) const = default;
};

// Dead bytes at which a mount starts background compaction by default
// ("compact_dead"); it starts sooner once the dead bytes exceed the live
// bytes and compact_min. Bounds the dead space a mount keeps to about the
// smaller of this and the live bytes, plus what sits in segments below the
// dead ratio; the copying is limited by compact_rate, so that it takes at
// most that much disk bandwidth from a save.
inline constexpr uint64_t kMountCompactDead = 1ull << 30;

// The settings a mount starts from: StoreOptions' defaults, except that a
// mount frees segment files whose data was all deleted (free_empty) and
// compacts in the background once kMountCompactDead bytes are dead.
inline StoreOptions MountStoreDefaults() {
  StoreOptions o;
  o.free_empty = true;
  o.compact_dead = kMountCompactDead;
  return o;
}

// EINVAL with a one-line message naming the setting when a value of
// `options` is out of its bounds; OK otherwise.
Status ValidateStoreOptions(const StoreOptions& options);

struct CompactOptions {
  // Rewrite segments whose dead fraction dead / (live + dead) is at least
  // this, and segments with nothing live. The active segment too, once it
  // has dead bytes: it is sealed and a new one started first. Default: 0.3.
  double dead_ratio = 0.3;
  // Only report what would be done. Default: false.
  bool dry_run = false;
  // Bytes copied per second, 0 = unlimited. Default: 0.
  uint64_t bytes_per_sec = 0;
  // Called with live bytes copied so far and the total to copy.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

}  // namespace ckptfs::engine
