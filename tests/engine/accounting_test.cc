// Accounting that cannot be read is an error, never a value: segment stats
// and extents damaged in the index make ListSegments, GetStats, compaction
// (online, offline and in the background) and purges fail with EIO naming
// what is damaged, and nothing is deleted or rewritten on their strength.
//
// The index of a closed store is damaged with RocksDB directly
// (engine/index/index_db.h); the segment files are compared byte for byte.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "engine/index/index_db.h"
#include "format/format.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;

// Path -> bytes of every file in the store's segments/ directory.
std::map<std::string, std::string> SegmentFiles(const std::string& store) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(store + "/segments")) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    out[e.path().string()] = buf.str();
  }
  return out;
}

// Every file of `before` is still there with the same bytes.
void ExpectSegmentFilesKept(const std::map<std::string, std::string>& before,
                            const std::string& store) {
  const std::map<std::string, std::string> now = SegmentFiles(store);
  for (const auto& [path, bytes] : before) {
    auto it = now.find(path);
    if (it == now.end()) {
      ADD_FAILURE() << path << " was deleted";
      continue;
    }
    EXPECT_TRUE(it->second == bytes) << path << " changed";
  }
}

void ExpectNames(const Status& st, int err, const std::string& what) {
  EXPECT_EQ(st.code(), err) << st.ToString();
  EXPECT_NE(st.message().find(what), std::string::npos)
      << "\"" << st.message() << "\" does not name " << what;
}

class AccountingTest : public ::testing::Test {
 protected:
  // A file of one 32 KiB record, then five files of 1.5 MiB over 2 MiB
  // segments: several sealed segments, and one file deleted so that there is
  // dead space to compact.
  void SetUp() override {
    options_ = SmallOptions();
    ASSERT_NO_FATAL_FAILURE(Open());
    auto write = [&](const std::string& name, uint64_t seed, size_t size) {
      ASSERT_OK_AND_ASSIGN(Attr a, s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0));
      files_[name] = {a.ino, PatternData(seed, 0, size)};
      ASSERT_OK(WriteAll(s(), a.ino, 0, files_[name].content));
    };
    ASSERT_NO_FATAL_FAILURE(write("small", 99, 32 * kKiB));
    for (int i = 0; i < 5; ++i) {
      ASSERT_NO_FATAL_FAILURE(write("f" + std::to_string(i), 100 + i, 1536 * kKiB));
    }
    ASSERT_OK(s()->Unlink(kRootIno, "f1"));
    files_.erase("f1");
    ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs, s()->ListSegments());
    ASSERT_GE(segs.size(), 3u);
    ASSERT_TRUE(segs.front().sealed);
    victim_ = segs.front();  // sealed and not the newest: compaction may take it
    ASSERT_NO_FATAL_FAILURE(Close());
  }
  void TearDown() override {
    if (store_) {
      EXPECT_OK(store_->Close());
    }
  }

  void Open() { ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), options_)); }
  void Close() {
    ASSERT_OK(store_->Close());
    store_.reset();
  }
  Store* s() { return store_.get(); }

  // Runs `fn` on the index of the closed store.
  void WithIndex(const std::function<void(IndexDb&)>& fn) {
    IndexDb db;
    ASSERT_OK(OpenIndexDb(dir_.store() + "/index", false, false, io::Env::Posix().get(), &db));
    fn(db);
    ASSERT_OK(db.Close());
  }
  void PutSegmentStat(uint64_t id, const std::string& value) {
    WithIndex([&](IndexDb& db) {
      ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.segments(), format::SegmentKey(id), value).ok());
    });
  }
  // The victim segment's accounting, damaged the way a lost update would:
  // more bytes went from live to dead than it ever held.
  void MakeVictimLiveNegative() {
    format::SegmentStat st;
    st.live = -4096;
    st.dead = 4096;
    st.sealed = 1;
    st.size = static_cast<int64_t>(victim_.file_bytes);
    ASSERT_NO_FATAL_FAILURE(PutSegmentStat(victim_.id, format::EncodeSegmentStat(st)));
  }

  void ExpectFilesReadBack() {
    for (const auto& [name, f] : files_) {
      ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f.ino));
      EXPECT_TRUE(got == f.content) << name;
    }
  }

  std::string VictimName() const { return "segment " + std::to_string(victim_.id); }

  struct File {
    Ino ino = 0;
    std::string content;
  };
  TempDir dir_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
  std::map<std::string, File> files_;
  SegmentInfo victim_;
};

// ---- Segment accounting that is corrupt but decodes: the store opens. ----

TEST_F(AccountingTest, ListSegmentsAndGetStatsReportCorruptAccounting) {
  ASSERT_NO_FATAL_FAILURE(MakeVictimLiveNegative());
  ASSERT_NO_FATAL_FAILURE(Open());
  Result<std::vector<SegmentInfo>> list = s()->ListSegments();
  ASSERT_FALSE(list.ok()) << "corrupt accounting listed as a value";
  ExpectNames(list.status(), EIO, VictimName());
  EXPECT_NE(list.status().message().find("live -4096"), std::string::npos) << list.status().ToString();
  Result<EngineStats> stats = s()->GetStats();
  ASSERT_FALSE(stats.ok()) << "stats show a sum over accounting that could not be read";
  ExpectNames(stats.status(), EIO, VictimName());
  // The data itself is fine.
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

TEST_F(AccountingTest, CompactDeletesNothingWhenAccountingIsCorrupt) {
  ASSERT_NO_FATAL_FAILURE(MakeVictimLiveNegative());
  const auto before = SegmentFiles(dir_.store());
  ASSERT_NO_FATAL_FAILURE(Open());
  CompactOptions dry;
  dry.dry_run = true;
  Result<CompactReport> d = s()->Compact(dry);
  ASSERT_FALSE(d.ok()) << "dry run chose victims on corrupt accounting";
  ExpectNames(d.status(), EIO, VictimName());
  for (double ratio : {0.3, 1.0}) {
    CompactOptions o;
    o.dead_ratio = ratio;
    Result<CompactReport> r = s()->Compact(o);
    ASSERT_FALSE(r.ok()) << "ratio " << ratio << ": rewrote " << r->segments_rewritten
                         << " segments on corrupt accounting";
    ExpectNames(r.status(), EIO, VictimName());
  }
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
  ASSERT_NO_FATAL_FAILURE(Close());
  ExpectSegmentFilesKept(before, dir_.store());
}

TEST_F(AccountingTest, CompactOfflineDeletesNothingWhenAccountingIsCorrupt) {
  ASSERT_NO_FATAL_FAILURE(MakeVictimLiveNegative());
  const auto before = SegmentFiles(dir_.store());
  Result<CompactReport> r = Store::CompactOffline(dir_.store(), CompactOptions{});
  ASSERT_FALSE(r.ok()) << "rewrote " << r->segments_rewritten << " segments on corrupt accounting";
  ExpectNames(r.status(), EIO, VictimName());
  ExpectSegmentFilesKept(before, dir_.store());
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

TEST_F(AccountingTest, BackgroundCompactionLogsCorruptAccountingAndDeletesNothing) {
  ASSERT_NO_FATAL_FAILURE(MakeVictimLiveNegative());
  const auto before = SegmentFiles(dir_.store());
  options_.free_empty = true;
  options_.compact_dead = 1;
  ::testing::internal::CaptureStderr();
  ASSERT_NO_FATAL_FAILURE(Open());
  // The background thread checks every 2 s: give it two checks.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const Status closed = store_->Close();
  store_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(closed);
  EXPECT_NE(log.find("background compaction"), std::string::npos) << log;
  EXPECT_NE(log.find(VictimName()), std::string::npos) << log;
  EXPECT_EQ(log.find(VictimName()), log.rfind(VictimName())) << "logged more than once:\n" << log;
  ExpectSegmentFilesKept(before, dir_.store());
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

TEST_F(AccountingTest, FsckRepairRecountsCorruptAccounting) {
  // Live bytes right, dead bytes impossible: fsck does not stop at live.
  format::SegmentStat st;
  st.live = victim_.live_bytes;
  st.dead = -1;
  st.sealed = 1;
  st.size = static_cast<int64_t>(victim_.file_bytes);
  ASSERT_NO_FATAL_FAILURE(PutSegmentStat(victim_.id, format::EncodeSegmentStat(st)));
  ASSERT_NO_FATAL_FAILURE(Open());
  ExpectNames(s()->ListSegments().status(), EIO, VictimName());
  ASSERT_NO_FATAL_FAILURE(Close());
  FsckOptions check;
  ASSERT_OK_AND_ASSIGN(FsckReport r, engine::Fsck(dir_.store(), check));
  EXPECT_EQ(r.counts["segment_live_mismatch"], 1u);
  EXPECT_FALSE(r.clean());
  FsckOptions repair;
  repair.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fixed, engine::Fsck(dir_.store(), repair));
  EXPECT_EQ(fixed.errors_left(), 0u);
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs, s()->ListSegments());
  ASSERT_EQ(segs.front().id, victim_.id);
  EXPECT_EQ(segs.front().live_bytes, victim_.live_bytes);
  EXPECT_TRUE(segs.front().sealed);
  ASSERT_OK(s()->Compact(CompactOptions{}).status());
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

// ---- Segment accounting that does not decode: the store does not open. ----

TEST_F(AccountingTest, UndecodableAccountingFailsOpenAndCompactOfflineNamingTheSegment) {
  ASSERT_NO_FATAL_FAILURE(PutSegmentStat(victim_.id, "not a stat"));
  const auto before = SegmentFiles(dir_.store());
  Result<std::unique_ptr<Store>> open = Store::Open(dir_.store(), options_);
  ASSERT_FALSE(open.ok());
  ExpectNames(open.status(), EIO, VictimName());
  Result<CompactReport> r = Store::CompactOffline(dir_.store(), CompactOptions{});
  ASSERT_FALSE(r.ok());
  ExpectNames(r.status(), EIO, VictimName());
  ExpectSegmentFilesKept(before, dir_.store());
  // fsck names it and --repair recounts it.
  FsckOptions repair;
  repair.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fixed, engine::Fsck(dir_.store(), repair));
  EXPECT_EQ(fixed.counts["segment_live_mismatch"], 1u);
  EXPECT_EQ(fixed.errors_left(), 0u);
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK(s()->ListSegments().status());
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

// ---- An extent that does not decode. ----

class PurgeTest : public AccountingTest {
 protected:
  // Damages the extent of file `name` at `offset` (64 KiB records).
  void DamageExtent(const std::string& name = "f2", uint64_t offset = 64 * kKiB) {
    ino_ = files_.at(name).ino;
    WithIndex([&](IndexDb& db) {
      const std::string key = format::ExtentKey(ino_, offset);
      std::string v;
      ASSERT_TRUE(db.db->Get(rocksdb::ReadOptions(), db.extents(), key, &v).ok());
      ASSERT_TRUE(db.db->Put(rocksdb::WriteOptions(), db.extents(), key, "bad").ok());
    });
  }
  void ExpectF2Kept() {
    ASSERT_OK_AND_ASSIGN(Attr a, s()->Lookup(kRootIno, "f2"));
    EXPECT_EQ(a.ino, ino_);
    EXPECT_EQ(a.nlink, 1u);
    ASSERT_OK_AND_ASSIGN(std::string head, ReadRange(s(), ino_, 0, 64 * kKiB));
    EXPECT_TRUE(head == files_.at("f2").content.substr(0, 64 * kKiB));
  }
  Ino ino_ = 0;
};

TEST_F(PurgeTest, UnlinkFailsAndCommitsNothing) {
  ASSERT_NO_FATAL_FAILURE(DamageExtent());
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs_before, s()->ListSegments());
  const std::string what = "inode " + std::to_string(ino_);
  ExpectNames(s()->Unlink(kRootIno, "f2"), EIO, what);
  ASSERT_NO_FATAL_FAILURE(ExpectF2Kept());
  // Renaming another file over it purges it too: it fails the same way.
  ASSERT_OK_AND_ASSIGN(Attr g, s()->Create(kRootIno, "g", S_IFREG | 0644, 0, 0));
  ExpectNames(s()->Rename(kRootIno, "g", kRootIno, "f2", RenameMode::kReplace), EIO, what);
  ASSERT_NO_FATAL_FAILURE(ExpectF2Kept());
  ASSERT_OK_AND_ASSIGN(Attr g2, s()->Lookup(kRootIno, "g"));
  EXPECT_EQ(g2.ino, g.ino);
  // No accounting changed.
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs_after, s()->ListSegments());
  ASSERT_EQ(segs_after.size(), segs_before.size());
  for (size_t i = 0; i < segs_after.size(); ++i) {
    EXPECT_EQ(segs_after[i].live_bytes, segs_before[i].live_bytes) << segs_after[i].id;
    EXPECT_EQ(segs_after[i].dead_bytes, segs_before[i].dead_bytes) << segs_after[i].id;
  }
  // And nothing reached the index.
  ASSERT_NO_FATAL_FAILURE(Close());
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(ExpectF2Kept());
}

TEST_F(PurgeTest, LastReleaseFailsAndTheOrphanIsKeptForFsck) {
  ASSERT_NO_FATAL_FAILURE(DamageExtent());
  ASSERT_NO_FATAL_FAILURE(Open());
  const std::string what = "inode " + std::to_string(ino_);
  ASSERT_OK(s()->OpenFile(ino_));
  ASSERT_OK(s()->Unlink(kRootIno, "f2"));  // open: kept as an orphan
  ExpectNames(s()->Release(ino_), EIO, what);
  ASSERT_NO_FATAL_FAILURE(Close());
  // Opening purges orphans: it fails rather than drop the extent uncounted.
  Result<std::unique_ptr<Store>> open = Store::Open(dir_.store(), options_);
  ASSERT_FALSE(open.ok());
  ExpectNames(open.status(), EIO, what);
  // fsck --repair drops the damaged extent; then the purge goes through.
  FsckOptions repair;
  repair.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fixed, engine::Fsck(dir_.store(), repair));
  EXPECT_EQ(fixed.counts["bad_extent"], 1u);
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_ERRNO(ENOENT, s()->GetAttr(ino_));
  files_.erase("f2");
  ASSERT_NO_FATAL_FAILURE(ExpectFilesReadBack());
}

TEST_F(PurgeTest, CompactionStopsAtAnUndecodableExtent) {
  // The only extent of "small", whose record is in the first segment.
  ASSERT_NO_FATAL_FAILURE(DamageExtent("small", 0));
  const auto before = SegmentFiles(dir_.store());
  ASSERT_NO_FATAL_FAILURE(Open());
  // The damaged extent might point into any victim: nothing is deleted.
  CompactOptions all;
  all.dead_ratio = 0;
  Result<CompactReport> r = s()->Compact(all);
  ASSERT_FALSE(r.ok()) << "deleted " << r->segments_rewritten << " segments";
  ExpectNames(r.status(), EIO, "inode " + std::to_string(ino_));
  ASSERT_NO_FATAL_FAILURE(Close());
  ExpectSegmentFilesKept(before, dir_.store());
}

}  // namespace
}  // namespace ckptfs::engine::test
