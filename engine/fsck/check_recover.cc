// Fsck's recovery of what the index lost: inodes found only in records
// (adopted under /lost+found), extents rebuilt from the records that
// describe them, and a restored index brought forward from the segments.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "engine/fsck/checker.h"
#include "engine/store_clock.h"

namespace ckptfs::engine::fsck {

Result<std::map<uint64_t, std::string>> Checker::ListDataFiles() {
  std::map<uint64_t, std::string> out;
  Result<std::vector<std::string>> names = env_->List(dir_ + "/" + format::kDataDirName);
  if (!names.ok() && names.status().code() == ENOENT) return out;
  CKPTFS_RETURN_IF_ERROR(names.status());
  for (const std::string& n : *names) {
    uint64_t ino;
    if (format::ParseDataFileName(n, &ino)) out.emplace(ino, n);
  }
  return out;
}

Status Checker::AdoptUnknownInodes() {
  if (!index_replaced_) return Status::OK();
  std::map<uint64_t, uint64_t> size_of;  // unknown inode -> the end of its furthest bytes
  for (auto& [id, seg] : segments_) {
    for (size_t i = 0; i < seg.records.size(); ++i) {
      const ScannedRecord& r = seg.records[i];
      if (seg.refs[i] != 0 || r.payload != ScannedRecord::Payload::kOk || r.header.raw_len == 0 ||
          r.header.ino <= known_max_ino_ || nodes_.count(r.header.ino)) {
        continue;
      }
      uint64_t& end = size_of[r.header.ino];
      end = std::max(end, r.header.file_offset + r.header.raw_len);
    }
  }
  for (const auto& [ino, name] : data_files_) {
    if (ino <= known_max_ino_ || nodes_.count(ino)) continue;
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file,
                            env_->Open(dir_ + "/" + format::DataFileName(ino), io::OpenMode::kRead));
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, file->Size());
    uint64_t& end = size_of[ino];
    end = std::max(end, size);
  }
  const Node& root = nodes_[kRootIno];
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  for (const auto& [ino, size] : size_of) {
    Node n;
    n.created = true;
    n.attr_dirty = true;
    n.v.mode = S_IFREG | 0600;
    n.v.uid = root.v.uid;
    n.v.gid = root.v.gid;
    n.v.nlink = 1;
    n.v.size = size;
    n.v.data_bytes = size;  // at most: RecoverExtents places records until it is reached
    SetAllTimes(&n.v, Timespec{ts.tv_sec, static_cast<uint32_t>(ts.tv_nsec)});
    nodes_.emplace(ino, std::move(n));
    adopted_.insert(ino);
    max_ino_ = std::max(max_ino_, ino);
  }
  return Status::OK();
}

Status Checker::FinishAdopted() {
  for (uint64_t ino : adopted_) {
    Node& node = nodes_[ino];
    const uint64_t from_records = node.data_kept;
    auto df = data_files_.find(ino);
    if (df != data_files_.end()) {
      // The data file holds the bytes written at or past its end when they
      // were written; the records placed are the overwrites below it, which
      // are newer. Fill what they leave, in blocks as the engine cuts them.
      CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file,
                              env_->Open(dir_ + "/" + format::DataFileName(ino), io::OpenMode::kRead));
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, file->Size());
      node.v.data_file_end = size;
      std::string block;
      for (uint64_t at = 0; at < size;) {
        auto next = node.covered.upper_bound(at);
        if (next != node.covered.begin() && std::prev(next)->second > at) {
          at = std::prev(next)->second;
          continue;
        }
        const uint64_t free_end = next == node.covered.end() ? size : std::min(size, next->first);
        const uint64_t len = std::min<uint64_t>(free_end - at, kDataFileBlockBytes - at % kDataFileBlockBytes);
        block.resize(len);
        CKPTFS_ASSIGN_OR_RETURN(const size_t got, file->ReadAt(at, len, block.data()));
        if (got < len) return Status(EIO, format::DataFileName(ino) + " ended while read");
        // A block of zeros stays a hole: it reads the same.
        if (block.find_first_not_of('\0') != std::string::npos) {
          format::ExtentValue e;
          e.in_data_file = true;
          e.length = e.stored_len = e.raw_len = static_cast<uint32_t>(len);
          e.record_offset = at;
          e.checksum = format::Checksum(block);
          batch_.Put(Space::kExtents, format::ExtentKey(ino, at), format::EncodeExtent(e));
          batch_used_ = true;
          node.covered[at] = at + len;
          node.data_kept += len;
        }
        at += len;
      }
    }
    node.v.data_bytes = node.data_all = node.data_kept;
    LinkUnderLostFound(ino);
    node.links = node.v.nlink;
    Add(kFileRecovered, FileRange(ino, node.path, 0, node.data_kept),
        "inode " + std::to_string(ino) + ", which the index did not know: " +
            std::to_string(node.data_kept) + " bytes (" + std::to_string(from_records) +
            " from segment records" +
            (df != data_files_.end() ? ", the rest from its data file" : "") + ") kept as " +
            node.path + "; its name and attributes were in the index",
        true);
  }
  return Status::OK();
}

void Checker::RecoverExtents() {
  struct Candidate {
    SegmentState* seg;
    size_t idx;
  };
  std::map<uint64_t, std::vector<Candidate>> by_ino;
  for (auto& [id, seg] : segments_) {
    // When the index is a state the store was in (a backup, a log replayed
    // up to its damage), the records written after it: all of a segment it
    // does not know, those past the last one it points to in an unsealed
    // one (segments are append-only).
    size_t newer_from = seg.records.size();
    if (index_is_past_state_ && !seg.has_stat) {
      newer_from = 0;
    } else if (index_is_past_state_ && !seg.stat.sealed) {
      newer_from = 0;
      for (size_t i = 0; i < seg.records.size(); ++i) {
        if (seg.refs[i] != 0) newer_from = i + 1;
      }
    }
    for (size_t i = 0; i < seg.records.size(); ++i) {
      const ScannedRecord& r = seg.records[i];
      // Only records read whole and verified: never guess at damaged bytes.
      if (seg.refs[i] != 0 || r.payload != ScannedRecord::Payload::kOk || r.header.raw_len == 0) {
        continue;
      }
      auto n = nodes_.find(r.header.ino);
      if (n == nodes_.end() || !S_ISREG(n->second.v.mode) || !n->second.v.data_bytes_known) continue;
      // A newer record of a file the index knows: its write was lost with
      // the index, and is written again (BringForward), as an overwrite.
      if (i >= newer_from && !adopted_.count(r.header.ino)) {
        forward_.push_back(Forward{id, i});
        continue;
      }
      // Otherwise only files that lost bytes: the inode counts more stored
      // bytes than its extents hold. A hole a truncate or a punch made
      // counts none, so old records never fill it.
      if (n->second.data_kept >= n->second.v.data_bytes || r.header.file_offset >= n->second.v.size) {
        continue;
      }
      by_ino[r.header.ino].push_back(Candidate{&seg, i});
    }
  }
  for (auto& [ino, candidates] : by_ino) {
    Node& node = nodes_[ino];
    // Newest first: segments in id order, records in file order.
    std::reverse(candidates.begin(), candidates.end());
    uint64_t placed = 0, placed_bytes = 0;
    for (const Candidate& c : candidates) {
      if (node.data_kept >= node.v.data_bytes) break;
      const uint64_t bytes = PlaceRecord(ino, &node, c.seg, c.idx);
      if (bytes == 0) continue;
      placed++;
      placed_bytes += bytes;
    }
    if (placed == 0) continue;
    Add(kExtentsRecovered, FileRange(ino, PathOf(ino), 0, placed_bytes),
        std::to_string(placed) + " records (" + std::to_string(placed_bytes) +
            " bytes) that no extent pointed to, put back where the file had none",
        true);
  }
}

uint64_t Checker::PlaceRecord(uint64_t ino, Node* node, SegmentState* seg, size_t idx) {
  const ScannedRecord& r = seg->records[idx];
  const uint64_t start = r.header.file_offset;
  const uint64_t end = std::min<uint64_t>(start + r.header.raw_len, node->v.size);
  // Only into a range nothing covers: the first range at or after `start`,
  // and the one before it, must leave [start, end) free.
  auto next = node->covered.lower_bound(start);
  if (next != node->covered.end() && next->first < end) return 0;
  if (next != node->covered.begin() && std::prev(next)->second > start) return 0;
  format::ExtentValue v;
  v.length = static_cast<uint32_t>(end - start);
  format::PointExtentAt(r.header, seg->id, r.offset, &v);
  batch_.Put(Space::kExtents, format::ExtentKey(ino, start), format::EncodeExtent(v));
  batch_used_ = true;
  node->covered[start] = end;
  node->data_kept += end - start;
  seg->refs[idx]++;
  seg->live_kept += static_cast<int64_t>(end - start);
  return end - start;
}

Status Checker::BringForward() {
  if (forward_.empty()) return Status::OK();
  // The index is repaired and closed; the engine's write path does the
  // overwrites (trimming older extents, accounting, size). The store lock
  // passes from fsck to the store it opens.
  lock_.reset();
  StoreOptions so;
  so.create_if_missing = false;
  so.env = env_;
  so.holder = "ckptfs fsck (pid " + std::to_string(::getpid()) + ")";
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(dir_, so));
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> per_ino;  // records, bytes
  std::string bytes, decoded;
  Status s;
  for (const Forward& fw : forward_) {  // in the order written
    SegmentState& seg = segments_[fw.segment];
    const ScannedRecord& r = seg.records[fw.index];
    bytes.resize(format::kRecordHeaderSize + r.header.stored_len);
    Result<size_t> got = seg.file->ReadAt(r.offset, bytes.size(), bytes.data());
    s = got.status();
    format::RecordView rec;
    if (s.ok()) s = format::DecodeRecord(std::string_view(bytes.data(), *got), &rec, &decoded);
    if (s.ok()) s = store->Write(r.header.ino, r.header.file_offset, rec.data).status();
    if (!s.ok()) {
      s = s.Annotate("write again the bytes of inode " + std::to_string(r.header.ino) + " at " +
                     std::to_string(r.header.file_offset));
      break;
    }
    per_ino[r.header.ino].first++;
    per_ino[r.header.ino].second += rec.data.size();
  }
  Status closed = store->Close();
  if (s.ok()) s = closed;
  for (const auto& [ino, n] : per_ino) {
    Add(kExtentsRecovered, FileRange(ino, PathOf(ino), 0, n.second),
        std::to_string(n.first) + " records (" + std::to_string(n.second) +
            " bytes) written after the state the index holds, written again",
        true);
  }
  return s;
}

}  // namespace ckptfs::engine::fsck
