#include "engine/segment_set.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include "engine/format.h"

namespace ckptfs::engine {

namespace {
constexpr std::string_view kTmpSuffix = ".tmp";

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(errno, "open " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  return rc == 0 ? Status::OK() : Status::IOError(err, "fsync " + dir);
}

Status PwriteAll(int fd, const char* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(errno, "write " + what);
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return Status::OK();
}
}  // namespace

Result<std::unique_ptr<SegmentSet>> SegmentSet::Open(const std::string& segments_dir,
                                                     uint64_t target_bytes, bool read_only,
                                                     const std::vector<uint64_t>& sealed) {
  std::unique_ptr<SegmentSet> set(new SegmentSet(segments_dir, target_bytes, read_only));
  DIR* d = ::opendir(segments_dir.c_str());
  if (d == nullptr) return Status::IOError(errno, "open " + segments_dir);
  std::vector<uint64_t> ids;
  while (dirent* e = ::readdir(d)) {
    uint64_t id;
    if (format::ParseSegmentFileName(e->d_name, &id)) ids.push_back(id);
    const std::string_view name(e->d_name);
    if (!read_only && name.size() > kTmpSuffix.size() &&
        name.substr(name.size() - kTmpSuffix.size()) == kTmpSuffix) {
      ::unlink((segments_dir + "/" + e->d_name).c_str());  // a segment never started
    }
  }
  ::closedir(d);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    auto seg = std::make_shared<Segment>();
    seg->id = id;
    std::string path = set->Path(id);
    seg->fd = ::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (seg->fd < 0) return Status::IOError(errno, "open " + path);
    struct stat st;
    if (::fstat(seg->fd, &st) != 0) return Status::IOError(errno, "stat " + path);
    char hdr[format::kSegmentHeaderSize];
    ssize_t n = ::pread(seg->fd, hdr, sizeof(hdr), 0);
    uint64_t hdr_id = 0;
    Status s = n == static_cast<ssize_t>(sizeof(hdr))
                   ? format::DecodeSegmentHeader(std::string_view(hdr, sizeof(hdr)), &hdr_id)
                   : Status::Corruption("segment header truncated");
    if (!s.ok()) return Status(s.code(), path + ": " + s.message());
    if (hdr_id != id) {
      return Status::Corruption(path + ": header names segment " + std::to_string(hdr_id));
    }
    seg->end = static_cast<uint64_t>(st.st_size);
    set->segments_[id] = seg;
    set->next_id_ = id + 1;
  }
  // The newest unsealed segment continues to take appends.
  if (!ids.empty() && !std::binary_search(sealed.begin(), sealed.end(), ids.back())) {
    set->active_ = set->segments_[ids.back()];
  }
  if (!sealed.empty()) set->next_id_ = std::max(set->next_id_, sealed.back() + 1);
  return set;
}

SegmentSet::~SegmentSet() = default;

SegmentSet::Segment::~Segment() {
  if (fd >= 0) ::close(fd);
}

std::string SegmentSet::Path(uint64_t segment_id) const {
  // dir_ ends in "/segments"; SegmentFileName includes that component.
  std::string parent = dir_.substr(0, dir_.size() - std::string_view(format::kSegmentsDirName).size());
  return parent + format::SegmentFileName(segment_id);
}

Status SegmentSet::StartSegmentLocked(uint64_t id) {
  // The file gets its name only once its header is on disk, so that a crash
  // never leaves a segment file without a valid header (Open would refuse it).
  std::string path = Path(id);
  std::string tmp = path + std::string(kTmpSuffix);
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError(errno, "create " + tmp);
  std::string hdr = format::EncodeSegmentHeader(id);
  Status s = PwriteAll(fd, hdr.data(), hdr.size(), 0, path);
  if (s.ok() && ::fdatasync(fd) != 0) s = Status::IOError(errno, "fdatasync " + path);
  if (s.ok() && ::link(tmp.c_str(), path.c_str()) != 0) s = Status::IOError(errno, "create " + path);
  ::unlink(tmp.c_str());
  if (s.ok()) s = FsyncDir(dir_);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  auto seg = std::make_shared<Segment>();
  seg->id = id;
  seg->fd = fd;
  seg->end = hdr.size();
  segments_[id] = seg;
  active_ = seg;
  next_id_ = id + 1;
  return Status::OK();
}

Result<AppendResult> SegmentSet::Append(std::string_view header, std::string_view payload) {
  const uint64_t size = header.size() + payload.size();
  if (read_only_) return Status(EROFS, "store is read-only");
  AppendResult r;
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (active_ != nullptr && active_->end > format::kSegmentHeaderSize &&
        active_->end + size > target_bytes_) {
      r.sealed_id = active_->id;
      r.sealed_size = active_->end;
      active_ = nullptr;
    }
    if (active_ == nullptr) CKPTFS_RETURN_IF_ERROR(StartSegmentLocked(next_id_));
    seg = active_;
    r.offset = seg->end.fetch_add(size);
    r.segment_id = seg->id;
  }
  // One call for header and payload; a short write finishes piece by piece.
  iovec iov[2] = {{const_cast<char*>(header.data()), header.size()},
                  {const_cast<char*>(payload.data()), payload.size()}};
  ssize_t w;
  do {
    w = ::pwritev(seg->fd, iov, 2, static_cast<off_t>(r.offset));
  } while (w < 0 && errno == EINTR);
  if (w < 0) return Status::IOError(errno, "write " + Path(seg->id));
  const size_t done = static_cast<size_t>(w);
  if (done < header.size()) {
    CKPTFS_RETURN_IF_ERROR(PwriteAll(seg->fd, header.data() + done, header.size() - done,
                                     r.offset + done, Path(seg->id)));
  }
  const size_t payload_done = done > header.size() ? done - header.size() : 0;
  CKPTFS_RETURN_IF_ERROR(PwriteAll(seg->fd, payload.data() + payload_done,
                                   payload.size() - payload_done,
                                   r.offset + header.size() + payload_done, Path(seg->id)));
  seg->dirty = true;
  return r;
}

std::shared_ptr<SegmentSet::Segment> SegmentSet::Find(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second;
}

void SegmentSet::Prefetch(uint64_t segment_id, uint64_t offset, uint64_t len) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg != nullptr) {
    (void)::posix_fadvise(seg->fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                          POSIX_FADV_WILLNEED);
  }
}

Result<size_t> SegmentSet::ReadUpTo(uint64_t segment_id, uint64_t offset, size_t len,
                                    char* buf) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  if (seg == nullptr) {
    return Status::Corruption("segment " + std::to_string(segment_id) + " is missing");
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(seg->fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(errno, "read " + Path(segment_id));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status SegmentSet::Read(uint64_t segment_id, uint64_t offset, size_t len, char* buf) const {
  CKPTFS_ASSIGN_OR_RETURN(size_t n, ReadUpTo(segment_id, offset, len, buf));
  if (n < len) {
    return Status::Corruption(Path(segment_id) + " ends at " + std::to_string(offset + n) +
                              ", expected data up to " + std::to_string(offset + len));
  }
  return Status::OK();
}

Status SegmentSet::SyncDirty() {
  std::vector<std::shared_ptr<Segment>> segs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, seg] : segments_) segs.push_back(seg);
  }
  for (auto& seg : segs) {
    if (seg->dirty.exchange(false) && ::fdatasync(seg->fd) != 0) {
      seg->dirty = true;
      return Status::IOError(errno, "fdatasync " + Path(seg->id));
    }
  }
  return Status::OK();
}

uint64_t SegmentSet::Size(uint64_t segment_id) const {
  std::shared_ptr<Segment> seg = Find(segment_id);
  return seg == nullptr ? 0 : seg->end.load();
}

std::vector<uint64_t> SegmentSet::Ids() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint64_t> ids;
  for (auto& [id, seg] : segments_) ids.push_back(id);
  return ids;
}

uint64_t SegmentSet::max_id() const {
  std::lock_guard<std::mutex> l(mu_);
  return segments_.empty() ? 0 : segments_.rbegin()->first;
}

Status SegmentSet::Remove(uint64_t segment_id) {
  if (read_only_) return Status(EROFS, "store is read-only");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (active_ != nullptr && active_->id == segment_id) {
      return Status(EBUSY, "segment " + std::to_string(segment_id) + " is the active segment");
    }
    if (segments_.erase(segment_id) == 0) return Status::OK();
  }
  // The descriptor closes when the last reader lets go of the Segment.
  const std::string path = Path(segment_id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError(errno, "delete " + path);
  }
  return Status::OK();
}

uint64_t SegmentSet::active_id() const {
  std::lock_guard<std::mutex> l(mu_);
  return active_ == nullptr ? 0 : active_->id;
}

}  // namespace ckptfs::engine
