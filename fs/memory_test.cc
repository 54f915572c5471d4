#include "fs/memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "fs/mount_options.h"

namespace ckptfs::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A document's text with each run of white space as one space, as it reads.
std::string ReadDoc(const std::string& name) {
  std::ifstream in(std::string(CKPTFS_SOURCE_DIR) + "/" + name);
  std::string text, word;
  while (in >> word) text += (text.empty() ? "" : " ") + word;
  return text;
}

TEST(MemoryTest, TheDefaultBoundAddsUpItsOwners) {
  const MountOptions o;
  const DaemonMemory m = DaemonMemoryBound(o.store, o.threads);
  EXPECT_EQ(m.engine.record_cache, 128 * kMiB);  // cache_size
  EXPECT_EQ(m.engine.index_memtables, 128 * kMiB);
  EXPECT_EQ(m.engine.index_block_cache, 64 * kMiB);
  EXPECT_EQ(m.engine.extent_maps, 24 * kMiB);
  EXPECT_EQ(m.engine.verified_blocks, 16 * kMiB);  // 16 blocks of max_record_bytes
  EXPECT_EQ(m.threads, 16 * 4 * kMiB);
  EXPECT_EQ(m.program, 64 * kMiB);
  EXPECT_EQ(m.Total(), 488 * kMiB);
}

TEST(MemoryTest, TheBoundFollowsTheOptions) {
  MountOptions o;
  o.store.cache_size = 1ull << 30;
  o.threads = 4;
  o.store.coalesce_max = 4 * kMiB;  // a backing read of up to 4 MiB per thread
  const DaemonMemory m = DaemonMemoryBound(o.store, o.threads);
  EXPECT_EQ(m.engine.record_cache, 1024 * kMiB);
  EXPECT_EQ(m.threads, 4 * (1 + 1 + 2 * 4) * kMiB);
  EXPECT_EQ(m.Total(), (1024 + 128 + 64 + 24 + 16 + 40 + 64) * kMiB);
  // And 1 KiB for each inode the kernel holds.
  EXPECT_EQ(DaemonMemoryBound(o.store, o.threads, 1 << 20).Total(), m.Total() + 1024 * kMiB);
}

// README.md and docs/DESIGN.md quote the bound with the defaults; the mount
// tests assert the bound the daemon computes with the same function.
TEST(MemoryTest, TheDocsQuoteTheDefaultBound) {
  const MountOptions o;
  const std::string quote =
      "at most " + std::to_string(DaemonMemoryBound(o.store, o.threads).Total() / kMiB) +
      " MiB with the defaults";
  EXPECT_NE(ReadDoc("README.md").find(quote), std::string::npos) << quote;
  EXPECT_NE(ReadDoc("docs/DESIGN.md").find(quote), std::string::npos) << quote;
}

TEST(MemoryTest, ResidentBytesReadsThisProcess) {
  const uint64_t before = ResidentBytes();
  EXPECT_GT(before, 1 * kMiB);
  std::string touched(64 * kMiB, 'x');  // every page written
  EXPECT_GE(ResidentBytes(), before + 60 * kMiB) << touched.size();
}

TEST(IdleReleaseTest, ReleasesOnceAfterEachBusySpell) {
  std::atomic<uint64_t> requests{0};
  std::atomic<int> released{0};
  IdleRelease r([&] { return requests.load(); }, [&] { released++; },
                std::chrono::milliseconds(1000));
  r.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(released.load(), 0) << "released before any request";
  // Busy: a request every 50 ms for two seconds, never idle for a second.
  for (int i = 0; i < 40; ++i) {
    requests++;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(released.load(), 0) << "released while busy";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(released.load(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(released.load(), 1) << "released again without a request";
  requests++;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(released.load(), 2);
  EXPECT_EQ(r.releases(), 2u);
  r.Stop();
}

}  // namespace
}  // namespace ckptfs::fs
