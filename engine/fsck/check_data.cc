// Fsck of file data: segment files walked record by record, every extent
// checked against its segment and record, and the segments' live counts.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "engine/fsck/checker.h"

namespace ckptfs::engine::fsck {

namespace {

std::string Range(uint64_t off, uint64_t len) {
  return "[" + std::to_string(off) + ", " + std::to_string(off + len) + ")";
}

// What is wrong with the record `h` for extent `e` of (ino, off); "" when
// they agree (format's one check).
std::string Mismatch(const format::RecordHeader& h, const format::ExtentValue& e, uint64_t ino,
                     uint64_t off) {
  Status s = format::CheckRecordForExtent(h, e, ino, off);
  return s.ok() ? "" : s.message();
}

}  // namespace

Status Checker::LoadSegments() {
  const std::string seg_dir = dir_ + "/" + format::kSegmentsDirName;
  CKPTFS_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->List(seg_dir));
  for (const std::string& name : names) {
    uint64_t id;
    if (!format::ParseSegmentFileName(name, &id)) continue;
    Result<std::unique_ptr<io::File>> file = env_->Open(seg_dir + "/" + name, io::OpenMode::kRead);
    if (!file.ok() && file.status().code() == ENOENT) continue;  // deleted meanwhile
    if (!file.ok()) return file.status();
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, (*file)->Size());
    SegmentState& s = segments_[id];
    s.id = id;
    s.has_file = true;
    s.file_size = size;
    s.file = std::move(file).value();
  }
  return ScanAll(Space::kSegments, [&](std::string_view key, std::string_view value) {
    if (key.size() != 8) return;
    const uint64_t id = format::GetBE64(key.data());
    SegmentState& s = segments_[id];
    s.id = id;
    s.has_stat = true;
    Status st = format::DecodeSegmentStat(value, &s.stat);
    format::SegmentStat kept;  // what survives of a stat that is unusable
    if (st.ok()) {
      st = format::CheckSegmentStat(s.stat);
      kept.sealed = s.stat.sealed != 0 ? 1 : 0;
      kept.size = std::max<int64_t>(s.stat.size, 0);
    }
    if (!st.ok()) {
      s.stat_error = st.message();
      s.stat = kept;
      s.stat.live = -1;  // forces a live mismatch, which rewrites the stat
    }
  });
}

Status Checker::ScanSegments() {
  std::vector<SegmentState*> todo;
  uint64_t total = 0;
  for (auto& [id, s] : segments_) {
    if (!s.has_file) continue;
    todo.push_back(&s);
    total += s.file_size;
  }
  std::mutex progress_mu;
  uint64_t done = 0;
  if (opt_.progress) opt_.progress(0, total);
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  Status first_error;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      Status st = ScanOneSegment(todo[i], &progress_mu, &done, total);
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(err_mu);
        if (first_error.ok()) first_error = st.Annotate(todo[i]->file->path());
        return;
      }
    }
  };
  const size_t threads = std::max<size_t>(
      1, std::min<size_t>({todo.size(), std::max(1u, std::thread::hardware_concurrency()), 8}));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  CKPTFS_RETURN_IF_ERROR(first_error);
  for (SegmentState* s : todo) {
    report_.records_checked += s->records.size();
    report_.bytes_checked += s->file_size;
    for (const ScannedRecord& r : s->records) ino_floor_ = std::max(ino_floor_, r.header.ino);
  }
  if (opt_.progress) opt_.progress(total, total);
  CKPTFS_ASSIGN_OR_RETURN(data_files_, ListDataFiles());
  for (const auto& [ino, name] : data_files_) ino_floor_ = std::max(ino_floor_, ino);
  return Status::OK();
}

Status Checker::ScanOneSegment(SegmentState* s, std::mutex* progress_mu, uint64_t* done,
                               uint64_t total) {
  const io::File& file = *s->file;
  const format::ReadAtFn read_at = [&file](uint64_t off, size_t len, char* buf) {
    return file.ReadAt(off, len, buf);
  };
  Status hs = format::ReadSegmentHeader(read_at, s->id);
  if (!hs.ok() && !hs.IsCorruption()) return hs;
  if (!hs.ok()) {
    s->header_ok = false;
    s->header_error = hs.message();
  }
  SegmentScanOptions so;
  so.verify_payloads = !opt_.quick;
  so.read_bytes = opt_.quick ? (64u << 10) : (16u << 20);
  uint64_t reached = 0;
  Status st = ScanSegment(
      read_at, s->file_size, so, [&](const ScannedRecord& r) { s->records.push_back(r); },
      [&](const ScannedGap& g) {
        s->gaps++;
        s->gap_bytes += g.length;
        if (!g.zeros) s->nonzero_gaps++;
      },
      [&](uint64_t pos) {
        std::lock_guard<std::mutex> l(*progress_mu);
        *done += pos - reached;
        reached = pos;
        if (opt_.progress) opt_.progress(*done, total);
      });
  {
    std::lock_guard<std::mutex> l(*progress_mu);
    *done += s->file_size - std::min(reached, s->file_size);
  }
  CKPTFS_RETURN_IF_ERROR(st);
  s->refs.assign(s->records.size(), 0);
  return Status::OK();
}

const ScannedRecord* Checker::FindRecord(SegmentState* seg, uint64_t offset, size_t* index) {
  auto it = std::lower_bound(seg->records.begin(), seg->records.end(), offset,
                             [](const ScannedRecord& r, uint64_t o) { return r.offset < o; });
  if (it == seg->records.end() || it->offset != offset) return nullptr;
  *index = static_cast<size_t>(it - seg->records.begin());
  return &*it;
}

void Checker::DropExtent(std::string_view key) {
  if (!opt_.repair) return;
  batch_.Delete(Space::kExtents, key);
  batch_used_ = true;
}

Status Checker::CheckExtents() {
  ExtentScan scan;
  Status failed;
  CKPTFS_RETURN_IF_ERROR(
      ScanAll(Space::kExtents, [&](std::string_view key, std::string_view value) {
        if (failed.ok()) failed = CheckExtent(key, value, &scan);
      }));
  return failed;
}

Status Checker::CheckExtent(std::string_view key, std::string_view value, ExtentScan* scan) {
  if (key.size() != 16) {
    Add(kBadExtent, {}, "extent key is " + std::to_string(key.size()) + " bytes, expected 16",
        opt_.repair);
    DropExtent(key);
    return Status::OK();
  }
  const uint64_t ino = format::GetBE64(key.data());
  const uint64_t off = format::GetBE64(key.data() + 8);
  if (ino != scan->ino) {
    scan->ino = ino;
    scan->prev_end = 0;
  }
  format::ExtentValue e;
  Status ds = format::DecodeExtent(value, &e);
  auto node_it = nodes_.find(ino);
  if (!ds.ok()) {
    AddData(kBadExtent, ino, 0, off, 0, ds.message(), true);
    if (node_it != nodes_.end()) lost_inos_.insert(ino);
    DropExtent(key);
    return Status::OK();
  }
  const uint64_t len = e.length;
  SegmentState* seg = nullptr;
  if (!e.is_inline && !e.in_data_file) {
    seg = &segments_[e.segment_id];
    seg->id = e.segment_id;
    seg->live_all += len;
  }
  if (node_it == nodes_.end()) {
    ReportExtentWithoutInode(ino, off, len);
    DropExtent(key);
    return Status::OK();
  }
  Node& node = node_it->second;
  node.data_all += len;
  if (!S_ISREG(node.v.mode)) {
    AddData(kExtentOnNonFile, ino, e.segment_id, off, len, "data extent on a non-regular inode",
            true);
    DropExtent(key);
    return Status::OK();
  }
  if (off < scan->prev_end) {
    AddData(kOverlappingExtents, ino, e.segment_id, off, len,
            "overlaps the previous extent, which ends at " + std::to_string(scan->prev_end), true);
    lost_inos_.insert(ino);
    DropExtent(key);
    return Status::OK();
  }
  scan->prev_end = off + len;
  return CheckExtentBytes(key, e, ino, off, &node, seg);
}

Status Checker::CheckExtentBytes(std::string_view key, const format::ExtentValue& e, uint64_t ino,
                                 uint64_t off, Node* node, SegmentState* seg) {
  const char* kind = nullptr;
  std::string detail;
  if (e.in_data_file) {
    detail = CheckDataFileExtent(*node, ino, off, e, &kind);
  } else if (!e.is_inline) {
    CKPTFS_ASSIGN_OR_RETURN(detail, CheckSegmentExtent(seg, ino, off, e, &kind));
  }
  if (detail.empty()) {
    KeepExtent(key, e, ino, off, node, seg);
    return Status::OK();
  }
  const uint64_t len = e.length;
  AddData(kind, ino, e.segment_id, off, len,
          detail + (opt_.repair ? "; extent removed, the range reads as zeros" : ""), true);
  lost_inos_.insert(ino);
  // Recovery leaves the range alone: an older record there would be bytes
  // the file no longer had.
  if (len > 0) node->covered[off] = std::max(node->covered[off], off + len);
  DropExtent(key);
  return Status::OK();
}

void Checker::ReportExtentWithoutInode(uint64_t ino, uint64_t off, uint64_t len) {
  auto d = dangling_paths_.find(ino);
  if (!report_.findings.empty() && report_.findings.back().kind == kExtentWithoutInode &&
      report_.findings.back().ino == ino) {
    report_.findings.back().length = off + len - report_.findings.back().offset;
  } else {
    Add(kExtentWithoutInode,
        FileRange(ino, d != dangling_paths_.end() ? d->second : "", off, len),
        "data of inode " + std::to_string(ino) + ", which does not exist", opt_.repair);
  }
  if (d != dangling_paths_.end()) lost_paths_.insert(d->second);
}

Result<std::string> Checker::CheckSegmentExtent(SegmentState* seg, uint64_t ino, uint64_t off,
                                                const format::ExtentValue& e, const char** kind) {
  const uint64_t rec_end = e.record_offset + format::kRecordHeaderSize + e.stored_len;
  const std::string where = "segment " + std::to_string(e.segment_id) + " bytes " +
                            Range(e.record_offset, format::kRecordHeaderSize + e.stored_len);
  if (!seg->has_file) {
    *kind = kMissingSegment;
    return "segment file " + format::SegmentFileName(e.segment_id) + " is missing";
  }
  if (e.record_offset < format::kSegmentHeaderSize || rec_end > seg->file_size) {
    seg->past_eof = true;
    *kind = kRecordOutsideSegment;
    return where + " lie outside the file, which has " + std::to_string(seg->file_size) + " bytes";
  }
  size_t idx = 0;
  if (const ScannedRecord* rec = FindRecord(seg, e.record_offset, &idx); rec != nullptr) {
    std::string mm = Mismatch(rec->header, e, ino, off);
    if (!mm.empty()) {
      *kind = kRecordMismatch;
      return where + ": " + mm;
    }
    if (rec->payload == ScannedRecord::Payload::kBadChecksum) {
      *kind = kBadPayloadChecksum;
      return where + ": payload checksum mismatch";
    }
    if (rec->payload == ScannedRecord::Payload::kTruncated) {
      *kind = kRecordOutsideSegment;
      return where + ": record truncated";
    }
    seg->refs[idx]++;
    return std::string();
  }
  // The walk found no record here: read the header directly to say why.
  std::string buf(format::kRecordHeaderSize + (opt_.quick ? 0 : e.stored_len), '\0');
  CKPTFS_ASSIGN_OR_RETURN(const size_t got,
                          seg->file->ReadAt(e.record_offset, buf.size(), buf.data()));
  format::RecordHeader h;
  Status hs = format::DecodeRecordHeader(std::string_view(buf.data(), got), &h);
  if (!hs.ok()) {
    *kind = kBadRecordHeader;
    return where + ": " + hs.message();
  }
  if (std::string mm = Mismatch(h, e, ino, off); !mm.empty()) {
    *kind = kRecordMismatch;
    return where + ": " + mm;
  }
  if (!opt_.quick && !format::VerifyRecordPayload(
                          h, std::string_view(buf).substr(format::kRecordHeaderSize, e.stored_len))
                          .ok()) {
    *kind = kBadPayloadChecksum;
    return where + ": payload checksum mismatch";
  }
  return std::string();
}

void Checker::KeepExtent(std::string_view key, const format::ExtentValue& e, uint64_t ino,
                         uint64_t off, Node* node, SegmentState* seg) {
  const uint64_t len = e.length;
  uint64_t kept = len;
  if (off + len > node->v.size) {
    kept = off >= node->v.size ? 0 : node->v.size - off;
    AddData(kExtentPastSize, ino, e.segment_id, off, len,
            "data past the end of the file (size " + std::to_string(node->v.size) + ")", true);
    if (opt_.repair) {
      if (kept == 0) {
        DropExtent(key);
      } else {
        format::ExtentValue t = e;
        t.length = static_cast<uint32_t>(kept);
        if (t.is_inline) t.inline_data.resize(kept);
        batch_.Put(Space::kExtents, key, format::EncodeExtent(t));
        batch_used_ = true;
      }
    }
  }
  if (seg != nullptr) seg->live_kept += static_cast<int64_t>(kept);
  node->data_kept += kept;
  if (kept > 0) node->covered[off] = off + kept;
}

std::string Checker::CheckDataFileExtent(const Node& node, uint64_t ino, uint64_t off,
                                         const format::ExtentValue& e, const char** kind) {
  const std::string name = format::DataFileName(ino);
  const std::string where = name + " bytes " + Range(e.record_offset, e.stored_len);
  *kind = kBadDataFileExtent;
  if (e.record_offset + e.skip != off) {
    return where + " do not hold file offset " + std::to_string(off) + " at their byte " +
           std::to_string(e.skip);
  }
  if (node.v.data_file_end == 0) return where + ": the inode has no data file";
  if (e.record_offset + e.stored_len > node.v.data_file_end) {
    return where + " end past the data file end the inode records, " +
           std::to_string(node.v.data_file_end);
  }
  if (data_file_ino_ != ino) {
    data_file_ino_ = ino;
    data_file_ = env_->Open(dir_ + "/" + name, io::OpenMode::kRead);
  }
  if (!data_file_.ok()) {
    *kind = kMissingDataFile;
    return data_file_.status().code() == ENOENT ? "data file " + name + " is missing"
                                                : data_file_.status().message();
  }
  std::string block(opt_.quick ? 0 : e.stored_len, '\0');
  if (opt_.quick) {
    Result<uint64_t> size = (*data_file_)->Size();
    if (!size.ok()) return size.status().message();
    if (*size < e.record_offset + e.stored_len) {
      *kind = kBlockOutsideDataFile;
      return where + " lie outside the file, which has " + std::to_string(*size) + " bytes";
    }
    return "";
  }
  Result<size_t> got = (*data_file_)->ReadAt(e.record_offset, block.size(), block.data());
  if (!got.ok()) return got.status().message();
  report_.bytes_checked += *got;
  if (*got < block.size()) {
    *kind = kBlockOutsideDataFile;
    return where + " lie outside the file, which ends at " + std::to_string(e.record_offset + *got);
  }
  if (!format::CheckDataFileBlock(e, block).ok()) {
    *kind = kBadPayloadChecksum;
    return where + ": checksum mismatch";
  }
  return "";
}

Status Checker::CheckDataFiles() {
  for (const auto& [ino, name] : data_files_) {
    auto it = nodes_.find(ino);
    if (it != nodes_.end() && it->second.v.data_file_end != 0) continue;
    if (opt_.repair) CKPTFS_RETURN_IF_ERROR(env_->Remove(dir_ + "/" + format::DataFileName(ino)));
    Add(kUnusedDataFile, Inode(ino),
        format::DataFileName(ino) + " belongs to no file" +
            (opt_.repair ? "; deleted" : "; repair deletes it"),
        opt_.repair);
  }
  return Status::OK();
}

void Checker::CheckDataBytes() {
  for (auto& [ino, n] : nodes_) {
    // Version 1 inodes have no counter (the engine counts them when it needs to).
    if (!S_ISREG(n.v.mode) || !n.v.data_bytes_known) continue;
    if (n.v.data_bytes != n.data_all) {
      std::string detail = "the inode counts " + std::to_string(n.v.data_bytes) +
                           " data bytes, its extents hold " + std::to_string(n.data_all);
      // Fewer bytes than were written, even after recovery: extents are
      // missing (a damaged index), and their ranges read as zeros.
      if (n.data_kept < n.v.data_bytes) {
        detail += "; the rest reads as zeros";
        lost_inos_.insert(ino);
      }
      Add(kBadDataBytes, Inode(ino, PathOf(ino)), std::move(detail), opt_.repair);
    }
    if (opt_.repair && n.v.data_bytes != n.data_kept) {  // also after dropping extents
      n.v.data_bytes = n.data_kept;
      n.attr_dirty = true;
    }
  }
}

void Checker::CheckSegments() {
  for (auto& [id, s] : segments_) {
    if (!s.has_file) {
      if (s.has_stat || s.live_all != 0) ReportMissingSegment(id, s);
      continue;
    }
    CheckSegmentStat(id, s);
    ReportUnusedBytes(id, s);
  }
}

void Checker::ReportMissingSegment(uint64_t id, const SegmentState& s) {
  const std::string name = format::SegmentFileName(id);
  if (s.live_all > 0) {
    Add(kMissingSegmentFile, SegmentRange(id),
        name + " is missing; " + std::to_string(s.live_all) + " bytes of file data were in it",
        opt_.repair);
  } else {
    Add(kStaleSegmentEntry, SegmentRange(id),
        "the index has accounting for " + name + ", which does not exist", opt_.repair);
  }
  if (opt_.repair) {
    batch_.Delete(Space::kSegments, format::SegmentKey(id));
    batch_used_ = true;
  }
}

void Checker::CheckSegmentStat(uint64_t id, const SegmentState& s) {
  const std::string name = format::SegmentFileName(id);
  if (!s.header_ok) {
    Add(kBadSegmentHeader, SegmentRange(id, 0, format::kSegmentHeaderSize),
        name + ": " + s.header_error + (opt_.repair ? "; header rewritten" : ""), opt_.repair);
  }
  format::SegmentStat st = s.has_stat ? s.stat : format::SegmentStat();
  bool put = false;
  const bool short_sealed = st.sealed && static_cast<uint64_t>(st.size) > s.file_size;
  if (short_sealed || s.past_eof) {
    Add(kTruncatedSegment,
        SegmentRange(id, s.file_size, short_sealed ? static_cast<uint64_t>(st.size) - s.file_size : 0),
        name + " has " + std::to_string(s.file_size) + " bytes" +
            (short_sealed ? ", it was sealed at " + std::to_string(st.size) : "") +
            (s.past_eof ? "; extents point past its end" : ""),
        opt_.repair);
    if (short_sealed) {
      st.size = static_cast<int64_t>(s.file_size);
      put = true;
    }
  }
  if (st.live != s.live_all) {
    Add(kSegmentLiveMismatch, SegmentRange(id),
        name + ": the index counts " +
            (s.stat_error.empty() ? std::to_string(st.live) + " live bytes"
                                  : "nothing usable (" + s.stat_error + ")") +
            ", its extents cover " + std::to_string(s.live_all),
        opt_.repair);
  }
  if (st.live != s.live_kept) {
    st.dead = std::max<int64_t>(0, std::max<int64_t>(st.live, 0) + st.dead - s.live_kept);
    st.live = s.live_kept;
    put = true;
  }
  if (put && opt_.repair) {
    batch_.Put(Space::kSegments, format::SegmentKey(id), format::EncodeSegmentStat(st));
    batch_used_ = true;
  }
}

void Checker::ReportUnusedBytes(uint64_t id, const SegmentState& s) {
  const std::string name = format::SegmentFileName(id);
  uint64_t unref = 0, unref_bytes = 0, unref_bad = 0;
  for (size_t i = 0; i < s.records.size(); ++i) {
    if (s.refs[i] != 0) continue;
    unref++;
    unref_bytes += std::min<uint64_t>(format::kRecordHeaderSize + s.records[i].header.stored_len,
                                      s.file_size - s.records[i].offset);
    if (s.records[i].payload == ScannedRecord::Payload::kBadChecksum) unref_bad++;
  }
  if (unref > 0) {
    Add(kUnreferencedRecords, SegmentRange(id, 0, unref_bytes),
        name + ": " + std::to_string(unref) + " records (" + std::to_string(unref_bytes) +
            " bytes) that no extent points to" +
            (unref_bad ? ", " + std::to_string(unref_bad) + " of them fail their checksum" : "") +
            "; compaction reclaims them",
        false);
  }
  if (s.gaps > 0) {
    Add(kUnparsableBytes, SegmentRange(id, 0, s.gap_bytes),
        name + ": " + std::to_string(s.gaps) + " stretches (" + std::to_string(s.gap_bytes) +
            " bytes) hold no record" +
            (s.nonzero_gaps ? ", " + std::to_string(s.nonzero_gaps) +
                                  " with non-zero bytes (torn or damaged records)"
                            : ", all zero-filled (writes cut short by a crash)"),
        false);
  }
}

}  // namespace ckptfs::engine::fsck
