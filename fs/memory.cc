#include "fs/memory.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fs/request.h"

namespace ckptfs::fs {

uint64_t ThreadMemoryBound(const engine::StoreOptions& store) {
  const uint64_t backing_read = std::max<uint64_t>(store.coalesce_max, store.max_record_bytes);
  return uint64_t{kMaxWrite} + kMaxRead + 2 * backing_read;
}

DaemonMemory DaemonMemoryBound(const engine::StoreOptions& store, unsigned threads,
                               uint64_t kernel_inodes) {
  DaemonMemory m;
  m.engine = engine::EngineMemoryBound(store);
  m.threads = uint64_t{threads} * ThreadMemoryBound(store);
  m.program = kProgramMemoryBytes;
  m.inodes = kernel_inodes * kBytesPerKernelInode;
  return m;
}

uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %lu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib << 10;
}

IdleRelease::IdleRelease(std::function<uint64_t()> requests, std::function<void()> release,
                         std::chrono::milliseconds idle)
    : requests_(std::move(requests)), release_(std::move(release)), idle_(idle) {}

void IdleRelease::Start() {
  {
    MutexLock l(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void IdleRelease::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void IdleRelease::Run() {
  using Clock = std::chrono::steady_clock;
  // Looks often enough to release within a fifth of `idle` of its end.
  const auto tick = std::max<Clock::duration>(idle_ / 5, std::chrono::milliseconds(10));
  uint64_t seen = requests_();
  Clock::time_point changed = Clock::now();
  bool released = true;  // nothing to give back before the first request
  for (;;) {
    {
      MutexLock l(&mu_);
      const Clock::time_point deadline = Clock::now() + tick;
      while (!stop_ && cv_.WaitUntil(&mu_, deadline)) {
      }
      if (stop_) return;
    }
    const uint64_t now_seen = requests_();
    if (now_seen != seen) {
      seen = now_seen;
      changed = Clock::now();
      released = false;
    } else if (!released && Clock::now() - changed >= idle_) {
      release_();
      released = true;
      releases_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void ReturnFreeMemory() { malloc_trim(0); }

}  // namespace ckptfs::fs
