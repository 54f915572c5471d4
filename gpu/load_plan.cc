#include "gpu/load_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "format/format.h"
#include "io/read_plan.h"

namespace ckptfs::gpu {
namespace {

using io::BackingRead;
using io::CoalesceSettings;
using io::RecordRef;

constexpr uint64_t kHeaderBytes = format::kRecordHeaderSize;

// Decoded bytes of one record that go to the destination.
struct WindowNeed {
  uint64_t decoded_offset = 0;
  uint64_t length = 0;
  uint64_t dest_offset = 0;
};

struct RecordNeed {
  const LayoutExtent* extent = nullptr;  // any extent of the record: the fields agree
  std::vector<WindowNeed> windows;
  uint64_t window_bytes = 0;
};

// Segment id, record offset; data-file blocks: 0, block offset.
using RecordKey = std::pair<uint64_t, uint64_t>;

// Bytes that come from somewhere without planning reads: inline data (a
// view), or file bytes read through the file (data empty).
struct Piece {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  uint64_t dest_offset = 0;
  std::string_view data;
  bool through_file = false;
};

// Appends chunks to a plan, handing out staging space of the newest one.
class ChunkBuilder {
 public:
  ChunkBuilder(LoadPlan* plan, uint64_t capacity) : plan_(plan), capacity_(capacity) {}
  Chunk& current() {
    if (plan_->chunks.empty()) plan_->chunks.emplace_back();
    return plan_->chunks.back();
  }
  uint64_t room() { return capacity_ - current().staging_used; }
  void Next() {
    if (!plan_->chunks.empty() && plan_->chunks.back().staging_used == 0) return;
    plan_->chunks.emplace_back();
  }
  // REQUIRES: n <= room()
  uint64_t Take(uint64_t n) {
    Chunk& c = current();
    const uint64_t at = c.staging_used;
    c.staging_used += n;
    return at;
  }

 private:
  LoadPlan* plan_;
  uint64_t capacity_;
};

// Pieces go to the staging buffer as they are, split where a chunk is full.
void PlanPieces(const std::vector<Piece>& pieces, ChunkBuilder* b, LoadPlan* plan) {
  for (const Piece& p : pieces) {
    uint64_t done = 0;
    while (done < p.length) {
      if (b->room() == 0) b->Next();
      const uint64_t n = std::min(p.length - done, b->room());
      const uint64_t at = b->Take(n);
      Chunk& c = b->current();
      if (p.through_file) {
        ReadTask t;
        t.source = kThroughFile;
        t.offset = p.file_offset + done;
        t.length = n;
        t.in_place = true;
        t.staging_offset = at;
        c.reads.push_back(std::move(t));
        plan->backing_reads++;
        plan->backing_bytes += n;
      } else {
        c.inlines.push_back(InlineTask{p.data.substr(done, n), at});
      }
      c.copies.push_back(CopyOp{at, p.dest_offset + done, n});
      done += n;
    }
  }
}

// Bytes before a record's payload in its backing read: a data-file block
// has no header.
uint64_t HeaderBytes(const format::ExtentValue& e) { return e.in_data_file ? 0 : kHeaderBytes; }

// Plans one backing read of records or data-file blocks (all uncompressed
// when `in_place`), splitting it at record boundaries where a chunk fills up.
void PlanBackingRead(const BackingRead& br, bool in_place, int source,
                     const std::map<RecordKey, RecordNeed>& needs, ChunkBuilder* b,
                     LoadPlan* plan) {
  ReadTask sub;
  bool open = false;
  auto close = [&]() {
    if (!open) return;
    plan->backing_reads++;
    plan->backing_bytes += sub.length;
    if (!in_place) plan->scratch_bytes = std::max(plan->scratch_bytes, sub.length);
    b->current().reads.push_back(std::move(sub));
    sub = ReadTask();
    open = false;
  };
  for (const RecordRef& ref : br.records) {
    const RecordNeed& need = needs.at({ref.segment_id, ref.offset});
    const uint64_t end = ref.offset + ref.length;
    // Staging bytes this record adds to the open read, or needs alone.
    const uint64_t alone = in_place ? ref.length : need.window_bytes;
    if (open) {
      const uint64_t extra = in_place ? end - (sub.offset + sub.length) : need.window_bytes;
      if (extra > b->room()) {
        close();
        b->Next();
      }
    }
    if (!open) {
      if (alone > b->room()) b->Next();
      sub.source = source;
      sub.offset = ref.offset;
      sub.length = 0;
      sub.in_place = in_place;
      sub.staging_offset = in_place ? b->current().staging_used : 0;
      open = true;
    }
    if (in_place) b->Take(end - (sub.offset + sub.length));
    sub.length = end - sub.offset;

    const LayoutExtent& e = *need.extent;
    RecordTask rt;
    rt.read_offset = ref.offset - sub.offset;
    rt.extent = e.value;
    rt.file_offset = e.file_offset;
    Chunk& c = b->current();
    for (const WindowNeed& w : need.windows) {
      uint64_t at;
      if (in_place) {
        at = sub.staging_offset + rt.read_offset + HeaderBytes(e.value) + w.decoded_offset;
      } else {
        at = b->Take(w.length);
        rt.windows.push_back(Window{w.decoded_offset, w.length, at});
      }
      c.copies.push_back(CopyOp{at, w.dest_offset, w.length});
    }
    if (e.value.in_data_file) {
      plan->data_file_blocks++;
    } else {
      plan->records++;
    }
    if (e.value.codec != format::Codec::kNone) plan->compressed_records++;
    sub.records.push_back(std::move(rt));
  }
  close();
}

// What a load needs of each record, data-file block and inline piece, and
// the holes to zero, for `ranges` of the file.
struct Needs {
  std::map<RecordKey, RecordNeed> records;
  std::map<RecordKey, RecordNeed> blocks;  // of the data file
  std::vector<Piece> pieces;
  std::vector<FillOp> zeros;
};

// Adds what extent `e` gives to file bytes [pos, pos + n), which go to `dest`.
void NeedExtent(const LayoutExtent& e, uint64_t pos, uint64_t n, uint64_t dest, Needs* needs,
                LoadPlan* plan) {
  const uint64_t within = pos - e.file_offset;
  switch (e.kind) {
    case LayoutExtent::Kind::kRecord:
    case LayoutExtent::Kind::kDataFile: {
      RecordNeed& need = e.kind == LayoutExtent::Kind::kRecord
                             ? needs->records[{e.value.segment_id, e.value.record_offset}]
                             : needs->blocks[{0, e.value.record_offset}];
      need.extent = &e;
      need.windows.push_back(WindowNeed{e.value.skip + within, n, dest});
      need.window_bytes += n;
      break;
    }
    case LayoutExtent::Kind::kInline:
      needs->pieces.push_back(
          Piece{pos, n, dest, std::string_view(e.value.inline_data).substr(within, n)});
      plan->inline_bytes += n;
      break;
    case LayoutExtent::Kind::kInlineOmitted:
      needs->pieces.push_back(Piece{pos, n, dest, {}, /*through_file=*/true});
      plan->inline_bytes += n;
      break;
  }
}

Needs CollectNeeds(const std::vector<LayoutExtent>& ex, const std::vector<Range>& ranges,
                   LoadPlan* plan) {
  Needs needs;
  for (const Range& r : ranges) {
    uint64_t pos = r.file_offset;
    const uint64_t end = r.file_offset + r.length;
    size_t j = std::partition_point(
                   ex.begin(), ex.end(),
                   [&](const LayoutExtent& e) { return e.file_offset + e.value.length <= pos; }) -
               ex.begin();
    while (pos < end) {
      const uint64_t dest = r.dest_offset + (pos - r.file_offset);
      if (j < ex.size() && ex[j].file_offset <= pos) {
        const uint64_t e_end = ex[j].file_offset + ex[j].value.length;
        const uint64_t stop = std::min(end, e_end);
        NeedExtent(ex[j], pos, stop - pos, dest, &needs, plan);
        pos = stop;
        if (stop == e_end) ++j;
      } else {
        const uint64_t stop = j < ex.size() ? std::min(end, ex[j].file_offset) : end;
        needs.zeros.push_back(FillOp{dest, stop - pos});
        plan->hole_bytes += stop - pos;
        pos = stop;
      }
    }
  }
  return needs;
}

}  // namespace

Status CheckRanges(const std::vector<Range>& ranges, uint64_t file_size, uint64_t dest_capacity) {
  for (const Range& r : ranges) {
    if (r.file_offset > file_size || r.length > file_size - r.file_offset) {
      return Status(EINVAL, "range [" + std::to_string(r.file_offset) + ", +" +
                                std::to_string(r.length) + ") ends past the end of the file (" +
                                std::to_string(file_size) + " bytes)");
    }
    if (r.dest_offset > dest_capacity || r.length > dest_capacity - r.dest_offset) {
      return Status(EINVAL, "range to destination offset " + std::to_string(r.dest_offset) + " (+" +
                                std::to_string(r.length) + ") does not fit the destination (" +
                                std::to_string(dest_capacity) + " bytes)");
    }
  }
  return Status::OK();
}

LoadPlan PlanDirect(const FileLayout& layout, const std::vector<Range>& ranges,
                    const PlanSettings& settings) {
  LoadPlan plan;
  plan.ino = layout.ino;
  Needs n = CollectNeeds(layout.extents, ranges, &plan);
  std::map<RecordKey, RecordNeed>& needs = n.records;
  std::map<RecordKey, RecordNeed>& block_needs = n.blocks;

  // The buffer must hold any single record's staging bytes.
  plan.buffer_bytes = std::max<uint64_t>(settings.buffer_bytes, 1);
  std::vector<RecordRef> raw, zstd;
  std::map<uint64_t, int> source_of;
  for (const auto& [key, need] : needs) {
    const format::ExtentValue& e = need.extent->value;
    const bool in_place = e.codec == format::Codec::kNone;
    const RecordRef ref{e.segment_id, e.record_offset, kHeaderBytes + e.stored_len};
    (in_place ? raw : zstd).push_back(ref);
    plan.buffer_bytes = std::max(plan.buffer_bytes, in_place ? ref.length : need.window_bytes);
    if (source_of.emplace(e.segment_id, static_cast<int>(plan.segment_ids.size())).second) {
      plan.segment_ids.push_back(e.segment_id);
    }
  }
  std::vector<RecordRef> blocks;
  for (const auto& [key, need] : block_needs) {
    const format::ExtentValue& e = need.extent->value;
    blocks.push_back(RecordRef{0, e.record_offset, e.stored_len});
    plan.buffer_bytes = std::max<uint64_t>(plan.buffer_bytes, e.stored_len);
  }
  CoalesceSettings c{settings.coalesce_gap, std::min(settings.coalesce_max, plan.buffer_bytes)};
  std::vector<BackingRead> raw_reads = io::PlanReads(std::move(raw), c);
  std::vector<BackingRead> zstd_reads = io::PlanReads(std::move(zstd), c);
  std::vector<BackingRead> block_reads = io::PlanReads(std::move(blocks), c);

  // Both lists are in (segment, offset) order; visit them merged so that each
  // segment is read front to back.
  ChunkBuilder b(&plan, plan.buffer_bytes);
  size_t i = 0, k = 0;
  while (i < raw_reads.size() || k < zstd_reads.size()) {
    const bool take_raw =
        k == zstd_reads.size() ||
        (i < raw_reads.size() && std::pair(raw_reads[i].segment_id, raw_reads[i].offset) <
                                     std::pair(zstd_reads[k].segment_id, zstd_reads[k].offset));
    const BackingRead& br = take_raw ? raw_reads[i++] : zstd_reads[k++];
    PlanBackingRead(br, take_raw, source_of.at(br.segment_id), needs, &b, &plan);
  }
  // The data file front to back, in place: its blocks are uncompressed.
  for (const BackingRead& br : block_reads) {
    PlanBackingRead(br, /*in_place=*/true, kDataFile, block_needs, &b, &plan);
  }
  plan.reads_data_file = !block_reads.empty();
  PlanPieces(n.pieces, &b, &plan);
  if (!n.zeros.empty()) {
    Chunk& first = plan.chunks.empty() ? b.current() : plan.chunks.front();
    first.zeros = std::move(n.zeros);
  }
  return plan;
}

LoadPlan PlanThroughFile(const std::vector<Range>& ranges, uint64_t buffer_bytes) {
  LoadPlan plan;
  plan.buffer_bytes = std::max<uint64_t>(buffer_bytes, 1);
  std::vector<Piece> pieces;
  for (const Range& r : ranges) {
    if (r.length > 0) pieces.push_back(Piece{r.file_offset, r.length, r.dest_offset, {}, true});
  }
  ChunkBuilder b(&plan, plan.buffer_bytes);
  PlanPieces(pieces, &b, &plan);
  return plan;
}

}  // namespace ckptfs::gpu
