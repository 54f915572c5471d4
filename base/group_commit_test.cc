#include "base/group_commit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

TEST(GroupCommitTest, ConcurrentCallersShareFlushes) {
  std::atomic<int> flushes{0};
  std::atomic<int> in_flush{0};
  GroupCommit gc([&] {
    EXPECT_EQ(in_flush.fetch_add(1), 0) << "flushes must not overlap";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    flushes++;
    in_flush--;
    return Status::OK();
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 4; ++j) EXPECT_TRUE(gc.Sync().ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(static_cast<uint64_t>(flushes.load()), gc.flushes());
  EXPECT_LT(flushes.load(), 64) << "64 syncs should share flushes";
  EXPECT_GE(flushes.load(), 4);
}

TEST(GroupCommitTest, CallerWaitsForAFlushThatStartsAfterIt) {
  // A sync must be covered by a flush that began after the call: count the
  // flushes that started after each call and require at least one.
  std::atomic<int> started{0};
  GroupCommit gc([&] {
    started++;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return Status::OK();
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 10; ++j) {
        int before = started.load();
        EXPECT_TRUE(gc.Sync().ok());
        EXPECT_GT(started.load(), before);
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GroupCommitTest, FailureIsReportedAndNextCallRetries) {
  int calls = 0;
  GroupCommit gc([&] {
    ++calls;
    return calls == 1 ? Status(EIO, "disk gone") : Status::OK();
  });
  Status s = gc.Sync();
  EXPECT_EQ(s.code(), EIO);
  EXPECT_TRUE(gc.Sync().ok());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace ckptfs
