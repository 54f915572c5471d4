#include "base/write_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

// Starts one thread per offset, each taking a turn and recording its offset,
// while the caller holds a turn; returns the offsets in the order the turns
// went, once the caller's turn has ended and every thread is done.
class Recorder {
 public:
  explicit Recorder(WriteOrder* order) : order_(order) {}

  // Starts a writer at `offset` and waits until it waits for its turn.
  void Start(uint64_t offset) {
    const size_t before = order_->waiting();
    threads_.emplace_back([this, offset] {
      WriteOrder::Turn turn(order_, offset);
      MutexLock l(&mu_);
      order_seen_.push_back(offset);
    });
    while (order_->waiting() == before) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  std::vector<uint64_t> Finish() {
    for (std::thread& t : threads_) t.join();
    MutexLock l(&mu_);
    return order_seen_;
  }

 private:
  WriteOrder* const order_;
  std::vector<std::thread> threads_;
  Mutex mu_;
  std::vector<uint64_t> order_seen_ GUARDED_BY(mu_);
};

TEST(WriteOrderTest, WaitingWritersGoInOffsetOrder) {
  WriteOrder order;
  std::vector<uint64_t> offsets;
  for (uint64_t i = 0; i < 16; ++i) offsets.push_back(i << 20);
  std::shuffle(offsets.begin(), offsets.end(), std::mt19937(7));
  Recorder rec(&order);
  {
    WriteOrder::Turn held(&order, 100 << 20);
    for (uint64_t off : offsets) rec.Start(off);
    EXPECT_EQ(order.waiting(), offsets.size());
  }
  std::vector<uint64_t> seen = rec.Finish();
  std::sort(offsets.begin(), offsets.end());
  EXPECT_EQ(seen, offsets);
  EXPECT_EQ(order.waiting(), 0u);
}

TEST(WriteOrderTest, AWriterPassedOverTooOftenGoesNext) {
  WriteOrder order;
  Recorder rec(&order);
  const uint64_t high = 1ull << 40;
  const uint64_t lows = WriteOrder::kMaxBypass + 8;
  {
    WriteOrder::Turn held(&order, 0);
    rec.Start(high);  // arrives first
    for (uint64_t i = 0; i < lows; ++i) rec.Start(i);
  }
  std::vector<uint64_t> want;
  for (uint64_t i = 0; i < WriteOrder::kMaxBypass; ++i) want.push_back(i);
  want.push_back(high);
  for (uint64_t i = WriteOrder::kMaxBypass; i < lows; ++i) want.push_back(i);
  EXPECT_EQ(rec.Finish(), want);
}

TEST(WriteOrderTest, ConcurrentWritersEachGetATurnAlone) {
  WriteOrder order;
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::atomic<int> turns{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 2000; ++i) {
        WriteOrder::Turn turn(&order, rng() % 64);
        const int now = ++inside;
        int prev = most.load();
        while (now > prev && !most.compare_exchange_weak(prev, now)) {
        }
        turns++;
        --inside;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(turns.load(), 8 * 2000);
  EXPECT_EQ(order.waiting(), 0u);
}

}  // namespace
}  // namespace ckptfs
