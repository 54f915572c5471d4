// The embedded implementation of the seam (meta/kv.h): a RocksDB database
// with one column family per key space. One process, no server; the
// default index of a store (engine/index/index_db.h opens it).
//
// A transaction reads a RocksDB snapshot taken at its first read, and a
// read-write one commits one WriteBatch. It never reports a conflict: the
// engine's own locks keep what a writer reads from changing under it. An
// Insert reads its key's latest value at the commit (EEXIST when present);
// the caller's locks keep another writer from creating it between that read
// and the write.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/merge_operator.h>

#include <memory>
#include <string>
#include <vector>

#include "meta/kv.h"

namespace ckptfs::meta {

// The merge operator of a space's column family (ApplyMerge's rule);
// nullptr for a space without merges.
std::shared_ptr<rocksdb::MergeOperator> NewMergeOperator(Space s);

// The column family name of a space: "default" for kMeta, else SpaceName.
std::string FamilyName(Space s);

// Maps a RocksDB status to ours: ENOSPC, corruption (EIO) or EIO, with
// `what` before RocksDB's message.
Status FromRocksStatus(const rocksdb::Status& s, const std::string& what);

class RocksKv final : public Kv {
 public:
  // `db` and `families` (in kAllSpaces order) must outlive this.
  RocksKv(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> families);

  Result<std::unique_ptr<ReadTxn>> BeginRead() override;
  Result<std::unique_ptr<Txn>> Begin() override;
  Status Sync() override;
  std::string Describe() const override;

  rocksdb::DB* db() const { return db_; }
  rocksdb::ColumnFamilyHandle* family(Space s) const {
    return families_[static_cast<size_t>(s)];
  }

 private:
  rocksdb::DB* const db_;
  const std::vector<rocksdb::ColumnFamilyHandle*> families_;
};

// A RocksDB database of its own with the seam's column families and merge
// operators and RocksDB's default options, through RocksKv: for tests and
// benchmarks of the seam. (A store opens its index with its own options:
// engine/index/index_db.h.)
class OwnedRocksKv {
 public:
  // Opens, creating when missing, the database at `path`.
  static Result<std::unique_ptr<OwnedRocksKv>> Open(const std::string& path);
  ~OwnedRocksKv();
  RocksKv* kv() { return kv_.get(); }

 private:
  OwnedRocksKv() = default;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::unique_ptr<RocksKv> kv_;
};

}  // namespace ckptfs::meta
