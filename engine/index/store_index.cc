#include "engine/index/store_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/index/index_backup.h"
#include "engine/index/index_db.h"
#include "meta/pg_kv.h"
#include "meta/rocks_kv.h"
#include "meta/shared_kv.h"

namespace ckptfs::engine {
namespace {

// Writes `content` to `path` through a fsynced `path`.tmp renamed into place.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(errno, "create " + tmp);
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) return Status::IOError(err, "write " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError(errno, "rename " + tmp);
  }
  return Status::OK();
}

// The contents of `path`; nullopt when it cannot be opened.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Connects to the shared index that `where` names (PostgreSQL, or one in
// memory), through `meta` instead of its connection string when that is set.
Result<std::unique_ptr<meta::Kv>> OpenSharedIndex(const format::SharedIndex& where,
                                                  const IndexOpenOptions& options) {
  meta::SharedKvOptions so;
  so.uri = options.meta.empty() ? where.meta : options.meta;
  so.schema = where.schema;
  so.create = options.create;
  so.reconnect_wait_s = options.meta_timeout;
  return meta::OpenSharedKv(so);
}

}  // namespace

Result<std::unique_ptr<meta::SnapshotFile>> ReadSnapshotFile(io::Env* env,
                                                             const std::string& path) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f, env->Open(path, io::OpenMode::kRead));
  CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  std::string bytes(size, '\0');
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, f->ReadAt(0, size, bytes.data()));
  if (n != size) {
    return Status(EIO, "read snapshot " + path + ": " + std::to_string(n) + " of " +
                           std::to_string(size) + " bytes");
  }
  return meta::SnapshotFile::FromBytes(path, std::move(bytes));
}

Status CheckFormatFile(const std::string& dir) {
  const std::optional<std::string> text = ReadSmallFile(dir + "/" + format::kFormatFileName);
  return format::ParseFormatFile(text.value_or("")).Annotate(dir);
}

Status WriteFormatFile(const std::string& dir) {
  return WriteFileAtomically(dir + "/" + format::kFormatFileName, format::FormatFileContents());
}

Result<std::optional<format::SharedIndex>> ReadSharedFile(const std::string& dir) {
  const std::optional<std::string> text = ReadSmallFile(dir + "/" + format::kSharedFileName);
  if (!text.has_value()) return std::optional<format::SharedIndex>();
  format::SharedIndex shared;
  CKPTFS_RETURN_IF_ERROR(format::ParseSharedFile(*text, &shared).Annotate(dir));
  return std::optional<format::SharedIndex>(std::move(shared));
}

Result<std::optional<format::SharedIndex>> ChooseIndex(const std::string& dir, bool creating,
                                                       const std::string& meta) {
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::SharedIndex> shared, ReadSharedFile(dir));
  if (shared.has_value() || meta.empty()) return shared;
  if (!creating) {
    return Status(EINVAL, dir + " keeps its index in " + format::kIndexDirName +
                              "/: meta= chooses the index of a new store only");
  }
  CKPTFS_ASSIGN_OR_RETURN(std::string conninfo, meta::ConninfoWithoutPassword(meta));
  std::random_device rd;
  char schema[32];
  std::snprintf(schema, sizeof(schema), "ckptfs_%08x%08x", rd(), rd());
  shared = format::SharedIndex{std::move(conninfo), schema};
  CKPTFS_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + format::kSharedFileName,
                                             format::SharedFileContents(*shared)));
  return shared;
}

Result<std::unique_ptr<StoreIndex>> StoreIndex::Open(
    const std::string& dir, const std::optional<format::SharedIndex>& shared, io::Env* env,
    const IndexOpenOptions& options) {
  if (shared.has_value()) {
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<meta::Kv> kv, OpenSharedIndex(*shared, options));
    return std::unique_ptr<StoreIndex>(new StoreIndex(dir, nullptr, std::move(kv)));
  }
  auto db = std::make_unique<IndexDb>();
  CKPTFS_RETURN_IF_ERROR(OpenIndexDb(dir + "/" + format::kIndexDirName, options.create,
                                     options.read_only, env, db.get(), options.before_flush,
                                     options.strict_log));
  auto kv = std::make_unique<meta::RocksKv>(db->db.get(), db->handles);
  return std::unique_ptr<StoreIndex>(new StoreIndex(dir, std::move(db), std::move(kv)));
}

StoreIndex::StoreIndex(std::string dir, std::unique_ptr<IndexDb> db, std::unique_ptr<meta::Kv> kv)
    : dir_(std::move(dir)), embedded_(db != nullptr), db_(std::move(db)), kv_(std::move(kv)) {}

StoreIndex::~StoreIndex() {
  Status s = Close();
  if (!s.ok()) std::fprintf(stderr, "ckptfs: closing the index of %s: %s\n", dir_.c_str(),
                            s.ToString().c_str());
}

Status StoreIndex::Flush() {
  if (db_ == nullptr || db_->db == nullptr) return Status::OK();
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocksStatus(db_->db->Flush(fo, db_->handles), "flush index");
}

uint64_t StoreIndex::MemtableBytes() const {
  return db_ != nullptr && db_->memtables != nullptr ? db_->memtables->memory_usage() : 0;
}

uint64_t StoreIndex::BlockCacheBytes() const {
  return db_ != nullptr && db_->block_cache != nullptr ? db_->block_cache->GetUsage() : 0;
}

bool StoreIndex::CanBackUp() const {
  return db_ != nullptr && db_->db != nullptr && db_->env == nullptr;
}

Status StoreIndex::Backup(int64_t now, int64_t max_age_s) {
  if (max_age_s > 0) {
    const std::vector<std::string> backups = ListIndexBackups(dir_);
    if (!backups.empty() && now - std::stoll(backups.front()) < max_age_s) return Status::OK();
  }
  return BackupIndex(db_->db.get(), dir_, now);
}

Result<uint64_t> StoreIndex::Bytes() {
  if (!embedded_) {
    return kv_->StoredBytes();
  }
  // RocksDB may delete files while we walk: skip what vanishes.
  namespace stdfs = std::filesystem;
  const stdfs::path index_dir = stdfs::path(dir_) / format::kIndexDirName;
  uint64_t bytes = 0;
  std::error_code ec;
  for (stdfs::recursive_directory_iterator d(index_dir, ec), end; !ec && d != end; d.increment(ec)) {
    std::error_code size_ec;
    if (d->is_regular_file(size_ec)) {
      const uintmax_t n = d->file_size(size_ec);
      if (!size_ec) bytes += n;
    }
  }
  if (ec && ec.value() != ENOENT) {
    return Status::IOError(ec.value(), "list " + index_dir.string());
  }
  return bytes;
}

Status StoreIndex::Close() {
  kv_.reset();
  return db_ != nullptr ? db_->Close() : Status::OK();
}

}  // namespace ckptfs::engine
