// LoadPlan: how to fill a destination with byte ranges of one file, cut into
// chunks that each fit one staging buffer. Pure logic: no I/O.
//
// Direct plans (PlanDirect) read segment records: records needed by the
// ranges are merged into backing reads by the mount's coalescing rules
// (io/read_plan.h: gap, max; the read never grows past what is needed),
// uncompressed and compressed records separately. A read of uncompressed
// records lands in the staging buffer as it is ("in place"): the sink copies
// each record's window straight out of it. A read holding zstd records lands
// in a reader's scratch buffer, and the decoded windows are written into the
// staging buffer. Blocks of the file's data file are planned as uncompressed
// records without a header: merged by the same rules, read in place, and
// each checked whole (format::CheckDataFileBlock) before its windows are
// copied out. Holes become zero fills, inline extents copies out of the
// layout, and inline extents too large for the xattr reads through the file.
//
// Plans through the file (PlanThroughFile) pread the file itself.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/format.h"
#include "gpu/file_layout.h"
#include "gpu/sink.h"

namespace ckptfs::gpu {

// File bytes [file_offset, +length) go to destination [dest_offset, +length).
struct Range {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  uint64_t dest_offset = 0;
};

// Part of a record's decoded data that a scratch read writes into staging.
struct Window {
  uint64_t decoded_offset = 0;
  uint64_t length = 0;
  uint64_t staging_offset = 0;
};

// A record (or data-file block) inside a backing read, and what the index
// says it must be.
struct RecordTask {
  uint64_t read_offset = 0;  // of the record header (block), from the start of the read
  // One extent that points at the record, as the index has it, and where it
  // starts in the file: the record must pass format::CheckRecordForExtent;
  // a block (extent.in_data_file) format::CheckDataFileBlock.
  format::ExtentValue extent;
  uint64_t file_offset = 0;
  std::vector<Window> windows;  // scratch reads only
};

inline constexpr int kThroughFile = -1;
inline constexpr int kDataFile = -2;  // the file's data file (FileLayout::data_dir)

struct ReadTask {
  // Index into LoadPlan::segment_ids, kThroughFile or kDataFile.
  int source = kThroughFile;
  uint64_t offset = 0;  // in the segment, the data file or the file
  uint64_t length = 0;
  bool in_place = true;  // lands at staging_offset; otherwise in scratch
  uint64_t staging_offset = 0;
  std::vector<RecordTask> records;  // segment and data-file reads: every one to verify
};

// Bytes of an inline extent to put into staging.
struct InlineTask {
  std::string_view data;  // points into the FileLayout's extent
  uint64_t staging_offset = 0;
};

struct Chunk {
  std::vector<ReadTask> reads;
  std::vector<InlineTask> inlines;
  std::vector<CopyOp> copies;  // staging -> destination, once the reads are done
  std::vector<FillOp> zeros;
  uint64_t staging_used = 0;
};

struct LoadPlan {
  uint64_t ino = 0;                   // the file's inode, which every record names
  std::vector<uint64_t> segment_ids;  // sources of the segment reads
  bool reads_data_file = false;       // some read has source kDataFile
  std::vector<Chunk> chunks;
  uint64_t buffer_bytes = 0;   // staging buffer size the chunks need
  uint64_t scratch_bytes = 0;  // longest scratch read
  // What the plan does, for LoadStats.
  uint64_t records = 0;
  uint64_t compressed_records = 0;
  uint64_t data_file_blocks = 0;
  uint64_t backing_reads = 0;
  uint64_t backing_bytes = 0;
  uint64_t hole_bytes = 0;
  uint64_t inline_bytes = 0;
};

struct PlanSettings {
  uint64_t buffer_bytes = 16u << 20;  // staging buffer size; grown when a record needs more
  uint64_t coalesce_gap = 0;          // 0 or coalesce_max 0: one read per record
  uint64_t coalesce_max = 0;          // capped at buffer_bytes
};

// EINVAL when a range leaves the file (file_offset + length > size) or the
// destination (dest_offset + length > dest_capacity). Ranges may overlap in
// the file; destinations should not (the last writer wins, in no set order).
Status CheckRanges(const std::vector<Range>& ranges, uint64_t file_size, uint64_t dest_capacity);

// REQUIRES: ValidateLayout(layout) is OK and CheckRanges passed; `layout`
// outlives the plan (inline tasks point into it).
LoadPlan PlanDirect(const FileLayout& layout, const std::vector<Range>& ranges,
                    const PlanSettings& settings);
// REQUIRES: CheckRanges passed.
LoadPlan PlanThroughFile(const std::vector<Range>& ranges, uint64_t buffer_bytes);

}  // namespace ckptfs::gpu
