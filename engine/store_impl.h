// StoreImpl: the orchestrator behind engine/store.h. Namespace operations in
// store_namespace.cc (one change, Txn, in store_change.cc), extended
// attributes in store_xattr.cc; file data in store_extents.cc (extent maps),
// store_write.cc, store_read.cc and store_attr.cc (attributes, fallocate,
// open and release); compaction in store_compact.cc, its background thread
// in store_background.cc; sealed trees in store_seal.cc; open, close,
// commits and space in store_impl.cc; what it reports and its run-time
// settings in store_info.cc. It asks mode_
// (engine/store_mode.h) what an embedded or a shared store means, and host_
// (engine/shared/host_session.h) for a shared store's host, solo grants and
// owned inodes (store_owned.cc).
//
// Concurrency: namespace mutations take ns_mu_ (exclusively on an embedded
// store; shared on a shared store, whose index's SERIALIZABLE transactions
// order them across threads and hosts, ChangeNamespace) and then the
// InodeState mutexes of every inode they touch, in ascending inode order,
// each loaded from the index in the change's transaction unless this mount
// trusts what it knows of it (it owns it, or is alone). File data operations
// take only their inode's mutex, so writers of different files run in
// parallel; their segment appends reserve space under SegmentSet's short lock
// and write outside it. Readers take no inode lock for the data: they
// take the extents from the extent maps' cache or read them from the index
// in one transaction (CollectIndexExtents).
//
// Compaction (store_compact.cc) runs one at a time under
// CompactionState::mu, moves one inode's extents at a time under that
// inode's mutex, and uses io_gate_ (which every Read and data write holds)
// to wait out writes into its victims and reads of their old extents.
//
// Lock order, outermost first (clang's -Wthread-safety checks who holds
// what; the order itself is kept by hand):
//   CompactionState::mu or ns_mu_ (no caller holds both)
//   a write's turn on its inode (InodeState::write_order), held by Write only
//   InodeState::mu, of several inodes in ascending inode number
//   one at a time: ino_mu_, space_mu_, the SegmentSet's (then the Env's, io/), the
//   record cache's shards, InflightReads', GroupCommit's, the InodeTable
//   shards'
#pragma once

#include <atomic>
#include <unordered_map>
#include <optional>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/commit_gate.h"
#include "base/epoch_gate.h"
#include "base/group_commit.h"
#include "base/inflight_reads.h"
#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "engine/data/data_files.h"
#include "engine/data/record_cache.h"
#include "engine/data/reservations.h"
#include "engine/data/segment_set.h"
#include "engine/data/verified_blocks.h"
#include "engine/index/extent_map_cache.h"
#include "engine/index/store_index.h"
#include "engine/index/store_lock.h"
#include "engine/inode_table.h"
#include "engine/sealed_inodes.h"
#include "engine/shared/held_snapshots.h"
#include "engine/shared/host_session.h"
#include "engine/shared/lookup_hints.h"
#include "engine/shared/peer_reads.h"
#include "engine/shared/peer_service.h"
#include "io/object_store_env.h"
#include "engine/shared/range_cache.h"
#include "engine/store_clock.h"
#include "engine/store.h"
#include "engine/store_compact.h"
#include "engine/store_mode.h"
#include "format/format.h"
#include "io/read_plan.h"
#include "meta/kv.h"
#include "meta/snapshot_file.h"

namespace ckptfs::engine {

using io::BackingRead;
using io::CoalesceSettings;
using io::PlanReads;
using io::RecordRef;
using meta::Space;

// The largest file size (and end of a write or fallocate).
inline constexpr uint64_t kMaxFileSize = 1ull << 60;

class StoreImpl final : public Store {
 public:
  StoreImpl(std::string dir, const StoreOptions& options);
  ~StoreImpl() override;
  // Opens everything; called once by Store::Open.
  Status Init();

  Status Close() override;
  Result<Attr> Lookup(Ino parent, std::string_view name) override;
  Result<Attr> GetAttr(Ino ino) override;
  Result<Attr> SetAttr(Ino ino, const SetAttrRequest& req) override;
  Result<Attr> Mkdir(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                     uint32_t gid) override;
  Result<Attr> Create(Ino parent, std::string_view name, uint32_t mode, uint32_t uid,
                      uint32_t gid, uint32_t rdev) override;
  Result<Attr> Symlink(Ino parent, std::string_view name, std::string_view target, uint32_t uid,
                       uint32_t gid) override;
  Result<std::string> ReadLink(Ino ino) override;
  Result<Attr> Link(Ino ino, Ino new_parent, std::string_view new_name) override;
  Status Unlink(Ino parent, std::string_view name) override;
  Status Rmdir(Ino parent, std::string_view name) override;
  Status Rename(Ino parent, std::string_view name, Ino new_parent, std::string_view new_name,
                RenameMode mode) override;
  Status ReadDir(Ino ino, std::string_view after,
                 const std::function<bool(const DirEntry&)>& fn) override;
  Result<FsStats> StatFs() override;
  uint64_t ReservedBytes(Ino ino) override EXCLUDES(space_mu_);
  Status SetXattr(Ino ino, std::string_view name, std::string_view value, int flags) override;
  Result<std::string> GetXattr(Ino ino, std::string_view name) override;
  Result<std::vector<std::string>> ListXattr(Ino ino) override;
  Status RemoveXattr(Ino ino, std::string_view name) override;

  Status OpenFile(Ino ino) override;
  Status Release(Ino ino) override;
  Status Accessed(Ino ino, AtimeRule rule) override;
  Result<size_t> Read(Ino ino, uint64_t offset, size_t len, char* buf) override;
  using Store::Write;
  Result<size_t> Write(Ino ino, uint64_t offset, std::string_view data,
                       WriteTimes times) override;
  Status Fallocate(Ino ino, int mode, uint64_t offset, uint64_t len) override;
  Result<uint64_t> SeekData(Ino ino, uint64_t offset, bool hole) override;
  Status Fsync(Ino ino, bool datasync) override;
  Status SyncAll() override;

  Result<std::vector<ExtentInfo>> GetExtents(Ino ino) override;
  Result<std::optional<WholeDataFile>> WholeDataFileOf(Ino ino) override;
  Result<std::optional<std::string>> BeginDirectWrite(Ino ino) override;
  Status AdoptDirectWrites(Ino ino) override;
  Status EndDirectWrite(Ino ino) override;
  Result<std::vector<SegmentInfo>> ListSegments() override;
  std::string SegmentPath(uint64_t segment_id) const override;
  Result<EngineStats> GetStats() override;
  Result<NamespaceCounts> CountNamespace() override;
  StoreOptions GetOptions() override;
  bool Shared() const override { return shared_.has_value(); }
  bool SendsAtClose() const override { return shared_.has_value() && objects_ != nullptr; }
  Status Closed(Ino ino) override;
  std::string DataStorage() const override { return data_storage_; }
  Result<std::vector<HostInfo>> Hosts() override;
  std::string PeerAddress() const override { return peers_ ? peers_->address() : ""; }
  double CacheSeconds() const override;
  double CacheSecondsOf(Ino ino) const override;
  double CacheSecondsOfName(Ino dir, Ino ino) const override;
  void SetGiveUpHook(GiveUpHook hook) override EXCLUDES(give_up_mu_);
  void Reread(Ino ino) override;
  Status UpdateOptions(const std::function<void(StoreOptions*)>& change) override;
  std::optional<CompactionRecord> LastCompaction() override;
  void DropCache() override;
  EngineMemory MemoryUse() override;
  Status ReleaseIdleMemory() override;
  Status BackupIndex(int64_t max_age_s) override EXCLUDES(backup_mu_);
  Result<CompactReport> Compact(const CompactOptions& options) override;
  Result<uint64_t> Seal(Ino ino) override;
  Result<std::vector<SealedTree>> SealedTrees() override;
  bool KnownSealed(Ino ino) const override { return sealed_.Contains(ino); }

 private:
  // Segment accounting changes gathered while building one batch.
  using StatDeltas = std::map<uint64_t, format::SegmentStat>;
  using Extent = engine::Extent;

  // ---- store_impl.cc, store_info.cc ----
  // Takes this mount's host of a shared store (HostSession::Claim), owning
  // what it makes from then on; EBUSY naming the holder, as when embedded.
  Status ClaimHost();
  // A shared store whose data is in an object store: sends on what this
  // host's killed mount left in its staging directory, and stages there.
  Status StartHostStaging();
  // The ids of the segments the index says are sealed.
  Result<std::vector<uint64_t>> SealedSegments();
  Status CreateLayout();
  // Opens index_ where shared_ says (engine/index/store_index.h).
  Status OpenIndex(bool create);
  Status LoadMeta(bool creating);
  // Purges the inodes that lost their last name while open here, before a
  // crash: on a shared store, those of this host (StoreMode::OrphanValue),
  // since other hosts may have theirs open still.
  Status PurgeOrphans();
  // Deletes data files that no inode uses (left by a crash between an
  // inode's removal and its data file's; on a shared store, of inodes that
  // are gone).
  Status RemoveUnusedDataFiles();
  // Makes every commit so far durable (group commit when syncing).
  Status MakeDurable();
  // Applies `batch` in one transaction of the index, and to the extent maps.
  Status Commit(meta::Writes* batch, bool sync = false);
  // Commit for a change that read the index in `in` (a shared store's
  // namespace changes): the batch commits in `in`, or not at all (a
  // conflict).
  Status CommitIn(meta::Txn* in, meta::Writes* batch,
                  meta::Durability d = meta::Durability::kLogged);
  // Commit for a batch that changes the attributes of `s` (a write, a
  // setattr, an adoption, an access time) computed from s->attr, which
  // may be newer than the batch. Where this mount owns the inode, or alone
  // writes the store, a plain commit. Otherwise another host may change
  // the inode at any moment (a seal takes a whole tree): the batch commits
  // in a transaction that reads the inode again, so that a change of it
  // committed meanwhile conflicts (and the read is made again), and an
  // inode found sealed or removed is left as it is (EROFS, ENOENT; s->attr
  // then holds what the index holds).
  Status CommitAttrs(InodeState* s, meta::Writes* batch, bool sync = false,
                     meta::Durability d = meta::Durability::kLogged) REQUIRES(s->mu);
  // Applies `batch` in a synced transaction of its own: for the
  // marks of an open and a clean close, which no record depends on.
  Status CommitSynced(meta::Writes* batch);
  // Reads of the index, each in a transaction of its own: the latest state.
  Result<std::optional<std::string>> IndexGet(Space s, std::string_view key);
  Status IndexScan(Space s, std::string_view begin, std::string_view end,
                   const meta::ScanFn& fn);
  Status CheckWritable() const;
  // ENOSPC when `incoming` more bytes would leave the filesystem under the
  // store short of min_free plus what fallocate reserved. The bytes of
  // [offset, offset+incoming) of `ino` (0: none) that are reserved draw on
  // their reservation instead: a write of reserved bytes only is never refused.
  Status CheckSpace(uint64_t incoming, Ino ino = 0, uint64_t offset = 0);
  // Reads the free space under the store into space_avail_.
  Status StatSpaceLocked() REQUIRES(space_mu_);
  // Reserves [start, end) of `ino` (see Store::Fallocate): ENOSPC, and
  // nothing reserved, when the free space does not cover it.
  Status Reserve(Ino ino, uint64_t start, uint64_t end);
  // Gives back the reservation of [start, end) of `ino`.
  void Unreserve(Ino ino, uint64_t start, uint64_t end);
  Status FlushDurable();

  // ---- store_namespace.cc ----
  // An index value read, or nullopt where there was none.
  using ReadValue = std::optional<std::string>;
  // One namespace change: the pinned, locked inodes it touches, working
  // copies of their attributes, and the batch that will carry it. On a
  // shared store it also holds the index transaction that every read of
  // the change goes through and that commits it, so that a change that
  // another host's overlapped is refused (a conflict) and made again.
  struct Txn {
    // The methods below touch the guarded state of inodes whose mutexes
    // `locks` holds: a set known only at run time, which the analysis cannot
    // follow, hence NO_THREAD_SAFETY_ANALYSIS on them.
    explicit Txn(StoreImpl* store) : st(store) {}
    // Begins the index transaction of a shared store; nothing otherwise.
    Status Begin();
    // Pins, locks (ascending) and loads these inodes (on a shared store,
    // reads them in `index`). Call once. `read`: values of the inodes
    // already read in `index` (a whole tree's, in one scan), which the
    // loads take instead of reading them again.
    Status Lock(std::vector<uint64_t> inos,
                const std::map<uint64_t, ReadValue>* read = nullptr) NO_THREAD_SAFETY_ANALYSIS;
    // The working copy of a locked inode's attributes; marks it for writing.
    format::InodeValue& Edit(uint64_t ino) NO_THREAD_SAFETY_ANALYSIS;
    // The state of a locked inode.
    InodeState* State(uint64_t ino);
    // Drops one name of `ino`; purges or orphans it when that was the last.
    // An error (from Purge) leaves the batch unusable: do not commit it.
    Status DropLink(uint64_t ino, const Timespec& now);
    // Removes the (empty) directory `ino` from the namespace: its link count
    // becomes 0; purges or orphans it. Errors as DropLink.
    Status DropDir(uint64_t ino, const Timespec& now);
    // `ino` has no name left: while OpenFile holds it, it stays (with an
    // orphan key, purged at its last Release or at the next open of the
    // store); otherwise it is purged. Errors as DropLink.
    Status Unnamed(uint64_t ino) NO_THREAD_SAFETY_ANALYSIS;
    // Removes `ino` and everything it owns. An error leaves the batch
    // unusable: do not commit it.
    Status Purge(uint64_t ino) NO_THREAD_SAFETY_ANALYSIS;
    // Writes the batch and, on success, the working copies into the cache.
    Status Commit() NO_THREAD_SAFETY_ANALYSIS;
    // A locked inode's extended attributes change.
    void XattrsChanged(uint64_t ino) NO_THREAD_SAFETY_ANALYSIS;
    // Whether the kernel writes a locked inode's data file (BeginDirectWrite).
    bool Direct(uint64_t ino) NO_THREAD_SAFETY_ANALYSIS { return State(ino)->direct; }

    StoreImpl* st;
    std::vector<InodeRef> refs;
    std::vector<std::unique_lock<Mutex>> locks;
    std::map<uint64_t, format::InodeValue> attrs;
    std::vector<uint64_t> purged;
    meta::Writes batch;
    StatDeltas deltas;
    // The index transaction that every read of the change goes through and
    // that commits it: a shared store's; null on an embedded store.
    std::unique_ptr<meta::Txn> index;
    // What every read of the change goes through: `index`, or kLatest.
    meta::ReadTxn* reader() const { return index.get(); }
    // 1, and more when RunChange runs the change again after a conflict.
    int attempt = 1;
  };
  // RunChange(body) under ns_mu_: exclusive on an embedded store, shared on
  // a shared one.
  template <typename Body>
  auto ChangeNamespace(Body body) -> decltype(body(std::declval<Txn&>())) {
    if (!mode_->ChangesExclusive()) {
      ReaderMutexLock ns(&ns_mu_);
      return RunChange(body);
    }
    WriterMutexLock ns(&ns_mu_);
    return RunChange(body);
  }
  // Runs `body`, one namespace change, in a Txn; on a shared store again,
  // in a new one, when the index reports a conflict.
  template <typename Body>
  auto RunChange(Body body) -> decltype(body(std::declval<Txn&>())) {
    meta::Retrier retry;
    for (;;) {
      Txn t(this);
      t.attempt = retry.attempts();
      CKPTFS_RETURN_IF_ERROR(t.Begin());
      auto r = body(t);
      if (!meta::IsConflict(StatusOf(r))) return r;
      if (!retry.Again()) return StatusOf(r).Annotate(retry.GaveUp());
    }
  }
  static const Status& StatusOf(const Status& s) { return s; }
  template <typename T>
  static Status StatusOf(const Result<T>& r) { return r.status(); }

  // The reader of the index for a read that is part of no namespace change
  // (and for every read of a change on an embedded store, whose changes
  // ns_mu_ orders): each read in a transaction of its own, the latest state.
  static constexpr meta::ReadTxn* kLatest = nullptr;
  // Loads attributes from the index when needed.
  Status LoadLocked(InodeState* s) REQUIRES(s->mu);
  // Directory `s`, just read, has stayed the same (Ownership::Quiet): asks
  // for a read grant of it, and takes the attributes that request read
  // when one is given.
  void ReadUnderGrant(InodeState* s) REQUIRES(s->mu);
  // Reads the attributes from the index (in `in`, or kLatest) whether
  // loaded or not: on a shared store another host may have changed them.
  // `read`: the value already read in `in` (nullopt: none), instead of a
  // read of its own.
  // `read_epoch`: with `read` and kLatest, the trust epoch taken before
  // `read` was read under s->mu in a transaction of its own (HostSession::
  // TrustEpoch), which it may be trusted in; nullopt: the epoch now.
  Status RefreshLocked(InodeState* s, meta::ReadTxn* in, const ReadValue* read = nullptr,
                       std::optional<uint64_t> read_epoch = std::nullopt) REQUIRES(s->mu);
  // Before a call that reports or changes attributes: LoadLocked, or on a
  // shared store (where another host may have changed them) RefreshLocked.
  Status FreshLocked(InodeState* s) REQUIRES(s->mu);
  // Reads of the index in `in`, or, with kLatest, each in a transaction of
  // its own.
  Result<std::optional<std::string>> IndexGet(meta::ReadTxn* in, Space s, std::string_view key);
  Status IndexScan(meta::ReadTxn* in, Space s, std::string_view begin, std::string_view end,
                   const meta::ScanFn& fn);
  Result<format::DentryValue> GetDentry(Ino parent, std::string_view name, meta::ReadTxn* in);
  // Entry `name` of `parent`, read in `t`, with `parent` and the entry's
  // inode locked (Txn::Lock). When a shared store's change runs again after
  // a conflict, the entry is looked up outside `t` first and read in `t`
  // only once the locks are held: a transaction whose first read comes
  // before a wait for the locks conflicts with every change committed
  // during that wait, and so again on each retry while the inode is busy.
  Result<format::DentryValue> LockEntry(Txn& t, Ino parent, std::string_view name);
  Result<Attr> GetAttrOf(InodeState* s);
  // The attributes of a fresh `s` (FreshLocked), as the kernel is told them.
  Result<Attr> AttrLocked(InodeState* s) REQUIRES(s->mu);
  // Lookup on an index whose reads are round trips (StoreMode::RemoteIndex)
  // and that no held snapshot answers: the name, the parent's attributes
  // where they are not loaded, and the inode that the name named at its
  // last lookup (lookup_hints_) in one round trip; a second when it names
  // another inode now. `entry_key`: the name's key (format::DentryKey).
  Result<Attr> LookupRemote(Ino parent, std::string_view name, const std::string& entry_key);
  // The type and permission bits of `ino`, from its cached attributes when
  // it has them, also on a shared store (types never change; a removed
  // inode's entries and other keys are gone too); ENOENT when it is not
  // there.
  Result<uint32_t> CachedMode(Ino ino);
  void PutInode(meta::Writes* b, uint64_t ino, const format::InodeValue& v);
  // The next inode number. A shared store takes blocks of them in
  // transactions of their own, so that hosts never hand out one number twice.
  Result<uint64_t> AllocIno(meta::Writes* b) EXCLUDES(ino_mu_);
  Result<Attr> MakeNode(Ino parent, std::string_view name, format::InodeValue v);
  // Removes the inode and everything it owns. EIO when one of its extents
  // cannot be read (its accounting would be lost); `b` and `deltas` may then
  // hold part of the purge and must not be committed.
  Status PurgeLocked(InodeState* s, meta::Writes* b, StatDeltas* deltas,
                     meta::ReadTxn* in) REQUIRES(s->mu);
  Result<bool> DirIsEmpty(Ino dir, meta::ReadTxn* in);
  // EEXIST when `name` is in `parent`, for a change that adds it with
  // AddName (which, on a shared store, checks instead).
  Status CheckNameFree(Txn* t, Ino parent, std::string_view name);
  void AddName(Txn* t, Ino parent, std::string_view name, const format::DentryValue& d);
  // True when `ino` is `ancestor` or lies below it.
  Result<bool> IsInSubtree(Ino ino, Ino ancestor, meta::ReadTxn* in);
  struct RenameSides;  // the two sides of a rename (store_namespace.cc)
  // RenameMode::kExchange: swaps the two entries.
  Status ExchangeLocked(const RenameSides& r, Txn* t) REQUIRES_SHARED(ns_mu_);
  // Moves src to the new name, replacing what is there.
  Status MoveLocked(const RenameSides& r, Txn* t) REQUIRES_SHARED(ns_mu_);

  // ---- store_seal.cc ----
  // EROFS, naming `what`, when `v` is sealed; remembers that it is.
  Status Unsealed(uint64_t ino, const format::InodeValue& v, std::string_view what);
  // Remembers that `ino`, whose attributes are `v`, is sealed, if it is.
  void NoteSealed(uint64_t ino, const format::InodeValue& v) {
    if (v.flags & format::kInodeSealed) sealed_.Note(ino);
  }
  // The inodes of the tree under `ino`, read in `in`, `ino` first; the
  // entries of its directories go to `dentries`.
  Result<std::vector<uint64_t>> TreeOf(Ino ino, meta::ReadTxn* in,
                                       std::vector<meta::SnapshotEntry>* dentries);
  // The values of `inos` in the index, read in `in` in one scan over their
  // range when it is dense; none (each is read on its own) when it is not,
  // or on an embedded store (`in` null).
  Result<std::map<uint64_t, ReadValue>> ReadInodes(const std::vector<uint64_t>& inos,
                                                   meta::ReadTxn* in);
  // Adds the keys of `space` (extents or xattrs: keyed by BE64(ino) first)
  // of `inos` to `out`, read in `in`.
  Status CollectTreeKeys(meta::ReadTxn* in, Space space, const std::set<uint64_t>& inos,
                         std::vector<meta::SnapshotEntry>* out);
  // STORE/snapshots/NAME, and that directory made when missing.
  std::string SnapshotPath(std::string_view name) const;
  Status EnsureSnapshotsDir();
  // Deletes the snapshot files no seal record names: those of trees
  // removed since, or of seals that did not commit. On a shared store only
  // those older than kUnusedSnapshotSeconds: another host may be sealing.
  Status RemoveUnusedSnapshots();
  static constexpr int64_t kUnusedSnapshotSeconds = 600;
  // The snapshot that answers a read of `s` in [begin, end) (end: nullopt,
  // a point read of `begin`) that this mount holds: that of the tree of the
  // inode the keys name (inodes, names, extents and extended attributes are
  // keyed by an inode number first), when the range stays within it. Null
  // when none does: the index answers.
  std::shared_ptr<meta::SnapshotFile> HeldFor(Space s, std::string_view begin,
                                              std::optional<std::string_view> end);
  // After a read of `ino`'s attributes `v`, on a shared store: when `ino`
  // is the root of a sealed tree (a sealed directory in a directory that
  // is not) that this mount does not hold, reads the snapshot its seal
  // record names and holds it. A
  // snapshot that cannot be read is logged and not tried again: the index
  // answers instead.
  void HoldSnapshotOf(uint64_t ino, const format::InodeValue& v);
  // The segments that the snapshots of the sealed trees point into. An
  // error when one cannot be read: no segment is then known free of them.
  Result<std::set<uint64_t>> SnapshotSegments();
  // The directories from `dir` up to the store's root (at most
  // kMaxHeldPathDepth of them), read from the index: the path to a held
  // tree's root, its parent first.
  std::vector<uint64_t> PathTo(uint64_t dir);
  static constexpr int kMaxHeldPathDepth = 64;
  // Reads and opens the snapshot file `name`.
  Result<std::unique_ptr<meta::SnapshotFile>> ReadSnapshot(const std::string& name);

  // ---- file data: store_extents.cc, store_write.cc, store_read.cc ----
  // Extents of `ino` overlapping [start, end), in offset order: from its
  // extent map when one is held, else from the index.
  Status CollectExtents(Ino ino, uint64_t start, uint64_t end, std::vector<Extent>* out);
  // CollectExtents for a change of the file: loads its extent map first
  // when none is held, so that its next changes need no index scan.
  Status CollectExtentsLocked(InodeState* s, uint64_t start, uint64_t end,
                              std::vector<Extent>* out) REQUIRES(s->mu);
  // CollectExtents from the index only.
  Status CollectIndexExtents(Ino ino, uint64_t start, uint64_t end, std::vector<Extent>* out);
  // CollectIndexExtents's reads, in transaction `t`.
  Status CollectExtentsIn(meta::ReadTxn* t, Ino ino, uint64_t start, uint64_t end,
                          std::vector<Extent>* out);
  // CollectExtents for the common reads, with one point lookup instead of an
  // iterator: when an extent starts at `start` and reaches `end`, it is the
  // only one in [start, end) (extents never overlap); then it is appended and
  // the result is true. Otherwise false and `out` is unchanged.
  Result<bool> ExtentCovering(Ino ino, uint64_t start, uint64_t end, std::vector<Extent>* out);
  // Removes [start, end) from the file's extents; adds the bytes they held
  // to `*removed`.
  Status PunchLocked(InodeState* s, uint64_t start, uint64_t end, meta::Writes* b,
                     StatDeltas* deltas, uint64_t* removed) REQUIRES(s->mu);
  // Makes s->attr.data_bytes known: an inode of a store written before the
  // counter existed gets its extents counted once.
  Status CountDataBytesLocked(InodeState* s) REQUIRES(s->mu);
  // Writes `data` at `offset` of the file: into segments, or past its data
  // file's end into the data file (moving it there when it grows past
  // data_file_min); the index batch carries the extents and attributes.
  Result<size_t> WriteLocked(InodeState* s, uint64_t offset, std::string_view data,
                             WriteTimes times) REQUIRES(s->mu);
  // WriteLocked's file of at most inline_max bytes whose extents are all
  // inline: all of it into one inline extent in `b`. False (nothing done)
  // when the file has records.
  Result<bool> WriteInlineLocked(InodeState* s, uint64_t offset, std::string_view data,
                                 uint64_t new_size, format::InodeValue* v,
                                 meta::Writes* b) REQUIRES(s->mu);
  // WriteLocked's other files: the bytes into records and the data file
  // (an inline head the write touches folds into its record). Syncs the
  // bytes it moves first when `moved_may_be_synced`.
  Status WriteStoredLocked(InodeState* s, uint64_t offset, std::string_view data,
                           bool moved_may_be_synced, format::InodeValue* v,
                           meta::Writes* b, StatDeltas* deltas) REQUIRES(s->mu);
  // The inline extent at offset 0 of `ino` when `offset` lies in it (0 <
  // offset <= its length): its bytes with `data` written at `offset`, in
  // `*folded`; else `*folded` stays empty.
  Status FoldInlineHead(uint64_t ino, uint64_t offset, std::string_view data,
                        std::string* folded);
  // Appends `data`, the file's bytes at `offset`, as records of at most
  // max_record_bytes to the active segment and puts their extents into `b`.
  Status AppendRecords(uint64_t ino, uint64_t offset, std::string_view data,
                       meta::Writes* b, StatDeltas* deltas);
  // Writes `data` at `offset` of the data file of `ino` and puts its
  // extents (blocks cut as records are) into `b`.
  Status AppendDataFile(uint64_t ino, uint64_t offset, std::string_view data,
                        meta::Writes* b);
  // Extents of `data`, the data file's bytes at `offset`: one per block,
  // blocks ending where records would (AppendRecords).
  void PutDataFileExtents(uint64_t ino, uint64_t offset, std::string_view data,
                          meta::Writes* b);
  void PutDataFileExtent(uint64_t ino, uint64_t at, uint64_t len, uint64_t checksum,
                         meta::Writes* b);
  // The one inline extent of a file whose bytes are all `content`.
  void PutInlineExtent(uint64_t ino, std::string content, meta::Writes* b);
  // AdoptDirectWrites; with `sync`, for an fsync, syncs the data file
  // alongside.
  Status Adopt(Ino ino, bool sync);
  // BeginDirectWrite's state: takes the data file's bytes into the index
  // (copies them into segments below data_file_min).
  Status AdoptLocked(InodeState* s) REQUIRES(s->mu);
  // Gives `s` a data file holding the bytes of its extents below `upto`
  // (copied from segments and inline extents, repointed in `b`); sets
  // v->data_file_end to `upto`.
  Status MoveToDataFileLocked(InodeState* s, uint64_t upto, format::InodeValue* v,
                              meta::Writes* b, StatDeltas* deltas) REQUIRES(s->mu);
  // Copies the bytes of `ex` that lie in [offset, end) into buf (which
  // holds [offset, end); holes are left alone), verifying every checksum.
  // On a shared store, bytes that another host's file seems to lack are
  // read again after io::File::Refresh of its files, a few times.
  Status ReadExtentsInto(Ino ino, const std::vector<Extent>& ex, uint64_t offset, uint64_t end,
                         char* buf);
  Status ReadExtentsOnce(Ino ino, const std::vector<Extent>& ex, uint64_t offset, uint64_t end,
                         char* buf);
  // Reads the data-file block of extent `v` of `ino` into dst (v.stored_len
  // bytes) and verifies it; `once`: a large sequential read (ReadOnce).
  Status ReadDataFileBlock(Ino ino, const format::ExtentValue& v, bool once, char* dst);
  static void EmitDeltas(const StatDeltas& deltas, meta::Writes* b);
  // Adds `from` into `*to`, segment by segment (format::MergeSegmentStat).
  static void MergeDeltas(const StatDeltas& from, StatDeltas* to);
  // Fetches verified, decoded records, from the cache or with planned reads.
  // kWholeOnce: the caller uses each record whole and will not ask for it
  // again soon, so records read for it are not cached.
  enum class RecordUse { kMayRepeat, kWholeOnce };
  using RecordMap = std::map<std::pair<uint64_t, uint64_t>, RecordData>;
  // `sealed`: the records are a sealed file's, which peers may serve
  // (ReadRouted).
  Status FetchRecords(const std::vector<RecordRef>& want, RecordUse use, RecordMap* out,
                      bool sealed = false);
  // One planned backing read of FetchRecords: its records (and the whole
  // neighbours it brought) verified, decoded and cached, or taken from the
  // cache when another thread's overlapping read put them there.
  Status ServeBackingRead(const BackingRead& br, RecordUse use, const CoalesceSettings& cs,
                          RecordMap* out, bool sealed);
  // The bytes of one backing read while ServeBackingRead decodes them.
  struct ReadBuffer {
    explicit ReadBuffer(const BackingRead& read) : br(read) {}
    const BackingRead& br;
    std::shared_ptr<char[]> bytes;  // br.length bytes
    size_t n = 0;                   // of them read (less where the segment ends)
    bool pass_through = false;      // used whole once: not cached
    uint64_t max_tail = 0;          // the most read again to complete a cut record
    size_t served = 0;              // records decoded from it
    bool sealed = false;            // a sealed file's: its tails through ReadIntact too
  };
  // Decodes (verifies, caches) the records of a backing read into `out`.
  Status DecodeBackingRead(ReadBuffer* rb, RecordMap* out);
  // Verifies and decodes the record at `pos` of `bytes` (a buffer of
  // `bytes_held` bytes, `avail` of them read from segment offset `base`)
  // and caches it; nullptr (and `*err`) when it is not intact.
  RecordData DecodeRecordIn(ReadBuffer* rb, const std::shared_ptr<char[]>& bytes,
                            size_t bytes_held, size_t avail, uint64_t base, uint64_t pos,
                            Status* err);
  // The same for the record at `pos` of `rb`; `*next` = the byte after it.
  // A neighbour that a stretched read cut short is completed with one more
  // read of its tail, so that the next read of this region does not fetch
  // its head again (a restore in store order then reads each segment byte
  // once).
  RecordData DecodeRecordAt(ReadBuffer* rb, uint64_t pos, Status* err, uint64_t* next);

  // ---- store_compact.cc ----
  // Scans every extent: adds to `inos` the inodes and to `used` the segments
  // of those that point into `segments`. EIO for an extent that cannot be
  // decoded, since it may point into any of them.
  Status FindExtentsIn(const std::set<uint64_t>& segments, std::set<uint64_t>* inos,
                       std::set<uint64_t>* used);
  // Copies the records of `ino` that its extents in `victims` use, and
  // queues the batch that points the extents at the copies (run->pending);
  // with `now`, syncs the copies and commits it under the inode's mutex.
  Status CompactInode(uint64_t ino, const std::set<uint64_t>& victims, CompactRun* run,
                      bool now = false);
  // Syncs the segments, then, per inode under its mutex, repoints the
  // extents of each copied record that are still those copied; adds to
  // `changed` the inodes with a record whose were not (its copy stays as
  // dead space). No extent points at a copy before the copy is durable: a
  // power cut after the index log reached the disk ahead of the segments
  // (the kernel writes pages back in its own order) must not leave an
  // fsynced file pointing at lost copies.
  Status CommitCopies(const std::set<uint64_t>& victims, CompactRun* run,
                      std::set<uint64_t>* changed);
  // Adds to `b` the repointing of the copies of `p` whose records `ex`, the
  // inode's extents now, still point at (none unless `live`: the inode is
  // still there), and the accounting of all of them; true when some copy
  // stays unreferenced (its extents changed since the copy).
  bool PlanRepoint(const PendingRepoint& p, const std::set<uint64_t>& victims, bool live,
                   const std::vector<Extent>& ex, meta::Writes* b);
  // Adds the repointing of copied record `r` and its accounting to `b` and
  // `deltas`.
  void AddCopy(const CopiedRecord& r, meta::Writes* b, StatDeltas* deltas);
  // A victim record read and verified (format::DecodeRecord): its views
  // point into the run's scratch buffer and `decoded`.
  struct SourceRecord {
    format::RecordView rec;
    std::string decoded;
  };
  // Reads and verifies the victim record whose windows `group` (extents of
  // `ino`) uses, and checks it against each of them. An error means the
  // record is unreadable or damaged, its segment is kept.
  Status ReadSourceRecord(uint64_t ino, const std::vector<const Extent*>& group, CompactRun* run,
                          SourceRecord* out);
  // Copies `src` (ReadSourceRecord) whole or its live windows to the active
  // segment; the repointed extents go to `puts`, the accounting to `deltas`.
  // REQUIRES: the mu of `ino`'s InodeState is held (not checked: the
  // function gets the number, not the state).
  Status CopyRecord(uint64_t ino, const std::vector<const Extent*>& group, const SourceRecord& src,
                    std::vector<std::pair<std::string, std::string>>* puts, StatDeltas* deltas,
                    CompactRun* run);
  // ListSegments, less other hosts' segments (a shared store): what this
  // store compacts.
  Result<std::vector<SegmentInfo>> OwnSegments();
  // Compact() once the caller holds the compaction lock.
  Result<CompactReport> CompactLocked(const CompactOptions& options) REQUIRES(compaction_->mu);
  // Seals the victims that the active segment or the newest file are, so
  // that appends go elsewhere, and commits that once every write into the
  // victims has.
  Status SealVictims(const std::vector<Victim>& victims) REQUIRES(compaction_->mu);
  // Copies what the inodes with extents in `round` (some of `victims`) use,
  // makes it durable, then deletes the segments of `round` that nothing
  // references any more (adding their bytes to `*freed`; the others go to
  // rep->kept with why).
  Status CompactRound(const std::set<uint64_t>& round, const std::vector<Victim>& victims,
                      CompactRun* run, CompactReport* rep, uint64_t* freed)
      REQUIRES(compaction_->mu);
  // `r` with its time and kept segments in order, recorded as the last
  // compaction.
  CompactReport FinishCompaction(const CompactRun& run, CompactReport r)
      REQUIRES(compaction_->mu);
  // One look of background compaction: compacts when the dead bytes or an
  // empty segment call for it (then the report), else nothing (nullopt).
  Result<std::optional<CompactReport>> BackgroundPass();
  void StartBackgroundCompaction();
  // A shared store, every kDropGoneSegmentsMs (the background thread): lets
  // go of other hosts' segments that their compactions deleted.
  Status DropGoneSegments();
  static constexpr int64_t kDropGoneSegmentsMs = 10'000;
  int64_t segments_dropped_ms_ = 0;  // the background thread's
  void StopBackgroundCompaction();  // also stops a running Compact()

  const std::string dir_;
  StoreOptions options_;
  std::unique_ptr<StoreLock> lock_;
  // The segments' Env (options_.env or io::Env::Posix()).
  std::shared_ptr<io::Env> env_;
  // env_ when the segments, data files and snapshots are in an object store
  // (the STORE/STORAGE file; no path of theirs opens with open(2)); else
  // null.
  std::shared_ptr<io::ObjectStoreEnv> objects_;
  // Its URL when they are (Store::DataStorage).
  std::string data_storage_;
  // The data files of large files; declared before index_ so that it
  // outlives the index, whose before-flush hook syncs it.
  std::unique_ptr<DataFiles> data_files_;
  // The index (engine/index/store_index.h); set by Init, closed (not
  // destroyed) by Close.
  std::unique_ptr<StoreIndex> index_;
  // The index through the seam (meta/kv.h): every read and write of it.
  // REQUIRES: index_ is open.
  meta::Kv* kv() const { return index_->kv(); }
  // Where the index is when in PostgreSQL (STORE/SHARED); nullopt: RocksDB.
  std::optional<format::SharedIndex> shared_;
  // This mount's host of a shared store: lease, solo grants, the inodes it
  // owns (engine/shared/host_session.h); claims nothing on an embedded
  // store or a read-only open. Declared after index_, which its watch reads.
  HostSession host_;
  // The inode each name named at its last lookup on a shared store
  // (LookupRemote).
  LookupHints lookup_hints_;
  // A writable mount's server for the other hosts of a shared store
  // (engine/shared/peer_service.h); none with peers=off, on an embedded
  // store or a read-only open. Started by Init (StartPeers), stopped by
  // Close before the host goes.
  // The blocks this mount serves (engine/shared/range_cache.h): its
  // server's reads, and its own of the files it serves. Declared before
  // peers_, whose server reads it until it stops.
  std::unique_ptr<RangeCache> served_;
  std::unique_ptr<PeerService> peers_;
  // Where a shared store's reads of sealed files go (engine/shared/
  // peer_reads.h); none with peers=off or on an embedded store.
  std::unique_ptr<PeerReads> peer_reads_;
  Status StartPeers();
  // Up to `len` bytes of the store's file `name` (segments/..., data/...)
  // at `offset`, from the storage: RangeCache's loader.
  Result<size_t> ReadStoreFile(const std::string& name, uint64_t offset, size_t len, char* dst);
  // Up to `len` bytes of segment `id` or of inode `ino`'s data file (`once`:
  // read past the page cache, DataFiles::ReadOnce) at `offset` from the
  // storage, counted in the backing or data-file read counters.
  Result<size_t> ReadSegmentBytes(uint64_t id, uint64_t offset, size_t len, char* dst);
  Result<size_t> ReadDataFileBytes(uint64_t ino, uint64_t offset, size_t len, char* dst, bool once);
  // Up to `len` bytes at `offset` of the store's file `name` for a read of
  // a sealed file, from where PeerReads routes it: `*from` is the address
  // of the peer they came from, "self" for this host's RangeCache, empty
  // for the storage (`storage` reads them there, where the route fails).
  // Bytes from a peer or the RangeCache that fail their checksum are
  // read again with `storage` (and the peer told: PeerReads::Reject).
  Result<size_t> ReadRouted(const std::string& name, uint64_t offset, size_t len, char* dst,
                            std::string* from, const std::function<Result<size_t>()>& storage);
  // Reads a range of the store's file `name` into `dst` with ReadRouted
  // for a read of a sealed file (else with `storage`) and gives the count
  // to `intact`, which checks the bytes (and may keep them); bytes from
  // elsewhere that it refuses are read again with `storage` and given to
  // it again. Its status.
  Status ReadIntact(const std::string& name, uint64_t offset, size_t len, char* dst, bool sealed,
                    const std::function<Result<size_t>()>& storage,
                    const std::function<Status(size_t n)>& intact);
  // What the kind of store means (engine/store_mode.h): set by Init once the
  // index is chosen. Declared after host_, which a shared store's reads.
  std::unique_ptr<StoreMode> mode_ = StoreMode::Embedded();
  // A shared store's owned inodes (store_owned.cc, Ownership): MayChange
  // before a change (never holding an inode's mutex), NamesChanged after its
  // commit; OwnNew puts the owner key of `ino`, made in `b`, and says whether
  // it did (if so and `b` fails: Ownership::Forget); GiveUp when another
  // host asks for `ino` (Ownership::GiveUpFn), started by ClaimHost.
  Status MayChange(Ino ino);
  void NamesChanged(const meta::Writes& batch);
  // The directories `batch` changes and the ranges of reader keys
  // (Ownership::ReaderRanges) it requires empty; none on an embedded
  // store. Commit and CommitIn add them, and on a refusal Unguard has the
  // readers give them up; Commit then tries again, up to kUnreadAttempts
  // times, and CommitIn reports a conflict, which runs the change again.
  struct ReaderGuard {
    std::vector<uint64_t> dirs;
    std::vector<meta::Writes::Range> ranges;
  };
  ReaderGuard GuardOf(const meta::Writes& batch) const;
  Status Unguard(const ReaderGuard& g) EXCLUDES(give_up_mu_);
  static constexpr int kUnreadAttempts = 16;
  bool OwnNew(meta::Writes* b, uint64_t ino, bool dir);
  void GiveUp(uint64_t ino, const std::vector<Ownership::Name>& names, bool owned)
      EXCLUDES(give_up_mu_);
  Mutex give_up_mu_;  // a leaf lock
  CondVar give_up_cv_;  // give_up_calls_ reached 0
  GiveUpHook give_up_hook_ GUARDED_BY(give_up_mu_);
  int give_up_calls_ GUARDED_BY(give_up_mu_) = 0;  // hooks under way
  void CallGiveUpHook(Ino ino, const std::vector<Ownership::Name>& names, bool wait)
      EXCLUDES(give_up_mu_);
  // Whether `s` was read or written in the trust epoch of it that runs
  // (HostSession::TrustEpoch): what the index holds.
  bool TrustedLocked(const InodeState* s) const REQUIRES(s->mu);
  // A shared store's file read with a hole in [start, end) of the extents
  // `ex`: ESTALE when its inode is gone (another host removed it while this
  // one has it open; its extents went with it), rather than zeros.
  Status CheckHoleOfLiveFile(Ino ino, const std::vector<Extent>& ex, uint64_t start,
                             uint64_t end);
  // Whether extended attribute `name` of `s` is known absent in trust epoch
  // `epoch` (0: never).
  bool KnownAbsentLocked(InodeState* s, std::string_view name, uint64_t epoch) REQUIRES(s->mu);
  std::unique_ptr<SegmentSet> segments_;
  std::unique_ptr<RecordCache> cache_;
  // Extents of recently written inodes (engine/index/extent_map_cache.h); Commit
  // applies every committed batch to it.
  ExtentMapCache extent_maps_{ExtentMapCache::kDefaultMaxExtents,
                              ExtentMapCache::kDefaultMaxInodeExtents};
  InflightReads inflight_;  // coalesced reads in progress, by byte range
  VerifiedBlocks verified_blocks_;  // data-file blocks read last
  SealedInodes sealed_;  // inodes seen sealed
  // The sealed trees' snapshots a mount of a shared store reads instead of
  // the index (engine/shared/held_snapshots.h); empty on an embedded store.
  HeldSnapshots snapshots_;
  std::unique_ptr<GroupCommit> syncer_;
  InodeTable inodes_;
  std::atomic<bool> closed_{false};
  // Every Read and data write holds a Guard; compaction drains it (see
  // base/epoch_gate.h).
  EpochGate io_gate_;
  // segments_ for the index's before-flush hook, which may run on RocksDB's
  // threads from the moment the index opens; null until segments_ is set.
  std::atomic<SegmentSet*> flush_segments_{nullptr};
  // Appends-then-commits against FlushDurable (base/commit_gate.h).
  CommitGate commit_gate_;
  // Index log syncs begun (FlushDurable), from 1. A write that moves a
  // file's earlier bytes (an inline head into a record, a staged start into
  // the file's data file) syncs the bytes' new place before its batch when
  // one began since the file's first write (InodeState::first_write_syncs).
  std::atomic<uint64_t> index_syncs_{1};
  std::unique_ptr<CompactionState> compaction_ = std::make_unique<CompactionState>();

  static constexpr uint64_t kInoBlock = 4096;  // inode numbers persisted at a time
  // Serializes namespace mutations of an embedded store (held exclusively);
  // a shared store's hold it shared, since its index's transactions order
  // them, across threads as across hosts. Lock order: see the top.
  SharedMutex ns_mu_;
  // The inode numbers this store hands out next. A leaf lock.
  Mutex ino_mu_;
  uint64_t next_ino_ GUARDED_BY(ino_mu_) = 0;
  uint64_t ino_limit_ GUARDED_BY(ino_mu_) = 0;  // persisted high-water mark

  // Serializes index backups: the idle mount's, compaction's and close's. A
  // leaf lock (taken under the compaction lock).
  Mutex backup_mu_;

  // Run-time settings (the rest of options_ is fixed while open).
  Mutex update_mu_;  // serializes UpdateOptions; taken before the engine's other locks
  std::atomic<uint64_t> coalesce_gap_;
  std::atomic<uint64_t> coalesce_max_;
  std::atomic<int> compression_level_;

  // Free-space check, refreshed at most every kSpaceCheckInterval bytes or ms.
  // A leaf lock (taken under an inode's mutex by writes and compaction).
  Mutex space_mu_;
  uint64_t space_avail_ GUARDED_BY(space_mu_) = UINT64_MAX;
  uint64_t space_checked_ms_ GUARDED_BY(space_mu_) = 0;
  uint64_t space_since_check_ GUARDED_BY(space_mu_) = 0;
  // What fallocate reserved (engine/data/reservations.h).
  Reservations reservations_ GUARDED_BY(space_mu_);
  // reservations_.bytes(), read without space_mu_: most stores have none,
  // and ReservedBytes, asked for every stat, then takes no lock.
  std::atomic<uint64_t> reserved_bytes_{0};

  struct Counters {
    std::atomic<uint64_t> reads{0}, read_bytes{0}, writes{0}, write_bytes{0};
    std::atomic<uint64_t> backing_reads{0}, backing_read_bytes{0}, coalesced_reads{0};
    std::atomic<uint64_t> cache_hits{0}, cache_misses{0}, inline_writes{0};
    std::atomic<uint64_t> records_written{0}, stored_bytes{0}, fsyncs{0}, checksum_errors{0};
    std::atomic<uint64_t> data_file_writes{0}, data_file_write_bytes{0};
    std::atomic<uint64_t> data_file_reads{0}, data_file_read_bytes{0};
    std::atomic<uint64_t> direct_writes{0}, direct_adoptions{0}, direct_adopted_bytes{0};
    std::atomic<uint64_t> direct_rereads{0}, file_refreshes{0};
  } counters_;
};

// The public attributes of inode `ino`, whose index value is `v`.
Attr ToAttr(uint64_t ino, const format::InodeValue& v);

}  // namespace ckptfs::engine
