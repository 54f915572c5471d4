#include "engine/data/verified_blocks.h"

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

TEST(VerifiedBlocksTest, ABlockIsKeptUntilEveryByteIsTaken) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'a');
  // Taken in pieces, out of order and overlapping: one read.
  for (auto [from, to] : {std::pair<uint64_t, uint64_t>{1, 2}, {0, 2}, {1, 2}}) {
    Result<VerifiedBlocks::Taken> t = blocks.Get(KeyAt(0), from, to, read);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->bytes[3], 'a');
    EXPECT_FALSE(t->whole);
  }
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(blocks.bytes(), 4u);
  // Another checksum or length is another block.
  VerifiedBlocks::Key other = KeyAt(0);
  other.checksum++;
  ASSERT_TRUE(blocks.Get(other, 0, 1, read).ok());
  other.length = 3;
  ASSERT_TRUE(blocks.Get(other, 0, 1, read).ok());
  EXPECT_EQ(reads, 3);
  EXPECT_EQ(blocks.bytes(), 11u);
  // The last bytes of the first block: taken whole, it goes.
  Result<VerifiedBlocks::Taken> t = blocks.Get(KeyAt(0), 2, 4, read);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->whole);
  EXPECT_EQ(reads, 3);
  EXPECT_EQ(blocks.bytes(), 7u);
  ASSERT_TRUE(blocks.Get(KeyAt(0), 0, 1, read).ok());  // a second pass reads again
  EXPECT_EQ(reads, 4);
}

TEST(VerifiedBlocksTest, KeepsTheBytesOfTheMostRecentlyUsedBlocks) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'b');
  constexpr uint64_t kFit = 4;  // blocks of a quarter of kBytes each
  auto key = [](uint64_t i) { return VerifiedBlocks::Key{7, i, VerifiedBlocks::kBytes / kFit, i}; };
  for (uint64_t i = 0; i < kFit; ++i) ASSERT_TRUE(blocks.Get(key(i), 0, 1, read).ok());
  EXPECT_EQ(blocks.bytes(), VerifiedBlocks::kBytes);
  ASSERT_TRUE(blocks.Get(key(0), 1, 2, read).ok());     // used again: kept
  ASSERT_TRUE(blocks.Get(key(kFit), 0, 1, read).ok());  // block 1 lets go of its bytes
  EXPECT_EQ(reads, static_cast<int>(kFit) + 1);
  EXPECT_EQ(blocks.bytes(), VerifiedBlocks::kBytes);
  ASSERT_TRUE(blocks.Get(key(0), 2, 3, read).ok());
  EXPECT_EQ(reads, static_cast<int>(kFit) + 1);
  // Block 1's bytes are read again, and what was taken of it still counts.
  Result<VerifiedBlocks::Taken> t = blocks.Get(key(1), 1, VerifiedBlocks::kBytes / kFit, read);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(reads, static_cast<int>(kFit) + 2);
  EXPECT_TRUE(t->whole);
}

TEST(VerifiedBlocksTest, TracksAtMostKEntriesBlocks) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'f');
  for (uint64_t i = 0; i <= VerifiedBlocks::kEntries; ++i) ASSERT_TRUE(blocks.Get(KeyAt(i), 0, 1, read).ok());
  // Block 0 was forgotten: the rest of it does not complete it.
  Result<VerifiedBlocks::Taken> t = blocks.Get(KeyAt(0), 1, 4, read);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->whole);
  // Block 2 was not.
  t = blocks.Get(KeyAt(2), 1, 4, read);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->whole);
}

TEST(VerifiedBlocksTest, PagesGoByWholeFolios) {
  VerifiedBlocks blocks;
  int reads = 0;
  auto read = CountingRead(&reads, 'g');
  constexpr uint64_t kMiB = 1 << 20;
  auto key = [](uint64_t i) { return VerifiedBlocks::Key{7, i * kMiB, kMiB, i}; };
  ASSERT_TRUE(blocks.Get(key(1), 0, 10, read).ok());  // half taken
  Result<VerifiedBlocks::Taken> t = blocks.Get(key(0), 0, kMiB, read);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->whole);
  EXPECT_EQ(t->evict_offset, 0u);  // the block alone: its folio holds block 1 too
  EXPECT_EQ(t->evict_length, kMiB);
  t = blocks.Get(key(1), 10, kMiB, read);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->whole);
  EXPECT_EQ(t->evict_offset, 0u);  // the whole 2 MiB span
  EXPECT_EQ(t->evict_length, VerifiedBlocks::kFolioBytes);
  // Another inode's half-taken block does not count.
  ASSERT_TRUE(blocks.Get(VerifiedBlocks::Key{8, 3 * kMiB, kMiB, 0}, 0, 10, read).ok());
  t = blocks.Get(key(2), 0, kMiB, read);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->evict_offset, 2 * kMiB);
  EXPECT_EQ(t->evict_length, VerifiedBlocks::kFolioBytes);
}

TEST(VerifiedBlocksTest, AFailedReadIsNotKept) {
  VerifiedBlocks blocks;
  Result<VerifiedBlocks::Taken> b =
      blocks.Get(KeyAt(0), 0, 1, []() -> Result<Bytes> { return Status(EIO, "bad"); });
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), EIO);
  int reads = 0;
  b = blocks.Get(KeyAt(0), 0, 1, CountingRead(&reads, 'c'));
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
      Result<VerifiedBlocks::Taken> b = blocks.Get(KeyAt(5), 0, 1, read);
      if (b.ok() && b->bytes[0] == 'd') ++ok;
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
    Result<VerifiedBlocks::Taken> b = blocks.Get(KeyAt(9), 0, 1, [&]() -> Result<Bytes> {
      ++reads;
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return Status(EIO, "bad");
    });
    EXPECT_FALSE(b.ok());
  });
  while (!started.load()) std::this_thread::yield();
  Result<VerifiedBlocks::Taken> b = blocks.Get(KeyAt(9), 0, 1, [&]() -> Result<Bytes> {
    ++reads;
    return Block('e');
  });
  first.join();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes[0], 'e');
  EXPECT_EQ(reads.load(), 2);
}

}  // namespace
}  // namespace ckptfs::engine
