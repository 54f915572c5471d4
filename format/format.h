// On-disk encodings of ckptfs: index keys and values, segment headers and
// segment records. Pure code: depends only on the standard library, zstd and
// xxhash, does no I/O. docs/FORMAT.md documents every layout below, and
// format/format_test.cc holds golden bytes that keep the two in step.
//
// Byte order: index keys are big-endian so that byte order is numeric order;
// every value and on-disk header field is little-endian.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ckptfs::format {

// ---- Fixed-width coding. ----
void PutBE32(std::string* dst, uint32_t v);
void PutBE64(std::string* dst, uint64_t v);
uint64_t GetBE64(const char* p);
uint32_t GetBE32(const char* p);
void PutLE16(std::string* dst, uint16_t v);
void PutLE32(std::string* dst, uint32_t v);
void PutLE64(std::string* dst, uint64_t v);
uint16_t GetLE16(const char* p);
uint32_t GetLE32(const char* p);
uint64_t GetLE64(const char* p);

// XXH3 64-bit hash, the checksum of every on-disk structure.
uint64_t Checksum(std::string_view data);

// ---- Store directory. ----
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr char kFormatFileName[] = "FORMAT";
inline constexpr char kIndexDirName[] = "index";
inline constexpr char kSegmentsDirName[] = "segments";
inline constexpr char kDataDirName[] = "data";
inline constexpr char kLockFileName[] = "LOCK";
// Present in a store whose index is in PostgreSQL (docs/SHARED.md).
inline constexpr char kSharedFileName[] = "SHARED";
// Where a shared store's index is: the SHARED file's two lines.
struct SharedIndex {
  std::string meta;    // a libpq connection string, without a password
  std::string schema;  // the PostgreSQL schema that holds the index
  bool operator==(const SharedIndex&) const = default;
};
std::string SharedFileContents(const SharedIndex& v);
// Corruption when a line is missing, empty or unknown.
Status ParseSharedFile(std::string_view contents, SharedIndex* v);
// Present in a store whose segments, data files and snapshots are objects
// of an object store (docs/FORMAT.md, STORAGE).
inline constexpr char kStorageFileName[] = "STORAGE";
// A store whose data is in an object store: the local directory of the
// logs of writes the object store has not acknowledged yet (io/rados_env.h,
// Staging).
inline constexpr char kStagingDirName[] = "staging";
// In a shared store, each host's staging logs are in a directory of its own
// under kStagingDirName, named by the host's id in decimal.
inline std::string HostStagingDirName(uint32_t host) {
  return std::string(kStagingDirName) + "/" + std::to_string(host);
}
// Where a store's data is: the STORAGE file's two lines.
struct DataStorage {
  std::string data;      // "rados://POOL[/NAMESPACE]" or "s3://BUCKET[/PREFIX]"
  std::string prefix;    // before the name of each of the store's objects
  std::string endpoint;  // S3 only: "http[s]://HOST[:PORT]" of the service
  bool operator==(const DataStorage&) const = default;
};
std::string StorageFileContents(const DataStorage& v);
// Corruption when a line is missing, empty or unknown.
Status ParseStorageFile(std::string_view contents, DataStorage* v);
// Content of the FORMAT file.
std::string FormatFileContents();
// Checks the FORMAT file's content: magic line and a supported version.
Status ParseFormatFile(std::string_view contents);
// "segments/00000001.seg" relative to the store: 8+ decimal digits.
std::string SegmentFileName(uint64_t segment_id);
// Inverse of SegmentFileName's base name; false when `name` is not one.
bool ParseSegmentFileName(std::string_view name, uint64_t* segment_id);

// "data/00000042.dat" relative to the store: the data file of inode 42, in
// which byte N is the file's byte N (8+ decimal digits, as segment names).
std::string DataFileName(uint64_t ino);
// Inverse of DataFileName's base name; false when `name` is not one.
bool ParseDataFileName(std::string_view name, uint64_t* ino);

// ---- RocksDB column families. ----
inline constexpr char kCfInodes[] = "inodes";
inline constexpr char kCfDentries[] = "dentries";
inline constexpr char kCfExtents[] = "extents";
inline constexpr char kCfSegments[] = "segments";
inline constexpr char kCfXattrs[] = "xattrs";
// The meta family is RocksDB's "default" family.

// inodes: BE64(ino)
std::string InodeKey(uint64_t ino);
// dentries: BE64(parent) + name bytes
std::string DentryKey(uint64_t parent, std::string_view name);
std::string DentryPrefix(uint64_t parent);
// extents: BE64(ino) + BE64(file offset)
std::string ExtentKey(uint64_t ino, uint64_t file_offset);
std::string ExtentPrefix(uint64_t ino);
// segments: BE64(segment id)
std::string SegmentKey(uint64_t segment_id);
// xattrs: BE64(ino) + name bytes
std::string XattrKey(uint64_t ino, std::string_view name);
// meta keys
inline constexpr char kMetaFormatVersion[] = "format_version";
inline constexpr char kMetaNextIno[] = "next_ino";
inline constexpr char kMetaInodeCount[] = "inode_count";
inline constexpr char kMetaCleanShutdown[] = "clean_shutdown";
inline constexpr char kMetaOrphanPrefix[] = "orphan/";
std::string OrphanKey(uint64_t ino);
// Shared stores (docs/SHARED.md, "Hosts and their files"): the host ids
// handed out so far, and one key per host name.
inline constexpr char kMetaNextHostId[] = "next_host_id";
inline constexpr char kMetaHostPrefix[] = "host/";
std::string HostKey(std::string_view name);
// Owned inodes of shared stores (docs/SHARED.md, "Owned inodes"): the
// mount that made inode `ino` and alone changes it until another host asks
// for it, and one such request to the owner `host`.
inline constexpr char kMetaOwnerPrefix[] = "owner/";
inline constexpr char kMetaGiveUpPrefix[] = "give_up/";
std::string OwnerKey(uint64_t ino);
std::string GiveUpKey(uint32_t host, uint64_t ino);
std::string GiveUpPrefix(uint32_t host);
// A host that reads directory `ino` under a read grant (docs/SHARED.md,
// "Read grants"): "reader/" + BE64(ino) + BE32(host id); the value is an
// owner value (EncodeOwner). ReadersPrefix(ino) begins the keys of `ino`.
inline constexpr char kMetaReaderPrefix[] = "reader/";
std::string ReaderKey(uint64_t ino, uint32_t host);
std::string ReadersPrefix(uint64_t ino);
// Sealed trees (docs/DESIGN.md, "Sealed trees"): one key per tree root,
// written in the commit that seals the tree, deleted with the root.
inline constexpr char kMetaSealPrefix[] = "seal/";
inline constexpr char kMetaSealEnd[] = "seal0";  // past every seal key
std::string SealKey(uint64_t ino);
// Peers of shared stores (docs/SHARED.md, "Peers"): the secret that the
// store's hosts prove to one another, made by the first host that serves,
// and the address each host serves on while it is mounted ("HOST:PORT").
inline constexpr char kMetaPeerSecret[] = "peer_secret";
inline constexpr size_t kPeerSecretBytes = 32;
inline constexpr char kMetaPeerPrefix[] = "peer/";
std::string PeerKey(std::string_view host_name);

// What a seal record says of its tree when it was sealed.
struct SealValue {
  int64_t sealed_ms = 0;       // wall-clock milliseconds since the epoch
  uint64_t inodes = 0;         // in the tree, its root included
  uint64_t logical_bytes = 0;  // sum of its regular files' sizes
  // The snapshot file of the tree's index entries, in STORE/snapshots/
  // (meta/snapshot_file.h); empty: none (version 1).
  std::string snapshot;  // < 64 KiB
  bool operator==(const SealValue&) const = default;
};
inline constexpr uint8_t kSealValueVersion = 1;
inline constexpr uint8_t kSealValueVersion2 = 2;  // with a snapshot
inline constexpr char kSnapshotsDirName[] = "snapshots";
std::string EncodeSeal(const SealValue& v);
Status DecodeSeal(std::string_view in, SealValue* v);

// The mount that owns an inode: its host id, and the process that holds
// the host (as its HostValue names it). An owner whose host is no longer
// held by that process owns nothing.
struct OwnerValue {
  uint32_t id = 0;
  uint32_t pid = 0;
  std::string machine;  // < 64 KiB
  bool operator==(const OwnerValue&) const = default;
};
std::string EncodeOwner(const OwnerValue& v);
Status DecodeOwner(std::string_view in, OwnerValue* v);

// A host of a shared store: its id, and the mount that holds it until its
// lease runs out (lease_until_ms 0: released at a clean close).
struct HostValue {
  uint32_t id = 0;
  int64_t lease_until_ms = 0;  // wall-clock milliseconds since the epoch
  uint32_t pid = 0;            // of the mount's process
  std::string machine;         // the machine's name (gethostname), < 64 KiB
  std::string holder;          // the mount, for messages (StoreOptions::holder)
  bool operator==(const HostValue&) const = default;
};
std::string EncodeHost(const HostValue& v);
Status DecodeHost(std::string_view in, HostValue* v);
// Host ids live in the high bits of segment ids: host h appends to the
// segments (h << kHostIdShift) + 1, + 2, ... The embedded store is host 0.
inline constexpr int kHostIdShift = 40;
inline constexpr uint32_t kMaxHostId = (1u << 23) - 1;

struct InodeValue {
  uint32_t mode = 0, uid = 0, gid = 0, nlink = 0, rdev = 0;
  uint64_t size = 0;
  int64_t atime_sec = 0, mtime_sec = 0, ctime_sec = 0;
  uint32_t atime_nsec = 0, mtime_nsec = 0, ctime_nsec = 0;
  uint64_t generation = 1;
  uint64_t parent = 0;
  std::string symlink_target;
  // Bytes of file data the inode's extents hold, holes excluded: the sum of
  // their lengths, kept in the batch that changes them. Version 2 values
  // carry it. Version 1 values (stores written before it existed) decode
  // with data_bytes_known false, and encode as version 1 again until the
  // engine has counted the extents once.
  uint64_t data_bytes = 0;
  bool data_bytes_known = true;
  // Nonzero: the file has a data file (DataFileName), and bytes below this
  // offset of it may be in use by extents, so that writes there go to
  // segments. Version 3 values carry it; values with 0 encode as version 2.
  uint64_t data_file_end = 0;
  // kInodeSealed and further bits. Version 4 values carry them (and the
  // data file end, which may then be 0); values with none encode as
  // version 3 or below.
  uint32_t flags = 0;
  bool operator==(const InodeValue&) const = default;
};
// The inode is in a sealed tree: nothing changes it but its removal.
inline constexpr uint32_t kInodeSealed = 1u << 0;
inline constexpr uint32_t kInodeKnownFlags = kInodeSealed;
inline constexpr uint8_t kInodeValueVersion4 = 4;  // with flags
inline constexpr uint8_t kInodeValueVersion3 = 3;  // with data_file_end
inline constexpr uint8_t kInodeValueVersion2 = 2;  // with data_bytes
inline constexpr uint8_t kInodeValueVersion1 = 1;  // without data_bytes
std::string EncodeInode(const InodeValue& v);
Status DecodeInode(std::string_view in, InodeValue* v);

struct DentryValue {
  uint64_t ino = 0;
  uint8_t type = 0;  // S_IFMT >> 12
  bool operator==(const DentryValue&) const = default;
};
std::string EncodeDentry(const DentryValue& v);
Status DecodeDentry(std::string_view in, DentryValue* v);

enum class Codec : uint8_t { kNone = 0, kZstd = 1 };

// A window [skip, skip+length) of one record's decoded data, or inline bytes,
// or a window of one checksummed block of the inode's data file.
struct ExtentValue {
  bool is_inline = false;
  // A block of the data file: the block starts at file (and data file)
  // offset record_offset and is stored_len == raw_len bytes long; codec is
  // kNone, segment_id 0, and checksum is Checksum() of the block's bytes.
  bool in_data_file = false;
  uint32_t length = 0;  // logical bytes covered (inline: the data size)
  std::string inline_data;
  uint64_t segment_id = 0;
  uint64_t record_offset = 0;
  uint32_t stored_len = 0;
  uint32_t raw_len = 0;
  Codec codec = Codec::kNone;
  uint32_t skip = 0;
  uint64_t checksum = 0;  // of the record's stored payload
  bool operator==(const ExtentValue&) const = default;
};
inline constexpr uint8_t kExtentRecord = 0;
inline constexpr uint8_t kExtentInline = 1;
inline constexpr uint8_t kExtentDataFile = 2;
inline constexpr size_t kExtentRecordValueSize = 42;
inline constexpr size_t kExtentDataFileValueSize = 29;
std::string EncodeExtent(const ExtentValue& v);
Status DecodeExtent(std::string_view in, ExtentValue* v);

// Per-segment accounting. Stored whole or as a merge operand (a delta):
// live and dead add up, sealed and size take the maximum.
struct SegmentStat {
  int64_t live = 0;   // logical bytes referenced by extents
  int64_t dead = 0;   // logical bytes written and no longer referenced
  int64_t sealed = 0; // 1 once the segment takes no more appends
  int64_t size = 0;   // file size at sealing
  bool operator==(const SegmentStat&) const = default;
};
inline constexpr size_t kSegmentStatSize = 32;
std::string EncodeSegmentStat(const SegmentStat& v);
Status DecodeSegmentStat(std::string_view in, SegmentStat* v);
SegmentStat MergeSegmentStat(const SegmentStat& a, const SegmentStat& b);
// The one check of a whole (merged) stat as the index returns it: live, dead
// and size are never negative and sealed is 0 or 1. Corruption otherwise.
// Merge operands are not checked here: a delta's live is negative by nature.
Status CheckSegmentStat(const SegmentStat& v);

// ---- Segment files. ----
inline constexpr char kSegmentMagic[8] = {'C', 'K', 'P', 'T', 'S', 'E', 'G', '1'};
inline constexpr uint32_t kSegmentVersion = 1;
inline constexpr size_t kSegmentHeaderSize = 32;
std::string EncodeSegmentHeader(uint64_t segment_id);
Status DecodeSegmentHeader(std::string_view in, uint64_t* segment_id);
// The one check of a segment file's first kSegmentHeaderSize bytes: a valid
// header that names `segment_id`. Used by the engine, fsck and the GPU loader.
Status CheckSegmentHeader(std::string_view in, uint64_t segment_id);

inline constexpr uint32_t kRecordMagic = 0x52504b43;  // "CKPR" on disk
inline constexpr uint8_t kRecordVersion = 1;
inline constexpr size_t kRecordHeaderSize = 48;
struct RecordHeader {
  Codec codec = Codec::kNone;
  uint64_t ino = 0;
  uint64_t file_offset = 0;
  uint32_t raw_len = 0;
  uint32_t stored_len = 0;
  uint64_t payload_checksum = 0;
  bool operator==(const RecordHeader&) const = default;
};
std::string EncodeRecordHeader(const RecordHeader& h);
// Checks magic, version, header checksum and codec.
Status DecodeRecordHeader(std::string_view in, RecordHeader* h);

// A record ready to append: the encoded header, then the payload, which is
// `compressed` when that is non-empty and the caller's data otherwise.
struct PreparedRecord {
  RecordHeader header;
  std::string header_bytes;  // kRecordHeaderSize bytes
  std::string compressed;
};
// Compresses `data` with zstd at `level` (> 0) and keeps the compressed form
// only when it is smaller; computes the checksums.
PreparedRecord PrepareRecord(uint64_t ino, uint64_t file_offset, std::string_view data, int level);
// PrepareRecord, returned as one string (header + payload).
std::string BuildRecord(uint64_t ino, uint64_t file_offset, std::string_view data, int level,
                        RecordHeader* header_out);
// A whole record as DecodeRecord finds it in a buffer.
struct RecordView {
  RecordHeader header;
  std::string_view payload;  // the stored_len bytes after the header
  // The raw_len bytes of file data: the payload, or the decoded bytes of a
  // compressed one (empty when DecodeRecord was asked not to decode).
  std::string_view data;
};
// The one decoding of a record, for every reader of records (reads,
// compaction, fsck, verify, the GPU loader): `bytes` begins at its header
// and holds at least the whole record. Decodes the header, checks that the
// record fits in `bytes`, verifies the payload checksum, and decodes a
// compressed payload into `*decoded` (nullptr: verify only). Corruption
// naming what is wrong otherwise.
Status DecodeRecord(std::string_view bytes, RecordView* out, std::string* decoded);

// Verifies the payload checksum only. `payload` is exactly stored_len bytes.
Status VerifyRecordPayload(const RecordHeader& h, std::string_view payload);
// Verifies the payload checksum and decodes it into `out` (raw_len bytes).
// `payload` is exactly stored_len bytes.
Status DecodeRecordPayload(const RecordHeader& h, std::string_view payload, std::string* out);

// The one check of a data-file block against the extent `e` that points at
// it: `block` (the bytes read at e.record_offset of the data file) is
// e.stored_len bytes long and its checksum is e.checksum. Corruption
// naming the byte range of the block otherwise.
Status CheckDataFileBlock(const ExtentValue& e, std::string_view block);

// ---- The one record-versus-extent check. ----
// Whether the record `h` is the one that extent `e` of inode `ino`, starting
// at byte `file_offset` of the file, points at: every field the extent
// copies from the record header (stored_len, raw_len, codec, payload
// checksum), the inode, the file offset, and the window inside the record.
// Corruption naming the first field that differs. Reads, compaction, fsck
// and the GPU loader all call this one check. The payload checksum itself is
// VerifyRecordPayload's.
Status CheckRecordForExtent(const RecordHeader& h, const ExtentValue& e, uint64_t ino,
                            uint64_t file_offset);
// Points `e` at the record `h` written at `offset` of segment `segment_id`:
// sets the fields CheckRecordForExtent compares with the header, and the
// record's place; the others (length, skip) stay.
void PointExtentAt(const RecordHeader& h, uint64_t segment_id, uint64_t offset, ExtentValue* e);

}  // namespace ckptfs::format
