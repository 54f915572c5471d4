#include "engine/store_clock.h"

#include <atomic>
#include <ctime>

namespace ckptfs::engine {

namespace {
// The latest change time the kernel stamped and sent (KernelStamped), in
// nanoseconds since the epoch.
std::atomic<int64_t> kernel_stamped_ns{0};
}  // namespace

Timespec Now() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  const int64_t coarse = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  const int64_t stamped = kernel_stamped_ns.load(std::memory_order_relaxed);
  if (stamped > coarse) return FromNanos(stamped);
  return Timespec{ts.tv_sec, static_cast<uint32_t>(ts.tv_nsec)};
}

void KernelStamped(Timespec ctime) {
  const int64_t ns = ctime.sec * 1'000'000'000 + ctime.nsec;
  int64_t seen = kernel_stamped_ns.load(std::memory_order_relaxed);
  while (ns > seen && !kernel_stamped_ns.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

Timespec FromNanos(int64_t ns) {
  return Timespec{ns / 1'000'000'000, static_cast<uint32_t>(ns % 1'000'000'000)};
}

}  // namespace ckptfs::engine
