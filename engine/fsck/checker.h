// Internals of Fsck (engine/fsck/fsck.cc, check_namespace.cc, check_data.cc,
// check_recover.cc).
//
// Fsck runs on a store nobody has open: it takes the store lock, opens the
// index itself (read-only unless repairing; a shared store's in PostgreSQL,
// STORE/SHARED), reads it through the seam (meta/kv.h), and checks
//   - the namespace: dentries against inodes (dangling entries), reachability
//     from the root (orphans), link counts, directory parent pointers and
//     cycles, the inode counter and next_ino;
//   - every extent against its segment file and record header, and (unless
//     quick) the payload checksum of every record;
//   - every segment file record by record, from offset 32 (records nothing
//     points to, gaps, truncation) and its live-byte count.
// Repairs are gathered in one batch of writes and committed (synced) at the
// end, after any segment header rewrites.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/fsck/fsck.h"
#include "engine/index/store_index.h"
#include "engine/index/store_lock.h"
#include "engine/store.h"
#include "format/format.h"
#include "format/segment_scan.h"
#include "meta/kv.h"

namespace ckptfs::engine::fsck {

using meta::Space;

using format::ScanSegment;
using format::ScannedGap;
using format::ScannedRecord;
using format::SegmentScanOptions;


// Finding kinds. Errors:
inline constexpr char kBadInode[] = "bad_inode";                  // undecodable inode value
inline constexpr char kMissingRoot[] = "missing_root";
inline constexpr char kBadDentry[] = "bad_dentry";                // undecodable entry
inline constexpr char kDanglingEntry[] = "dangling_entry";        // entry -> missing inode
inline constexpr char kEntryInNonDirectory[] = "entry_in_non_directory";
inline constexpr char kEntryTypeMismatch[] = "entry_type_mismatch";
inline constexpr char kExtraDirectoryLink[] = "extra_directory_link";
inline constexpr char kDirectoryCycle[] = "directory_cycle";
inline constexpr char kOrphanedInode[] = "orphaned_inode";        // unreachable, no orphan key
inline constexpr char kOrphanKeyOnLinkedInode[] = "orphan_key_on_linked_inode";
inline constexpr char kBadLinkCount[] = "bad_link_count";
inline constexpr char kBadParent[] = "bad_parent";                // directory parent pointer
inline constexpr char kBadInodeCount[] = "bad_inode_count";
inline constexpr char kBadNextIno[] = "bad_next_ino";
inline constexpr char kBadMeta[] = "bad_meta";
inline constexpr char kBadExtent[] = "bad_extent";                // undecodable extent
inline constexpr char kExtentWithoutInode[] = "extent_without_inode";
inline constexpr char kExtentOnNonFile[] = "extent_on_non_file";
inline constexpr char kOverlappingExtents[] = "overlapping_extents";
inline constexpr char kExtentPastSize[] = "extent_past_size";
inline constexpr char kMissingSegment[] = "missing_segment";      // extent -> no file
inline constexpr char kRecordOutsideSegment[] = "record_outside_segment";  // truncated
inline constexpr char kBadRecordHeader[] = "bad_record_header";
inline constexpr char kRecordMismatch[] = "record_mismatch";      // header != extent
inline constexpr char kBadPayloadChecksum[] = "bad_payload_checksum";
inline constexpr char kMissingSegmentFile[] = "missing_segment_file";
inline constexpr char kTruncatedSegment[] = "truncated_segment";
inline constexpr char kBadSegmentHeader[] = "bad_segment_header";
inline constexpr char kSegmentLiveMismatch[] = "segment_live_mismatch";
inline constexpr char kExtentsRecovered[] = "extents_recovered";  // records put back
inline constexpr char kIndexRebuilt[] = "index_rebuilt";    // the index did not open or read
inline constexpr char kIndexRestored[] = "index_restored";  // the newest backup restored
inline constexpr char kFileRecovered[] = "file_recovered";  // bytes of an inode the index lost
inline constexpr char kBadDataBytes[] = "bad_data_bytes";        // inode's counter != extents
inline constexpr char kXattrWithoutInode[] = "xattr_without_inode";
inline constexpr char kMissingDataFile[] = "missing_data_file";  // extent -> no data file
inline constexpr char kBlockOutsideDataFile[] = "block_outside_data_file";  // truncated
inline constexpr char kBadDataFileExtent[] = "bad_data_file_extent";  // breaks byte N = byte N
inline constexpr char kHalfSealed[] = "half_sealed";  // unsealed entry of a sealed directory
inline constexpr char kBadSealRecord[] = "bad_seal_record";  // of no sealed inode, or undecodable
inline constexpr char kBadSnapshot[] = "bad_snapshot";  // missing, damaged, or not the index's
// Informational:
inline constexpr char kUnreferencedRecords[] = "unreferenced_records";
inline constexpr char kUnparsableBytes[] = "unparsable_bytes";    // crash gaps, damage in dead space
inline constexpr char kPendingOrphan[] = "pending_orphan";        // unlinked while open; purged at open
inline constexpr char kStaleSegmentEntry[] = "stale_segment_entry";
inline constexpr char kUnusedDataFile[] = "unused_data_file";  // no inode uses it (repair deletes)
inline constexpr char kUnusedSnapshot[] = "unused_snapshot";  // no seal record names it (repair deletes)

// The blocks fsck cuts a recovered data file into (the engine's default
// max_record_bytes): each gets an extent with its checksum.
inline constexpr uint64_t kDataFileBlockBytes = 1ull << 20;

// The payload of a corruption that a read of the index met (a damaged table
// file of an embedded index, which a repair rebuilds).
struct DamagedIndexRead {};

class Checker {
 public:
  Checker(std::string dir, const FsckOptions& options)
      : dir_(std::move(dir)),
        opt_(options),
        env_(options.env != nullptr ? options.env : io::Env::Posix()) {}
  // Checks (and repairs) the store and closes its index on every path.
  Result<FsckReport> Run();
  // With repair: rebuild the index (RepairIndexDb) before the checks even
  // if it opens, because `why` (damage a previous run's scan met).
  void RebuildIndexFirst(std::string why) { rebuild_because_ = std::move(why); }

 private:
  struct Node {
    format::InodeValue v;
    bool is_dir = false;
    bool orphan_key = false;
    bool reachable = false;
    bool attached = false;     // linked under lost+found by this run
    bool created = false;      // made by this run (a missing root, lost+found)
    bool lost_data = false;
    bool attr_dirty = false;   // v changed by repair
    uint64_t data_all = 0;     // regular files: bytes of all their decodable extents
    uint64_t data_kept = 0;    // ... of those that survive repair
    // Regular files: the file ranges [start, end) those extents cover.
    std::map<uint64_t, uint64_t> covered;
    uint32_t links = 0;        // valid entries naming it
    uint32_t subdirs = 0;      // directories: valid subdirectory entries
    uint64_t tree_parent = 0;  // directories: the directory whose entry was kept
    uint32_t incoming = 0;     // valid entries from existing directories
    std::vector<std::pair<std::string, uint64_t>> children;  // directories: valid entries
    std::string path;
  };
  struct SegmentState {
    uint64_t id = 0;
    bool has_file = false;
    bool has_stat = false;
    bool header_ok = true;
    std::string header_error;
    uint64_t file_size = 0;
    format::SegmentStat stat;
    std::string stat_error;  // why the stored stat is unusable ("" when it is fine)
    std::vector<ScannedRecord> records;  // in file order
    std::vector<uint32_t> refs;          // per record: extents pointing at it
    uint64_t gaps = 0, gap_bytes = 0, nonzero_gaps = 0;
    int64_t live_all = 0;   // recount over every decodable extent
    int64_t live_kept = 0;  // ... over the extents that survive repair
    bool past_eof = false;  // some extent points past the end of the file
    std::unique_ptr<io::File> file;  // open while fsck runs (has_file)
  };
  // A directory entry as the index holds it.
  struct RawEntry {
    uint64_t parent = 0;
    std::string name;
    format::DentryValue d;
  };

  // ---- fsck.cc ----
  // Run() up to the report: opens, checks and repairs.
  Status Check();
  Status Open();
  // Open's two kinds of index: STORE/index (opened, repaired, rebuilt or
  // restored as the options say), or PostgreSQL's (where STORE/SHARED says).
  Status OpenEmbedded();
  Status OpenShared(const format::SharedIndex& where);
  // Sends on what each host's killed mount left in its staging directory
  // (a shared store whose data is in an object store, no host mounted).
  Status SendHostsStaged();
  // Opens STORE/index into index_ (StoreIndex::Open with these options).
  Status OpenRocks(bool create, bool read_only, bool strict_log = false);
  // With repair, when the index has no file left: a new, empty one (the
  // checks put every file the segments and data files hold under
  // lost+found). Without, or with a backup to restore: the error saying so.
  Status MakeNewIndex(const std::string& index_dir);
  // The index did not open (`s`): replayed up to damage in its log, pointed
  // at its newest MANIFEST, or rebuilt (only when repairing).
  Status OpenDamagedIndex(const std::string& index_dir, const Status& s);
  // Rebuilds the index that did not open (or that a scan found damaged),
  // recording a finding; `why` says what was wrong.
  Status RebuildIndex(const std::string& index_dir, const std::string& why);
  // Replaces the index with its newest backup (opt_.from_backup).
  Status RestoreNewestBackup();
  // What a finding is about. `{}`: the store as a whole (its index, its
  // counters); Inode: an inode (and its path when known); FileRange: bytes
  // [off, off+len) of a file (in segment `segment` when they are in one);
  // SegmentRange: bytes of segment `id`.
  struct Subject {
    uint64_t ino = 0;
    std::string path;
    uint64_t segment_id = 0;
    uint64_t offset = 0;  // byte range: in the file for data findings, else in the segment
    uint64_t length = 0;
  };
  static Subject Inode(uint64_t ino, std::string path = "") {
    return Subject{ino, std::move(path), 0, 0, 0};
  }
  static Subject FileRange(uint64_t ino, std::string path, uint64_t off, uint64_t len,
                           uint64_t segment = 0) {
    return Subject{ino, std::move(path), segment, off, len};
  }
  static Subject SegmentRange(uint64_t id, uint64_t off = 0, uint64_t len = 0) {
    return Subject{0, "", id, off, len};
  }
  // The one way a finding is recorded: `kind` (informational or an error as
  // its kind says), about `at`, repaired by this run or not.
  void Add(const char* kind, Subject at, std::string detail, bool repaired);
  // Adds a finding about bytes [off, off+len) of file `ino`, merged with the
  // previous finding when it continues it.
  void AddData(const char* kind, uint64_t ino, uint64_t segment, uint64_t off, uint64_t len,
               std::string detail, bool repairable);
  std::string PathOf(uint64_t ino) const;
  Status ApplyRepairs();
  Status Get(Space s, const std::string& key, std::string* v, bool* found);
  // Calls `fn` for every key of space `s`, in order.
  Status ScanAll(Space s, const std::function<void(std::string_view key, std::string_view value)>& fn);
  // `s` from a read of the index; a corruption gets a DamagedIndexRead.
  static Status TagIndexDamage(Status s);

  // ---- check_namespace.cc ----
  // The meta keys (format version, counters, orphan keys), the inodes and
  // the directory entries; what does not decode is a finding.
  Status LoadNamespace();
  Status LoadMeta();
  Status LoadInodes();
  Status LoadEntries();
  void WalkTree(uint64_t from);
  // Links unreachable `ino` under lost+found (really only when repairing).
  void Attach(uint64_t ino);
  uint64_t EnsureLostFound();
  // Links `ino` under lost+found by its number (Node::path says where).
  void LinkUnderLostFound(uint64_t ino);
  void CheckNamespace();
  // A missing root (or one that is not a directory) is made anew.
  void EnsureRoot();
  struct BadEntry {
    const char* kind;
    const RawEntry* e;
    std::string why;
  };
  // The valid entries become the directories' children; the others are
  // returned, to be reported once paths are known.
  std::vector<BadEntry> ClassifyEntries();
  // Unreachable inodes go under lost+found: first those no entry names (the
  // tops of detached trees), then what is left (directory cycles).
  void AttachUnreachable();
  void ReportBadEntries(const std::vector<BadEntry>& bad);
  // Inode `ino`'s orphan key, link count and (directories) parent pointer.
  void CheckLinks(uint64_t ino, Node& n);
  void CheckCounters();
  // Sealed trees: every entry of a sealed directory is sealed (repair seals
  // it), and each seal record names a sealed inode (repair deletes it).
  void CheckSeals();
  // Each seal record's snapshot file opens, its checksums hold and its
  // inodes are the index's where both have them (repair drops the snapshot
  // from the record); snapshot files no record names (repair deletes them).
  Status CheckSnapshots();
  Status CheckXattrs();

  // ---- check_data.cc; the recovery in check_recover.cc ----
  Status LoadSegments();
  Status ScanSegments();
  // Walks segment `s` record by record (its header, records and gaps),
  // adding what it reads to `*done` under `progress_mu` as it goes.
  Status ScanOneSegment(SegmentState* s, std::mutex* progress_mu, uint64_t* done, uint64_t total);
  Status CheckExtents();
  // Where CheckExtents is: the inode whose extents it reads, and the end of
  // the last one it kept.
  struct ExtentScan {
    uint64_t ino = 0;
    uint64_t prev_end = 0;
  };
  // One extent of the scan: its key and value decoded, its inode found,
  // its range checked against the previous one's; then CheckExtentBytes.
  Status CheckExtent(std::string_view key, std::string_view value, ExtentScan* scan);
  // The bytes extent `e` (of `ino` at `off`, in `seg` unless inline or in a
  // data file) points at: kept when intact, else a finding and (repair)
  // dropped. An error only when the bytes could not be read.
  Status CheckExtentBytes(std::string_view key, const format::ExtentValue& e, uint64_t ino,
                          uint64_t off, Node* node, SegmentState* seg);
  // Each regular file's data-bytes counter against its extents.
  void CheckDataBytes();
  // With repair: puts back, as extents, the records no extent points to
  // whose file range nothing covers (a lost table of the index, a restored
  // backup), newest first.
  void RecoverExtents();
  // Record `idx` of `seg` as the extent of `ino` at its file offset, when
  // nothing covers that range: the bytes placed (0 when it was not).
  uint64_t PlaceRecord(uint64_t ino, Node* node, SegmentState* seg, size_t idx);
  // After the index was rebuilt or restored: the inodes numbered above every
  // one it knows (created after what it holds) whose verified records no
  // extent points to, or whose data file exists, become files under
  // lost+found named by their number. AdoptUnknownInodes makes their nodes
  // before RecoverExtents places their records; FinishAdopted fills the
  // rest from their data files and links them.
  Status AdoptUnknownInodes();
  Status FinishAdopted();
  // After the repairs are committed and the index closed: writes again,
  // through the store, the records RecoverExtents found written after the
  // state a rebuilt or restored index holds, for files it knows.
  Status BringForward();
  // The store's data files by inode.
  Result<std::map<uint64_t, std::string>> ListDataFiles();
  void CheckSegments();
  // A segment the index names (accounting or extents) with no file.
  void ReportMissingSegment(uint64_t id, const SegmentState& s);
  // Its header, its sealed size against the file's, its live bytes against
  // the extents (repair rewrites the accounting).
  void CheckSegmentStat(uint64_t id, const SegmentState& s);
  // What no extent uses: unreferenced records and unparsable stretches.
  void ReportUnusedBytes(uint64_t id, const SegmentState& s);
  // Data files on disk that no inode uses.
  Status CheckDataFiles();
  // With repair: the extent at `key` goes (in the repair batch).
  void DropExtent(std::string_view key);
  // An extent of `ino`, which does not exist: one finding per run of them.
  void ReportExtentWithoutInode(uint64_t ino, uint64_t off, uint64_t len);
  // What is wrong with data-file extent `e` of (ino, off) of `node`; sets
  // `kind` and returns the detail, or "" when the block is intact.
  std::string CheckDataFileExtent(const Node& node, uint64_t ino, uint64_t off,
                                  const format::ExtentValue& e, const char** kind);
  // The same for segment extent `e`, against the scanned records of `seg`
  // (counting the record's reference when it is intact).
  Result<std::string> CheckSegmentExtent(SegmentState* seg, uint64_t ino, uint64_t off,
                                         const format::ExtentValue& e, const char** kind);
  // An intact extent: counted for its node and segment, cut to the file's
  // size (repair rewrites it).
  void KeepExtent(std::string_view key, const format::ExtentValue& e, uint64_t ino,
                  uint64_t off, Node* node, SegmentState* seg);
  // The scanned record of `seg` at `offset`, or nullptr.
  const ScannedRecord* FindRecord(SegmentState* seg, uint64_t offset, size_t* index);

  const std::string dir_;
  const FsckOptions opt_;
  std::shared_ptr<io::Env> env_;  // set for good by Open()
  std::unique_ptr<StoreLock> lock_;
  std::string rebuild_because_;
  bool index_replaced_ = false;  // rebuilt, restored or made anew by this run
  // ... and holds a state the store was in: a backup, a log replayed up to
  // its damage (not a rebuild that lost a table file).
  bool index_is_past_state_ = false;
  // The store's index, RocksDB's or PostgreSQL's (engine/index/store_index.h).
  std::unique_ptr<StoreIndex> index_;
  // The index through the seam. REQUIRES: index_ is open.
  meta::Kv* kv() const { return index_->kv(); }
  FsckReport report_;
  meta::Writes batch_;
  bool batch_used_ = false;

  std::unordered_map<uint64_t, Node> nodes_;
  uint64_t max_ino_ = 0;
  uint64_t known_max_ino_ = 0;      // max_ino_ as the index holds it
  uint64_t ino_floor_ = 0;          // the largest inode a record or data file names
  std::set<uint64_t> adopted_;      // inodes AdoptUnknownInodes made
  struct Forward {
    uint64_t segment = 0;
    size_t index = 0;  // in segments_[segment].records
  };
  std::vector<Forward> forward_;    // for BringForward, in the order written
  std::map<uint64_t, std::string> data_files_;  // the store's data files by inode
  uint64_t next_ino_ = 0;           // stored value
  uint64_t lost_found_ = 0;         // its inode once chosen or created
  bool lost_found_new_ = false;
  std::string lost_found_name_ = "lost+found";
  std::set<uint64_t> orphan_keys_;  // inodes with orphan/ keys
  // Inodes with seal/ keys, and the record (nullopt: it does not decode).
  std::map<uint64_t, std::optional<format::SealValue>> seal_keys_;
  std::map<uint64_t, SegmentState> segments_;
  // The data file CheckExtents reads now (extents come in inode order).
  uint64_t data_file_ino_ = 0;
  Result<std::unique_ptr<io::File>> data_file_ = Status(ENOENT, "none");
  std::set<uint64_t> lost_inos_;     // existing inodes that lose data
  std::set<std::string> lost_paths_; // names of inodes that are gone entirely
  std::vector<RawEntry> entries_;    // decodable dentries, in key order
  std::unordered_map<uint64_t, std::string> dangling_paths_;  // missing ino -> entry path
  std::set<uint64_t> bad_inos_;      // inode keys that do not decode
  uint64_t stored_inode_count_ = 0;
  bool has_inode_count_ = false;
};

}  // namespace ckptfs::engine::fsck
