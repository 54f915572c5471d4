#include "engine/index/index_db.h"

#include <rocksdb/cache.h>


#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>

#include <cstdio>
#include <filesystem>

#include "engine/index/index_file_system.h"
#include "format/format.h"
#include "meta/rocks_kv.h"

namespace ckptfs::engine {

Status IndexDb::Close() {
  Status result;
  if (db != nullptr) {
    for (auto* h : handles) {
      Status s = FromRocksStatus(db->DestroyColumnFamilyHandle(h), "close index column family");
      if (result.ok()) result = s;
    }
    handles.clear();
    Status s = FromRocksStatus(db->Close(), "close index");
    if (result.ok()) result = s;
    db.reset();
    env.reset();
    block_cache.reset();
    memtables.reset();
  }
  return result;
}

namespace {
class BeforeFlush final : public rocksdb::EventListener {
 public:
  explicit BeforeFlush(std::function<void()> fn) : fn_(std::move(fn)) {}
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override { fn_(); }

 private:
  const std::function<void()> fn_;
};
}  // namespace

namespace {

// The options of the index: its DBOptions and its column families, with the
// merge operators and the memory bounds (engine/index/index_db.h).
struct IndexOptions {
  rocksdb::DBOptions db;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  rocksdb::ColumnFamilyOptions unknown_family;  // for a repair that finds one
  std::unique_ptr<rocksdb::Env> env;
  std::shared_ptr<rocksdb::Cache> block_cache;
  std::shared_ptr<rocksdb::WriteBufferManager> memtables;
};

IndexOptions MakeIndexOptions(io::Env* env, std::function<void()> before_flush) {
  IndexOptions io;
  rocksdb::DBOptions& dbo = io.db;
  if (before_flush) dbo.listeners.push_back(std::make_shared<BeforeFlush>(std::move(before_flush)));
  io.env = NewIndexEnv(env);
  if (io.env != nullptr) dbo.env = io.env.get();
  dbo.create_missing_column_families = true;
  dbo.max_open_files = 256;  // bounds descriptors; the index stays small
  dbo.keep_log_file_num = 2;
  dbo.info_log_level = rocksdb::WARN_LEVEL;
  dbo.max_background_jobs = 2;
  io.memtables = std::make_shared<rocksdb::WriteBufferManager>(
      kIndexMemtableBytes, /*cache=*/nullptr, /*allow_stall=*/true);
  dbo.write_buffer_manager = io.memtables;
  dbo.max_total_wal_size = 256ull << 20;

  io.block_cache = rocksdb::NewLRUCache(kIndexBlockCacheBytes);
  auto cf_opts = [&](std::shared_ptr<rocksdb::MergeOperator> merge) {
    rocksdb::ColumnFamilyOptions o;
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = io.block_cache;
    // Index and filter blocks count against the cache too: the bound holds
    // however many table files are open.
    t.cache_index_and_filter_blocks = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
    // Restores read the index in key order (inode numbers follow creation
    // order): larger blocks bring the neighbours' keys in the same read.
    t.block_size = 32 << 10;
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    o.write_buffer_size = 32ull << 20;
    o.merge_operator = std::move(merge);
    return o;
  };
  io.families = {
      {rocksdb::kDefaultColumnFamilyName, cf_opts(meta::NewMergeOperator(meta::Space::kMeta))},
      {format::kCfInodes, cf_opts(nullptr)},
      {format::kCfDentries, cf_opts(nullptr)},
      {format::kCfExtents, cf_opts(nullptr)},
      {format::kCfSegments, cf_opts(meta::NewMergeOperator(meta::Space::kSegments))},
      {format::kCfXattrs, cf_opts(nullptr)},
  };
  io.unknown_family = cf_opts(nullptr);
  return io;
}

}  // namespace

Status OpenIndexDb(const std::string& path, bool create, bool read_only, io::Env* env,
                   IndexDb* out, std::function<void()> before_flush, bool strict_log) {
  IndexOptions io = MakeIndexOptions(env, std::move(before_flush));
  io.db.create_if_missing = create;
  io.db.wal_recovery_mode = strict_log ? rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords
                                       : rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s =
      read_only ? rocksdb::DB::OpenForReadOnly(io.db, path, io.families, &handles, &raw)
                : rocksdb::DB::Open(io.db, path, io.families, &handles, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status(EBUSY, "index " + path + " is in use: " + s.ToString());
    }
    if (s.IsCorruption()) return Status::Corruption("open index " + path + ": " + s.ToString());
    return Status(EIO, "open index " + path + ": " + s.ToString());
  }
  out->env = std::move(io.env);
  out->block_cache = std::move(io.block_cache);
  out->memtables = std::move(io.memtables);
  out->db.reset(raw);
  out->handles = std::move(handles);
  return Status::OK();
}

namespace {

// A column family as a table file's properties name it: what SstFileWriter
// needs to write a table that RepairDB assigns to that family.
class NamedFamily final : public rocksdb::ColumnFamilyHandle {
 public:
  NamedFamily(std::string name, uint32_t id) : name_(std::move(name)), id_(id) {}
  const std::string& GetName() const override { return name_; }
  uint32_t GetID() const override { return id_; }
  rocksdb::Status GetDescriptor(rocksdb::ColumnFamilyDescriptor*) override {
    return rocksdb::Status::NotSupported("a family named for a seed table");
  }
  const rocksdb::Comparator* GetComparator() const override { return rocksdb::BytewiseComparator(); }

 private:
  const std::string name_;
  const uint32_t id_;
};

// The largest file number among `path`'s RocksDB files (NNNNNN.sst/.log,
// MANIFEST-NNNNNN).
uint64_t LargestFileNumber(const std::string& path) {
  uint64_t largest = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with("MANIFEST-")) name = name.substr(9);
    const size_t digits = name.find_first_not_of("0123456789");
    if (digits == 0 || name.empty()) continue;
    largest = std::max<uint64_t>(largest, std::stoull(name.substr(0, digits)));
  }
  return largest;
}

}  // namespace

Status SeedIndexFamilies(const std::string& path, io::Env* env, std::vector<std::string>* seeds) {
  IndexOptions io = MakeIndexOptions(env, nullptr);
  rocksdb::Options options(io.db, io.families[0].options);
  uint64_t number = LargestFileNumber(path);
  for (uint32_t id = 1; id < io.families.size(); ++id) {
    NamedFamily family(io.families[id].name, id);
    rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options, &family);
    char name[32];
    std::snprintf(name, sizeof(name), "%06llu.sst", static_cast<unsigned long long>(++number));
    const std::string file = path + "/" + name;
    rocksdb::Status s = writer.Open(file);
    // A tombstone of the empty key, which no family uses: the table changes
    // nothing that is read.
    if (s.ok()) s = writer.Delete(rocksdb::Slice());
    if (s.ok()) s = writer.Finish();
    if (!s.ok()) return FromRocksStatus(s, "write seed table " + file);
    seeds->push_back(name);
  }
  return Status::OK();
}

Status RepairIndexDb(const std::string& path, io::Env* env, std::vector<std::string>* seeds) {
  CKPTFS_RETURN_IF_ERROR(SeedIndexFamilies(path, env, seeds));
  IndexOptions io = MakeIndexOptions(env, nullptr);
  return FromRocksStatus(rocksdb::RepairDB(path, io.db, io.families, io.unknown_family),
                         "repair index " + path);
}

}  // namespace ckptfs::engine
