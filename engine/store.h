// The ckptfs engine: a whole filesystem tree kept in a few append-only,
// checksummed segment files plus an index (RocksDB, or PostgreSQL if shared).
// fs/ and tools/ include only this header, its store_options.h and fsck/fsck.h.
//
// Thread safety: every method of Store may be called from any number of
// threads at once. Writers of different inodes proceed in parallel; writers of
// one inode are serialized by that inode's lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/index/store_lock.h"
#include "engine/store_options.h"
#include "format/extents_attr.h"
#include "format/format.h"
#include "io/env.h"

namespace ckptfs::engine {

using Ino = uint64_t;
inline constexpr Ino kRootIno = 1;
// Longest name of one directory entry, as on ext4.
inline constexpr size_t kMaxNameLen = 255;
// Longest symlink target.
inline constexpr size_t kMaxSymlinkLen = 4095;

struct Timespec {
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool operator==(const Timespec&) const = default;
};

struct Attr {
  Ino ino = 0;
  uint32_t mode = 0;  // S_IFMT type bits and permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;  // bytes; for a symlink the target length
  // Regular files: the bytes of data the file stores, holes excluded (what
  // st_blocks reports, in 512-byte units). Other types, and files of stores
  // written before the counter existed that have not changed since: `size`.
  uint64_t data_bytes = 0;
  uint32_t rdev = 0;
  Timespec atime, mtime, ctime;
  uint64_t generation = 1;  // inode numbers are never reused, so always 1
  Ino parent = 0;           // directories only: the containing directory
  // Part of a sealed tree (Store::Seal): nothing of it changes any more but
  // its removal.
  bool sealed = false;
};

// Which attributes SetAttr changes. Times set to "now" use the store's clock.
struct SetAttrRequest {
  std::optional<uint32_t> mode;  // permission bits only; the type is kept
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;  // truncate down or extend with a hole
  std::optional<Timespec> atime;
  std::optional<Timespec> mtime;
  // The change time to record instead of now: the kernel's write-back cache
  // owns a file's mtime and ctime while it holds its pages and hands both
  // back with a SETATTR when it writes them.
  std::optional<Timespec> ctime;
  bool atime_now = false;
  bool mtime_now = false;
  // Clears S_ISUID, and S_ISGID when S_IXGRP is set (after `mode` applies),
  // as Linux does when a file is written, truncated or given a new owner;
  // directories keep theirs. When nothing else is asked and no bit needs
  // clearing, nothing is written and ctime stays. Default: false.
  bool kill_suidgid = false;
  // Clears S_ISGID also without S_IXGRP, as Linux does for a writer outside
  // the file's group; directories keep it. Written like kill_suidgid.
  // Default: false.
  bool kill_sgid = false;
};

// When Store::Accessed moves an inode's access time to now.
enum class AtimeRule {
  // Only when the access time is not after the modification or change time,
  // or is at least a day old, as Linux's relatime: one update per change.
  kRelative,
  // On every access, as Linux's strictatime.
  kAlways,
};

struct DirEntry {
  std::string name;
  Ino ino = 0;
  uint32_t type = 0;  // S_IFMT bits of the child
};

enum class RenameMode { kReplace, kNoReplace, kExchange };

struct FsStats {
  uint64_t block_size = 4096;
  uint64_t total_bytes = 0;  // of the filesystem that holds the store
  uint64_t free_bytes = 0;
  // Free bytes less those fallocate reserved; available bytes less those
  // and min_free (what writes may take).
  uint64_t avail_bytes = 0;
  uint64_t inodes = 0;  // live inodes in the store
};

// Counters since the store was opened. Monotonic; read without locks.
struct EngineStats {
  uint64_t reads = 0, read_bytes = 0;
  uint64_t writes = 0, write_bytes = 0;
  uint64_t backing_reads = 0, backing_read_bytes = 0;  // preads of segment files
  uint64_t coalesced_reads = 0;  // backing reads that served more than one record
  uint64_t cache_hits = 0, cache_misses = 0;
  uint64_t inline_writes = 0;     // writes kept in the index
  uint64_t records_written = 0;   // segment records appended
  uint64_t stored_bytes = 0;      // payload bytes appended (after compression)
  uint64_t fsyncs = 0, device_syncs = 0;  // device_syncs <= fsyncs: group commit
  uint64_t checksum_errors = 0;   // reads that found damaged bytes
  // Reads of a shared store that opened another host's files again to
  // find bytes their first read did not (io::File::Refresh).
  uint64_t file_refreshes = 0;
  // On a shared store (docs/SHARED.md, "Owned inodes"): inodes this mount
  // gave up to another host, asked another host to give up, and took from
  // an owner that was gone or did not answer; reads of the requests for
  // its inodes that a notification began.
  uint64_t owned_given_up = 0, owned_asked = 0, owned_taken_over = 0, owned_requests_heard = 0;
  // On a shared store ("Read grants"): directories this mount was given a
  // read grant of, gave up to another host that changed them, and asked
  // other hosts to give up.
  uint64_t read_grants = 0, read_grants_given_up = 0, read_grants_asked = 0;
  uint64_t segments = 0;
  uint64_t live_bytes = 0, dead_bytes = 0;  // logical bytes, over all segments
  uint64_t data_file_writes = 0, data_file_write_bytes = 0;  // writes into data files
  uint64_t data_file_reads = 0, data_file_read_bytes = 0;    // preads of data files
  // Direct writes (BeginDirectWrite): files begun, adoptions, bytes hashed,
  // and the data files read again because a write landed while they were
  // read.
  uint64_t direct_writes = 0, direct_adoptions = 0, direct_adopted_bytes = 0;
  uint64_t direct_rereads = 0;
  // A shared store's round trips to PostgreSQL, and the time calls spent
  // waiting for them (0 for an embedded store).
  uint64_t index_round_trips = 0, index_wait_ns = 0;
  // A shared store's sealed trees whose snapshots this mount holds, their
  // inodes, and the index reads those snapshots answered instead of the
  // index (docs/SHARED.md, "Sealed trees").
  uint64_t sealed_trees_held = 0, sealed_inodes_held = 0, snapshot_reads = 0;
  // A shared store's server for the other hosts (docs/SHARED.md, "Peers"):
  // connections admitted and refused (a wrong proof, too many), ranges
  // asked for and of those refused (a name it does not serve), bytes sent.
  uint64_t peer_connections = 0, peer_refused = 0, peer_requests = 0, peer_bad_requests = 0;
  uint64_t peer_bytes_served = 0;
  // What the blocks it serves hold in peer_cache_dir's file now.
  uint64_t peer_cache_file_bytes = 0;
  // Ranges of sealed files this mount read from peers and their bytes;
  // reads from peers that failed (refused, timed out, short) and ranges
  // that failed their checksum, both then read from the storage.
  uint64_t peer_reads = 0, peer_read_bytes = 0, peer_failures = 0, peer_rejected = 0;
  // A store whose data is in an object store (docs/OBJECT_STORAGE.md): the
  // requests sent to it by kind (other: stats, creates, removes, truncates,
  // listings) and their bytes (0 for a store whose data is local).
  uint64_t object_reads = 0, object_writes = 0, object_other = 0;
  uint64_t object_read_bytes = 0, object_write_bytes = 0;
};

// Where one piece of a file's data lies: the index's extent value and the
// file offset where it starts. The extents xattr (fs/extents_xattr.h,
// encoded by format/extents_attr.h) serves these to readers of segment
// files, such as the GPU loader.
using ExtentInfo = format::FileExtent;

// A file whose every byte is in its data file at the same offset (see
// Store::WholeDataFile).
struct WholeDataFile {
  std::string path;   // STORE/data/NNNNNNNN.dat
  uint64_t size = 0;  // the file's size, which is also the data file's
};

struct SegmentInfo {
  uint64_t id = 0;
  std::string path;
  uint64_t file_bytes = 0;
  int64_t live_bytes = 0;
  int64_t dead_bytes = 0;
  bool sealed = false;
};

// What Store::CountNamespace finds. Inodes unlinked while open (link count
// 0, purged at their last Release) are not counted; a file with several hard
// links counts once.
struct NamespaceCounts {
  uint64_t files = 0;          // regular files
  uint64_t directories = 0;    // the root included
  uint64_t symlinks = 0;
  uint64_t other = 0;          // fifos, sockets, device nodes
  uint64_t logical_bytes = 0;  // sum of the regular files' sizes (holes included)
  uint64_t index_bytes = 0;    // bytes of the files under STORE/index on disk (a
                               // shared store: of its PostgreSQL tables)
  uint64_t data_files = 0;     // regular files with a data file (STORE/data/)
  uint64_t data_file_bytes = 0;  // the bytes those data files hold (their ends)
};

// The engine's memory by owner, in bytes: what it holds now
// (Store::MemoryUse) or the most it can hold (EngineMemoryBound).
struct EngineMemory {
  uint64_t record_cache = 0;       // verified, decoded records (cache_size)
  uint64_t index_memtables = 0;    // RocksDB's memtables, all column families
  uint64_t index_block_cache = 0;  // RocksDB's table blocks, index and filters included
  uint64_t extent_maps = 0;        // extents of recently written files
  uint64_t verified_blocks = 0;    // the data-file blocks read last
  uint64_t sealed_snapshots = 0;   // sealed trees' snapshots a shared store's mount reads
  uint64_t peer_ranges = 0;        // blocks a shared store's mount serves its peers, and
                                   // its server's replies on their way
  uint64_t Total() const {
    return record_cache + index_memtables + index_block_cache + extent_maps + verified_blocks +
           sealed_snapshots + peer_ranges;
  }
};

// The most each owner holds for a store opened with `options`, each a limit
// that the owner enforces. The record cache can go past cache_size by the
// records readers hold at that moment (at most one READ's worth per thread),
// which the daemon's per-thread allowance counts.
EngineMemory EngineMemoryBound(const StoreOptions& options);

// ---- compaction (engine/store_compact.cc) ----
// A segment that a compaction left in place, and why.
struct KeptSegment {
  enum class Reason {
    kBelowRatio,        // its dead fraction is below CompactOptions::dead_ratio
    kNothingDead,       // the active (or newest) segment, with no dead bytes:
                        // rewriting it would reclaim nothing
    kUnreadable,        // a record it holds could not be read or verified
    kStillReferenced,   // an extent still pointed into it after the copy
    kHostMounted,       // a shared store's segment whose host a mount holds:
                        // that mount compacts it (Store::CompactOffline)
    kSealed,            // a sealed tree's snapshot points into it: hosts read
                        // the tree's records there for as long as it lives
  };
  uint64_t id = 0;
  Reason reason = Reason::kBelowRatio;
  uint64_t live_bytes = 0;
  uint64_t dead_bytes = 0;
  double dead_fraction = 0;  // dead / (live + dead); 0 when both are 0
  std::string host;          // kHostMounted: the host's name
};
// A stable snake_case name of `r` ("below_ratio", "nothing_dead",
// "unreadable", "still_referenced", "host_mounted", "sealed").
const char* KeptReasonName(KeptSegment::Reason r);
// One line that says why `k` was kept, e.g. "segment 3: dead 12% below the
// ratio 30%"; `dead_ratio` is the compaction's CompactOptions::dead_ratio.
std::string DescribeKept(const KeptSegment& k, double dead_ratio);
// Whether a compaction at `dead_ratio` takes a segment that holds `live` and
// `dead` logical bytes: nothing in it is live, or its dead fraction
// dead / (live + dead) reaches the ratio. (It leaves the active and the
// newest segment alone while they hold no dead bytes.)
bool CompactionTakes(uint64_t live, uint64_t dead, double dead_ratio);
// The dead bytes, over all segments, at which background compaction with
// `o` starts a pass while the segments hold `live` bytes: the smaller of
// compact_dead and the larger of `live` and
// compact_min. 0 when it is off
// (compact_dead 0). The pass rewrites the segments that
// CompactionTakes at CompactOptions' default dead ratio; with none, it waits.
uint64_t BackgroundCompactThreshold(const StoreOptions& o, uint64_t live);

struct CompactReport {
  uint64_t segments_rewritten = 0;  // segments retired (file deleted)
  uint64_t bytes_reclaimed = 0;     // segment file bytes freed minus bytes written
  uint64_t bytes_copied = 0;        // record bytes (headers included) written anew
  double seconds = 0;
  std::vector<uint64_t> segments;   // ids of the retired (dry run: chosen) segments
  // Every other segment and why it stayed, in id order (a dry run: those it
  // would keep; a segment the run itself starts is not listed).
  std::vector<KeptSegment> kept;
  // Segments kept because of unreadable data. Unreadable accounting or
  // extents fail the whole compaction instead (Compact returns the error).
  std::vector<std::string> errors;
};

// The root of a sealed tree (Store::Seal) and what its seal record says.
struct SealedTree {
  Ino ino = 0;
  format::SealValue seal;
};

// One host of a shared store (docs/SHARED.md, "Hosts and their files").
struct HostInfo {
  std::string name;
  uint32_t id = 0;
  // Whether a mount holds it now (its lease runs, and its process lives
  // when it is on this machine).
  bool mounted = false;
  std::string holder;          // the mount that holds or last held it
  uint32_t pid = 0;            // that mount's process
  std::string machine;         // and its machine
  int64_t lease_until_ms = 0;  // wall clock, ms since the epoch; 0: released
  std::string peer;            // while mounted: the address it serves peers on
};

// The latest compaction of an open store (Store::LastCompaction): what it was
// asked to do and what it did.
struct CompactionRecord {
  double dead_ratio = 0;  // CompactOptions::dead_ratio
  bool dry_run = false;   // CompactOptions::dry_run
  Timespec finished;      // wall-clock time it ended
  CompactReport report;
};

class Store {
 public:
  // Opens (or creates) the store in `dir`. Fails with EBUSY, a message that
  // names the holder and a StoreHolder payload when another process has it
  // open; with EINVAL when `dir` is not a store and not empty; with EIO
  // ("corruption: ...") on a damaged store. Purges inodes left
  // unlinked-but-open by an earlier crash.
  static Result<std::unique_ptr<Store>> Open(const std::string& dir,
                                             const StoreOptions& options);
  // Returns true when `dir` holds a store (its FORMAT file exists).
  static bool IsStore(const std::string& dir);
  // Open + Compact + Close of a store that is not open (EBUSY with a
  // StoreHolder payload when it is). A shared store's segments are
  // compacted host by host, each as its host, which this takes in turn; the
  // segments of a host that a mount holds are kept (kHostMounted) for that
  // mount to compact; EBUSY, naming one, when every host is mounted.
  static Result<CompactReport> CompactOffline(const std::string& dir,
                                              const CompactOptions& options);

  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  // Syncs and closes. Call Close() first to see its status.
  virtual ~Store() = default;
  // Flushes everything to disk, marks the store cleanly closed and releases
  // it. Further calls (other than the destructor) fail with EIO.
  // REQUIRES: no other call on this Store is in progress.
  virtual Status Close() = 0;

  // ---- Namespace. Each mutation is one atomic index batch. ----
  virtual Result<Attr> Lookup(Ino parent, std::string_view name) = 0;
  virtual Result<Attr> GetAttr(Ino ino) = 0;
  virtual Result<Attr> SetAttr(Ino ino, const SetAttrRequest& req) = 0;
  // Mkdir, Create and Symlink make an inode of `uid` and `gid`; in a
  // set-group-ID directory it takes the directory's group instead, and a
  // directory the set-group-ID bit too.
  virtual Result<Attr> Mkdir(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                             uint32_t gid) = 0;
  // Creates a regular file (or a fifo, socket or device node per `mode`).
  // EEXIST when the name exists.
  virtual Result<Attr> Create(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                              uint32_t gid, uint32_t rdev = 0) = 0;
  virtual Result<Attr> Symlink(Ino parent, std::string_view name, std::string_view target,
                               uint32_t uid, uint32_t gid) = 0;
  virtual Result<std::string> ReadLink(Ino ino) = 0;
  // Adds a hard link to the non-directory `ino`.
  virtual Result<Attr> Link(Ino ino, Ino new_parent, std::string_view new_name) = 0;
  // Removing the last name of an inode that no handle holds open deletes its
  // data; when one of its extents cannot be read, the whole operation fails
  // with EIO and changes nothing (Unlink, Rmdir, Rename over it, Release).
  virtual Status Unlink(Ino parent, std::string_view name) = 0;
  virtual Status Rmdir(Ino parent, std::string_view name) = 0;
  virtual Status Rename(Ino parent, std::string_view name, Ino new_parent,
                        std::string_view new_name, RenameMode mode) = 0;
  // Calls `fn` for the entries of directory `ino` in name order, starting after
  // `after` ("" = from the start), until it returns false. A position is a
  // name, so it stays valid while entries are added or removed.
  virtual Status ReadDir(Ino ino, std::string_view after,
                         const std::function<bool(const DirEntry&)>& fn) = 0;
  virtual Result<FsStats> StatFs() = 0;

  // ---- Extended attributes (stored for any name). ----
  virtual Status SetXattr(Ino ino, std::string_view name, std::string_view value,
                          int flags) = 0;  // flags: XATTR_CREATE / XATTR_REPLACE
  virtual Result<std::string> GetXattr(Ino ino, std::string_view name) = 0;  // ENODATA
  virtual Result<std::vector<std::string>> ListXattr(Ino ino) = 0;
  virtual Status RemoveXattr(Ino ino, std::string_view name) = 0;

  // ---- File data. ----
  // Open/Release bracket every use of an inode by a handle: an inode that
  // loses its last name (an unlinked file, a removed directory) keeps its
  // attributes and data until its last Release.
  virtual Status OpenFile(Ino ino) = 0;
  virtual Status Release(Ino ino) = 0;
  // Records an access of `ino` (a read of a file's data, a listing of a
  // directory): sets its access time to now where `rule` says so. Writes
  // nothing when the rule keeps the access time, or on a read-only store.
  // The change goes into the index unsynced and without its log (as Linux's
  // lazytime): a crash may lose it, a clean close keeps it, and the next
  // change of the inode writes it with the rest of its attributes. Holds the
  // inode's mutex only for an in-memory index write.
  virtual Status Accessed(Ino ino, AtimeRule rule) = 0;
  // Reads up to `len` bytes at `offset` into `buf`; short only at end of file.
  // Holes read as zeros. EIO when a checksum does not match.
  virtual Result<size_t> Read(Ino ino, uint64_t offset, size_t len, char* buf) = 0;
  // Writes `data` at `offset`, extending the file as needed. On return the
  // bytes are in a segment file and the extent in the index log (durable
  // against a process crash, not yet against power loss). Sets mtime and
  // ctime to now, unless `times` is kKeep: for writes from the kernel's
  // write-back cache, whose times the kernel stamped itself when the file
  // was written and sends in a SETATTR (or, when they did not change, not
  // at all).
  enum class WriteTimes { kStamp, kKeep };
  virtual Result<size_t> Write(Ino ino, uint64_t offset, std::string_view data,
                               WriteTimes times) = 0;
  Result<size_t> Write(Ino ino, uint64_t offset, std::string_view data) {
    return Write(ino, offset, data, WriteTimes::kStamp);
  }
  // fallocate(2) with `mode` one of:
  //  - 0 or FALLOC_FL_KEEP_SIZE: reserves space for the first write of every
  //    byte of the 4 KiB blocks that [offset, offset+len) touches
  //    (engine/data/reservations.h), or fails with
  //    ENOSPC and changes nothing when the filesystem under the store has not
  //    that much free beyond min_free and the other reservations; mode 0
  //    extends the size to offset+len when larger. Nothing is stored, so the
  //    range's holes stay holes (SEEK_HOLE, data_bytes).
  //  - FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the bytes of the range
  //    become a hole (read as zeros; their stored bytes become dead space),
  //    exactly to the byte; the size stays.
  //  - FALLOC_FL_ZERO_RANGE, optionally | FALLOC_FL_KEEP_SIZE: a hole punch
  //    plus the reservation and size extension of mode 0.
  // Other modes: EOPNOTSUPP. `len` 0: EINVAL. Reservations last while the
  // store is open; a write, punch or truncation of the range and the file's
  // deletion give them back.
  virtual Status Fallocate(Ino ino, int mode, uint64_t offset, uint64_t len) = 0;
  // Bytes of `ino` that fallocate reserved and no write has taken yet: what
  // st_blocks counts besides the stored bytes (Attr::data_bytes), as ext4
  // counts preallocated blocks. 0 after the store is reopened.
  virtual uint64_t ReservedBytes(Ino ino) = 0;
  // SEEK_DATA / SEEK_HOLE semantics; ENXIO past the end.
  virtual Result<uint64_t> SeekData(Ino ino, uint64_t offset, bool hole) = 0;
  // ---- Direct writes (the kernel writes a data file itself). ----
  // With FUSE passthrough for writers the kernel writes a new file's bytes
  // straight into its data file (byte N at byte N) and no request reaches
  // the store. From BeginDirectWrite to EndDirectWrite the data file is the
  // file: GetAttr reports its size and modification time, a size change
  // cuts or extends it, a write lands in it, and AdoptDirectWrites takes its
  // bytes into the index (size, mtime and a checksum per block, replacing
  // the previous ones: the writers may have rewritten any byte). A file
  // smaller than data_file_min is adopted as a copy of its bytes in
  // segments instead, as if written through the store, and at the end its
  // data file is deleted once the copy is durable (at the next sync). Bytes
  // not yet adopted are lost in a crash, as unflushed bytes of any file.
  //
  // Begins when `ino` is an empty regular file without set-ID bits (the
  // kernel's writes to a data file would not clear them), data files are
  // on (data_file_min > 0) and local (not in an object store): creates its
  // data file and returns its path.
  // nullopt, and nothing changes, otherwise.
  virtual Result<std::optional<std::string>> BeginDirectWrite(Ino ino) = 0;
  // Adopts what the data file holds now; nothing to do when it has not
  // changed since the last adoption (same size and mtime, where the
  // filesystem's timestamps tell every later write apart: on one with
  // coarse timestamps, an adoption within a step of the last write is
  // followed by another), or when `ino` has no direct writes. A write that
  // lands while it reads the data file (another open of the file writes
  // on) changes size or mtime, and it reads again, up to three times in
  // all; then it adopts what it read last and the next adoption reads
  // again. Reads and hashing hold back neither flushes nor other writes.
  virtual Status AdoptDirectWrites(Ino ino) = 0;
  // Adopts a last time and ends.
  virtual Status EndDirectWrite(Ino ino) = 0;
  // Makes the file's data and metadata durable against power loss. Concurrent
  // calls share device flushes (group commit).
  virtual Status Fsync(Ino ino, bool datasync) = 0;
  // Makes everything written so far durable.
  virtual Status SyncAll() = 0;
  // Whether a close of a file written through this mount must send what
  // the mount holds of it: a shared store whose data is in an object store
  // gathers each host's writes until it sends them, and another host's
  // open after the close reads them (close-to-open, docs/SHARED.md).
  virtual bool SendsAtClose() const { return false; }
  // A close of `ino`, opened for writing: where SendsAtClose(), sends the
  // host's waiting writes (its segments' and data files') to the object
  // store, as a sync does, concurrent closes sharing the requests (group
  // commit). Else nothing.
  virtual Status Closed(Ino /*ino*/) { return Status::OK(); }

  // ---- Sealed trees (docs/DESIGN.md, "Sealed trees"). ----
  // Seals the tree under `ino` (a directory and everything below it, or a
  // single file) in one commit, then makes the store durable: from then on
  // its data, names, attributes and extended attributes never change, on
  // any host. A change fails with EROFS: a write, truncation, fallocate, a
  // change of mode, owner, times or extended attributes, a name made in a
  // sealed directory or renamed out of one, a hard link to a sealed file.
  // Removals stay allowed (unlink, rmdir, a rename that replaces a sealed
  // file or empty directory), as does a rename of the tree's root, whose
  // directory is not sealed; reads leave the access times alone. A seal
  // is never lifted. Returns how many inodes it sealed (0: all were).
  // EBUSY, and nothing sealed, when the kernel is writing a file of the
  // tree directly (BeginDirectWrite); on a shared store another host's
  // writers are not asked: open files that it writes on get EROFS. The
  // commit records the tree's root (SealedTrees), and forgets the roots of
  // the sealed trees it takes in.
  virtual Result<uint64_t> Seal(Ino ino) = 0;
  // The roots of the sealed trees, in inode order; a root's record goes
  // with the root.
  virtual Result<std::vector<SealedTree>> SealedTrees() = 0;
  // Whether `ino` is known to be sealed: seen sealed by this open of the
  // store (a bounded memory of it; false when not known).
  virtual bool KnownSealed(Ino ino) const = 0;

  // ---- Introspection and settings. ----
  virtual Result<std::vector<ExtentInfo>> GetExtents(Ino ino) = 0;
  // The data file of `ino` when it holds the whole file: a regular file of
  // at least one byte, all of it in the data file (data_file_end == size),
  // with extents that cover [0, size) without a gap, each at its own offset
  // (no overwrite in segments, no punched range). Reading the data file then
  // reads the file; the kernel may serve reads from it directly (FUSE
  // passthrough). nullopt otherwise, and always for a store whose data is
  // in an object store. A snapshot: a later write, truncation or punch of
  // the file changes the answer.
  virtual Result<std::optional<WholeDataFile>> WholeDataFileOf(Ino ino) = 0;
  // Every segment file with its accounting, in id order. A segment the index
  // has no accounting for yet (no batch that counts it has committed) holds
  // nothing live and lists with zeros. Fails with EIO naming the segment when
  // the index cannot be read or its accounting is corrupt (see
  // format::CheckSegmentStat); never reports such a segment as empty.
  virtual Result<std::vector<SegmentInfo>> ListSegments() = 0;
  virtual std::string SegmentPath(uint64_t segment_id) const = 0;
  // The counters, and the segment totals from ListSegments(), whose error
  // it returns.
  virtual Result<EngineStats> GetStats() = 0;
  // Counts the inodes by type with one scan of the index's inodes family (a
  // consistent snapshot; roughly a second per million inodes) and sums the
  // sizes of the index files. Mutations may go on meanwhile.
  virtual Result<NamespaceCounts> CountNamespace() = 0;
  // The effective settings: the options the store was opened with (holder
  // filled in), with the current values of the run-time settings.
  virtual StoreOptions GetOptions() = 0;
  // Whether the store is shared (its index in PostgreSQL; docs/SHARED.md):
  // other hosts may change it at any time.
  virtual bool Shared() const = 0;
  // Where the segments, data files and snapshots are: "" for the store's
  // own directory, else the object store's URL (`rados://POOL/NS`) that
  // STORE/STORAGE names (docs/OBJECT_STORAGE.md).
  virtual std::string DataStorage() const { return ""; }
  // A shared store's hosts, by name; none for an embedded store.
  virtual Result<std::vector<HostInfo>> Hosts() = 0;
  // The address this mount serves the other hosts of a shared store on
  // (docs/SHARED.md, "Peers"); empty when it serves none.
  virtual std::string PeerAddress() const { return ""; }
  // For how many seconds from now the kernel may keep what it is told of
  // names and attributes: without bound (infinity) for an embedded store,
  // whose changes all come through this process. On a shared store, up to
  // a second while this open is the only mounted host (a writable open
  // holds one), else 0 (docs/SHARED.md, "What one host sees").
  virtual double CacheSeconds() const = 0;
  // The same for the attributes of `ino` and, for a directory, the names
  // in it: on a shared store also while this mount owns `ino`
  // (docs/SHARED.md, "Owned inodes"), up to a second at a time; without
  // bound when `ino` is known sealed (KnownSealed).
  virtual double CacheSecondsOf(Ino ino) const = 0;
  // The same for a name in directory `dir` that names `ino`: on a shared
  // store also while this mount owns the one or the other; without bound
  // when `dir` is known sealed.
  virtual double CacheSecondsOfName(Ino dir, Ino ino) const = 0;
  // What to call when this mount gives up an inode it owned, or a
  // directory it read under a read grant, to another host: the kernel must
  // drop the attributes it keeps of `ino` and the names `names` (a
  // directory and a name in it): those of `ino` and, for a directory,
  // those in it. With `wait`, before it returns: called from a thread of
  // the store's own, never while a request of the kernel's waits for it;
  // without, soon after (called from a request's thread: the kernel may
  // hold those directories for it). Set before the mount serves; an empty
  // function calls nothing.
  using GiveUpHook = std::function<void(
      Ino ino, const std::vector<std::pair<uint64_t, std::string>>& names, bool wait)>;
  virtual void SetGiveUpHook(GiveUpHook hook) = 0;
  // Forgets what the store remembers of `ino` beyond the index (its
  // attributes, extents and verified blocks), so that the next call reads
  // it afresh: an open of a shared store's file (close-to-open). Nothing
  // for an embedded store, where every change comes through this process.
  virtual void Reread(Ino ino) = 0;
  // Changes run-time settings: calls `change` with the effective settings and
  // applies what it changed. Only coalesce_gap, coalesce_max, cache_size and
  // compression (0 to 22) may change; otherwise EINVAL and nothing is
  // applied. Updates are serialized, so concurrent ones never undo each
  // other. EIO once the store is closed.
  virtual Status UpdateOptions(const std::function<void(StoreOptions*)>& change) = 0;
  // The latest Compact() since the store was opened that ran to its end (a
  // dry run included), whether the caller or background compaction ran it.
  virtual std::optional<CompactionRecord> LastCompaction() = 0;
  // Drops the record cache and the blocks it keeps for its peers (for
  // cold-read measurements).
  virtual void DropCache() = 0;
  // What the engine's memory holds now; each figure is at most its
  // EngineMemoryBound (GetOptions()).
  virtual EngineMemory MemoryUse() = 0;
  // Writes the index's memtables to its table files when they hold more
  // than a little, so that a store at rest keeps no write buffers; the
  // caches stay. For a mount that has gone idle.
  virtual Status ReleaseIdleMemory() = 0;
  // Takes a backup of the index inside the store (engine/index/index_backup.h)
  // when the newest is older than `max_age_s` seconds. A store closes with
  // a backup taken.
  virtual Status BackupIndex(int64_t max_age_s) = 0;

  // Rewrites the live data of sealed segments with much dead space into new
  // segments and deletes the old files, while reads and writes go on. Safe
  // against a crash at any point: old records stay referenced until the
  // index batch that moves them commits, and a file is deleted only after
  // the new data and the index are durable and no read still uses it. One
  // compaction runs at a time; others wait. LastCompaction() then tells
  // its result. Fails (EIO, naming the segment or inode) without deleting
  // anything more when the accounting of a segment or an extent cannot be
  // read: no segment is chosen, rewritten or deleted on the strength of a
  // value that could not be read.
  virtual Result<CompactReport> Compact(const CompactOptions& options) = 0;
};

}  // namespace ckptfs::engine
