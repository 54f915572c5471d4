// ReadPlan: which segment byte ranges to read for a set of needed records.
//
// Records of one segment merge into one backing read when the bytes between
// them are at most `gap` and the merged read stays within `max`. With both
// settings nonzero, a read shorter than `max` is extended to `max` bytes so
// that the records after it (the neighbouring small files written next to
// it) arrive in the same read; one plan extends its reads by at most `max`
// bytes in all (the first reads first), so that scattered records do not
// each bring `max` bytes. gap == 0 or max == 0 turns all of this off:
// one backing read per record.
//
// Pure logic: no I/O, no locks.
#pragma once

#include <cstdint>
#include <vector>

namespace ckptfs::io {

struct RecordRef {
  uint64_t segment_id = 0;
  uint64_t offset = 0;  // of the record header
  uint64_t length = 0;  // header + stored payload
  bool operator==(const RecordRef&) const = default;
};

struct BackingRead {
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint64_t required = 0;  // bytes that must be there (covers every record)
  uint64_t length = 0;    // bytes to ask for; >= required (prefetch)
  std::vector<RecordRef> records;  // the needed records inside, in offset order
};

struct CoalesceSettings {
  uint64_t gap = 0;
  uint64_t max = 0;
  bool enabled() const { return gap > 0 && max > 0; }
};

// `needed` may be unsorted and hold duplicates.
std::vector<BackingRead> PlanReads(std::vector<RecordRef> needed, const CoalesceSettings& c);

}  // namespace ckptfs::io
