// Large files in data files of their own (docs/FORMAT.md, "data/"): the move
// out of segments, overwrites, truncation, holes, removal, fsck and
// compaction on stores that hold both layouts; direct writes, where another
// writer (the kernel) writes the data file and the store adopts its bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "engine/data/data_files.h"
#include "format/format.h"
#include "io/fault_injection.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

StoreOptions DataFileOptions() {
  StoreOptions o = SmallOptions();  // 64 KiB records and blocks
  o.data_file_min = 1 * kMiB;
  o.segment_size = 4 * kMiB;
  return o;
}

class DataFileTest : public StoreFixture {
 protected:
  void SetUp() override {
    options_ = DataFileOptions();
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }
  Ino File(const std::string& name) {
    auto a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  std::string DataPath(Ino ino) { return dir_.store() + "/" + format::DataFileName(ino); }
  // Bytes of the data file of `ino` on disk; -1 when it has none.
  int64_t DataFileSize(Ino ino) {
    struct stat st;
    return ::stat(DataPath(ino).c_str(), &st) == 0 ? st.st_size : -1;
  }
  // Waits (up to a minute) for the store's background deletion of the data
  // file of `ino`; fails when it is still there.
  void ExpectDataFileDeleted(Ino ino) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (DataFileSize(ino) != -1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(DataFileSize(ino), -1) << "the data file of inode " << ino << " is still there";
  }
  // Waits (up to a minute) until the OS has none of the pages of the data
  // file of `ino` cached; fails when it still has some, or the file is gone
  // (not yet: no sync since).
  void ExpectCachedPagesDropped(Ino ino) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (CachedPages(DataPath(ino)) != 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(CachedPages(DataPath(ino)), 0u) << "inode " << ino;
  }
  // Writes `data` at `off` in pieces of `piece` bytes and into `model`.
  void Write(Ino ino, uint64_t off, const std::string& data, std::string* model,
             size_t piece = 100 * kKiB) {
    for (size_t pos = 0; pos < data.size(); pos += piece) {
      const std::string_view chunk = std::string_view(data).substr(pos, piece);
      ASSERT_OK(WriteAll(s(), ino, off + pos, chunk));
    }
    if (model->size() < off + data.size()) model->resize(off + data.size(), '\0');
    model->replace(off, data.size(), data);
  }
  void Truncate(Ino ino, uint64_t size, std::string* model) {
    SetAttrRequest req;
    req.size = size;
    ASSERT_OK(s()->SetAttr(ino, req));
    model->resize(size, '\0');
  }
  void ExpectContents(Ino ino, const std::string& want) {
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), ino));
    ASSERT_EQ(got.size(), want.size());
    if (got != want) {
      size_t i = 0;
      while (got[i] == want[i]) ++i;
      FAIL() << "contents differ first at offset " << i;
    }
  }
  // Extents of `ino` by layout.
  struct Layout {
    uint64_t data_file_bytes = 0, segment_bytes = 0, inline_bytes = 0;
  };
  Layout LayoutOf(Ino ino) {
    Layout l;
    auto ex = s()->GetExtents(ino);
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    if (!ex.ok()) return l;
    for (const ExtentInfo& e : *ex) {
      if (e.value.in_data_file) {
        // Byte N of the data file is byte N of the file.
        EXPECT_EQ(e.value.record_offset + e.value.skip, e.file_offset);
        l.data_file_bytes += e.value.length;
      } else if (e.value.is_inline) {
        l.inline_bytes += e.value.length;
      } else {
        l.segment_bytes += e.value.length;
      }
    }
    return l;
  }
  FsckReport Fsck(bool repair = false) {
    if (store_) {
      EXPECT_OK(store_->Close());
      store_.reset();
    }
    FsckOptions fo;
    fo.repair = repair;
    auto r = engine::Fsck(dir_.store(), fo);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FsckReport();
  }
  void ExpectFsckClean() {
    FsckReport r = Fsck();
    for (const FsckFinding& f : r.findings) {
      EXPECT_TRUE(f.informational) << f.kind << " " << f.path << " " << f.detail;
    }
    EXPECT_TRUE(r.clean());
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }
};

TEST_F(DataFileTest, AFileGrowingPastTheThresholdMovesToItsDataFile) {
  Ino big = File("big"), small = File("small");
  std::string want, want_small;
  ASSERT_NO_FATAL_FAILURE(Write(big, 0, PatternData(1, 0, 3 * kMiB + 1234), &want));
  ASSERT_NO_FATAL_FAILURE(Write(small, 0, PatternData(2, 0, 900 * kKiB), &want_small));
  // All of the big file, its first MiB included, is in the data file, whose
  // byte N is its byte N; the small one stays in segments.
  Layout l = LayoutOf(big);
  EXPECT_EQ(l.data_file_bytes, want.size());
  EXPECT_EQ(l.segment_bytes + l.inline_bytes, 0u);
  EXPECT_EQ(DataFileSize(big), static_cast<int64_t>(want.size()));
  EXPECT_EQ(LayoutOf(small).data_file_bytes, 0u);
  EXPECT_EQ(DataFileSize(small), -1);
  {
    std::ifstream in(DataPath(big), std::ios::binary);
    std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(raw == want);
  }
  // The bytes copied out of segments are dead there; the small file's live.
  ASSERT_OK_AND_ASSIGN(SpaceTotals t, SumSegments(s()));
  EXPECT_EQ(t.live, static_cast<int64_t>(want_small.size()));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(big, want));
  ASSERT_OK_AND_ASSIGN(std::string mid, ReadRange(s(), big, 1 * kMiB - 7, 200 * kKiB + 3));
  EXPECT_TRUE(mid == want.substr(1 * kMiB - 7, 200 * kKiB + 3));
  ASSERT_OK_AND_ASSIGN(NamespaceCounts counts, s()->CountNamespace());
  EXPECT_EQ(counts.data_files, 1u);
  EXPECT_EQ(counts.data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(big, want));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(small, want_small));
  ASSERT_OK_AND_ASSIGN(EngineStats st, s()->GetStats());
  EXPECT_GT(st.data_file_reads, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, AFileThatWritesOutOfOrderTookPastTheThresholdMovesAtItsNextWriteAtItsEnd) {
  // As the kernel's write-back can deliver them: the write that crosses the
  // threshold arrives before the one below it, past the end (a gap).
  Ino f = File("f");
  std::string want;
  const std::string data = PatternData(3, 0, 2 * kMiB);
  auto put = [&](uint64_t from, uint64_t to) {
    ASSERT_NO_FATAL_FAILURE(Write(f, from, data.substr(from, to - from), &want));
  };
  ASSERT_NO_FATAL_FAILURE(put(0, 900 * kKiB));
  ASSERT_NO_FATAL_FAILURE(put(1 * kMiB + 100 * kKiB, 1 * kMiB + 200 * kKiB));  // past the end
  ASSERT_NO_FATAL_FAILURE(put(900 * kKiB, 1 * kMiB + 100 * kKiB));             // the gap
  EXPECT_EQ(LayoutOf(f).data_file_bytes, 0u);  // no write at its end crossed the threshold
  ASSERT_NO_FATAL_FAILURE(put(1 * kMiB + 200 * kKiB, 2 * kMiB));  // at its end: it moves
  Layout l = LayoutOf(f);
  EXPECT_EQ(l.data_file_bytes, want.size());
  EXPECT_EQ(l.segment_bytes + l.inline_bytes, 0u);
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  ASSERT_OK_AND_ASSIGN(std::optional<WholeDataFile> whole, s()->WholeDataFileOf(f));
  EXPECT_TRUE(whole.has_value());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));

  // A file that got far past the threshold in segments stays there: the
  // move would copy all of it in one write.
  Ino far = File("far");
  std::string want_far;
  ASSERT_NO_FATAL_FAILURE(Write(far, 0, data.substr(0, 100 * kKiB), &want_far));
  const uint64_t past = DataFileOptions().data_file_min + 64 * kMiB + 1;
  ASSERT_NO_FATAL_FAILURE(Write(far, past, "x", &want_far));
  ASSERT_NO_FATAL_FAILURE(Write(far, past + 1, data.substr(0, 100 * kKiB), &want_far));
  EXPECT_EQ(LayoutOf(far).data_file_bytes, 0u);
  EXPECT_EQ(DataFileSize(far), -1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(far, want_far));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataFileTest, OverwritesInTheMiddleGoToSegmentsAndNeverRewriteTheDataFile) {
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 2 * kMiB), &want));
  const std::string before = [&] {
    std::ifstream in(DataPath(f), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  ASSERT_NO_FATAL_FAILURE(Write(f, 700 * kKiB + 5, PatternData(2, 0, 300 * kKiB), &want, 77 * kKiB));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  Layout l = LayoutOf(f);
  EXPECT_EQ(l.segment_bytes, 300 * kKiB);
  EXPECT_EQ(l.data_file_bytes, want.size() - 300 * kKiB);
  {
    std::ifstream in(DataPath(f), std::ios::binary);
    std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(after == before) << "the data file was written in place";
  }
  // Appends still go to the data file.
  ASSERT_NO_FATAL_FAILURE(Write(f, want.size(), PatternData(3, 0, 500 * kKiB), &want));
  EXPECT_EQ(LayoutOf(f).segment_bytes, 300 * kKiB);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, TruncateDownUpAndAppendKeepEveryByte) {
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 3 * kMiB), &want, 64 * kKiB));
  // Down into the middle of a 64 KiB block: the block keeps its bytes.
  const uint64_t cut = 2 * kMiB + 10 * kKiB + 3;
  ASSERT_NO_FATAL_FAILURE(Truncate(f, cut, &want));
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(2 * kMiB + 64 * kKiB));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  // An append: up to the block's end in segments, past it in the data file.
  ASSERT_NO_FATAL_FAILURE(Write(f, cut, PatternData(2, 0, 1 * kMiB), &want));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  Layout l = LayoutOf(f);
  EXPECT_EQ(l.segment_bytes, 64 * kKiB - 10 * kKiB - 3);
  // Up: a hole that reads as zeros; then a write past it, a sparse one.
  ASSERT_NO_FATAL_FAILURE(Truncate(f, want.size() + 300 * kKiB, &want));
  ASSERT_NO_FATAL_FAILURE(Write(f, want.size() + 2 * kMiB, PatternData(3, 0, 100 * kKiB), &want));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK_AND_ASSIGN(uint64_t hole, s()->SeekData(f, cut + 1 * kMiB, /*hole=*/true));
  EXPECT_EQ(hole, cut + 1 * kMiB);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, TruncateToZeroDeletesTheDataFileAndARewriteMakesANewOne) {
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 2 * kMiB), &want));
  ASSERT_GT(DataFileSize(f), 0);
  ASSERT_NO_FATAL_FAILURE(Truncate(f, 0, &want));  // as open(O_TRUNC) does
  EXPECT_EQ(DataFileSize(f), -1);
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(2, 0, 1536 * kKiB), &want));
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  EXPECT_EQ(LayoutOf(f).data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, UnlinkDeletesTheDataFileOnceTheRemovalIsDurable) {
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 2 * kMiB), &want));
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(ExpectDataFileDeleted(f));
  // A file held open keeps its data file until its last release.
  Ino g = File("g");
  ASSERT_NO_FATAL_FAILURE(Write(g, 0, PatternData(2, 0, 2 * kMiB), &want));
  ASSERT_OK(s()->OpenFile(g));
  ASSERT_OK(s()->Unlink(kRootIno, "g"));
  ASSERT_OK(s()->SyncAll());
  EXPECT_GT(DataFileSize(g), 0);
  ASSERT_OK(s()->Release(g));
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(ExpectDataFileDeleted(g));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, UnlinkDropsTheCachedPagesOfADataFileAtOnce) {
  if (PagesStayCached(dir_.store())) GTEST_SKIP() << "tmpfs keeps its pages: nothing to evict";
  // Its deletion waits for the next sync; its pages do not, as an unlink's.
  // Once at the unlink, once at the last release of a file unlinked while
  // open.
  std::string want;
  Ino f = File("f");
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 4 * kMiB), &want));
  Ino g = File("g");
  ASSERT_NO_FATAL_FAILURE(Write(g, 0, PatternData(2, 0, 4 * kMiB), &want));
  ASSERT_OK(s()->SyncAll());
  ASSERT_GT(CachedPages(DataPath(f)), 0u);
  ASSERT_GT(CachedPages(DataPath(g)), 0u);
  ASSERT_OK(s()->OpenFile(g));
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  ASSERT_OK(s()->Unlink(kRootIno, "g"));
  ExpectCachedPagesDropped(f);
  EXPECT_GT(CachedPages(DataPath(g)), 0u);  // still open
  ASSERT_OK(s()->Release(g));
  ExpectCachedPagesDropped(g);
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(ExpectDataFileDeleted(f));
  ASSERT_NO_FATAL_FAILURE(ExpectDataFileDeleted(g));
}

TEST_F(DataFileTest, AFlippedByteIsEioAndFsckNamesTheFileAndRange) {
  Ino f = File("model.bin");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 2 * kMiB), &want, 64 * kKiB));
  ASSERT_OK(s()->SyncAll());
  const uint64_t at = 1 * kMiB + 100 * kKiB + 17;  // in block [1 MiB + 64 KiB, +64 KiB)
  {
    const int fd = ::open(DataPath(f).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c = static_cast<char>(want[at] ^ 0x40);
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(at)), 1);
    ::close(fd);
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());  // no cached copy
  EXPECT_ERRNO(EIO, ReadRange(s(), f, at - 5, 10));
  ASSERT_OK_AND_ASSIGN(std::string other, ReadRange(s(), f, 0, 1 * kMiB));
  EXPECT_TRUE(other == want.substr(0, 1 * kMiB));
  FsckReport r = Fsck();
  EXPECT_FALSE(r.clean());
  bool found = false;
  for (const FsckFinding& x : r.findings) {
    if (x.kind != "bad_payload_checksum") continue;
    found = true;
    EXPECT_EQ(x.path, "/model.bin");
    EXPECT_EQ(x.offset, 1 * kMiB + 64 * kKiB);
    EXPECT_EQ(x.length, 64 * kKiB);
    EXPECT_NE(x.detail.find(format::DataFileName(f)), std::string::npos) << x.detail;
  }
  EXPECT_TRUE(found);
}

TEST_F(DataFileTest, FsckReportsAndRepairDeletesADataFileNoInodeUses) {
  ASSERT_OK(s()->SyncAll());
  ASSERT_OK(store_->Close());
  store_.reset();
  const std::string stray = dir_.store() + "/" + format::DataFileName(999);
  { std::ofstream(stray) << "left by a crash"; }
  FsckReport r = Fsck();
  ASSERT_EQ(r.counts["unused_data_file"], 1u);
  EXPECT_TRUE(r.clean());  // informational
  r = Fsck(/*repair=*/true);
  EXPECT_FALSE(std::filesystem::exists(stray));
  // The store also deletes such a file when it opens.
  { std::ofstream(stray) << "left by a crash"; }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_FALSE(std::filesystem::exists(stray));
}

TEST_F(DataFileTest, CompactionOfAStoreWithBothLayoutsKeepsEveryByte) {
  std::vector<std::pair<Ino, std::string>> files;
  for (int i = 0; i < 6; ++i) {
    Ino f = File("f" + std::to_string(i));
    std::string want;
    const uint64_t size = (i % 2 ? 2 * kMiB : 300 * kKiB) + static_cast<uint64_t>(i) * 1000;
    ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(10 + i, 0, size), &want));
    files.emplace_back(f, std::move(want));
  }
  // Overwrites in both layouts leave dead bytes in segments.
  for (auto& [f, want] : files) {
    ASSERT_NO_FATAL_FAILURE(Write(f, 50 * kKiB, PatternData(f, 0, 120 * kKiB), &want, 40 * kKiB));
  }
  CompactOptions co;
  co.dead_ratio = 0.01;
  ASSERT_OK_AND_ASSIGN(CompactReport rep, s()->Compact(co));
  for (auto& [f, want] : files) ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  for (auto& [f, want] : files) ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataFileTest, WholeDataFileOnlyWhileTheDataFileHoldsEveryByte) {
  Ino big = File("big"), small = File("small");
  std::string want, want_small;
  ASSERT_NO_FATAL_FAILURE(Write(big, 0, PatternData(1, 0, 2 * kMiB + 5), &want));
  ASSERT_NO_FATAL_FAILURE(Write(small, 0, PatternData(2, 0, 100 * kKiB), &want_small));
  ASSERT_OK_AND_ASSIGN(std::optional<WholeDataFile> whole, s()->WholeDataFileOf(big));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->path, DataPath(big));
  EXPECT_EQ(whole->size, want.size());
  ASSERT_OK_AND_ASSIGN(std::optional<WholeDataFile> none, s()->WholeDataFileOf(small));
  EXPECT_FALSE(none.has_value());
  EXPECT_FALSE(s()->WholeDataFileOf(kRootIno)->has_value());
  // Appending keeps it whole; an overwrite in the middle goes to a segment.
  ASSERT_NO_FATAL_FAILURE(Write(big, want.size(), PatternData(3, 0, 300 * kKiB), &want));
  ASSERT_OK_AND_ASSIGN(whole, s()->WholeDataFileOf(big));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->size, want.size());
  ASSERT_NO_FATAL_FAILURE(Write(big, 1 * kMiB, "overwritten", &want));
  ASSERT_OK_AND_ASSIGN(none, s()->WholeDataFileOf(big));
  EXPECT_FALSE(none.has_value());
  // A punched range reads as zeros, which the data file does not hold.
  Ino punched = File("punched");
  std::string want_punched;
  ASSERT_NO_FATAL_FAILURE(Write(punched, 0, PatternData(4, 0, 2 * kMiB), &want_punched));
  ASSERT_TRUE(s()->WholeDataFileOf(punched)->has_value());
  ASSERT_OK(s()->Fallocate(punched, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 64 * kKiB,
                           64 * kKiB));
  EXPECT_FALSE(s()->WholeDataFileOf(punched)->has_value());
  // Truncating below the data file's end leaves the bytes after it elsewhere.
  Ino cut = File("cut");
  std::string want_cut;
  ASSERT_NO_FATAL_FAILURE(Write(cut, 0, PatternData(5, 0, 2 * kMiB), &want_cut));
  ASSERT_NO_FATAL_FAILURE(Truncate(cut, 1 * kMiB + 3, &want_cut));
  ASSERT_OK_AND_ASSIGN(whole, s()->WholeDataFileOf(cut));
  if (whole.has_value()) {
    EXPECT_EQ(whole->size, want_cut.size());
    EXPECT_EQ(DataFileSize(cut), static_cast<int64_t>(want_cut.size()));
  }
  ASSERT_NO_FATAL_FAILURE(Write(cut, want_cut.size(), "tail", &want_cut));
  ASSERT_OK_AND_ASSIGN(whole, s()->WholeDataFileOf(cut));
  if (whole.has_value()) {
    EXPECT_EQ(DataFileSize(cut), static_cast<int64_t>(want_cut.size()));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(cut, want_cut));
}

TEST_F(DataFileTest, ZeroThresholdKeepsEveryFileInSegments) {
  options_.data_file_min = 0;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, PatternData(1, 0, 3 * kMiB), &want));
  EXPECT_EQ(LayoutOf(f).data_file_bytes, 0u);
  EXPECT_EQ(DataFileSize(f), -1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

// What the kernel does for a passthrough writer: writes the data file.
void WriteDirectly(const std::string& path, uint64_t off, const std::string& data,
                   std::string* model) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)),
            static_cast<ssize_t>(data.size()));
  ::close(fd);
  if (model->size() < off + data.size()) model->resize(off + data.size(), '\0');
  model->replace(off, data.size(), data);
}

TEST_F(DataFileTest, DirectWritesAreAdoptedWithChecksumsOfWhatTheDataFileHoldsNow) {
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, DataPath(f));
  std::string want;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(1, 0, 2 * kMiB + 5), &want));
  // Before any adoption the size is the data file's, and nothing is indexed.
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(f));
  EXPECT_EQ(a.size, want.size());
  EXPECT_EQ(LayoutOf(f).data_file_bytes, 0u);
  ASSERT_OK(s()->AdoptDirectWrites(f));
  EXPECT_EQ(LayoutOf(f).data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));  // every block checked
  // A rewrite in the middle: the next adoption checksums the new bytes.
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 1 * kMiB - 2, "rewritten", &want));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK_AND_ASSIGN(EngineStats st, s()->GetStats());
  EXPECT_EQ(st.direct_writes, 1u);
  EXPECT_EQ(st.direct_adoptions, 2u);
  // Nothing changed: nothing to do. Where this machine's timestamps are
  // coarse, only once a step has passed since the rewrite and one more
  // adoption was made (DataFiles::Look::settled).
  ASSERT_OK_AND_ASSIGN(const int64_t step,
                       DataFiles::ProbeTimestampStep(io::Env::Posix().get(), dir_.path() + "/probe"));
  ASSERT_LT(step, DataFiles::kUnknownStep);
  uint64_t adoptions = 2;
  if (step != 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(2 * step));
    ASSERT_OK(s()->AdoptDirectWrites(f));
    ++adoptions;
  }
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_OK_AND_ASSIGN(st, s()->GetStats());
  EXPECT_EQ(st.direct_adoptions, adoptions);
  // Truncation cuts and extends the data file itself.
  ASSERT_NO_FATAL_FAILURE(Truncate(f, 1 * kMiB + 3, &want));
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(Truncate(f, 1 * kMiB + 100 * kKiB, &want));
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  // A write through the store lands in the data file too.
  ASSERT_NO_FATAL_FAILURE(Write(f, want.size(), PatternData(2, 0, 300 * kKiB), &want));
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  EXPECT_EQ(s()->Fallocate(f, 0, 0, 4 * kMiB).code(), EOPNOTSUPP);
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, want.size(), PatternData(3, 0, 70 * kKiB), &want));
  ASSERT_OK(s()->EndDirectWrite(f));
  // Past data_file_bytes: it stays whole in its data file.
  ASSERT_OK_AND_ASSIGN(std::optional<WholeDataFile> whole, s()->WholeDataFileOf(f));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->size, want.size());
  EXPECT_EQ(s()->EndDirectWrite(f).code(), EINVAL);  // not begun
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataFileTest, WithCoarseTimestampsARewriteInTheStepOfTheLastAdoptionIsAdopted) {
  // Timestamps in steps of 500 ms: a rewrite of the same size right after
  // an adoption leaves size and mtime as they were.
  constexpr auto kStep = std::chrono::milliseconds(500);
  std::shared_ptr<io::FaultInjectionEnv> env = io::FaultInjectionEnv::Make();
  env->SetTimestampStep(std::chrono::nanoseconds(kStep).count());
  options_.env = env;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  ASSERT_TRUE(path.has_value());
  // The first look at a data file measures the step (up to a step long).
  ASSERT_OK(s()->GetAttr(f).status());
  std::string want;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(1, 0, 2 * kMiB), &want));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 1 * kMiB - 2, "rewritten", &want));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));  // checks every block
  ASSERT_OK_AND_ASSIGN(EngineStats st, s()->GetStats());
  EXPECT_EQ(st.direct_adoptions, 2u);
  // A step later the next adoption hashes once more, and then there is
  // nothing left to do.
  std::this_thread::sleep_for(2 * kStep);
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_OK_AND_ASSIGN(st, s()->GetStats());
  EXPECT_EQ(st.direct_adoptions, 3u);
  ASSERT_OK(s()->EndDirectWrite(f));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataFileTest, ASmallDirectFileIsCopiedIntoSegmentsAndItsDataFileGoesAfterASync) {
  struct Case {
    std::string name;
    size_t size;
  };
  for (const Case& c : {Case{"records", 300 * kKiB}, Case{"inline", 10}, Case{"empty", 0}}) {
    SCOPED_TRACE(c.name);
    Ino f = File(c.name);
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
    ASSERT_TRUE(path.has_value());
    std::string want;
    if (c.size > 0) {
      ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(4, 0, c.size), &want));
    }
    ASSERT_OK(s()->EndDirectWrite(f));
    Layout l = LayoutOf(f);
    EXPECT_EQ(l.data_file_bytes, 0u);
    EXPECT_EQ(c.size > 100 ? l.segment_bytes : l.inline_bytes, c.size);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
    // The index does not use the data file; it goes once that is durable.
    EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(c.size));
    ASSERT_OK(s()->SyncAll());
    ASSERT_NO_FATAL_FAILURE(ExpectDataFileDeleted(f));
    ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, ManySmallDirectFilesWithoutAnFsyncSyncOnTheirOwn) {
  // Each leaves a data file that copies bytes in segments; the store syncs
  // once the queue of them is long, so that they do not pile up until an
  // fsync that may never come.
  const int kFiles = 1100;
  ASSERT_OK_AND_ASSIGN(EngineStats before, s()->GetStats());
  for (int i = 0; i < kFiles; ++i) {
    Ino f = File("f" + std::to_string(i));
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
    ASSERT_TRUE(path.has_value());
    std::string want;
    ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, "file " + std::to_string(i), &want));
    ASSERT_OK(s()->EndDirectWrite(f));
  }
  const std::string data_dir = dir_.store() + "/data";
  auto count = [&] {
    return std::distance(std::filesystem::directory_iterator(data_dir),
                         std::filesystem::directory_iterator{});
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (count() > kFiles - 1000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LE(count(), kFiles - 1000);
  ASSERT_OK_AND_ASSIGN(EngineStats after, s()->GetStats());
  EXPECT_GT(after.device_syncs, before.device_syncs);
  EXPECT_EQ(after.fsyncs, before.fsyncs);  // none asked for
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(count(), 0);
}

TEST_F(DataFileTest, AWriteWhileAnAdoptionReadsTheDataFileIsAdoptedToo) {
  // Another open of the file writes on while a close adopts the data file.
  // The adoption sees the write (size or mtime changed) and reads the data
  // file again: the checksums in the index are those of the bytes in it.
  std::shared_ptr<io::FaultInjectionEnv> env = io::FaultInjectionEnv::Make();
  options_.env = env;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  ASSERT_TRUE(path.has_value());
  std::string want;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(1, 0, 2 * kMiB), &want));
  // Runs `act` once, right after the adoption has read the first block.
  std::atomic<int> fired{0};
  auto after_first_block = [&](std::function<void()> act) {
    fired = 0;
    env->SetReadHook([&, act](const std::string& p, uint64_t offset) {
      if (p == *path && offset == 0 && fired.exchange(1) == 0) act();
    });
  };
  // A rewrite in the first block (the checksum taken is of the old bytes)
  // and an append (which changes the size, on any filesystem's timestamps).
  after_first_block([&] {
    WriteDirectly(*path, 100, "rewritten while hashed", &want);
    WriteDirectly(*path, want.size(), PatternData(2, 0, 100 * kKiB), &want);
  });
  ASSERT_OK(s()->AdoptDirectWrites(f));
  EXPECT_EQ(fired.load(), 1);
  ASSERT_OK_AND_ASSIGN(EngineStats st, s()->GetStats());
  EXPECT_EQ(st.direct_adoptions, 1u);
  EXPECT_EQ(st.direct_rereads, 1u);
  EXPECT_EQ(LayoutOf(f).data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));  // checks every block

  // A rewrite alone (same size) is seen by its mtime where this machine's
  // timestamps tell a write after a look apart.
  ASSERT_OK_AND_ASSIGN(const int64_t step,
                       DataFiles::ProbeTimestampStep(io::Env::Posix().get(), dir_.path() + "/probe"));
  uint64_t rereads = 1;
  if (step == 0) {
    ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 3 * kMiB / 2, "moved on", &want));
    after_first_block([&] { WriteDirectly(*path, 200, "rewritten in place", &want); });
    ASSERT_OK(s()->AdoptDirectWrites(f));
    ASSERT_OK_AND_ASSIGN(st, s()->GetStats());
    EXPECT_EQ(st.direct_rereads, ++rereads);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  }

  // A writer that never stops: the adoption gives up after three reads and
  // adopts the last; the next adoption reads again.
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, "one more", &want));
  uint64_t seed = 3;
  env->SetReadHook([&](const std::string& p, uint64_t offset) {
    if (p != *path || offset != 0) return;
    WriteDirectly(*path, want.size(), PatternData(seed++, 0, 10 * kKiB), &want);
  });
  ASSERT_OK(s()->AdoptDirectWrites(f));
  ASSERT_OK_AND_ASSIGN(st, s()->GetStats());
  EXPECT_EQ(st.direct_rereads, rereads + 2);
  EXPECT_EQ(seed, 6u);
  env->SetReadHook(nullptr);
  ASSERT_OK(s()->AdoptDirectWrites(f));
  EXPECT_EQ(LayoutOf(f).data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK(s()->EndDirectWrite(f));
  ASSERT_OK_AND_ASSIGN(st, s()->GetStats());
  EXPECT_EQ(st.direct_rereads, rereads + 2);
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataFileTest, AdoptionFollowsTheSizeAcrossDataFileBytes) {
  // Below data_file_bytes an adoption copies into segments; past it the
  // data file holds the file; cut below it again, a copy again.
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  ASSERT_TRUE(path.has_value());
  std::string want;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(6, 0, 200 * kKiB), &want));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  EXPECT_EQ(LayoutOf(f).segment_bytes, want.size());
  EXPECT_EQ(LayoutOf(f).data_file_bytes, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, want.size(), PatternData(7, 0, 2 * kMiB), &want));
  ASSERT_OK(s()->AdoptDirectWrites(f));
  EXPECT_EQ(LayoutOf(f).segment_bytes, 0u);
  EXPECT_EQ(LayoutOf(f).data_file_bytes, want.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(Truncate(f, 100, &want));  // adopts: inline
  EXPECT_EQ(LayoutOf(f).inline_bytes, 100u);
  EXPECT_EQ(LayoutOf(f).data_file_bytes, 0u);
  ASSERT_OK(s()->EndDirectWrite(f));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
  // Begun again while its data file waits for the sync: the new data file
  // is the one that stays.
  ASSERT_NO_FATAL_FAILURE(Truncate(f, 0, &want));
  ASSERT_OK_AND_ASSIGN(path, s()->BeginDirectWrite(f));
  ASSERT_TRUE(path.has_value());
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(8, 0, 3 * kMiB), &want));
  ASSERT_OK(s()->SyncAll());
  ASSERT_OK(s()->EndDirectWrite(f));
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(Reopen());  // the close waits for the background deletions
  EXPECT_EQ(DataFileSize(f), static_cast<int64_t>(want.size()));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(DataFileTest, OnlyAnEmptyFileBeginsDirectWrites) {
  Ino f = File("f");
  std::string want;
  ASSERT_NO_FATAL_FAILURE(Write(f, 0, "bytes", &want));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  EXPECT_FALSE(path.has_value());
  EXPECT_EQ(DataFileSize(f), -1);
  EXPECT_EQ(s()->EndDirectWrite(f).code(), EINVAL);
  // Nor one with set-ID bits: the writes must reach the daemon, which
  // clears them.
  for (uint32_t bits : {S_ISUID, S_ISGID}) {
    ASSERT_OK_AND_ASSIGN(engine::Attr a, s()->Create(kRootIno, "setid" + std::to_string(bits),
                                                     S_IFREG | 0777 | bits, 0, 0));
    ASSERT_OK_AND_ASSIGN(path, s()->BeginDirectWrite(a.ino));
    EXPECT_FALSE(path.has_value()) << bits;
  }
  options_.data_file_min = 0;  // data files off: none
  ASSERT_NO_FATAL_FAILURE(Reopen());
  Ino g = File("g");
  ASSERT_OK_AND_ASSIGN(path, s()->BeginDirectWrite(g));
  EXPECT_FALSE(path.has_value());
}

TEST_F(DataFileTest, BytesNotAdoptedBeforeACrashAreNotTheFiles) {
  Ino f = File("f"), g = File("g");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path_g, s()->BeginDirectWrite(g));
  std::string want, want_g;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, PatternData(5, 0, 2 * kMiB), &want));
  ASSERT_OK(s()->Fsync(f, false));
  std::string lost = want;
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, want.size(), PatternData(6, 0, kMiB), &lost));
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path_g, 0, PatternData(7, 0, kMiB), &want_g));
  // The daemon dies: no EndDirectWrite.
  ASSERT_OK(s()->SyncAll());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(g));
  EXPECT_EQ(a.size, 0u);
  EXPECT_EQ(DataFileSize(g), -1);  // no inode used it: deleted at the open
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

}  // namespace
}  // namespace ckptfs::engine::test
