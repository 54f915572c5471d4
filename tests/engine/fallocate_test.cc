// Store::Fallocate (reservations, hole punching, zero ranges) and the
// data-bytes counter behind st_blocks: kept by writes, truncation and
// punches, persisted, checked by fsck, and counted once for inodes of stores
// written before it existed.
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <string>
#include <vector>

#include "engine/index/index_db.h"
#include "format/format.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr int kPunch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;

std::string Pattern(size_t len, uint64_t seed) { return PatternData(seed, 0, len); }

class FallocateTest : public StoreFixture {
 protected:
  FallocateTest() { options_ = SmallOptions(); }

  Ino NewFile(const std::string& name) {
    auto a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  uint64_t DataBytes(Ino ino) {
    auto a = s()->GetAttr(ino);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a->data_bytes : 0;
  }
  // What st_blocks counts (fs/filesystem.cc ToStat), in 512-byte units:
  // the stored bytes and those reserved for writes.
  uint64_t Blocks(Ino ino) { return (DataBytes(ino) + s()->ReservedBytes(ino) + 511) / 512; }
  // The sum of the file's extent lengths: what the counter must equal.
  uint64_t ExtentBytes(Ino ino) {
    auto ex = s()->GetExtents(ino);
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    uint64_t n = 0;
    if (ex.ok()) {
      for (const ExtentInfo& e : *ex) n += e.value.length;
    }
    return n;
  }
  FsckReport Fsck(bool repair) {
    FsckOptions o;
    o.repair = repair;
    auto r = engine::Fsck(dir_.store(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FsckReport{};
  }
  // Rewrites the inode value of `ino` in the index of the closed store.
  void EditInode(Ino ino, const std::function<void(format::InodeValue*)>& edit) {
    IndexDb db;
    ASSERT_OK(OpenIndexDb(dir_.store() + "/index", false, false, io::Env::Posix().get(), &db));
    std::string v;
    ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.inodes(), format::InodeKey(ino), &v).ok());
    format::InodeValue iv;
    ASSERT_OK(format::DecodeInode(v, &iv));
    edit(&iv);
    ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.inodes(), format::InodeKey(ino),
                           format::EncodeInode(iv))
                    .ok());
    ASSERT_OK(db.Close());
  }
  void Close() {
    ASSERT_OK(store_->Close());
    store_.reset();
  }
};

TEST_F(FallocateTest, PunchHoleReadsZerosAndMovesBytesToDead) {
  const Ino ino = NewFile("f");
  const std::string data = Pattern(1 << 20, 1);
  ASSERT_OK(WriteAll(s(), ino, 0, data));
  ASSERT_OK_AND_ASSIGN(SpaceTotals before, SumSegments(s()));
  // Unaligned on both sides, across several records (64 KiB each).
  ASSERT_OK(s()->Fallocate(ino, kPunch, 100000, 300001));
  std::string expect = data;
  std::fill(expect.begin() + 100000, expect.begin() + 400001, '\0');
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), ino));
  EXPECT_TRUE(got == expect);
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(ino));
  EXPECT_EQ(a.size, data.size());
  EXPECT_EQ(a.data_bytes, data.size() - 300001);
  EXPECT_EQ(ExtentBytes(ino), a.data_bytes);
  EXPECT_EQ(*s()->SeekData(ino, 0, /*hole=*/true), 100000u);
  EXPECT_EQ(*s()->SeekData(ino, 100000, /*hole=*/false), 400001u);
  ASSERT_OK_AND_ASSIGN(SpaceTotals after, SumSegments(s()));
  EXPECT_EQ(after.live, before.live - 300001);
  EXPECT_EQ(after.dead, before.dead + 300001);
  // Past the end: nothing changes.
  ASSERT_OK(s()->Fallocate(ino, kPunch, 2 << 20, 4096));
  EXPECT_EQ(s()->GetAttr(ino)->size, data.size());
  Reopen();
  ASSERT_OK_AND_ASSIGN(got, ReadAll(s(), ino));
  EXPECT_TRUE(got == expect);
  EXPECT_EQ(DataBytes(ino), data.size() - 300001);
  Close();
  FsckReport r = Fsck(false);
  EXPECT_TRUE(r.clean());
}

TEST_F(FallocateTest, PunchInAnInlineFileKeepsTheOtherBytes) {
  const Ino ino = NewFile("small");
  const std::string data = Pattern(3000, 2);
  ASSERT_OK(WriteAll(s(), ino, 0, data));
  ASSERT_OK(s()->Fallocate(ino, kPunch, 100, 200));
  std::string expect = data;
  std::fill(expect.begin() + 100, expect.begin() + 300, '\0');
  EXPECT_TRUE(*ReadAll(s(), ino) == expect);
  EXPECT_EQ(DataBytes(ino), 2800u);
  ASSERT_OK(WriteAll(s(), ino, 2000, "abc"));  // the pieces join again
  expect.replace(2000, 3, "abc");
  EXPECT_TRUE(*ReadAll(s(), ino) == expect);
  EXPECT_EQ(DataBytes(ino), ExtentBytes(ino));
  Close();
  EXPECT_TRUE(Fsck(false).clean());
}

TEST_F(FallocateTest, ZeroRangeExtendsUnlessKeepSize) {
  const Ino ino = NewFile("z");
  const std::string data = Pattern(200000, 3);
  ASSERT_OK(WriteAll(s(), ino, 0, data));
  ASSERT_OK(s()->Fallocate(ino, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 150000, 100000));
  EXPECT_EQ(s()->GetAttr(ino)->size, 200000u);
  ASSERT_OK(s()->Fallocate(ino, FALLOC_FL_ZERO_RANGE, 10, 20));
  ASSERT_OK(s()->Fallocate(ino, FALLOC_FL_ZERO_RANGE, 250000, 50000));
  EXPECT_EQ(s()->GetAttr(ino)->size, 300000u);
  std::string expect = data;
  std::fill(expect.begin() + 150000, expect.end(), '\0');
  std::fill(expect.begin() + 10, expect.begin() + 30, '\0');
  expect.resize(300000);
  EXPECT_TRUE(*ReadAll(s(), ino) == expect);
  EXPECT_EQ(DataBytes(ino), 150000u - 20);
}

TEST_F(FallocateTest, UnsupportedModesChangeNothing) {
  const Ino ino = NewFile("f");
  ASSERT_OK(WriteAll(s(), ino, 0, Pattern(100000, 4)));
  for (int mode : {FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE, FALLOC_FL_UNSHARE_RANGE,
                   FALLOC_FL_PUNCH_HOLE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE,
                   kPunch | FALLOC_FL_NO_HIDE_STALE}) {
    EXPECT_ERRNO(EOPNOTSUPP, s()->Fallocate(ino, mode, 0, 4096)) << mode;
  }
  EXPECT_ERRNO(EINVAL, s()->Fallocate(ino, 0, 0, 0));
  EXPECT_EQ(s()->GetAttr(ino)->size, 100000u);
  EXPECT_TRUE(*ReadAll(s(), ino) == Pattern(100000, 4));
}

TEST_F(FallocateTest, DataBytesFollowWritesTruncatesAndReopen) {
  const Ino ino = NewFile("f");
  ASSERT_OK(WriteAll(s(), ino, 0, Pattern(1000, 5)));  // inline
  EXPECT_EQ(DataBytes(ino), 1000u);
  ASSERT_OK(WriteAll(s(), ino, 1 << 20, Pattern(4096, 6)));  // a hole, then a record
  EXPECT_EQ(DataBytes(ino), 1000u + 4096);
  ASSERT_OK(WriteAll(s(), ino, 500, Pattern(1000, 7)));  // overlaps the inline head
  EXPECT_EQ(DataBytes(ino), ExtentBytes(ino));
  ASSERT_OK(WriteAll(s(), ino, (1 << 20) + 1000, Pattern(200000, 8)));  // overwrite + extend
  EXPECT_EQ(DataBytes(ino), ExtentBytes(ino));
  SetAttrRequest shrink;
  shrink.size = (1 << 20) + 10;
  ASSERT_OK(s()->SetAttr(ino, shrink));
  EXPECT_EQ(DataBytes(ino), 1500u + 10);
  SetAttrRequest grow;
  grow.size = 8 << 20;
  ASSERT_OK(s()->SetAttr(ino, grow));
  EXPECT_EQ(DataBytes(ino), 1500u + 10);
  Reopen();
  EXPECT_EQ(DataBytes(ino), 1500u + 10);
  EXPECT_EQ(ExtentBytes(ino), 1500u + 10);
  // Other types report their size, as before.
  ASSERT_OK_AND_ASSIGN(Attr link, s()->Symlink(kRootIno, "l", "target", 0, 0));
  EXPECT_EQ(link.data_bytes, 6u);
  Close();
  EXPECT_TRUE(Fsck(false).clean());
}

TEST_F(FallocateTest, InodesWithoutTheCounterAreCountedOnce) {
  const Ino ino = NewFile("old");
  ASSERT_OK(WriteAll(s(), ino, 1 << 20, Pattern(8192, 9)));
  Close();
  // As a store written before the counter existed has it: a version 1 value.
  EditInode(ino, [](format::InodeValue* v) {
    v->data_bytes_known = false;
    v->data_bytes = 0;
  });
  EXPECT_TRUE(Fsck(false).clean());
  Reopen();
  EXPECT_EQ(DataBytes(ino), (1u << 20) + 8192);  // unknown: the size
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_OK(s()->SetAttr(ino, chmod));  // not a data change: stays version 1
  EXPECT_EQ(DataBytes(ino), (1u << 20) + 8192);
  ASSERT_OK(WriteAll(s(), ino, 0, Pattern(4096, 10)));
  EXPECT_EQ(DataBytes(ino), 8192u + 4096);
  Reopen();
  EXPECT_EQ(DataBytes(ino), 8192u + 4096);
  EXPECT_TRUE(*ReadRange(s(), ino, 1 << 20, 8192) == Pattern(8192, 9));
  Close();
  EXPECT_TRUE(Fsck(false).clean());
}

TEST_F(FallocateTest, FsckFindsAndRepairsAWrongCounter) {
  const Ino ino = NewFile("f");
  ASSERT_OK(WriteAll(s(), ino, 0, Pattern(100000, 11)));
  Close();
  EditInode(ino, [](format::InodeValue* v) { v->data_bytes = 7; });
  FsckReport r = Fsck(false);
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(r.counts["bad_data_bytes"], 1u);
  r = Fsck(true);
  EXPECT_EQ(r.counts["bad_data_bytes"], 1u);
  EXPECT_EQ(r.errors_left(), 0u);
  EXPECT_TRUE(Fsck(false).clean());
  Reopen();
  EXPECT_EQ(DataBytes(ino), 100000u);
}

// Free space of the filesystem under the test's store.
uint64_t AvailBytes(const std::string& dir) {
  struct statvfs v;
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

TEST_F(FallocateTest, WritesIntoAReservationAcrossABlockBoundaryKeepItsBlocks) {
  // 2 bytes at 4095 touch two blocks: both are reserved, as ext4 allocates
  // them (st_blocks 16).
  const Ino paged = NewFile("paged");
  ASSERT_OK(s()->Fallocate(paged, 0, 4095, 2));
  EXPECT_EQ(s()->GetAttr(paged)->size, 4097u);
  EXPECT_EQ(DataBytes(paged), 0u);
  EXPECT_EQ(s()->ReservedBytes(paged), 8192u);
  EXPECT_EQ(Blocks(paged), 16u);
  // The kernel's page cache writes the 2 bytes as its two pages: the first
  // with the zeros before byte 4095, the second up to the size.
  ASSERT_OK(WriteAll(s(), paged, 0, std::string(4095, '\0') + "x"));
  EXPECT_EQ(Blocks(paged), 16u);
  ASSERT_OK(WriteAll(s(), paged, 4096, "y"));
  EXPECT_EQ(DataBytes(paged), 4097u);
  EXPECT_EQ(Blocks(paged), 16u);
  EXPECT_EQ(*ReadRange(s(), paged, 4095, 2), "xy");

  // Written as asked for (no write-back cache): the same.
  const Ino exact = NewFile("exact");
  ASSERT_OK(s()->Fallocate(exact, FALLOC_FL_KEEP_SIZE, 4095, 2));
  EXPECT_EQ(s()->GetAttr(exact)->size, 0u);
  EXPECT_EQ(Blocks(exact), 16u);
  ASSERT_OK(WriteAll(s(), exact, 4095, "xy"));
  EXPECT_EQ(DataBytes(exact), 2u);
  EXPECT_EQ(Blocks(exact), 16u);

  // A punch of the whole range gives both blocks back.
  ASSERT_OK(s()->Fallocate(exact, kPunch, 0, 8192));
  EXPECT_EQ(Blocks(exact), 0u);
}

TEST_F(FallocateTest, ReservationsFailUpFrontAndHoldSpaceForTheirWrites) {
  // Pretend the filesystem has about 512 MiB free: min_free keeps the
  // rest. The margins are wide, since other processes may write meanwhile.
  const uint64_t avail = AvailBytes(dir_.path());
  if (avail < (2ull << 30)) GTEST_SKIP() << "needs 2 GiB free under " << dir_.path();
  Close();
  options_.min_free = avail - (512ull << 20);
  Reopen();
  const Ino ino = NewFile("f");
  ASSERT_OK(WriteAll(s(), ino, 0, Pattern(8192, 12)));
  EXPECT_ERRNO(ENOSPC, s()->Fallocate(ino, 0, 0, 4ull << 30));
  EXPECT_ERRNO(ENOSPC, s()->Fallocate(ino, FALLOC_FL_KEEP_SIZE, 0, 4ull << 30));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(ino));
  EXPECT_EQ(a.size, 8192u);  // nothing changed
  EXPECT_EQ(a.data_bytes, 8192u);

  // Reserve most of it: the store's free space shrinks by as much.
  ASSERT_OK_AND_ASSIGN(FsStats fs_before, s()->StatFs());
  ASSERT_OK(s()->Fallocate(ino, 0, 1 << 20, 400ull << 20));
  ASSERT_OK_AND_ASSIGN(FsStats fs_after, s()->StatFs());
  EXPECT_LT(fs_after.avail_bytes + (390ull << 20), fs_before.avail_bytes);
  EXPECT_EQ(s()->GetAttr(ino)->size, (1u << 20) + (400ull << 20));
  EXPECT_EQ(DataBytes(ino), 8192u);
  EXPECT_ERRNO(ENXIO, s()->SeekData(ino, 8192, false));  // reserved, not stored: a hole

  // Writes outside the reservation may not eat into it ...
  const Ino other = NewFile("other");
  {
    // 300 MiB that cost no memory: the write is refused before it reads them.
    const size_t big = 300u << 20;
    void* p = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_ERRNO(ENOSPC, s()->Write(other, 0, std::string_view(static_cast<char*>(p), big)));
    ::munmap(p, big);
  }
  ASSERT_OK(WriteAll(s(), other, 0, Pattern(1 << 20, 13)));
  // ... and writes into it draw on it.
  const std::string chunk = Pattern(4 << 20, 14);
  for (uint64_t off = 1 << 20; off < (64ull << 20); off += chunk.size()) {
    ASSERT_OK(WriteAll(s(), ino, off, chunk)) << off;
  }
  EXPECT_EQ(DataBytes(ino), 8192u + (64ull << 20));  // 16 chunks
  EXPECT_TRUE(*ReadRange(s(), ino, 5 << 20, chunk.size()) == chunk);

  // Truncation gives the rest back.
  SetAttrRequest shrink;
  shrink.size = 8192;
  ASSERT_OK(s()->SetAttr(ino, shrink));
  ASSERT_OK_AND_ASSIGN(FsStats fs_freed, s()->StatFs());
  EXPECT_GT(fs_freed.avail_bytes, fs_after.avail_bytes + (250ull << 20));
  ASSERT_OK(s()->Fallocate(ino, FALLOC_FL_KEEP_SIZE, 0, 300ull << 20));
  EXPECT_EQ(s()->GetAttr(ino)->size, 8192u);
  // Deleting the file gives back its reservation.
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  ASSERT_OK(s()->Fallocate(other, FALLOC_FL_KEEP_SIZE, 0, 300ull << 20));
}

}  // namespace
}  // namespace ckptfs::engine::test
