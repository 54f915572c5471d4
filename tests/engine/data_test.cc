// File data through ckptfs::engine::Store: writes at any offset, holes,
// truncation, inline data, record splitting, compression, run-time settings,
// read coalescing, SEEK_DATA/SEEK_HOLE, fallocate, space accounting, orphans
// and segment rollover.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <functional>
#include <random>
#include <vector>

#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

class DataTest : public StoreFixture {
 protected:
  // Sets options_ and opens the store afresh with them.
  void ReopenWith(const StoreOptions& o) {
    options_ = o;
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }
  Ino File(const std::string& name, Ino parent = kRootIno) {
    auto a = s()->Create(parent, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << "Create " << name << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  uint64_t SizeOf(Ino ino) {
    auto a = s()->GetAttr(ino);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a->size : ~0ull;
  }
  // Compares the whole file with `want`, reporting the first difference.
  void ExpectContents(Ino ino, const std::string& want) {
    auto got = ReadAll(s(), ino);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want.size());
    if (*got != want) {
      size_t i = 0;
      while ((*got)[i] == want[i]) ++i;
      FAIL() << "contents differ first at offset " << i;
    }
  }

};

TEST_F(DataTest, SequentialWrites) {
  Ino f = File("seq");
  std::string want;
  for (int i = 0; i < 10; ++i) {
    std::string piece = PatternData(1, want.size(), 100 * kKiB + i);
    auto n = s()->Write(f, want.size(), piece);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, piece.size());
    want += piece;
    EXPECT_EQ(SizeOf(f), want.size());
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  // Reads at odd offsets and lengths, and short reads at the end.
  ASSERT_OK_AND_ASSIGN(std::string mid, ReadRange(s(), f, 12345, 300000));
  EXPECT_TRUE(mid == want.substr(12345, 300000));
  ASSERT_OK_AND_ASSIGN(std::string tail, ReadRange(s(), f, want.size() - 10, 100));
  EXPECT_EQ(tail, want.substr(want.size() - 10));
  ASSERT_OK_AND_ASSIGN(std::string past, ReadRange(s(), f, want.size() + 10, 100));
  EXPECT_EQ(past, "");
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataTest, RandomOverlappingWritesMatchAReferenceBuffer) {
  ASSERT_NO_FATAL_FAILURE(ReopenWith(SmallOptions()));
  Ino f = File("rand");
  std::string want;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 400; ++i) {
    uint64_t off = rng() % (2 * kMiB);
    size_t len = 1 + rng() % (i % 5 == 0 ? 200 * kKiB : 5000);
    std::string data = PatternData(1000 + i, off, len);
    ASSERT_OK(WriteAll(s(), f, off, data));
    if (want.size() < off + len) want.resize(off + len, '\0');
    want.replace(off, len, data);
    if (i % 50 == 49) {
      ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
      s()->DropCache();
      for (int k = 0; k < 20; ++k) {
        uint64_t roff = rng() % want.size();
        size_t rlen = 1 + rng() % (300 * kKiB);
        ASSERT_OK_AND_ASSIGN(std::string got, ReadRange(s(), f, roff, rlen));
        ASSERT_TRUE(got == want.substr(roff, rlen)) << "read at " << roff << " len " << rlen;
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
}

TEST_F(DataTest, SparseFileHolesReadAsZeros) {
  Ino f = File("sparse");
  const std::string a = PatternData(2, 0, 10000);
  const std::string b = PatternData(3, 0, 10000);
  ASSERT_OK(WriteAll(s(), f, 0, a));
  ASSERT_OK(WriteAll(s(), f, 10 * kMiB, b));
  EXPECT_EQ(SizeOf(f), 10 * kMiB + 10000);
  std::string want = a + std::string(10 * kMiB - 10000, '\0') + b;
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK_AND_ASSIGN(std::string hole, ReadRange(s(), f, 5 * kMiB, 4096));
  EXPECT_EQ(hole, std::string(4096, '\0'));
  // A write that starts beyond the end leaves a hole behind the old end.
  Ino g = File("gap");
  ASSERT_OK(WriteAll(s(), g, 100, "x"));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(g, std::string(100, '\0') + "x"));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(g, std::string(100, '\0') + "x"));
}

TEST_F(DataTest, TruncateDownAndUp) {
  ASSERT_NO_FATAL_FAILURE(ReopenWith(SmallOptions()));
  Ino f = File("t");
  std::string want = PatternData(4, 0, 500 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 0, want));
  SetAttrRequest r;
  // Down into the middle of a record, up again, then write past the cut.
  r.size = 100 * kKiB + 7;
  ASSERT_OK(s()->SetAttr(f, r));
  want.resize(100 * kKiB + 7);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  r.size = 300 * kKiB;
  ASSERT_OK(s()->SetAttr(f, r));
  want.resize(300 * kKiB, '\0');
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  std::string piece = PatternData(5, 250 * kKiB, 100 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 250 * kKiB, piece));
  want.resize(350 * kKiB, '\0');
  want.replace(250 * kKiB, piece.size(), piece);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  // Truncate an inline file.
  Ino g = File("small");
  ASSERT_OK(WriteAll(s(), g, 0, "0123456789"));
  r.size = 4;
  ASSERT_OK(s()->SetAttr(g, r));
  r.size = 8;
  ASSERT_OK(s()->SetAttr(g, r));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(g, std::string("0123") + std::string(4, '\0')));
}

TEST_F(DataTest, SmallFilesAreInlineLargeOnesInSegments) {
  ASSERT_EQ(options_.inline_max, 4096u);
  ASSERT_OK_AND_ASSIGN(EngineStats s0, s()->GetStats());
  Ino small = File("small");
  const std::string a = PatternData(6, 0, 1000);
  ASSERT_OK(WriteAll(s(), small, 0, a));
  Ino large = File("large");
  const std::string b = PatternData(7, 0, 100 * kKiB);
  ASSERT_OK(WriteAll(s(), large, 0, b));
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  EXPECT_GE(s1.inline_writes, s0.inline_writes + 1);
  EXPECT_GE(s1.records_written, s0.records_written + 1);

  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "before reopen" : "after reopen");
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(small));
    ASSERT_EQ(ex.size(), 1u);
    EXPECT_TRUE(ex[0].value.is_inline);
    EXPECT_EQ(ex[0].file_offset, 0u);
    EXPECT_EQ(ex[0].value.length, a.size());
    EXPECT_EQ(ex[0].value.inline_data, a);

    ASSERT_OK_AND_ASSIGN(ex, s()->GetExtents(large));
    ASSERT_FALSE(ex.empty());
    uint64_t covered = 0;
    for (const ExtentInfo& e : ex) {
      EXPECT_FALSE(e.value.is_inline);
      EXPECT_EQ(e.file_offset, covered);
      EXPECT_NE(e.value.segment_id, 0u);
      EXPECT_GT(e.value.raw_len, 0u);
      covered += e.value.length;
    }
    EXPECT_EQ(covered, b.size());
    ASSERT_NO_FATAL_FAILURE(ExpectContents(small, a));
    ASSERT_NO_FATAL_FAILURE(ExpectContents(large, b));
    if (pass == 0) {
      ASSERT_NO_FATAL_FAILURE(Reopen());
    }
  }

  // Growing an inline file past the limit keeps every byte.
  const std::string more = PatternData(8, 1000, 10000);
  ASSERT_OK(WriteAll(s(), small, 1000, more));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(small, a + more));
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(small));
  uint64_t covered = 0;
  for (const ExtentInfo& e : ex) covered += e.value.length;
  EXPECT_EQ(covered, a.size() + more.size());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(small, a + more));
}

TEST_F(DataTest, LargeWritesAreSplitIntoBoundedRecords) {
  StoreOptions o = TestOptions();
  o.max_record_bytes = 64 * kKiB;
  ASSERT_NO_FATAL_FAILURE(ReopenWith(o));
  Ino f = File("big");
  const std::string data = PatternData(9, 0, kMiB + 123);
  ASSERT_OK_AND_ASSIGN(EngineStats s0, s()->GetStats());
  ASSERT_OK(WriteAll(s(), f, 0, data));
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  EXPECT_GE(s1.records_written - s0.records_written, 17u);
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(f));
  EXPECT_GE(ex.size(), 17u);
  uint64_t covered = 0;
  for (const ExtentInfo& e : ex) {
    EXPECT_FALSE(e.value.is_inline);
    EXPECT_LE(e.value.raw_len, 64 * kKiB);
    EXPECT_LE(e.value.length, 64 * kKiB);
    EXPECT_EQ(e.file_offset, covered);
    covered += e.value.length;
  }
  EXPECT_EQ(covered, data.size());
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
}

TEST_F(DataTest, CompressionStoresFewerBytesAndRoundTrips) {
  StoreOptions o = TestOptions();
  o.compression = 3;
  ASSERT_NO_FATAL_FAILURE(ReopenWith(o));
  Ino f = File("text");
  const std::string text = CompressibleData(4 * kMiB);
  ASSERT_OK_AND_ASSIGN(EngineStats s0, s()->GetStats());
  ASSERT_OK(WriteAll(s(), f, 0, text));
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  EXPECT_EQ(s1.write_bytes - s0.write_bytes, text.size());
  EXPECT_LT(s1.stored_bytes - s0.stored_bytes, (s1.write_bytes - s0.write_bytes) / 4);
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(f));
  ASSERT_FALSE(ex.empty());
  for (const ExtentInfo& e : ex) {
    EXPECT_EQ(e.value.codec, format::Codec::kZstd)
        << "compressible record at " << e.file_offset << " not compressed";
    EXPECT_LT(e.value.stored_len, e.value.raw_len);
  }
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, text));
  ASSERT_OK_AND_ASSIGN(std::string mid, ReadRange(s(), f, 1234567, 99999));
  EXPECT_TRUE(mid == text.substr(1234567, 99999));

  // Incompressible data is stored raw even with compression on.
  Ino g = File("random");
  const std::string noise = PatternData(10, 0, 512 * kKiB);
  ASSERT_OK(WriteAll(s(), g, 0, noise));
  ASSERT_OK_AND_ASSIGN(ex, s()->GetExtents(g));
  for (const ExtentInfo& e : ex) EXPECT_EQ(e.value.codec, format::Codec::kNone);

  // Turned off at run time: new records are raw.
  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) { o->compression = 0; }));
  Ino h = File("text-raw");
  ASSERT_OK(WriteAll(s(), h, 0, text.substr(0, kMiB)));
  ASSERT_OK_AND_ASSIGN(ex, s()->GetExtents(h));
  for (const ExtentInfo& e : ex) EXPECT_EQ(e.value.codec, format::Codec::kNone);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, text));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(g, noise));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h, text.substr(0, kMiB)));
}

TEST_F(DataTest, GetOptionsAndUpdateOptions) {
  const StoreOptions opened = s()->GetOptions();
  EXPECT_EQ(opened.coalesce_gap, options_.coalesce_gap);
  EXPECT_EQ(opened.coalesce_max, options_.coalesce_max);
  EXPECT_EQ(opened.cache_size, options_.cache_size);
  EXPECT_EQ(opened.compression, 0);
  EXPECT_EQ(opened.segment_size, options_.segment_size);
  EXPECT_EQ(opened.inline_max, options_.inline_max);
  EXPECT_EQ(opened.holder, options_.holder);

  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) {
    o->coalesce_gap = 0;
    o->coalesce_max = 2 * kMiB;
    o->cache_size = kMiB;
    o->compression = 5;
  }));
  StoreOptions want = opened;
  want.coalesce_gap = 0;
  want.coalesce_max = 2 * kMiB;
  want.cache_size = kMiB;
  want.compression = 5;
  EXPECT_TRUE(s()->GetOptions() == want);

  // A change to a setting fixed while open, or a level out of range, is
  // refused whole: the run-time change that comes with it is not applied.
  const std::vector<std::function<void(StoreOptions*)>> refused = {
      [](StoreOptions* o) { o->segment_size = 4 * kMiB; },
      [](StoreOptions* o) { o->inline_max = 0; },
      [](StoreOptions* o) { o->min_free = 1; },
      [](StoreOptions* o) { o->free_empty = !o->free_empty; },
      [](StoreOptions* o) { o->holder = "someone else"; },
      [](StoreOptions* o) { o->compression = 23; },
      [](StoreOptions* o) { o->compression = -1; },
  };
  for (size_t i = 0; i < refused.size(); ++i) {
    const Status st = s()->UpdateOptions([&](StoreOptions* o) {
      o->coalesce_gap = 12345;
      refused[i](o);
    });
    EXPECT_ERRNO(EINVAL, st) << "change " << i;
  }
  EXPECT_TRUE(s()->GetOptions() == want);
  // Writes and reads still work with the new settings.
  Ino f = File("f");
  const std::string data = CompressibleData(300 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 0, data));
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
}

TEST_F(DataTest, CoalescingMergesBackingReadsAndCanBeTurnedOff) {
  constexpr int kFiles = 200;
  constexpr size_t kSize = 16 * kKiB;
  std::vector<Ino> inos;
  for (int i = 0; i < kFiles; ++i) {
    Ino f = File("c" + std::to_string(i));
    ASSERT_OK(WriteAll(s(), f, 0, PatternData(100 + i, 0, kSize)));
    inos.push_back(f);
  }
  // Backing reads of reading every file cold, or the error of GetStats.
  auto read_all = [&]() -> Result<uint64_t> {
    s()->DropCache();
    Result<EngineStats> before = s()->GetStats();
    if (!before.ok()) return before.status();
    for (int i = 0; i < kFiles; ++i) {
      auto got = ReadRange(s(), inos[i], 0, kSize);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (got.ok()) {
        EXPECT_TRUE(*got == PatternData(100 + i, 0, kSize)) << "file " << i;
      }
    }
    Result<EngineStats> after = s()->GetStats();
    if (!after.ok()) return after.status();
    return after->backing_reads - before->backing_reads;
  };
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(inos[0]));
  ASSERT_EQ(ex.size(), 1u);
  ASSERT_FALSE(ex[0].value.is_inline) << "16 KiB is above inline_max";

  // Default settings: neighbouring records come in with few large reads.
  ASSERT_OK_AND_ASSIGN(uint64_t on, read_all());
  EXPECT_GE(on, 1u);
  EXPECT_LE(on, static_cast<uint64_t>(kFiles / 10)) << "coalescing on";
  ASSERT_OK_AND_ASSIGN(EngineStats coalesced, s()->GetStats());
  EXPECT_GT(coalesced.coalesced_reads, 0u);

  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) {
    o->coalesce_gap = 0;
    o->coalesce_max = 0;
  }));
  ASSERT_OK_AND_ASSIGN(uint64_t off, read_all());
  EXPECT_EQ(off, static_cast<uint64_t>(kFiles)) << "coalescing off: one read per record";

  // And on again at run time.
  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) {
    o->coalesce_gap = 256 * kKiB;
    o->coalesce_max = kMiB;
  }));
  ASSERT_OK_AND_ASSIGN(uint64_t again, read_all());
  EXPECT_LE(again, static_cast<uint64_t>(kFiles / 10)) << "coalescing on again";
}

// A stretched read that ends inside a neighbouring record completes that
// record, so reading files in store order reads each segment byte once.
TEST_F(DataTest, StoreOrderReadsFetchEachSegmentByteOnce) {
  constexpr int kFiles = 60;
  std::vector<Ino> inos;
  std::vector<std::string> datas;
  for (int i = 0; i < kFiles; ++i) {
    Ino f = File("o" + std::to_string(i));
    // Sizes that do not divide the coalescing window: records straddle it.
    datas.push_back(PatternData(300 + i, 0, (37 + 11 * (i % 7)) * kKiB));
    ASSERT_OK(WriteAll(s(), f, 0, datas.back()));
    inos.push_back(f);
  }
  s()->DropCache();
  ASSERT_OK_AND_ASSIGN(EngineStats before, s()->GetStats());
  uint64_t stored = 0;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(inos[i]));
    ASSERT_EQ(ex.size(), 1u);
    stored += ex[0].value.stored_len + format::kRecordHeaderSize;
    auto got = ReadRange(s(), inos[i], 0, datas[i].size());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == datas[i]) << "file " << i;
  }
  ASSERT_OK_AND_ASSIGN(EngineStats after, s()->GetStats());
  EXPECT_EQ(after.backing_read_bytes - before.backing_read_bytes, stored);
  EXPECT_LT(after.backing_reads - before.backing_reads, static_cast<uint64_t>(kFiles / 4));
  EXPECT_EQ(after.checksum_errors, before.checksum_errors);
}

TEST_F(DataTest, RecordsEndAtAlignedFileOffsets) {
  // One 3 MiB write at 100 KiB: records end at 1, 2 and 3 MiB and where the
  // write ends, so each aligned 1 MiB window of the file is one record.
  Ino f = File("unaligned");
  const std::string data = PatternData(13, 0, 3 << 20);
  ASSERT_OK(WriteAll(s(), f, 100 * kKiB, data));
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(f));
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (const ExtentInfo& e : ex) got.emplace_back(e.file_offset, e.value.length);
  const uint64_t mib = 1 << 20;
  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {100 * kKiB, mib - 100 * kKiB}, {mib, mib}, {2 * mib, mib}, {3 * mib, 100 * kKiB}};
  EXPECT_EQ(got, want);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, std::string(100 * kKiB, '\0') + data));
}

TEST_F(DataTest, LargeExactReadsLeaveTheRecordCacheAlone) {
  // 1 MiB records read one by one, as the kernel reads a big file ahead:
  // each backing read is exactly its record, the kernel keeps the bytes, and
  // the record cache is not filled with them (a repeat reads the segment).
  Ino f = File("big");
  const std::string data = PatternData(12, 0, 4 << 20);
  for (size_t off = 0; off < data.size(); off += 1 << 20) {
    ASSERT_OK(WriteAll(s(), f, off, data.substr(off, 1 << 20)));
  }
  s()->DropCache();
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_OK_AND_ASSIGN(EngineStats before, s()->GetStats());
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      auto got = ReadRange(s(), f, off, 1 << 20);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(*got == data.substr(off, 1 << 20)) << "pass " << pass << " offset " << off;
    }
    ASSERT_OK_AND_ASSIGN(EngineStats after, s()->GetStats());
    EXPECT_EQ(after.backing_reads - before.backing_reads, 4u) << "pass " << pass;
    EXPECT_EQ(after.cache_hits, before.cache_hits) << "pass " << pass;
  }
  // Small records still fill the cache (CacheServesRepeatedReads).
}

TEST_F(DataTest, CacheServesRepeatedReads) {
  Ino f = File("f");
  const std::string data = PatternData(11, 0, 200 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 0, data));
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
  ASSERT_OK_AND_ASSIGN(EngineStats s2, s()->GetStats());
  EXPECT_EQ(s2.backing_reads, s1.backing_reads) << "second read should come from the cache";
  EXPECT_GT(s2.cache_hits, s1.cache_hits);
  // With no cache, every read goes to the segment file.
  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) { o->cache_size = 0; }));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
  ASSERT_OK_AND_ASSIGN(EngineStats s3, s()->GetStats());
  EXPECT_GT(s3.backing_reads, s2.backing_reads);
}

TEST_F(DataTest, SeekDataAndHole) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(12, 0, 64 * kKiB)));
  ASSERT_OK(WriteAll(s(), f, kMiB, PatternData(13, 0, 64 * kKiB)));
  const uint64_t end = kMiB + 64 * kKiB;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "before reopen" : "after reopen");
    auto seek = [&](uint64_t off, bool hole) { return s()->SeekData(f, off, hole); };
    ASSERT_OK_AND_ASSIGN(uint64_t v, seek(0, false));
    EXPECT_EQ(v, 0u);
    ASSERT_OK_AND_ASSIGN(v, seek(0, true));
    EXPECT_EQ(v, 64 * kKiB);
    ASSERT_OK_AND_ASSIGN(v, seek(100 * kKiB, false));
    EXPECT_EQ(v, kMiB);
    ASSERT_OK_AND_ASSIGN(v, seek(100 * kKiB, true));
    EXPECT_EQ(v, 100 * kKiB);
    ASSERT_OK_AND_ASSIGN(v, seek(kMiB + 10, false));
    EXPECT_EQ(v, kMiB + 10);
    // The end of the file is a hole.
    ASSERT_OK_AND_ASSIGN(v, seek(kMiB + 10, true));
    EXPECT_EQ(v, end);
    EXPECT_ERRNO(ENXIO, seek(end, false));
    EXPECT_ERRNO(ENXIO, seek(end, true));
    EXPECT_ERRNO(ENXIO, seek(end + 100, false));
    if (pass == 0) {
      ASSERT_NO_FATAL_FAILURE(Reopen());
    }
  }
  // A file extended by truncate has no data after its last write.
  SetAttrRequest r;
  r.size = 4 * kMiB;
  ASSERT_OK(s()->SetAttr(f, r));
  EXPECT_ERRNO(ENXIO, s()->SeekData(f, 2 * kMiB, false));
  ASSERT_OK_AND_ASSIGN(uint64_t v, s()->SeekData(f, 2 * kMiB, true));
  EXPECT_EQ(v, 2 * kMiB);
  // An empty file.
  Ino e = File("empty");
  EXPECT_ERRNO(ENXIO, s()->SeekData(e, 0, false));
  EXPECT_ERRNO(ENXIO, s()->SeekData(e, 0, true));
  // An inline file is all data.
  Ino small = File("small");
  ASSERT_OK(WriteAll(s(), small, 0, "abc"));
  ASSERT_OK_AND_ASSIGN(v, s()->SeekData(small, 1, false));
  EXPECT_EQ(v, 1u);
  ASSERT_OK_AND_ASSIGN(v, s()->SeekData(small, 0, true));
  EXPECT_EQ(v, 3u);
}

TEST_F(DataTest, FallocateExtendsTheSize) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, "hello"));
  ASSERT_OK(s()->Fallocate(f, 0, 0, kMiB));
  EXPECT_EQ(SizeOf(f), kMiB);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, "hello" + std::string(kMiB - 5, '\0')));
  // Inside the current size: no change.
  ASSERT_OK(s()->Fallocate(f, 0, 100, 1000));
  EXPECT_EQ(SizeOf(f), kMiB);
  ASSERT_OK(s()->Fallocate(f, 0, kMiB, 10));
  EXPECT_EQ(SizeOf(f), kMiB + 10);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(SizeOf(f), kMiB + 10);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, "hello" + std::string(kMiB + 5, '\0')));
  // KEEP_SIZE must not change the size (or is refused).
  Status st = s()->Fallocate(f, FALLOC_FL_KEEP_SIZE, 0, 4 * kMiB);
  EXPECT_TRUE(st.ok() || st.code() == EOPNOTSUPP) << st.ToString();
  EXPECT_EQ(SizeOf(f), kMiB + 10);
}

TEST_F(DataTest, SpaceAccountingFollowsOverwriteTruncateAndUnlink) {
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(SpaceTotals t0, SumSegments(s()));
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(14, 0, kMiB)));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t1, SumSegments(s()));
  EXPECT_EQ(t1.live - t0.live, static_cast<int64_t>(kMiB));
  EXPECT_EQ(t1.dead - t0.dead, 0);

  // Overwrite 256 KiB: as much live as before, the hidden bytes dead.
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(15, 0, 256 * kKiB)));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t2, SumSegments(s()));
  EXPECT_EQ(t2.live - t0.live, static_cast<int64_t>(kMiB));
  EXPECT_EQ(t2.dead - t0.dead, static_cast<int64_t>(256 * kKiB));

  // Truncate to 512 KiB.
  SetAttrRequest r;
  r.size = 512 * kKiB;
  ASSERT_OK(s()->SetAttr(f, r));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t3, SumSegments(s()));
  EXPECT_EQ(t3.live - t0.live, static_cast<int64_t>(512 * kKiB));
  EXPECT_EQ(t3.dead - t0.dead, static_cast<int64_t>(768 * kKiB));

  // The numbers survive a reopen.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(SpaceTotals t4, SumSegments(s()));
  EXPECT_EQ(t4.live, t3.live);
  EXPECT_EQ(t4.dead, t3.dead);
  ASSERT_OK_AND_ASSIGN(EngineStats st, s()->GetStats());
  EXPECT_EQ(static_cast<int64_t>(st.live_bytes), t4.live);
  EXPECT_EQ(static_cast<int64_t>(st.dead_bytes), t4.dead);
  EXPECT_EQ(st.segments, t4.segments);

  // Unlink: everything dead.
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t5, SumSegments(s()));
  EXPECT_EQ(t5.live - t0.live, 0);
  EXPECT_EQ(t5.dead - t0.dead, static_cast<int64_t>(1280 * kKiB));

  // Rename over an existing file kills the replaced file's bytes.
  Ino g = File("g");
  Ino h = File("h");
  ASSERT_OK(WriteAll(s(), g, 0, PatternData(16, 0, 100 * kKiB)));
  ASSERT_OK(WriteAll(s(), h, 0, PatternData(17, 0, 200 * kKiB)));
  ASSERT_OK(s()->Rename(kRootIno, "g", kRootIno, "h", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t6, SumSegments(s()));
  EXPECT_EQ(t6.live - t0.live, static_cast<int64_t>(100 * kKiB));
  EXPECT_EQ(t6.dead - t5.dead, static_cast<int64_t>(200 * kKiB));

  // Inline data is not counted against segments.
  Ino i = File("inline");
  ASSERT_OK(WriteAll(s(), i, 0, "tiny"));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t7, SumSegments(s()));
  EXPECT_EQ(t7.live, t6.live);
  // Every segment's file holds at least its live + dead bytes' worth of
  // records (uncompressed here).
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segments, s()->ListSegments());
  for (const SegmentInfo& seg : segments) {
    EXPECT_GE(static_cast<int64_t>(seg.file_bytes), seg.live_bytes + seg.dead_bytes)
        << seg.path;
    EXPECT_EQ(seg.path, s()->SegmentPath(seg.id));
    // (An object of the object store, where the data is there.)
    if (!DataInObjectStore()) EXPECT_TRUE(std::filesystem::exists(seg.path)) << seg.path;
  }
}

TEST_F(DataTest, UnlinkWhileOpenKeepsDataUntilRelease) {
  Ino f = File("f");
  const std::string data = PatternData(18, 0, 300 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 0, data));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t0, SumSegments(s()));
  ASSERT_OK(s()->OpenFile(f));
  ASSERT_OK(s()->OpenFile(f));  // two handles
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(f));
  EXPECT_EQ(a.nlink, 0u);
  EXPECT_EQ(a.size, data.size());
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, data));
  // Still writable through the handle.
  ASSERT_OK(WriteAll(s(), f, 0, "new head"));
  ASSERT_OK_AND_ASSIGN(std::string head, ReadRange(s(), f, 0, 8));
  EXPECT_EQ(head, "new head");
  ASSERT_OK_AND_ASSIGN(SpaceTotals t1, SumSegments(s()));
  EXPECT_GE(t1.live, t0.live) << "data of an open unlinked file must stay live";
  // A new file of the same name is a different inode.
  Ino g = File("f");
  EXPECT_NE(g, f);
  ASSERT_OK(s()->Release(f));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, "new head" + data.substr(8)));
  ASSERT_OK(s()->Release(f));
  Status gone = s()->GetAttr(f).status();
  EXPECT_TRUE(gone.code() == ENOENT || gone.code() == ESTALE) << gone.ToString();
  ASSERT_OK_AND_ASSIGN(SpaceTotals t2, SumSegments(s()));
  EXPECT_EQ(t2.live, t0.live - static_cast<int64_t>(data.size()));
  EXPECT_EQ(SizeOf(g), 0u);
}

TEST_F(DataTest, OrphanLeftByACrashIsPurgedOnOpen) {
  if (IndexInMemory(options_)) GTEST_SKIP() << "a child process cannot open an index in memory";
  ASSERT_OK_AND_ASSIGN(SpaceTotals t0, SumSegments(s()));
  ASSERT_OK_AND_ASSIGN(FsStats fs0, s()->StatFs());
  ASSERT_OK(s()->Close());
  store_.reset();

  // The child opens the store, creates /orphan with 1 MiB, opens and unlinks
  // it, and exits without Close (as a killed daemon would).
  Child child = StartChild({"orphan", dir_.store()});
  ChildGuard guard(&child);
  ASSERT_GT(child.pid, 0);
  std::string line;
  ASSERT_TRUE(ReadLine(child.fd, &line));
  int status = guard.Reap(/*kill=*/false);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  const Ino orphan = std::stoull(line);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "orphan"));
  Status gone = s()->GetAttr(orphan).status();
  EXPECT_TRUE(gone.code() == ENOENT || gone.code() == ESTALE) << gone.ToString();
  ASSERT_OK_AND_ASSIGN(FsStats fs1, s()->StatFs());
  EXPECT_EQ(fs1.inodes, fs0.inodes);
  ASSERT_OK_AND_ASSIGN(SpaceTotals t1, SumSegments(s()));
  EXPECT_EQ(t1.live, t0.live);
  EXPECT_EQ(t1.dead - t0.dead, static_cast<int64_t>(kMiB)) << "the orphan's data is dead";
  // The purge is durable.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(SpaceTotals t2, SumSegments(s()));
  EXPECT_EQ(t2.live, t0.live);
  EXPECT_EQ(t2.dead, t1.dead);
  ASSERT_OK_AND_ASSIGN(FsStats fs2, s()->StatFs());
  EXPECT_EQ(fs2.inodes, fs0.inodes);
}

TEST_F(DataTest, SegmentsRollOverAtTheTargetSize) {
  StoreOptions o = TestOptions();
  o.segment_size = 4 * kMiB;
  ASSERT_NO_FATAL_FAILURE(ReopenWith(o));
  std::vector<Ino> files;
  for (int i = 0; i < 5; ++i) {
    Ino f = File("r" + std::to_string(i));
    files.push_back(f);
    for (int k = 0; k < 4; ++k) {
      ASSERT_OK(WriteAll(s(), f, k * kMiB, PatternData(200 + i, k * kMiB, kMiB)));
    }
  }
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> segs, s()->ListSegments());
  EXPECT_GE(segs.size(), 5u);
  int sealed = 0;
  for (const SegmentInfo& seg : segs) {
    sealed += seg.sealed;
    // A segment is sealed once it reaches the target: none grows far past it.
    EXPECT_LE(seg.file_bytes, 4 * kMiB + kMiB + 4096) << seg.path;
  }
  EXPECT_GE(sealed, 4);
  ASSERT_OK_AND_ASSIGN(EngineStats stats, s()->GetStats());
  EXPECT_EQ(stats.segments, segs.size());
  // Extents of one file may live in different segments.
  std::set<uint64_t> ids;
  for (Ino f : files) {
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(f));
    for (const ExtentInfo& e : ex) ids.insert(e.value.segment_id);
  }
  EXPECT_GE(ids.size(), 5u);
  s()->DropCache();
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(ExpectContents(files[i], PatternData(200 + i, 0, 4 * kMiB)));
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(std::vector<SegmentInfo> reopened, s()->ListSegments());
  EXPECT_EQ(reopened.size(), segs.size()) << "reopen must not lose segments";
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(ExpectContents(files[i], PatternData(200 + i, 0, 4 * kMiB)));
  }
}

TEST_F(DataTest, FsyncAndSyncAll) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(19, 0, 100 * kKiB)));
  ASSERT_OK_AND_ASSIGN(EngineStats s0, s()->GetStats());
  ASSERT_OK(s()->Fsync(f, false));
  ASSERT_OK(s()->Fsync(f, true));
  ASSERT_OK(s()->SyncAll());
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  EXPECT_GE(s1.fsyncs - s0.fsyncs, 2u);
  EXPECT_LE(s1.device_syncs - s0.device_syncs, s1.fsyncs - s0.fsyncs + 1);
  EXPECT_ERRNO(EISDIR, s()->Write(kRootIno, 0, "x"));
}

TEST_F(DataTest, StatsCountReadsAndWrites) {
  Ino f = File("f");
  ASSERT_OK_AND_ASSIGN(EngineStats s0, s()->GetStats());
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(20, 0, 10000)));
  ASSERT_OK(WriteAll(s(), f, 10000, PatternData(20, 10000, 5000)));
  ASSERT_OK_AND_ASSIGN(std::string got, ReadRange(s(), f, 0, 15000));
  ASSERT_OK_AND_ASSIGN(EngineStats s1, s()->GetStats());
  EXPECT_EQ(s1.writes - s0.writes, 2u);
  EXPECT_EQ(s1.write_bytes - s0.write_bytes, 15000u);
  EXPECT_GE(s1.reads - s0.reads, 1u);
  EXPECT_EQ(s1.read_bytes - s0.read_bytes, 15000u);
}

TEST_F(DataTest, OffsetsBeyondFourGiB) {
  ASSERT_NO_FATAL_FAILURE(ReopenWith(SmallOptions()));
  Ino f = File("huge-sparse");
  const uint64_t k4G = 1ull << 32;
  // A write that crosses the 4 GiB boundary, one far beyond, and one below.
  const std::string a = PatternData(30, 0, 200 * kKiB);
  const std::string b = PatternData(31, 0, 100 * kKiB);
  ASSERT_OK(WriteAll(s(), f, k4G - 100 * kKiB, a));
  ASSERT_OK(WriteAll(s(), f, 5 * k4G + 7, b));
  ASSERT_OK(WriteAll(s(), f, 0, "head"));
  EXPECT_EQ(SizeOf(f), 5 * k4G + 7 + b.size());
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "before reopen" : "after reopen");
    s()->DropCache();
    ASSERT_OK_AND_ASSIGN(std::string got, ReadRange(s(), f, k4G - 100 * kKiB, a.size()));
    EXPECT_TRUE(got == a);
    ASSERT_OK_AND_ASSIGN(got, ReadRange(s(), f, k4G - 10, 20));
    EXPECT_TRUE(got == a.substr(100 * kKiB - 10, 20));
    ASSERT_OK_AND_ASSIGN(got, ReadRange(s(), f, 5 * k4G + 7, b.size() + 100));
    EXPECT_TRUE(got == b);
    ASSERT_OK_AND_ASSIGN(got, ReadRange(s(), f, 3 * k4G, 4096));
    EXPECT_EQ(got, std::string(4096, '\0'));
    ASSERT_OK_AND_ASSIGN(got, ReadRange(s(), f, 0, 8));
    EXPECT_EQ(got, std::string("head") + std::string(4, '\0'));
    ASSERT_OK_AND_ASSIGN(uint64_t data, s()->SeekData(f, 1 * kMiB, false));
    EXPECT_EQ(data, k4G - 100 * kKiB);
    ASSERT_OK_AND_ASSIGN(data, s()->SeekData(f, k4G + kMiB, false));
    EXPECT_EQ(data, 5 * k4G + 7);
    ASSERT_OK_AND_ASSIGN(uint64_t hole, s()->SeekData(f, k4G - 100 * kKiB, true));
    EXPECT_EQ(hole, k4G + 100 * kKiB);
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s()->GetExtents(f));
    uint64_t covered = 0;
    for (const ExtentInfo& e : ex) covered += e.value.length;
    EXPECT_EQ(covered, 4 + a.size() + b.size());
    if (pass == 0) {
      ASSERT_NO_FATAL_FAILURE(Reopen());
    }
  }
  // Truncate into the middle of the extent that crosses 4 GiB.
  SetAttrRequest r;
  r.size = k4G + 5;
  ASSERT_OK(s()->SetAttr(f, r));
  ASSERT_OK_AND_ASSIGN(std::string tail, ReadRange(s(), f, k4G - 5, 100));
  EXPECT_TRUE(tail == a.substr(100 * kKiB - 5, 10));
}

TEST_F(DataTest, ZeroLengthWritesAndReads) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, "abc"));
  auto n = s()->Write(f, 1000, "");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(SizeOf(f), 3u) << "an empty write must not extend the file";
  char buf[4];
  auto r = s()->Read(f, 0, 0, buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0u);
  r = s()->Read(f, 3, sizeof(buf), buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 0u);
}

TEST_F(DataTest, InlineFileGrowsWithAHole) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, std::string(100, 'a')));
  ASSERT_OK(WriteAll(s(), f, 50, std::string(10, 'b')));  // overwrite inside inline data
  std::string want = std::string(50, 'a') + std::string(10, 'b') + std::string(40, 'a');
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_OK(WriteAll(s(), f, 8000, "tail"));
  want += std::string(8000 - 100, '\0') + "tail";
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want));
  // Truncate back below the inline limit and grow by truncate.
  SetAttrRequest r;
  r.size = 70;
  ASSERT_OK(s()->SetAttr(f, r));
  r.size = 9000;
  ASSERT_OK(s()->SetAttr(f, r));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want.substr(0, 70) + std::string(9000 - 70, '\0')));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, want.substr(0, 70) + std::string(9000 - 70, '\0')));
}

TEST_F(DataTest, RenameOverAnOpenFileKeepsItReadableUntilRelease) {
  Ino f = File("f");
  Ino g = File("g");
  const std::string gd = PatternData(32, 0, 200 * kKiB);
  ASSERT_OK(WriteAll(s(), f, 0, "replacement"));
  ASSERT_OK(WriteAll(s(), g, 0, gd));
  ASSERT_OK(s()->OpenFile(g));
  ASSERT_OK_AND_ASSIGN(SpaceTotals t0, SumSegments(s()));
  ASSERT_OK(s()->Rename(kRootIno, "f", kRootIno, "g", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(g));
  EXPECT_EQ(a.nlink, 0u);
  s()->DropCache();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(g, gd));
  ASSERT_OK_AND_ASSIGN(Attr named, s()->Lookup(kRootIno, "g"));
  EXPECT_EQ(named.ino, f);
  ASSERT_OK(s()->Release(g));
  Status gone = s()->GetAttr(g).status();
  EXPECT_TRUE(gone.code() == ENOENT || gone.code() == ESTALE) << gone.ToString();
  ASSERT_OK_AND_ASSIGN(SpaceTotals t1, SumSegments(s()));
  EXPECT_EQ(t0.live - t1.live, static_cast<int64_t>(gd.size()));
}

TEST_F(DataTest, WritesFailWithEnospcBelowMinFreeBytes) {
  Ino f = File("f");
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(33, 0, 100 * kKiB)));
  StoreOptions o = TestOptions();
  o.min_free = 1ull << 62;  // more than any disk has
  ASSERT_NO_FATAL_FAILURE(ReopenWith(o));
  EXPECT_ERRNO(ENOSPC, s()->Write(f, 0, PatternData(34, 0, 100 * kKiB)));
  EXPECT_ERRNO(ENOSPC, s()->Write(f, 200 * kKiB, "x"));
  // Nothing changed, and reads still work.
  EXPECT_EQ(SizeOf(f), 100 * kKiB);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(f, PatternData(33, 0, 100 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ReopenWith(TestOptions()));
  ASSERT_OK(WriteAll(s(), f, 0, "ok again"));
}

}  // namespace
}  // namespace ckptfs::engine::test
