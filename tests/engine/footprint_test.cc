// The point of ckptfs: a checkpoint of many small files and a few large ones
// becomes a handful of files on disk. 20,000 small files across 200
// directories plus one 1 GiB file must leave fewer than 100 files in the
// store directory, and read back correctly.
#include <sys/stat.h>

#include <random>

#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kDirs = 200;
constexpr int kFilesPerDir = 100;
constexpr uint64_t kBigMiBs = 1024;  // 1 GiB

uint64_t SmallSeed(int d, int f) { return 5000000 + d * 1000 + f; }
// 1 byte to 8 KiB: some inline, most above the 4 KiB inline limit.
size_t SmallSize(int d, int f) { return 1 + Mix64(SmallSeed(d, f)) % 8192; }

// MiB number `k` of the big file: one random MiB with `k` in its first bytes.
void TagMiB(std::string* buf, uint64_t k) {
  for (int i = 0; i < 8; ++i) (*buf)[i] = static_cast<char>((k >> (8 * i)) & 0xff);
}

TEST(FootprintTest, ManyFilesBecomeFewFiles) {
  TempDir tmp;
  const std::string dir = tmp.store();
  std::vector<std::vector<Ino>> small(kDirs, std::vector<Ino>(kFilesPerDir));
  Ino big = 0;
  std::string mib = PatternData(424242, 0, kMiB);
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir, TestOptions()));
    for (int d = 0; d < kDirs; ++d) {
      ASSERT_OK_AND_ASSIGN(Attr da, store->Mkdir(kRootIno, "layer" + std::to_string(d), 0755,
                                                 0, 0));
      for (int f = 0; f < kFilesPerDir; ++f) {
        ASSERT_OK_AND_ASSIGN(Attr fa, store->Create(da.ino, "0." + std::to_string(f),
                                                    S_IFREG | 0644, 0, 0));
        ASSERT_OK(WriteAll(store.get(), fa.ino, 0,
                           PatternData(SmallSeed(d, f), 0, SmallSize(d, f))));
        small[d][f] = fa.ino;
      }
    }
    ASSERT_OK_AND_ASSIGN(Attr ba, store->Create(kRootIno, "model.bin", S_IFREG | 0644, 0, 0));
    big = ba.ino;
    for (uint64_t k = 0; k < kBigMiBs; ++k) {
      TagMiB(&mib, k);
      ASSERT_OK(WriteAll(store.get(), big, k * kMiB, mib));
    }
    ASSERT_OK(store->Close());
  }

  const size_t files = CountFilesRecursively(dir);
  RecordProperty("store_files", std::to_string(files));
  std::printf("%d small files + one 1 GiB file -> %zu files in the store directory\n",
              kDirs * kFilesPerDir, files);
  EXPECT_LT(files, 100u);

  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir, TestOptions()));
  // Every small file, through the namespace.
  for (int d = 0; d < kDirs; ++d) {
    ASSERT_OK_AND_ASSIGN(Attr da, store->Lookup(kRootIno, "layer" + std::to_string(d)));
    for (int f = 0; f < kFilesPerDir; ++f) {
      ASSERT_OK_AND_ASSIGN(Attr fa, store->Lookup(da.ino, "0." + std::to_string(f)));
      ASSERT_EQ(fa.ino, small[d][f]);
      ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store.get(), fa.ino));
      ASSERT_TRUE(got == PatternData(SmallSeed(d, f), 0, SmallSize(d, f)))
          << "layer" << d << "/0." << f;
    }
  }
  // A sample of the big file: the ends and random MiBs, and a read across a
  // MiB boundary.
  ASSERT_OK_AND_ASSIGN(Attr ba, store->GetAttr(big));
  ASSERT_EQ(ba.size, kBigMiBs * kMiB);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> sample = {0, 1, kBigMiBs / 2, kBigMiBs - 1};
  for (int i = 0; i < 32; ++i) sample.push_back(rng() % kBigMiBs);
  for (uint64_t k : sample) {
    TagMiB(&mib, k);
    ASSERT_OK_AND_ASSIGN(std::string got, ReadRange(store.get(), big, k * kMiB, kMiB));
    ASSERT_TRUE(got == mib) << "MiB " << k << " of the big file";
  }
  std::string want = mib.substr(kMiB - 100);  // the tail does not depend on the tag
  ASSERT_OK_AND_ASSIGN(std::string seam, ReadRange(store.get(), big, kMiB - 100, 200));
  TagMiB(&mib, 1);
  EXPECT_TRUE(seam == want + mib.substr(0, 100));
  ASSERT_OK(store->Close());
}

}  // namespace
}  // namespace ckptfs::engine::test
