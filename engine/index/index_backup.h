// Backups of the index inside the store: STORE/backup/NNNNNNNNNN/, named by
// the time they were taken (seconds since the epoch, zero-padded), each a
// RocksDB checkpoint of the index: its table files hard-linked (copied
// where the filesystem cannot link), its MANIFEST, CURRENT and OPTIONS
// copied, taken with the memtables flushed so that no log is needed. The
// newest kIndexBackupsKept are kept. A backup costs the index's small files
// and, as its table files are compacted away, the space of the tables it
// still links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace rocksdb {
class DB;
}

namespace ckptfs::engine {

inline constexpr int kIndexBackupsKept = 2;
inline constexpr char kBackupDirName[] = "backup";

// Takes a backup of the open index `db` of the store at `store_dir`, named
// by `now` (replacing one of the same name), then removes the oldest beyond
// kIndexBackupsKept.
Status BackupIndex(rocksdb::DB* db, const std::string& store_dir, int64_t now);

// The names of the store's backups, newest first.
std::vector<std::string> ListIndexBackups(const std::string& store_dir);

// Replaces STORE/index with a copy of backup `name` (table files
// hard-linked); the index it replaces is kept as STORE/index.replaced-NOW
// (a damaged index is evidence). REQUIRES: the store is not open.
Status RestoreIndexBackup(const std::string& store_dir, const std::string& name, int64_t now,
                          std::string* kept_as);

}  // namespace ckptfs::engine
