// Counts of FUSE requests by kind, for MOUNT/.ckptfs/stats: one counter for
// each request the kernel can send to this session (libfuse answers INIT,
// DESTROY and INTERRUPT itself; the lock, bmap and statx requests are never
// sent because the capabilities are not offered).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ckptfs::fs {

enum class Op : uint8_t {
  kLookup,
  kForget,
  kGetattr,
  kSetattr,
  kReadlink,
  kMknod,
  kMkdir,
  kUnlink,
  kRmdir,
  kSymlink,
  kRename,
  kLink,
  kOpen,
  kRead,
  kWrite,
  kFlush,
  kRelease,
  kFsync,
  kOpendir,
  kReaddir,
  kReaddirplus,
  kReleasedir,
  kFsyncdir,
  kStatfs,
  kSetxattr,
  kGetxattr,
  kListxattr,
  kRemovexattr,
  kCreate,
  kFallocate,
  kLseek,
  kIoctl,
  kPoll,
  kCopyFileRange,
  kAccess,
  kNumOps
};

// The name of each counter in the stats file, indexed by Op.
inline constexpr std::array<const char*, static_cast<size_t>(Op::kNumOps)> kOpNames = {
    "lookups",   "forgets",   "getattrs",      "setattrs",     "readlinks", "mknods",
    "mkdirs",    "unlinks",   "rmdirs",        "symlinks",     "renames",   "links",
    "opens",     "reads",     "writes",        "flushes",      "releases",  "fsyncs",
    "opendirs",  "readdirs",  "readdirpluses", "releasedirs",  "fsyncdirs", "statfses",
    "setxattrs", "getxattrs", "listxattrs",    "removexattrs", "creates",   "fallocates",
    "lseeks",    "ioctls",    "polls",         "copy_file_ranges", "accesses",
};

// Monotonic counters; relaxed atomics, one cache line each so that threads
// serving different kinds of requests do not share lines. Thread-safe.
class OpStats {
 public:
  void Count(Op op) { Add(static_cast<size_t>(op), 1); }
  // A request answered with an error other than ENOENT or ENODATA.
  void CountError() { Add(kErrors, 1); }
  void AddReadBytes(uint64_t n) { Add(kReadBytes, n); }
  void AddWriteBytes(uint64_t n) { Add(kWriteBytes, n); }
  // A regular file made (creates arrive as MKNOD: see entries.cc).
  void CountFileCreated() { Add(kFilesCreated, 1); }
  // A READ of a regular file at offset 0: a file read from its start.
  void CountFileRead() { Add(kFilesRead, 1); }

  uint64_t Get(Op op) const { return Load(static_cast<size_t>(op)); }
  uint64_t errors() const { return Load(kErrors); }
  uint64_t read_bytes() const { return Load(kReadBytes); }
  uint64_t write_bytes() const { return Load(kWriteBytes); }
  uint64_t files_created() const { return Load(kFilesCreated); }
  uint64_t files_read() const { return Load(kFilesRead); }
  // Every request counted, of all kinds.
  uint64_t requests() const {
    uint64_t n = 0;
    for (size_t i = 0; i < static_cast<size_t>(Op::kNumOps); ++i) n += Load(i);
    return n;
  }

 private:
  static constexpr size_t kErrors = static_cast<size_t>(Op::kNumOps);
  static constexpr size_t kReadBytes = kErrors + 1;
  static constexpr size_t kWriteBytes = kErrors + 2;
  static constexpr size_t kFilesCreated = kErrors + 3;
  static constexpr size_t kFilesRead = kErrors + 4;
  static constexpr size_t kSlots = kErrors + 5;

  struct alignas(64) Counter {
    std::atomic<uint64_t> v{0};
  };
  void Add(size_t i, uint64_t n) { slots_[i].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Load(size_t i) const { return slots_[i].v.load(std::memory_order_relaxed); }

  std::array<Counter, kSlots> slots_;
};

}  // namespace ckptfs::fs
