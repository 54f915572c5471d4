// RocksDB merge operators of the index. Merges let many writers update shared
// counters (a segment's live/dead bytes, the inode count) inside their own
// WriteBatch without a read-modify-write under a common lock.
#pragma once

#include <rocksdb/merge_operator.h>

#include <memory>

namespace ckptfs::engine {

// Values and operands are format::SegmentStat encodings.
std::shared_ptr<rocksdb::MergeOperator> NewSegmentStatMergeOperator();
// Values and operands are 8-byte little-endian int64 counters that add up.
// Keys written with Put keep working: a Put resets the counter.
std::shared_ptr<rocksdb::MergeOperator> NewCounterMergeOperator();

}  // namespace ckptfs::engine
