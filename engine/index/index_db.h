// IndexDb: the store's RocksDB index, opened with its column families and
// merge operators. Shared by StoreImpl (an open store) and fsck (which opens
// the index of a store nobody has open), so that both see the same schema.
#pragma once

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/write_buffer_manager.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/index/store_index.h"
#include "io/env.h"
#include "meta/rocks_kv.h"

namespace ckptfs::engine {

// The memory bounds kIndexBlockCacheBytes and kIndexMemtableBytes are in
// engine/index/store_index.h.
struct IndexDb {
  // The filesystem of the index when not RocksDB's default
  // (engine/index/index_file_system.h); outlives db.
  std::unique_ptr<rocksdb::Env> env;
  // What bounds the memory; outlive db.
  std::shared_ptr<rocksdb::Cache> block_cache;
  std::shared_ptr<rocksdb::WriteBufferManager> memtables;
  std::unique_ptr<rocksdb::DB> db;
  // In the order of format.h's families: meta ("default"), inodes, dentries,
  // extents, segments, xattrs. Owned; Close() destroys them.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;

  rocksdb::ColumnFamilyHandle* meta() const { return handles[0]; }
  rocksdb::ColumnFamilyHandle* inodes() const { return handles[1]; }
  rocksdb::ColumnFamilyHandle* dentries() const { return handles[2]; }
  rocksdb::ColumnFamilyHandle* extents() const { return handles[3]; }
  rocksdb::ColumnFamilyHandle* segments() const { return handles[4]; }
  rocksdb::ColumnFamilyHandle* xattrs() const { return handles[5]; }

  // Destroys the handles and closes the database. Idempotent.
  Status Close();
};

// Opens the index at `path` (STORE/index) on RocksDB's filesystem, through
// `env`'s IndexFileHooks when it has them (engine/index/index_file_system.h). `create`: create it when missing.
// `read_only`: open without writing (RocksDB's read-only mode; the log is
// replayed in memory only). EBUSY when another process has it open; EIO with
// RocksDB's message otherwise.
// `before_flush`, when set, runs before RocksDB writes a memtable to a table
// file: the store syncs its segments there, so that a flushed (durable)
// extent never points at bytes that are not.
// The log is replayed up to its first damage (what a crash leaves at its
// tail, or worse); with `strict_log` only a torn last record is passed over,
// and other damage fails the open with corruption (fsck's check).
Status OpenIndexDb(const std::string& path, bool create, bool read_only, io::Env* env,
                   IndexDb* out, std::function<void()> before_flush = nullptr,
                   bool strict_log = false);

// Rebuilds the index at `path` from what is left of it (RocksDB's RepairDB
// with the index's column families and merge operators): a new MANIFEST
// from the table files that read, the logs' records turned into tables.
// Files that cannot be read are moved to `path`/lost. RepairDB replays a
// log's records only into the families it found table files of (a batch
// naming another is dropped whole), so SeedIndexFamilies runs first;
// `seeds` gets the names of the tables it wrote.
Status RepairIndexDb(const std::string& path, io::Env* env, std::vector<std::string>* seeds);

// Writes into `path` one table file per column family other than the
// default, each holding only a tombstone of the empty key and named in its
// properties as that family with its id (the families are created in
// format.h's order, so their ids are 1 to 5): RepairDB then knows every
// family before it replays the logs. Appends the files' names to `seeds`.
Status SeedIndexFamilies(const std::string& path, io::Env* env, std::vector<std::string>* seeds);

// Maps a RocksDB status to ours: ENOSPC, corruption (EIO) or EIO.
using meta::FromRocksStatus;

}  // namespace ckptfs::engine
