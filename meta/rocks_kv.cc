#include "meta/rocks_kv.h"

#include <rocksdb/write_batch.h>

#include <cstring>

namespace ckptfs::meta {
namespace {

class SpaceMerge final : public rocksdb::AssociativeMergeOperator {
 public:
  explicit SpaceMerge(Space s) : space_(s) {}
  bool Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger* logger) const override {
    std::optional<std::string_view> have;
    if (existing != nullptr) have = std::string_view(existing->data(), existing->size());
    // false: corruption, which RocksDB reports to the reader.
    return ApplyMerge(space_, have, std::string_view(value.data(), value.size()), new_value).ok();
  }
  const char* Name() const override {
    return space_ == Space::kMeta ? "ckptfs.Counter" : "ckptfs.SegmentStat";
  }

 private:
  const Space space_;
};

rocksdb::Slice ToSlice(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }
std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

// The reads of a transaction of type `Base` (ReadTxn or Txn): all of one
// snapshot, taken at the first read and released with the transaction.
template <class Base>
class RocksReader : public Base {
 public:
  explicit RocksReader(const RocksKv* kv) : kv_(kv) {}
  ~RocksReader() override {
    if (snapshot_ != nullptr) kv_->db()->ReleaseSnapshot(snapshot_);
  }

  Result<std::optional<std::string>> Get(Space s, std::string_view key) override {
    std::string v;
    rocksdb::Status st = kv_->db()->Get(Options(), kv_->family(s), ToSlice(key), &v);
    if (st.IsNotFound()) return std::optional<std::string>();
    if (!st.ok()) return FromRocksStatus(st, std::string("read index ") + SpaceName(s));
    return std::optional<std::string>(std::move(v));
  }

  Status Scan(Space s, std::string_view begin, std::string_view end, const ScanFn& fn) override {
    rocksdb::ReadOptions ro = Options();
    rocksdb::Slice upper = ToSlice(end);
    if (!end.empty()) ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(kv_->db()->NewIterator(ro, kv_->family(s)));
    for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
      if (!fn(ToView(it->key()), ToView(it->value()))) break;
    }
    return FromRocksStatus(it->status(), std::string("scan index ") + SpaceName(s));
  }

  Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                       std::string_view end) override {
    rocksdb::ReadOptions ro = Options();
    rocksdb::Slice lower = ToSlice(begin);
    rocksdb::Slice upper = ToSlice(end);
    ro.iterate_lower_bound = &lower;
    if (!end.empty()) ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(kv_->db()->NewIterator(ro, kv_->family(s)));
    if (end.empty()) {
      it->SeekToLast();
    } else {
      it->SeekForPrev(upper);
      // SeekForPrev lands on `end` itself when it exists; the range ends before it.
      if (it->Valid() && it->key() == upper) it->Prev();
    }
    if (!it->Valid()) {
      CKPTFS_RETURN_IF_ERROR(
          FromRocksStatus(it->status(), std::string("scan index ") + SpaceName(s)));
      return std::optional<KeyValue>();
    }
    return std::optional<KeyValue>(
        KeyValue{std::string(ToView(it->key())), std::string(ToView(it->value()))});
  }

 protected:
  const RocksKv* const kv_;

 private:
  // Read options at the snapshot, which the first read takes.
  rocksdb::ReadOptions Options() {
    if (snapshot_ == nullptr) snapshot_ = kv_->db()->GetSnapshot();
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot_;
    return ro;
  }

  const rocksdb::Snapshot* snapshot_ = nullptr;
};

class RocksReadTxn final : public RocksReader<ReadTxn> {
 public:
  using RocksReader::RocksReader;
};

class RocksTxn final : public RocksReader<Txn> {
 public:
  using RocksReader::RocksReader;

  Status Commit(Durability d) override {
    if (writes_.empty()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(writes_.Check());
    // The store's own locks order its commits: the latest state is the
    // one this commit applies to.
    for (const Writes::Range& r : writes_.empty_ranges()) CKPTFS_RETURN_IF_ERROR(CheckEmpty(r));
    rocksdb::WriteBatch batch;
    for (const Write& w : writes_.list()) {
      rocksdb::ColumnFamilyHandle* cf = kv_->family(w.space);
      rocksdb::Status st;
      switch (w.kind) {
        case Write::Kind::kPut: st = batch.Put(cf, w.key, w.value); break;
        case Write::Kind::kInsert: {
          CKPTFS_RETURN_IF_ERROR(CheckInsert(w));
          st = batch.Put(cf, w.key, w.value);
          break;
        }
        case Write::Kind::kDelete: st = batch.Delete(cf, w.key); break;
        case Write::Kind::kMerge: st = batch.Merge(cf, w.key, w.value); break;
      }
      CKPTFS_RETURN_IF_ERROR(FromRocksStatus(st, "build index batch"));
    }
    rocksdb::WriteOptions wo;
    wo.sync = d == Durability::kSynced;
    wo.disableWAL = d == Durability::kVolatile;
    rocksdb::Status st = kv_->db()->Write(wo, &batch);
    if (st.IsNoSpace() || (st.getState() != nullptr && std::strstr(st.getState(), "No space"))) {
      // RocksDB stops writes after a failed log append; resume, so that the
      // index takes writes again once space is freed.
      (void)kv_->db()->Resume();
      return Status(ENOSPC, "index write: no space left on device");
    }
    return FromRocksStatus(st, "index write");
  }

 private:
  // RangeHeld when a key of `r` exists now.
  Status CheckEmpty(const Writes::Range& r) {
    std::unique_ptr<rocksdb::Iterator> it(
        kv_->db()->NewIterator(rocksdb::ReadOptions(), kv_->family(r.space)));
    it->Seek(ToSlice(r.begin));
    if (it->Valid() && (r.end.empty() || it->key().compare(ToSlice(r.end)) < 0)) {
      return RangeHeldStatus(std::string("commit: a key of the ") + SpaceName(r.space) +
                             " range it requires empty exists");
    }
    return FromRocksStatus(it->status(), std::string("read index ") + SpaceName(r.space));
  }

  // EEXIST when the key of Insert `w` exists now (not at the snapshot).
  Status CheckInsert(const Write& w) {
    std::string v;
    rocksdb::Status st =
        kv_->db()->Get(rocksdb::ReadOptions(), kv_->family(w.space), ToSlice(w.key), &v);
    if (st.IsNotFound()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(FromRocksStatus(st, std::string("read index ") + SpaceName(w.space)));
    return Status(EEXIST, std::string("insert into ") + SpaceName(w.space) + ": key exists");
  }
};

}  // namespace

std::shared_ptr<rocksdb::MergeOperator> NewMergeOperator(Space s) {
  if (!SpaceMerges(s)) return nullptr;
  return std::make_shared<SpaceMerge>(s);
}

std::string FamilyName(Space s) {
  return s == Space::kMeta ? rocksdb::kDefaultColumnFamilyName : SpaceName(s);
}

Status FromRocksStatus(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.IsNoSpace()) return Status(ENOSPC, what + ": " + s.ToString());
  if (s.IsCorruption()) return Status::Corruption(what + ": " + s.ToString());
  return Status(EIO, what + ": " + s.ToString());
}

RocksKv::RocksKv(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> families)
    : db_(db), families_(std::move(families)) {}

Result<std::unique_ptr<ReadTxn>> RocksKv::BeginRead() {
  return std::unique_ptr<ReadTxn>(std::make_unique<RocksReadTxn>(this));
}

Result<std::unique_ptr<Txn>> RocksKv::Begin() {
  return std::unique_ptr<Txn>(std::make_unique<RocksTxn>(this));
}

Status RocksKv::Sync() { return FromRocksStatus(db_->SyncWAL(), "sync index log"); }

std::string RocksKv::Describe() const { return "RocksDB at " + db_->GetName(); }

Result<std::unique_ptr<OwnedRocksKv>> OwnedRocksKv::Open(const std::string& path) {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (Space s : kAllSpaces) {
    rocksdb::ColumnFamilyOptions co;
    co.merge_operator = NewMergeOperator(s);
    families.emplace_back(FamilyName(s), co);
  }
  std::unique_ptr<OwnedRocksKv> out(new OwnedRocksKv());
  rocksdb::DB* db = nullptr;
  CKPTFS_RETURN_IF_ERROR(
      FromRocksStatus(rocksdb::DB::Open(o, path, families, &out->handles_, &db), "open " + path));
  out->db_.reset(db);
  out->kv_ = std::make_unique<RocksKv>(db, out->handles_);
  return out;
}

OwnedRocksKv::~OwnedRocksKv() {
  kv_.reset();
  for (rocksdb::ColumnFamilyHandle* h : handles_) (void)db_->DestroyColumnFamilyHandle(h);
  db_.reset();
}

}  // namespace ckptfs::meta
