// LookupCounts against a real store: the kernel's lookups pin a file's data,
// the forget to zero releases it, and counts stay balanced under contention.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <thread>
#include <vector>

#include "fs/sharded_map.h"
#include "tests/engine/test_util.h"

namespace ckptfs::fs {
namespace {

using engine::Attr;
using engine::kRootIno;
using engine::Result;

class LookupCountsTest : public engine::test::StoreFixture {
 protected:
  Attr MakeFile(const std::string& name, const std::string& data) {
    Result<Attr> a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE(engine::test::WriteAll(s(), a->ino, 0, data).ok());
    return *a;
  }
  std::string ReadAll(engine::Ino ino, size_t n) {
    std::string buf(n, '\0');
    Result<size_t> got = s()->Read(ino, 0, n, buf.data());
    if (!got.ok()) return "error: " + got.status().ToString();
    buf.resize(*got);
    return buf;
  }
};

TEST_F(LookupCountsTest, UnlinkedFileKeepsItsDataUntilTheLastForget) {
  const std::string data(100000, 'q');
  const Attr a = MakeFile("f", data);
  LookupCounts counts(s());
  ASSERT_OK(counts.Add(a.ino, true));
  ASSERT_OK(counts.Add(a.ino, true));
  EXPECT_EQ(counts.pinned(), 1);
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_EQ(ReadAll(a.ino, data.size() + 1), data);
  bool gone = true;
  ASSERT_OK(counts.Forget(a.ino, 1, &gone));
  EXPECT_FALSE(gone);
  EXPECT_EQ(ReadAll(a.ino, data.size() + 1), data);
  EXPECT_EQ(counts.Get(a.ino), 1u);
  ASSERT_OK(counts.Forget(a.ino, 1, &gone));
  EXPECT_TRUE(gone);
  EXPECT_EQ(counts.Get(a.ino), 0u);
  EXPECT_EQ(counts.pinned(), 0);
  // Purged: the inode is gone.
  EXPECT_FALSE(s()->GetAttr(a.ino).ok());
}

// fstat of an open directory sends GETATTR of its inode: a directory
// removed while the kernel knows it still answers until the last forget.
TEST_F(LookupCountsTest, RemovedDirectoryAnswersUntilTheLastForget) {
  Result<Attr> d = s()->Mkdir(kRootIno, "d", 0755, 0, 0);
  ASSERT_OK(d.status());
  LookupCounts counts(s());
  ASSERT_OK(counts.Add(d->ino, true));
  ASSERT_OK(s()->Rmdir(kRootIno, "d"));
  Result<Attr> removed = s()->GetAttr(d->ino);
  ASSERT_OK(removed.status());
  EXPECT_EQ(removed->nlink, 0u);
  EXPECT_TRUE(S_ISDIR(removed->mode));
  ASSERT_OK(counts.Forget(d->ino, 1));
  EXPECT_EQ(counts.pinned(), 0);
  EXPECT_EQ(s()->GetAttr(d->ino).status().code(), ENOENT);
}

TEST_F(LookupCountsTest, ReleaseAllPurgesUnlinkedFiles) {
  const Attr a = MakeFile("a", "aaaa");
  const Attr b = MakeFile("b", "bbbb");
  LookupCounts counts(s());
  ASSERT_OK(counts.Add(a.ino, true));
  ASSERT_OK(counts.Add(b.ino, true));
  ASSERT_OK(counts.Add(kRootIno, false));
  ASSERT_OK(s()->Unlink(kRootIno, "a"));
  ASSERT_OK(counts.ReleaseAll());
  EXPECT_EQ(counts.Size(), 0u);
  EXPECT_EQ(counts.pinned(), 0);
  EXPECT_FALSE(s()->GetAttr(a.ino).ok());
  EXPECT_EQ(ReadAll(b.ino, 10), "bbbb");
}

TEST_F(LookupCountsTest, FailedPinCountsNothing) {
  LookupCounts counts(s());
  EXPECT_FALSE(counts.Add(987654321, true).ok());
  EXPECT_EQ(counts.Get(987654321), 0u);
  EXPECT_EQ(counts.pinned(), 0);
}

// Lookups and forgets of one inode from many threads, each thread keeping
// its own count above zero while it reads: every read finds the data, and
// at the end the pins balance (the unlink then purges at once).
TEST_F(LookupCountsTest, ConcurrentLookupsAndForgetsStayBalanced) {
  const std::string data(5000, 'z');
  const Attr a = MakeFile("f", data);
  LookupCounts counts(s());
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        if (!counts.Add(a.ino, true).ok()) bad[t]++;
        if (ReadAll(a.ino, data.size()) != data) bad[t]++;
        if (!counts.Forget(a.ino, 1).ok()) bad[t]++;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << t;
  EXPECT_EQ(counts.Get(a.ino), 0u);
  EXPECT_EQ(counts.pinned(), 0);
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_FALSE(s()->GetAttr(a.ino).ok());
}

}  // namespace
}  // namespace ckptfs::fs
