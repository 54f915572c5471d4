#include "engine/verified_blocks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace ckptfs::engine {
namespace {

using Bytes = VerifiedBlocks::Bytes;

Bytes Block(char c) {
  std::shared_ptr<char[]> b(new char[4]{c, c, c, c});
  return b;
}

VerifiedBlocks::Key KeyAt(uint64_t offset) { return {7, offset, 4, 0xabc + offset}; }

// A read that counts itself and returns a block of `c`.
std::function<Result<Bytes>()> CountingRead(int* reads, char c) {
  return [reads, c]() -> Result<Bytes> {
    ++*reads;
    return Block(c);
  };
}

TEST(VerifiedBlocksTest, ABlockIsReadOnceAndKept) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'a');
  for (int i = 0; i < 3; ++i) {
    Result<Bytes> b = blocks.Get(KeyAt(0), read);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)[3], 'a');
  }
  EXPECT_EQ(reads, 1);
  // Another checksum or length is another block.
  VerifiedBlocks::Key other = KeyAt(0);
  other.checksum++;
  ASSERT_TRUE(blocks.Get(other, read).ok());
  other.length = 3;
  ASSERT_TRUE(blocks.Get(other, read).ok());
  EXPECT_EQ(reads, 3);
}

TEST(VerifiedBlocksTest, KeepsTheMostRecentlyUsedBlocks) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'b');
  for (uint64_t i = 0; i < VerifiedBlocks::kBlocks; ++i) ASSERT_TRUE(blocks.Get(KeyAt(i), read).ok());
  ASSERT_TRUE(blocks.Get(KeyAt(0), read).ok());                        // used again: kept
  ASSERT_TRUE(blocks.Get(KeyAt(VerifiedBlocks::kBlocks), read).ok());  // pushes out block 1
  EXPECT_EQ(reads, static_cast<int>(VerifiedBlocks::kBlocks) + 1);
  ASSERT_TRUE(blocks.Get(KeyAt(0), read).ok());
  EXPECT_EQ(reads, static_cast<int>(VerifiedBlocks::kBlocks) + 1);
  ASSERT_TRUE(blocks.Get(KeyAt(1), read).ok());
  EXPECT_EQ(reads, static_cast<int>(VerifiedBlocks::kBlocks) + 2);
}

TEST(VerifiedBlocksTest, AFailedReadIsNotKept) {
  VerifiedBlocks blocks;
  Result<Bytes> b = blocks.Get(KeyAt(0), []() -> Result<Bytes> { return Status(EIO, "bad"); });
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), EIO);
  int reads = 0;
  b = blocks.Get(KeyAt(0), CountingRead(&reads, 'c'));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reads, 1);
}

TEST(VerifiedBlocksTest, ThreadsThatAskAtOnceShareOneRead) {
  VerifiedBlocks blocks;
  std::atomic<int> reads{0};
  std::atomic<bool> go{false};
  auto read = [&]() -> Result<Bytes> {
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // others arrive meanwhile
    return Block('d');
  };
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      Result<Bytes> b = blocks.Get(KeyAt(5), read);
      if (b.ok() && (*b)[0] == 'd') ++ok;
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(reads.load(), 1);
}

TEST(VerifiedBlocksTest, WhenTheSharedReadFailsEachWaiterReadsItself) {
  VerifiedBlocks blocks;
  std::atomic<int> reads{0};
  std::atomic<bool> started{false};
  std::thread first([&] {
    Result<Bytes> b = blocks.Get(KeyAt(9), [&]() -> Result<Bytes> {
      ++reads;
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return Status(EIO, "bad");
    });
    EXPECT_FALSE(b.ok());
  });
  while (!started.load()) std::this_thread::yield();
  Result<Bytes> b = blocks.Get(KeyAt(9), [&]() -> Result<Bytes> {
    ++reads;
    return Block('e');
  });
  first.join();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0], 'e');
  EXPECT_EQ(reads.load(), 2);
}

}  // namespace
}  // namespace ckptfs::engine
