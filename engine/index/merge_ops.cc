#include "engine/index/merge_ops.h"

#include "format/format.h"

namespace ckptfs::engine {
namespace {

class SegmentStatMerge : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger* logger) const override {
    format::SegmentStat a, b;
    if (existing != nullptr &&
        !format::DecodeSegmentStat(std::string_view(existing->data(), existing->size()), &a).ok()) {
      return false;  // corruption: RocksDB reports it to the reader
    }
    if (!format::DecodeSegmentStat(std::string_view(value.data(), value.size()), &b).ok()) {
      return false;
    }
    *new_value = format::EncodeSegmentStat(format::MergeSegmentStat(a, b));
    return true;
  }
  const char* Name() const override { return "ckptfs.SegmentStat"; }
};

class CounterMerge : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger* logger) const override {
    int64_t a = 0;
    if (existing != nullptr) {
      if (existing->size() != 8) return false;
      a = static_cast<int64_t>(format::GetLE64(existing->data()));
    }
    if (value.size() != 8) return false;
    int64_t b = static_cast<int64_t>(format::GetLE64(value.data()));
    new_value->clear();
    format::PutLE64(new_value, static_cast<uint64_t>(a + b));
    return true;
  }
  const char* Name() const override { return "ckptfs.Counter"; }
};

}  // namespace

std::shared_ptr<rocksdb::MergeOperator> NewSegmentStatMergeOperator() {
  return std::make_shared<SegmentStatMerge>();
}
std::shared_ptr<rocksdb::MergeOperator> NewCounterMergeOperator() {
  return std::make_shared<CounterMerge>();
}

}  // namespace ckptfs::engine
