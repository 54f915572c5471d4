// Counts of FUSE requests by kind, for MOUNT/.ckptfs/stats: one counter for
// each request the kernel can send to this session (libfuse answers INIT,
// DESTROY and INTERRUPT itself; the lock, bmap and statx requests are never
// sent because the capabilities are not offered).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/mutex.h"

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

// The latest run of one kind of per-file event (a file created, a file read
// from its start): events less than kGap apart belong to one run, so a save
// or a restore is one run and the next one starts a new run. Its requests
// per file are the requests counted from its first event to its last,
// divided by the files after the first: the requests between two events are
// one file's (the trailing requests of the one, the leading ones of the
// next), so no guess of where a file's requests begin is needed. Requests
// other work sends meanwhile are counted too. Thread-safe.
class FileRun {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kGap = std::chrono::seconds(1);

  struct Summary {
    uint64_t files = 0;
    // 0 until the run has two files.
    double requests_per_file = 0;
    // From the first event to the last.
    double seconds = 0;
  };

  // One event, when `requests` requests had been counted in all.
  void Event(uint64_t requests, Clock::time_point now) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (files_ == 0 || now - last_ >= kGap) {
      files_ = 0;
      first_ = now;
      first_requests_ = requests;
    }
    ++files_;
    last_ = now;
    last_requests_ = requests;
  }

  Summary Last() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    Summary s;
    s.files = files_;
    if (files_ >= 2) {
      s.requests_per_file = static_cast<double>(last_requests_ - first_requests_) /
                            static_cast<double>(files_ - 1);
    }
    s.seconds = std::chrono::duration<double>(last_ - first_).count();
    return s;
  }

 private:
  mutable Mutex mu_;
  uint64_t files_ GUARDED_BY(mu_) = 0;
  uint64_t first_requests_ GUARDED_BY(mu_) = 0;
  uint64_t last_requests_ GUARDED_BY(mu_) = 0;
  Clock::time_point first_ GUARDED_BY(mu_);
  Clock::time_point last_ GUARDED_BY(mu_);
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
  void CountFileCreated() {
    Add(kFilesCreated, 1);
    created_.Event(requests(), FileRun::Clock::now());
  }
  // A READ of a regular file at offset 0: a file read from its start.
  void CountFileRead() {
    Add(kFilesRead, 1);
    read_.Event(requests(), FileRun::Clock::now());
  }
  // The latest run of files created (a save) and of files read (a restore).
  FileRun::Summary LastCreate() const { return created_.Last(); }
  FileRun::Summary LastRestore() const { return read_.Last(); }

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
  FileRun created_;
  FileRun read_;
};

}  // namespace ckptfs::fs
