// The ckptfs loader: reads files (or byte ranges of them) into host or
// device memory, fast.
//
// For a file on a ckptfs mount whose segment files (and data file) the
// caller may open, it asks the mount where the bytes lie (the xattr
// "user.ckptfs.extents") and reads the store's files itself ("direct"):
// large preads merged by the mount's coalescing rules, every record's header
// and payload checksum verified against the index's copy (format.h's
// decoders), every data-file block against its extent
// (format::CheckDataFileBlock), zstd records decompressed on the CPU.
// Otherwise ("fallback") it preads the file through its path. Either way the
// bytes pass through a few staging buffers and a Sink (gpu/sink.h,
// gpu/device.h), so that reads overlap copies.
//
// A direct load reads the extents as they were when the file was opened
// (SourceFile::Open), like a snapshot: sealed records never change, and a
// segment file that compaction deletes stays readable through the open
// descriptor. Write the file before opening it for loading; bytes still in
// the kernel's write-back cache (mount option writeback_cache) of a writer
// that has not closed or fsynced the file are not in the store yet.
//
// No exceptions leave these functions (std::bad_alloc included: ENOMEM).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/env.h"
#include "gpu/file_layout.h"
#include "gpu/load_plan.h"
#include "gpu/sink.h"

namespace ckptfs::gpu {

struct LoadOptions {
  // Read segment files directly when possible. false = always read through
  // the path (`ckptfs gpu-load --no-direct`). Default: true.
  bool direct = true;
  // Staging buffers in flight, and the size of each (grown to fit the
  // largest record when needed). Default: 4 x 16 MiB.
  int buffers = 4;
  uint64_t buffer_bytes = 16u << 20;
  // Threads that read, verify and decompress. Default: 2.
  int reader_threads = 2;
  // Coalescing of segment reads (see engine/store.h); -1 = the mount's
  // current setting, as the xattr reports it. Default: -1.
  int64_t coalesce_gap = -1;
  int64_t coalesce_max = -1;
};

struct LoadStats {
  bool direct = false;          // segments read directly
  std::string fallback_reason;  // why not, when !direct
  uint64_t bytes = 0;           // destination bytes written, zeros of holes included
  uint64_t backing_reads = 0;   // preads of segment files, the data file or the file
  uint64_t backing_bytes = 0;   // bytes those read
  uint64_t records = 0;         // records verified
  uint64_t compressed_records = 0;
  uint64_t data_file_blocks = 0;  // blocks of the data file verified
  uint64_t hole_bytes = 0;
  uint64_t inline_bytes = 0;
  int xattr_pages = 0;  // getxattr pages read at open
  double seconds = 0;   // wall time of the loads
  // Sums counters (and times) of another load; direct only when both are.
  void Add(const LoadStats& other);
};

class SourceFile {
 public:
  // Opens `path` (a regular file) and decides direct or fallback. Fails only
  // when the file cannot be opened or read at all, or when the store is
  // corrupt (a segment header does not check); a reason not to read
  // directly is kept in fallback_reason() instead.
  static Result<std::unique_ptr<SourceFile>> Open(const std::string& path,
                                                  const LoadOptions& options = {});
  ~SourceFile();
  SourceFile(const SourceFile&) = delete;
  SourceFile& operator=(const SourceFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  bool direct() const { return direct_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // The extents (direct only).
  const FileLayout& layout() const { return layout_; }

  // Fills `sink`'s destination: file bytes of each range at its
  // dest_offset. EINVAL when a range leaves the file or the destination;
  // EIO ("corruption: ...") when a record or data-file block does not verify.
  // Thread safety: one Load at a time per SourceFile.
  Result<LoadStats> Load(const std::vector<Range>& ranges, Sink* sink);
  // The whole file to destination offset 0.
  Result<LoadStats> LoadAll(Sink* sink);

 private:
  SourceFile() = default;
  Status OpenSegments(bool* corrupt);
  void CloseSegments();

  std::string path_;
  LoadOptions options_;
  int fd_ = -1;  // for its attributes and layout
  uint64_t size_ = 0;
  bool direct_ = false;
  std::string fallback_reason_;
  FileLayout layout_;
  std::unique_ptr<io::File> file_;      // path_, read through for fallbacks
  std::vector<uint64_t> segment_ids_;  // sorted; segments_ in the same order
  std::vector<std::unique_ptr<io::File>> segments_;
  std::unique_ptr<io::File> data_file_;  // when an extent lies in the data file
};

// Opens `path` and loads all of it into `sink`'s destination.
Result<LoadStats> LoadFile(const std::string& path, Sink* sink, const LoadOptions& options = {});

}  // namespace ckptfs::gpu
