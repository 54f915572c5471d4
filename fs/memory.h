// The daemon's memory: the most it holds with a mount's options, by owner,
// and what it holds now. The bound is what docs/DESIGN.md ("Memory") states
// and README.md quotes for the defaults, what `ckptfs stat` shows beside the
// resident size, and what the memory tests assert.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "base/mutex.h"

#include "engine/store.h"

namespace ckptfs::fs {

struct DaemonMemory {
  engine::EngineMemory engine;
  // Per FUSE worker thread: the request buffer (a WRITE of up to max_write),
  // the reply of a READ, and one read of a segment or data file, with the
  // records a READ holds while it copies them.
  uint64_t threads = 0;
  // The program: code, libraries, thread stacks, the allocator's own.
  uint64_t program = 0;
  // The inode, lookup and handle tables of the files the kernel holds
  // (fs.kernel_inodes): kBytesPerKernelInode each. The kernel lets go of
  // them as its own caches shrink.
  uint64_t inodes = 0;
  uint64_t Total() const { return engine.Total() + threads + program + inodes; }
};

// What one worker thread may hold (see DaemonMemory::threads).
uint64_t ThreadMemoryBound(const engine::StoreOptions& store);
inline constexpr uint64_t kProgramMemoryBytes = 64ull << 20;
inline constexpr uint64_t kBytesPerKernelInode = 1024;

// The bound for `threads` worker threads, the store's effective options and
// `kernel_inodes` inodes the kernel holds.
DaemonMemory DaemonMemoryBound(const engine::StoreOptions& store, unsigned threads,
                               uint64_t kernel_inodes = 0);

// This process's resident memory (VmRSS of /proc/self/status); 0 if it
// cannot be read.
uint64_t ResidentBytes();

// Once the mount has served no request for `idle` after serving some, gives
// back what memory holds for nothing: the store's write buffers go to its
// index files (Store::ReleaseIdleMemory) and the allocator returns the pages
// it keeps free to the system. The caches stay: a restore that comes after a
// pause (a `ckptfs warmup`, then the job) still finds them.
//
// Thread safety: Start and Stop from one thread; the rest from any.
class IdleRelease {
 public:
  // `requests`: how many requests the mount has served; `release`: what to
  // give back (called on this object's thread).
  IdleRelease(std::function<uint64_t()> requests, std::function<void()> release,
              std::chrono::milliseconds idle);
  ~IdleRelease() { Stop(); }
  IdleRelease(const IdleRelease&) = delete;
  IdleRelease& operator=(const IdleRelease&) = delete;

  void Start();
  void Stop() EXCLUDES(mu_);
  // How many times it has released.
  uint64_t releases() const { return releases_.load(std::memory_order_relaxed); }

 private:
  void Run() EXCLUDES(mu_);

  const std::function<uint64_t()> requests_;
  const std::function<void()> release_;
  const std::chrono::milliseconds idle_;
  std::atomic<uint64_t> releases_{0};
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Gives the allocator's free pages back to the system (malloc_trim).
void ReturnFreeMemory();

}  // namespace ckptfs::fs
