// Damage on disk is reported, never returned as data: flip one byte of a
// record's payload or header in a segment file and check that reads of that
// record fail with EIO while every other record still reads correctly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/engine/store_files.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr size_t kRecordHeaderBytes = 48;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = TestOptions();
    options_.max_record_bytes = 64 * kKiB;
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

  // Writes file `name` with `data` in one Write and returns its inode.
  Ino Put(const std::string& name, const std::string& data) {
    auto a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!a.ok()) return 0;
    EXPECT_OK(WriteAll(s(), a->ino, 0, data));
    return a->ino;
  }
  // The extent that covers `offset` of `ino`.
  ExtentInfo ExtentAt(Ino ino, uint64_t offset) {
    auto ex = s()->GetExtents(ino);
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    if (ex.ok()) {
      for (const ExtentInfo& e : *ex) {
        if (e.file_offset <= offset && offset < e.file_offset + e.value.length) return e;
      }
    }
    ADD_FAILURE() << "no extent at " << offset;
    return ExtentInfo{};
  }
  // Reads [off, off+len) after dropping the cache.
  Result<std::string> ColdRead(Ino ino, uint64_t off, size_t len) {
    s()->DropCache();
    return ReadRange(s(), ino, off, len);
  }
  void ExpectReads(Ino ino, uint64_t off, const std::string& want) {
    auto got = ColdRead(ino, off, want.size());
    ASSERT_TRUE(got.ok()) << "read of " << ino << " at " << off << ": "
                          << got.status().ToString();
    EXPECT_TRUE(*got == want) << "read of " << ino << " at " << off << " returned wrong bytes";
  }

  TempDir dir_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
};

TEST_F(CorruptionTest, FlippedPayloadByteFailsOnlyThatRecord) {
  ASSERT_NO_FATAL_FAILURE(Open());
  const std::string a = PatternData(1, 0, 256 * kKiB);  // 4 records of 64 KiB
  const std::string b = PatternData(2, 0, 100 * kKiB);
  const std::string c = PatternData(3, 0, 100 * kKiB);
  Ino fa = Put("a", a);
  Ino fb = Put("b", b);
  Ino fc = Put("c", c);
  ExtentInfo bad = ExtentAt(fa, 64 * kKiB);
  ASSERT_FALSE(bad.value.is_inline);
  ASSERT_EQ(bad.file_offset, 64 * kKiB);
  ASSERT_EQ(bad.value.codec, format::Codec::kNone);
  const std::string seg = s()->SegmentPath(bad.value.segment_id);
  ASSERT_NO_FATAL_FAILURE(Close());

  ASSERT_NO_FATAL_FAILURE(StoreFiles(dir_.store()).FlipByte(seg, bad.value.record_offset + kRecordHeaderBytes + 100));
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK_AND_ASSIGN(const EngineStats stats0, s()->GetStats());

  // The damaged record: EIO for the whole of it and for any part of it.
  EXPECT_ERRNO(EIO, ColdRead(fa, 64 * kKiB, 64 * kKiB));
  EXPECT_ERRNO(EIO, ColdRead(fa, 64 * kKiB + 5000, 10));
  EXPECT_ERRNO(EIO, ColdRead(fa, 0, a.size()));
  EXPECT_ERRNO(EIO, ReadAll(s(), fa));
  ASSERT_OK_AND_ASSIGN(const EngineStats stats1, s()->GetStats());
  EXPECT_GT(stats1.checksum_errors, stats0.checksum_errors);
  // Warm: a failed record is not cached as if it were good.
  EXPECT_ERRNO(EIO, ReadRange(s(), fa, 64 * kKiB, 100));

  // Its neighbours in the same file, even when a coalesced read brings the
  // damaged record along.
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 0, a.substr(0, 64 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 128 * kKiB, a.substr(128 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 64 * kKiB - 10, a.substr(64 * kKiB - 10, 10)));
  // Other files.
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fb, 0, b));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fc, 0, c));
  // The same with coalescing off.
  ASSERT_OK(s()->UpdateOptions([](StoreOptions* o) {
    o->coalesce_gap = 0;
    o->coalesce_max = 0;
  }));
  EXPECT_ERRNO(EIO, ColdRead(fa, 64 * kKiB + 1, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 0, a.substr(0, 64 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 128 * kKiB, a.substr(128 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fb, 0, b));

  // Overwriting the damaged range replaces it: the file reads again.
  ASSERT_OK(WriteAll(s(), fa, 64 * kKiB, a.substr(64 * kKiB, 64 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 0, a));
}

TEST_F(CorruptionTest, FlippedHeaderByteFailsThatRecord) {
  ASSERT_NO_FATAL_FAILURE(Open());
  const std::string a = PatternData(4, 0, 100 * kKiB);
  const std::string c = PatternData(5, 0, 100 * kKiB);
  Ino fa = Put("a", a);
  Ino fc = Put("c", c);
  ExtentInfo first = ExtentAt(fc, 0);
  ASSERT_FALSE(first.value.is_inline);
  const std::string seg = s()->SegmentPath(first.value.segment_id);
  ASSERT_NO_FATAL_FAILURE(Close());
  // Byte 8 lies in the header's inode number.
  ASSERT_NO_FATAL_FAILURE(StoreFiles(dir_.store()).FlipByte(seg, first.value.record_offset + 8));
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_OK_AND_ASSIGN(const EngineStats stats0, s()->GetStats());
  EXPECT_ERRNO(EIO, ColdRead(fc, 0, 100));
  EXPECT_ERRNO(EIO, ColdRead(fc, 0, c.size()));
  ASSERT_OK_AND_ASSIGN(const EngineStats stats1, s()->GetStats());
  EXPECT_GT(stats1.checksum_errors, stats0.checksum_errors);
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fc, 64 * kKiB, c.substr(64 * kKiB)));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(fa, 0, a));
}

TEST_F(CorruptionTest, FlippedByteInACompressedRecord) {
  options_.compression = 3;
  ASSERT_NO_FATAL_FAILURE(Open());
  const std::string text = CompressibleData(256 * kKiB);
  Ino f = Put("text", text);
  ExtentInfo e = ExtentAt(f, 64 * kKiB);
  ASSERT_EQ(e.value.codec, format::Codec::kZstd);
  ASSERT_GT(e.value.stored_len, 20u);
  const std::string seg = s()->SegmentPath(e.value.segment_id);
  ASSERT_NO_FATAL_FAILURE(Close());
  ASSERT_NO_FATAL_FAILURE(
      StoreFiles(dir_.store()).FlipByte(seg, e.value.record_offset + kRecordHeaderBytes + e.value.stored_len / 2));
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_ERRNO(EIO, ColdRead(f, e.file_offset, 10));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(f, 0, text.substr(0, e.file_offset)));
  const uint64_t after = e.file_offset + e.value.length;
  ASSERT_NO_FATAL_FAILURE(ExpectReads(f, after, text.substr(after)));
}

TEST_F(CorruptionTest, InlineDataAndNamespaceSurviveSegmentDamage) {
  ASSERT_NO_FATAL_FAILURE(Open());
  Ino small = Put("small", "inline bytes");
  const std::string big = PatternData(6, 0, 64 * kKiB);
  Ino fbig = Put("big", big);
  ExtentInfo e = ExtentAt(fbig, 0);
  const std::string seg = s()->SegmentPath(e.value.segment_id);
  ASSERT_NO_FATAL_FAILURE(Close());
  ASSERT_NO_FATAL_FAILURE(StoreFiles(dir_.store()).FlipByte(seg, e.value.record_offset + kRecordHeaderBytes));
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_ERRNO(EIO, ColdRead(fbig, 0, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectReads(small, 0, "inline bytes"));
  // Namespace operations are unaffected by damaged data.
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(fbig));
  EXPECT_EQ(a.size, big.size());
  ASSERT_OK(s()->Unlink(kRootIno, "big"));
}

}  // namespace
}  // namespace ckptfs::engine::test
