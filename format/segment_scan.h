// Sequential walk over the records of one segment file, without the index:
// what fsck uses to verify every record and to find data nothing points to.
//
// The walk starts after the 32-byte segment header and follows the records'
// lengths. Where a valid header is expected but absent (a zero-filled gap left
// by a crash, a torn or damaged record), it scans forward for the next header
// whose magic and header checksum match, and reports the bytes in between as
// a gap. Payload checksums are verified unless the walk is "headers only".
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "format/format.h"
#include "base/status.h"

namespace ckptfs::format {

struct ScannedRecord {
  uint64_t offset = 0;  // of the header in the segment file
  format::RecordHeader header;
  enum class Payload : uint8_t {
    kUnchecked,  // headers-only walk
    kOk,
    kBadChecksum,
    kTruncated,  // the file ends inside the payload
  } payload = Payload::kUnchecked;
};

struct ScannedGap {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool zeros = false;  // every byte is zero (an unwritten reservation)
};

struct SegmentScanOptions {
  bool verify_payloads = true;
  // Size of each sequential read. Headers-only walks use a small one so that
  // payloads are skipped rather than read.
  size_t read_bytes = 16u << 20;
};

// Reads up to `len` bytes at `offset` of the segment file into `buf`; fewer
// only at its end. The scan does no I/O of its own.
using ReadAtFn = std::function<Result<size_t>(uint64_t offset, size_t len, char* buf)>;

// Walks a segment file of `file_size` bytes read through `read_at`. Calls `on_record` for
// every record header found, `on_gap` for unparsable stretches and
// `on_progress` with the offset reached, in file order. Fails only on I/O
// errors.
Status ScanSegment(const ReadAtFn& read_at, uint64_t file_size, const SegmentScanOptions& options,
                   const std::function<void(const ScannedRecord&)>& on_record,
                   const std::function<void(const ScannedGap&)>& on_gap,
                   const std::function<void(uint64_t offset)>& on_progress);

// Reads the first kSegmentHeaderSize bytes of segment `segment_id` through
// `read_at` and checks them (CheckSegmentHeader): the one reading of a
// segment file's header. A read error is returned as it is; a file shorter
// than the header, or a header that does not check, is corruption.
Status ReadSegmentHeader(const ReadAtFn& read_at, uint64_t segment_id);

// Largest stored_len a plausible record header may claim (the largest
// max_record_bytes plus zstd's worst-case growth).
inline constexpr uint32_t kMaxPlausibleStoredLen = (64u << 20) + (1u << 20);

}  // namespace ckptfs::format
