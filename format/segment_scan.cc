#include "format/segment_scan.h"


#include <algorithm>
#include <cstring>
#include <vector>

namespace ckptfs::format {

namespace {

constexpr uint64_t kProgressEvery = 8u << 20;

// A sliding read buffer over the file: Ensure(pos, n) makes [pos, pos+n)
// readable, reading at least `chunk` bytes at a time and keeping the part of
// the previous window that overlaps.
class Window {
 public:
  Window(const ReadAtFn& read_at, uint64_t file_size, size_t chunk)
      : read_at_(read_at), size_(file_size), chunk_(chunk) {}

  uint64_t size() const { return size_; }

  // On return `*p` points at the bytes from `pos`; the result is how many are
  // available (less than `n` only at the end of the file).
  Result<size_t> Ensure(uint64_t pos, size_t n, const char** p) {
    *p = nullptr;
    if (pos >= size_) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos));
    if (pos >= off_ && pos + n <= off_ + len_) {
      *p = buf_.data() + (pos - off_);
      return n;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(std::max(n, chunk_), size_ - pos));
    size_t keep = 0;
    if (pos >= off_ && pos < off_ + len_) keep = static_cast<size_t>(off_ + len_ - pos);
    if (buf_.size() < want) {
      std::vector<char> bigger(want);
      if (keep > 0) std::memcpy(bigger.data(), buf_.data() + (pos - off_), keep);
      buf_.swap(bigger);
    } else if (keep > 0) {
      std::memmove(buf_.data(), buf_.data() + (pos - off_), keep);
    }
    size_t got = keep;
    if (got < want) {
      CKPTFS_ASSIGN_OR_RETURN(size_t r, read_at_(pos + got, want - got, buf_.data() + got));
      got += r;
      if (got < want) size_ = pos + got;  // the file is shorter than it was: treat as its end
    }
    off_ = pos;
    len_ = got;
    *p = buf_.data();
    return std::min(n, got);
  }

 private:
  const ReadAtFn& read_at_;
  uint64_t size_;
  const size_t chunk_;
  std::vector<char> buf_;
  uint64_t off_ = 0;
  size_t len_ = 0;
};

bool PlausibleHeader(const char* p, format::RecordHeader* h) {
  return format::DecodeRecordHeader(std::string_view(p, format::kRecordHeaderSize), h).ok() &&
         h->stored_len <= kMaxPlausibleStoredLen && h->raw_len <= kMaxPlausibleStoredLen;
}

bool AllZero(const char* p, size_t n) {
  return std::all_of(p, p + n, [](char c) { return c == 0; });
}

// Finds the first offset >= `from` with a plausible record header; the end of
// the file when there is none. `*zeros` becomes false when a non-zero byte
// lies in [from, result).
Result<uint64_t> FindNextHeader(Window* w, uint64_t from, size_t chunk, bool* zeros) {
  static constexpr char kMagic[4] = {'C', 'K', 'P', 'R'};
  uint64_t cur = from;
  while (cur < w->size()) {
    const char* p;
    CKPTFS_ASSIGN_OR_RETURN(size_t avail, w->Ensure(cur, chunk, &p));
    if (avail == 0) break;
    size_t i = 0;
    for (;;) {
      const void* hit = avail - i >= 4 ? ::memmem(p + i, avail - i, kMagic, 4) : nullptr;
      if (hit == nullptr) break;
      const size_t at = static_cast<size_t>(static_cast<const char*>(hit) - p);
      const uint64_t cand = cur + at;
      const char* hp;
      CKPTFS_ASSIGN_OR_RETURN(size_t hn, w->Ensure(cand, format::kRecordHeaderSize, &hp));
      format::RecordHeader h;
      const bool ok = hn == format::kRecordHeaderSize && PlausibleHeader(hp, &h);
      // Ensure may have moved the window: get the bytes at `cur` back.
      CKPTFS_ASSIGN_OR_RETURN(avail, w->Ensure(cur, chunk, &p));
      if (ok) {
        if (*zeros && !AllZero(p, at)) *zeros = false;
        return cand;
      }
      i = at + 1;
    }
    if (*zeros && !AllZero(p, avail)) *zeros = false;
    if (avail < 4 || cur + avail >= w->size()) break;
    cur += avail - 3;  // a magic may straddle the windows
  }
  return w->size();
}

}  // namespace

Status ReadSegmentHeader(const ReadAtFn& read_at, uint64_t segment_id) {
  char hdr[kSegmentHeaderSize];
  CKPTFS_ASSIGN_OR_RETURN(const size_t got, read_at(0, sizeof(hdr), hdr));
  if (got < sizeof(hdr)) {
    return Status::Corruption("segment header truncated: the file has " + std::to_string(got) +
                              " bytes");
  }
  return CheckSegmentHeader(std::string_view(hdr, got), segment_id);
}

Status ScanSegment(const ReadAtFn& read_at, uint64_t file_size, const SegmentScanOptions& options,
                   const std::function<void(const ScannedRecord&)>& on_record,
                   const std::function<void(const ScannedGap&)>& on_gap,
                   const std::function<void(uint64_t offset)>& on_progress) {
  Window w(read_at, file_size, options.read_bytes);
  uint64_t pos = format::kSegmentHeaderSize;
  uint64_t reported = 0;
  while (pos < w.size()) {
    if (on_progress && pos - reported >= kProgressEvery) {
      on_progress(pos);
      reported = pos;
    }
    const char* p;
    CKPTFS_ASSIGN_OR_RETURN(size_t avail, w.Ensure(pos, format::kRecordHeaderSize, &p));
    ScannedRecord rec;
    if (avail == format::kRecordHeaderSize && PlausibleHeader(p, &rec.header)) {
      rec.offset = pos;
      const uint64_t end = pos + format::kRecordHeaderSize + rec.header.stored_len;
      if (end > w.size()) {
        rec.payload = ScannedRecord::Payload::kTruncated;
        on_record(rec);
        pos = w.size();
        break;
      }
      if (options.verify_payloads) {
        const char* q;
        CKPTFS_ASSIGN_OR_RETURN(
            size_t n, w.Ensure(pos + format::kRecordHeaderSize, rec.header.stored_len, &q));
        if (n < rec.header.stored_len) {
          rec.payload = ScannedRecord::Payload::kTruncated;
        } else {
          rec.payload = format::VerifyRecordPayload(rec.header, std::string_view(q, n)).ok()
                            ? ScannedRecord::Payload::kOk
                            : ScannedRecord::Payload::kBadChecksum;
        }
      }
      on_record(rec);
      pos = end;
      continue;
    }
    ScannedGap gap;
    gap.offset = pos;
    gap.zeros = avail == 0 || AllZero(p, avail);
    CKPTFS_ASSIGN_OR_RETURN(uint64_t next,
                            FindNextHeader(&w, pos + 1, options.read_bytes, &gap.zeros));
    gap.length = next - pos;
    on_gap(gap);
    pos = next;
  }
  if (on_progress) on_progress(w.size());
  return Status::OK();
}

}  // namespace ckptfs::format
