#include "engine/data/record_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace ckptfs::engine {
namespace {

// A record of `len` bytes at the start of a read buffer of `buffer` bytes,
// as a coalesced read leaves it; `alive` watches the buffer.
RecordData InBuffer(size_t len, size_t buffer, std::weak_ptr<char[]>* alive) {
  std::shared_ptr<char[]> buf(new char[buffer]());
  *alive = buf;
  auto r = std::make_shared<RecordBytes>();
  r->bytes = std::string_view(buf.get(), len);
  r->owner = std::move(buf);
  r->held = buffer;
  return r;
}

TEST(RecordCacheTest, CountsTheMemoryItsEntriesHold) {
  constexpr uint64_t kCapacity = 16 << 20;  // 1 MiB per shard
  constexpr size_t kBuffer = 256 << 10;
  RecordCache cache(kCapacity);
  std::vector<std::weak_ptr<char[]>> buffers(1000);
  for (size_t i = 0; i < buffers.size(); ++i) {
    cache.Insert(1, i * 4096, InBuffer(100, kBuffer, &buffers[i]));
  }
  size_t alive = 0;
  for (const auto& b : buffers) alive += b.expired() ? 0 : 1;
  // 100-byte records would fit by the thousand; their buffers do not.
  EXPECT_GT(alive, 0u);
  EXPECT_LE(alive * kBuffer, kCapacity);
  // The most recent one is kept.
  EXPECT_NE(cache.Lookup(1, 999 * 4096), nullptr);
}

TEST(RecordCacheTest, RecordsOfOneSizeUseTheWholeCapacity) {
  // A segment of 16 KiB chunks: a record every 48 + 16384 bytes, so every
  // offset is a multiple of 16. Half the capacity's worth of them all stays.
  constexpr uint64_t kCapacity = 32 << 20;
  constexpr size_t kChunk = 16 << 10, kStride = 48 + kChunk;
  constexpr size_t kRecords = kCapacity / 2 / (kChunk + RecordCache::kEntryOverhead);
  RecordCache cache(kCapacity);
  for (uint64_t segment = 1; segment <= 2; ++segment) {
    std::vector<std::weak_ptr<char[]>> buffers(kRecords / 2);
    for (size_t i = 0; i < buffers.size(); ++i) {
      cache.Insert(segment, 4096 + i * kStride, InBuffer(kChunk, kChunk, &buffers[i]));
    }
  }
  for (uint64_t segment = 1; segment <= 2; ++segment) {
    for (size_t i = 0; i < kRecords / 2; ++i) {
      ASSERT_NE(cache.Lookup(segment, 4096 + i * kStride), nullptr) << segment << " " << i;
    }
  }
  EXPECT_EQ(cache.bytes(), kRecords / 2 * 2 * (kChunk + RecordCache::kEntryOverhead));
}

TEST(RecordCacheTest, EntriesWithoutHeldCountTheirBytes) {
  RecordCache cache(16 * 1000);  // 1,000 bytes per shard
  auto r = std::make_shared<RecordBytes>();
  static const char kBytes[600] = {};
  r->bytes = std::string_view(kBytes, sizeof(kBytes));
  EXPECT_EQ(r->Held(), 600u);
  cache.Insert(2, 0, r);
  EXPECT_NE(cache.Lookup(2, 0), nullptr);
  r = std::make_shared<RecordBytes>(*r);
  r->held = 2000;  // more than a shard holds: not kept
  cache.Insert(2, 4096, r);
  EXPECT_EQ(cache.Lookup(2, 4096), nullptr);
}

// A record of `len` bytes that owns its bytes, as a small record's copy does.
RecordData Small(size_t len) {
  std::shared_ptr<char[]> buf(new char[len]());
  auto r = std::make_shared<RecordBytes>();
  r->bytes = std::string_view(buf.get(), len);
  r->owner = std::move(buf);
  return r;
}

TEST(RecordCacheTest, TinyRecordsCountTheirEntries) {
  constexpr uint64_t kCapacity = 16 << 20;
  RecordCache cache(kCapacity);
  constexpr uint64_t kRecords = 200'000;  // 3.2 MB of bytes, 54 MB with their entries
  for (uint64_t i = 0; i < kRecords; ++i) cache.Insert(3, i * 64, Small(16));
  EXPECT_LE(cache.bytes(), kCapacity);
  uint64_t kept = 0;
  for (uint64_t i = 0; i < kRecords; ++i) kept += cache.Lookup(3, i * 64) != nullptr;
  EXPECT_LT(kept, kRecords);
  EXPECT_EQ(cache.bytes(), kept * (16 + RecordCache::kEntryOverhead));
}

TEST(RecordCacheTest, ErasingASegmentDropsItsRecordsOnly) {
  RecordCache cache(16 << 20);
  std::vector<std::weak_ptr<char[]>> gone(100), kept(100);
  for (size_t i = 0; i < 100; ++i) {
    cache.Insert(7, i * 4096, InBuffer(100, 1000, &gone[i]));
    cache.Insert(8, i * 4096, InBuffer(100, 1000, &kept[i]));
  }
  EXPECT_EQ(cache.bytes(), 200 * (1000 + RecordCache::kEntryOverhead));
  cache.EraseSegment(7);
  EXPECT_EQ(cache.bytes(), 100 * (1000 + RecordCache::kEntryOverhead));
  for (size_t i = 0; i < 100; ++i) {
    EXPECT_TRUE(gone[i].expired()) << i;  // the buffers are freed, not only unlisted
    EXPECT_EQ(cache.Lookup(7, i * 4096), nullptr);
    EXPECT_NE(cache.Lookup(8, i * 4096), nullptr);
  }
}

}  // namespace
}  // namespace ckptfs::engine
