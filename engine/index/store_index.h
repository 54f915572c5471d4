// StoreIndex: the index of a store, whichever it is, opened one way for the
// store and for fsck. An embedded store keeps it in RocksDB under
// STORE/index (engine/index/index_db.h); a shared store in PostgreSQL, at
// the server and schema its STORE/SHARED file names (docs/SHARED.md). Every
// read and write goes through kv() (meta/kv.h); what only one kind has
// (RocksDB's flush, memory and backups) is a no-op on the other.
//
// Thread safety: kv() may be used from any number of threads at once; Open,
// Close and the destructor from one, with no other call running.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "format/format.h"
#include "io/env.h"
#include "meta/kv.h"
#include "meta/snapshot_file.h"

namespace ckptfs::engine {

struct IndexDb;

// The memory of a RocksDB index, bounded: RocksDB's block cache (data, index
// and filter blocks of the table files), and its memtables over all column
// families (writes wait for a flush rather than go past it).
inline constexpr uint64_t kIndexBlockCacheBytes = 64ull << 20;
inline constexpr uint64_t kIndexMemtableBytes = 128ull << 20;

// Checks the FORMAT file of the store at `dir` (format::ParseFormatFile).
Status CheckFormatFile(const std::string& dir);
// Writes the FORMAT file of a new store at `dir`, durably.
Status WriteFormatFile(const std::string& dir);

// Where the index of the store at `dir` is: the PostgreSQL server and schema
// its SHARED file names, or nullopt (RocksDB under STORE/index) when it has
// none. Corruption when the file does not parse.
Result<std::optional<format::SharedIndex>> ReadSharedFile(const std::string& dir);

// Where the index of the store at `dir` is (ReadSharedFile). A store with no
// SHARED file and a `meta` connection string (meta=) gets one only when
// `creating` (a new store): a new schema of its own on that server, written
// into SHARED (without a password); EINVAL for an existing embedded store.
Result<std::optional<format::SharedIndex>> ChooseIndex(const std::string& dir, bool creating,
                                                       const std::string& meta);

struct IndexOpenOptions {
  // Create the index when missing (a new store). Default: false.
  bool create = false;
  // RocksDB: open without writing (its read-only mode: the log is replayed
  // in memory only); fsck without --repair. Default: false.
  bool read_only = false;
  // RocksDB: runs before a memtable is written to a table file, on
  // RocksDB's threads, from the moment the index opens: the store syncs its
  // segments there, so that a flushed (durable) extent never points at
  // bytes that are not. Default: none.
  std::function<void()> before_flush;
  // RocksDB: only a torn last record of the log is passed over; other
  // damage fails the open with corruption (fsck's check). Default: false,
  // the log is replayed up to its first damage.
  bool strict_log = false;
  // PostgreSQL: a connection string that replaces the SHARED file's (the
  // mount's meta=, which may carry a password). Default: the file's.
  std::string meta;
  // PostgreSQL: seconds to wait for a lost server to come back (a restart,
  // a failover) before an operation fails with EIO. Default: 60.
  double meta_timeout = 60;
};

// The snapshot file at `path` (a sealed tree's index entries), read whole
// through `env`, where the store's data is.
Result<std::unique_ptr<meta::SnapshotFile>> ReadSnapshotFile(io::Env* env,
                                                             const std::string& path);

class StoreIndex {
 public:
  // Opens the index of the store at `dir`: RocksDB under STORE/index on
  // `env` when `shared` is nullopt, else PostgreSQL. EBUSY when another
  // process has the RocksDB index open; corruption when it is damaged.
  static Result<std::unique_ptr<StoreIndex>> Open(const std::string& dir,
                                                  const std::optional<format::SharedIndex>& shared,
                                                  io::Env* env, const IndexOpenOptions& options);
  ~StoreIndex();
  StoreIndex(const StoreIndex&) = delete;
  StoreIndex& operator=(const StoreIndex&) = delete;

  // The index through the seam. REQUIRES: not closed.
  meta::Kv* kv() const { return kv_.get(); }
  // Whether it is RocksDB (else PostgreSQL).
  bool embedded() const { return embedded_; }

  // RocksDB: writes the memtables of every column family to table files and
  // waits for that. The index at rest then lives in its table files, which a
  // repair reads whole (RocksDB's repair replays only part of the logs).
  // Nothing for PostgreSQL.
  Status Flush();
  // What the index holds in memory now: RocksDB's memtables and block cache
  // (engine/index/index_db.h bounds them); 0 for PostgreSQL or once closed.
  uint64_t MemtableBytes() const;
  uint64_t BlockCacheBytes() const;
  // Whether Backup takes backups: a RocksDB index on the store's own disk
  // (not a test's fault-injecting filesystem, which is not where the backups
  // would go). PostgreSQL is backed up with its own tools.
  bool CanBackUp() const;
  // Takes a backup inside the store named by `now`, seconds since the epoch
  // (engine/index/index_backup.h), unless `max_age_s` > 0 and the newest
  // backup is younger than that. REQUIRES: CanBackUp(); one call at a time.
  Status Backup(int64_t now, int64_t max_age_s = 0);
  // The bytes the index takes: its files under STORE/index, or its tables
  // on the server.
  Result<uint64_t> Bytes();

  // Closes the index: the seam, then RocksDB's column families and database.
  // Idempotent; the destructor closes it too (an error then goes to
  // stderr).
  Status Close();

 private:
  StoreIndex(std::string dir, std::unique_ptr<IndexDb> db, std::unique_ptr<meta::Kv> kv);

  const std::string dir_;  // the store's
  const bool embedded_;
  // RocksDB's database, handles, caches and filesystem (null for
  // PostgreSQL); outlives kv_, which reads through it.
  std::unique_ptr<IndexDb> db_;
  std::unique_ptr<meta::Kv> kv_;
};

}  // namespace ckptfs::engine
