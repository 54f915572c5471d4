#include "gpu/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>

#include "format/format.h"
#include "format/segment_scan.h"
#include "gpu/pipeline.h"

namespace ckptfs::gpu {
namespace {

namespace format = ::ckptfs::format;

// statfs(2) f_type of every FUSE filesystem.
constexpr long kFuseSuperMagic = 0x65735546;

// The segment id -> position in `ids` (sorted).
int IndexOf(const std::vector<uint64_t>& ids, uint64_t id) {
  return static_cast<int>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
}

}  // namespace

void LoadStats::Add(const LoadStats& o) {
  direct = direct && o.direct;
  if (fallback_reason.empty()) fallback_reason = o.fallback_reason;
  bytes += o.bytes;
  backing_reads += o.backing_reads;
  backing_bytes += o.backing_bytes;
  records += o.records;
  compressed_records += o.compressed_records;
  data_file_blocks += o.data_file_blocks;
  hole_bytes += o.hole_bytes;
  inline_bytes += o.inline_bytes;
  xattr_pages += o.xattr_pages;
  seconds += o.seconds;
}

SourceFile::~SourceFile() {
  CloseSegments();
  if (fd_ >= 0) close(fd_);
}

void SourceFile::CloseSegments() {
  segments_.clear();
  segment_ids_.clear();
  data_file_.reset();
}

// Opens every segment the layout names and checks its header, and the
// file's data file when an extent lies there. A file that cannot be opened
// (ENOENT, EACCES, ...) is a reason to fall back; a segment whose header is
// wrong is corruption (*corrupt).
Status SourceFile::OpenSegments(bool* corrupt) {
  *corrupt = false;
  CloseSegments();
  bool uses_data_file = false;
  for (const LayoutExtent& e : layout_.extents) {
    if (e.kind == LayoutExtent::Kind::kRecord) segment_ids_.push_back(e.value.segment_id);
    if (e.kind == LayoutExtent::Kind::kDataFile) uses_data_file = true;
  }
  if (uses_data_file) {
    const std::string path = DataFilePath(layout_);
    Result<std::unique_ptr<io::File>> data = io::Env::Posix()->Open(path, io::OpenMode::kRead);
    if (!data.ok()) {
      return Status(data.status().code(),
                    "cannot open data file " + path + ": " + data.status().message());
    }
    data_file_ = std::move(data).value();
  }
  std::sort(segment_ids_.begin(), segment_ids_.end());
  segment_ids_.erase(std::unique(segment_ids_.begin(), segment_ids_.end()), segment_ids_.end());
  for (uint64_t id : segment_ids_) {
    // SegmentFileName is "segments/NNNNNNNN.seg", relative to the store.
    const std::string path = layout_.segments_dir + "/" +
                             std::filesystem::path(format::SegmentFileName(id)).filename().string();
    Result<std::unique_ptr<io::File>> seg = io::Env::Posix()->Open(path, io::OpenMode::kRead);
    if (!seg.ok()) return Status(seg.status().code(), "cannot open segment " + path + ": " +
                                                          seg.status().message());
    segments_.push_back(std::move(seg).value());
    const io::File& file = *segments_.back();
    Status st = format::ReadSegmentHeader(
        [&file](uint64_t off, size_t len, char* buf) { return file.ReadAt(off, len, buf); }, id);
    if (!st.ok() && !st.IsCorruption()) return st;
    if (!st.ok()) {
      *corrupt = true;
      return Status(st.code(), st.message() + " (" + path + ")");
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<SourceFile>> SourceFile::Open(const std::string& path,
                                                     const LoadOptions& options) {
  try {
    std::unique_ptr<SourceFile> f(new SourceFile());
    f->path_ = path;
    f->options_ = options;
    f->fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd_ < 0) return Status::IOError(errno, "cannot open " + path);
    struct stat st;
    if (fstat(f->fd_, &st) != 0) return Status::IOError(errno, "stat " + path);
    if (!S_ISREG(st.st_mode)) return Status(EINVAL, path + " is not a regular file");
    f->size_ = static_cast<uint64_t>(st.st_size);
    CKPTFS_ASSIGN_OR_RETURN(f->file_, io::Env::Posix()->Open(path, io::OpenMode::kRead));

    if (!options.direct) {
      f->fallback_reason_ = "direct reads turned off";
      return f;
    }
    struct statfs sfs;
    if (fstatfs(f->fd_, &sfs) != 0) return Status::IOError(errno, "statfs " + path);
    if (sfs.f_type != kFuseSuperMagic) {
      f->fallback_reason_ = "not on a ckptfs mount";
      return f;
    }
    // Twice: compaction may delete a segment between the xattr and the open.
    for (int attempt = 0; attempt < 2; ++attempt) {
      Result<FileLayout> layout = FetchLayout(f->fd_);
      if (!layout.ok()) {
        f->fallback_reason_ = layout.status().code() == ENOTSUP
                                  ? "not on a ckptfs mount (" + layout.status().message() + ")"
                                  : layout.status().ToString();
        return f;
      }
      f->layout_ = std::move(*layout);
      if (f->layout_.size != f->size_) {
        f->fallback_reason_ = "file size " + std::to_string(f->size_) +
                              " differs from the store's " + std::to_string(f->layout_.size) +
                              " (written meanwhile?)";
        return f;
      }
      bool corrupt = false;
      Status seg = f->OpenSegments(&corrupt);
      if (seg.ok()) {
        f->direct_ = true;
        f->fallback_reason_.clear();
        return f;
      }
      if (corrupt) return seg;
      f->CloseSegments();
      f->fallback_reason_ = seg.ToString();
      if (seg.code() != ENOENT) break;
    }
    f->layout_ = FileLayout();
    return f;
  } catch (const std::bad_alloc&) {
    return Status(ENOMEM, "out of memory opening " + path);
  }
}

Result<LoadStats> SourceFile::Load(const std::vector<Range>& ranges, Sink* sink) {
  try {
    const auto start = std::chrono::steady_clock::now();
    CKPTFS_RETURN_IF_ERROR(CheckRanges(ranges, size_, sink->capacity()));
    if (sink->dest() == nullptr) {
      for (const Range& r : ranges) {
        if (r.length > 0) return Status(EINVAL, "the sink has no destination");
      }
    }
    LoadPlan plan;
    PlanSources src;
    src.file = file_.get();
    src.data_file = data_file_.get();
    if (direct_) {
      PlanSettings ps;
      ps.buffer_bytes = options_.buffer_bytes;
      ps.coalesce_gap = options_.coalesce_gap >= 0 ? static_cast<uint64_t>(options_.coalesce_gap)
                                                   : layout_.coalesce_gap;
      ps.coalesce_max = options_.coalesce_max >= 0 ? static_cast<uint64_t>(options_.coalesce_max)
                                                   : layout_.coalesce_max;
      plan = PlanDirect(layout_, ranges, ps);
      // The plan numbers segments in first-use order; map them to our fds.
      for (uint64_t id : plan.segment_ids) {
        const int i = IndexOf(segment_ids_, id);
        src.segments.push_back(segments_[i].get());
      }
    } else {
      plan = PlanThroughFile(ranges, options_.buffer_bytes);
    }
    PipelineOptions po;
    po.buffers = options_.buffers;
    po.reader_threads = options_.reader_threads;
    CKPTFS_RETURN_IF_ERROR(RunPipeline(plan, src, sink, po));

    LoadStats s;
    s.direct = direct_;
    s.fallback_reason = fallback_reason_;
    for (const Range& r : ranges) s.bytes += r.length;
    s.backing_reads = plan.backing_reads;
    s.backing_bytes = plan.backing_bytes;
    s.records = plan.records;
    s.compressed_records = plan.compressed_records;
    s.data_file_blocks = plan.data_file_blocks;
    s.hole_bytes = plan.hole_bytes;
    s.inline_bytes = plan.inline_bytes;
    s.xattr_pages = layout_.pages;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  } catch (const std::bad_alloc&) {
    return Status(ENOMEM, "out of memory loading " + path_);
  }
}

Result<LoadStats> SourceFile::LoadAll(Sink* sink) { return Load({Range{0, size_, 0}}, sink); }

Result<LoadStats> LoadFile(const std::string& path, Sink* sink, const LoadOptions& options) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> f, SourceFile::Open(path, options));
  return f->LoadAll(sink);
}

}  // namespace ckptfs::gpu
