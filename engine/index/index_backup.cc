#include "engine/index/index_backup.h"

#include <rocksdb/utilities/checkpoint.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "format/format.h"

namespace ckptfs::engine {
namespace {

namespace fsys = std::filesystem;

std::string BackupName(int64_t now) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%010" PRId64, now);
  return buf;
}

bool IsBackupName(const std::string& name) {
  return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

Status FsError(const std::string& what, const std::error_code& ec) {
  return Status(ec.value() != 0 ? ec.value() : EIO, what + ": " + ec.message());
}

}  // namespace

Status BackupIndex(rocksdb::DB* db, const std::string& store_dir, int64_t now) {
  const std::string dir = store_dir + "/" + kBackupDirName;
  const std::string name = BackupName(now);
  const std::string tmp = dir + "/" + name + ".tmp";
  std::error_code ec;
  fsys::create_directories(dir, ec);
  if (ec) return FsError("index backup: create " + dir, ec);
  fsys::remove_all(tmp, ec);  // one a crash left
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db, &raw);
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush 0: the memtables are flushed first, no log is kept.
  if (s.ok()) s = checkpoint->CreateCheckpoint(tmp, /*log_size_for_flush=*/0);
  if (!s.ok()) {
    fsys::remove_all(tmp, ec);
    return Status(EIO, "index backup " + tmp + ": " + s.ToString());
  }
  fsys::remove_all(dir + "/" + name, ec);
  fsys::rename(tmp, dir + "/" + name, ec);
  if (ec) return FsError("index backup: rename " + tmp, ec);
  std::vector<std::string> all = ListIndexBackups(store_dir);
  for (size_t i = kIndexBackupsKept; i < all.size(); ++i) {
    fsys::remove_all(dir + "/" + all[i], ec);
    if (ec) return FsError("index backup: remove " + all[i], ec);
  }
  return Status::OK();
}

std::vector<std::string> ListIndexBackups(const std::string& store_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(store_dir + "/" + kBackupDirName, ec)) {
    const std::string name = e.path().filename().string();
    if (IsBackupName(name) && e.is_directory(ec)) out.push_back(name);
  }
  std::sort(out.rbegin(), out.rend());  // zero-padded: newest first
  return out;
}

Status RestoreIndexBackup(const std::string& store_dir, const std::string& name, int64_t now,
                          std::string* kept_as) {
  const std::string from = store_dir + "/" + kBackupDirName + "/" + name;
  const std::string index = store_dir + "/" + format::kIndexDirName;
  const std::string tmp = index + ".restoring";
  std::error_code ec;
  fsys::remove_all(tmp, ec);
  fsys::create_directories(tmp, ec);
  if (ec) return FsError("restore index backup: create " + tmp, ec);
  for (const auto& e : fsys::directory_iterator(from, ec)) {
    const fsys::path to = fsys::path(tmp) / e.path().filename();
    // Table files never change: a link shares them with the backup.
    if (e.path().extension() == ".sst") {
      fsys::create_hard_link(e.path(), to, ec);
      if (!ec) continue;
    }
    fsys::copy_file(e.path(), to, ec);
    if (ec) return FsError("restore index backup: copy " + e.path().string(), ec);
  }
  if (ec) return FsError("restore index backup: read " + from, ec);
  if (fsys::exists(index, ec)) {
    *kept_as = index + ".replaced-" + BackupName(now);
    fsys::remove_all(*kept_as, ec);
    fsys::rename(index, *kept_as, ec);
    if (ec) return FsError("restore index backup: move " + index + " aside", ec);
  }
  fsys::rename(tmp, index, ec);
  if (ec) return FsError("restore index backup: rename " + tmp, ec);
  return Status::OK();
}

}  // namespace ckptfs::engine
