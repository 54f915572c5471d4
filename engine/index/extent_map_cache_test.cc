#include "engine/index/extent_map_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckptfs::engine {
namespace {

using meta::Space;

format::ExtentValue Record(uint32_t length, uint64_t segment, uint64_t record_offset) {
  format::ExtentValue v;
  v.length = length;
  v.segment_id = segment;
  v.record_offset = record_offset;
  v.stored_len = length;
  v.raw_len = length;
  return v;
}

std::vector<Extent> Extents(std::initializer_list<std::pair<uint64_t, uint32_t>> spans) {
  std::vector<Extent> out;
  for (auto [off, len] : spans) out.push_back(Extent{off, Record(len, 1, off)});
  return out;
}

// "offset+length" of each extent the cache holds for [start, end).
std::string Held(ExtentMapCache* c, uint64_t ino, uint64_t start = 0, uint64_t end = UINT64_MAX) {
  std::vector<Extent> out;
  switch (c->Collect(ino, start, end, &out)) {
    case ExtentMapCache::Lookup::kAbsent:
      return "absent";
    case ExtentMapCache::Lookup::kTooLarge:
      return "too large";
    case ExtentMapCache::Lookup::kHeld:
      break;
  }
  std::string s;
  for (const Extent& e : out) s += std::to_string(e.offset) + "+" + std::to_string(e.value.length) + " ";
  return s;
}

TEST(ExtentMapCacheTest, CollectReturnsTheOverlappingExtentsInOrder) {
  ExtentMapCache c(100, 100);
  EXPECT_EQ(Held(&c, 7), "absent");
  c.Insert(7, Extents({{0, 10}, {10, 5}, {20, 10}}));
  EXPECT_EQ(Held(&c, 7), "0+10 10+5 20+10 ");
  EXPECT_EQ(Held(&c, 7, 5, 12), "0+10 10+5 ");
  EXPECT_EQ(Held(&c, 7, 15, 20), "");  // a hole
  EXPECT_EQ(Held(&c, 7, 29, 40), "20+10 ");
  EXPECT_EQ(Held(&c, 7, 30, 40), "");
  EXPECT_EQ(Held(&c, 8), "absent");
}

TEST(ExtentMapCacheTest, ApplyFollowsPutsAndDeletesOfHeldInodesOnly) {
  ExtentMapCache c(100, 100);
  c.Insert(7, Extents({{0, 10}, {10, 10}}));
  meta::Writes b;
  b.Delete(Space::kExtents, format::ExtentKey(7, 10));
  b.Put(Space::kExtents, format::ExtentKey(7, 0), format::EncodeExtent(Record(4, 2, 0)));
  b.Put(Space::kExtents, format::ExtentKey(7, 4), format::EncodeExtent(Record(12, 2, 100)));
  b.Put(Space::kExtents, format::ExtentKey(8, 0), format::EncodeExtent(Record(1, 2, 0)));
  b.Merge(Space::kSegments, "segment", "delta");
  c.Apply(b);
  EXPECT_EQ(Held(&c, 7), "0+4 4+12 ");
  EXPECT_EQ(Held(&c, 8), "absent");  // not loaded: the index answers
  std::vector<Extent> got;
  ASSERT_EQ(c.Collect(7, 4, 5, &got), ExtentMapCache::Lookup::kHeld);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value.segment_id, 2u);
  EXPECT_EQ(got[0].value.record_offset, 100u);
  EXPECT_EQ(c.extents(), 2u);
}

TEST(ExtentMapCacheTest, DeletedInodeAndUndecodableValuesAreForgotten) {
  ExtentMapCache c(100, 100);
  c.Insert(7, Extents({{0, 10}}));
  c.Insert(9, Extents({{0, 10}}));
  meta::Writes b;
  b.Delete(Space::kInodes, format::InodeKey(7));
  b.Put(Space::kExtents, format::ExtentKey(9, 0), "not an extent");
  c.Apply(b);
  EXPECT_EQ(Held(&c, 7), "absent");
  EXPECT_EQ(Held(&c, 9), "absent");
  EXPECT_EQ(c.inodes(), 0u);
  EXPECT_EQ(c.extents(), 0u);
}

TEST(ExtentMapCacheTest, ForgetTouchedDropsEveryInodeOfAFailedBatch) {
  ExtentMapCache c(100, 100);
  c.Insert(7, Extents({{0, 10}}));
  c.Insert(9, Extents({{0, 10}}));
  meta::Writes b;
  b.Delete(Space::kExtents, format::ExtentKey(9, 0));
  c.ForgetTouched(b);
  EXPECT_EQ(Held(&c, 7), "0+10 ");
  EXPECT_EQ(Held(&c, 9), "absent");
}

TEST(ExtentMapCacheTest, BoundsEvictTheLeastRecentlyWrittenAndMarkLargeInodes) {
  ExtentMapCache c(/*max_extents=*/10, /*max_inode_extents=*/4);
  c.Insert(1, Extents({{0, 1}, {1, 1}, {2, 1}}));  // counts 4
  c.Insert(2, Extents({{0, 1}, {1, 1}, {2, 1}}));  // 8
  c.Insert(3, Extents({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}));  // too large: 1
  EXPECT_EQ(Held(&c, 3), "too large");
  EXPECT_EQ(c.inodes(), 3u);
  // A write of inode 1 makes inode 2 the least recently written.
  meta::Writes b;
  b.Put(Space::kExtents, format::ExtentKey(1, 3), format::EncodeExtent(Record(1, 1, 3)));
  c.Apply(b);  // 10
  EXPECT_EQ(c.inodes(), 3u);
  meta::Writes b2;
  b2.Put(Space::kExtents, format::ExtentKey(1, 4), format::EncodeExtent(Record(1, 1, 4)));
  c.Apply(b2);  // inode 1 grows past 4: marked too large
  EXPECT_EQ(Held(&c, 1), "too large");
  EXPECT_EQ(Held(&c, 2), "0+1 1+1 2+1 ");
  c.Insert(4, Extents({{0, 1}, {1, 1}, {2, 1}, {3, 1}}));  // 5 more: evicts from the back
  EXPECT_EQ(Held(&c, 4), "0+1 1+1 2+1 3+1 ");
  EXPECT_EQ(Held(&c, 2), "absent");
  EXPECT_LE(c.extents() + c.inodes(), 10u);
}

format::ExtentValue Inline(size_t bytes) {
  format::ExtentValue v;
  v.is_inline = true;
  v.inline_data.assign(bytes, 'x');
  v.length = static_cast<uint32_t>(bytes);
  return v;
}

TEST(ExtentMapCacheTest, InlineDataIsBoundedInBytes) {
  ExtentMapCache c(/*max_extents=*/1000, /*max_inode_extents=*/100, /*max_inline_bytes=*/10000);
  for (uint64_t ino = 1; ino <= 5; ++ino) c.Insert(ino, {Extent{0, Inline(3000)}});
  // Three small files' data fit in 10,000 bytes; the two written first went.
  EXPECT_EQ(c.inline_bytes(), 9000u);
  EXPECT_EQ(Held(&c, 1), "absent");
  EXPECT_EQ(Held(&c, 2), "absent");
  EXPECT_EQ(Held(&c, 5), "0+3000 ");
  EXPECT_EQ(c.bytes(), 6 * ExtentMapCache::kBytesPerExtent + 9000);
  // A write that replaces inline data counts the new bytes, not both.
  meta::Writes b;
  b.Put(Space::kExtents, format::ExtentKey(5, 0), format::EncodeExtent(Inline(100)));
  c.Apply(b);
  EXPECT_EQ(c.inline_bytes(), 6100u);
  meta::Writes d;
  d.Delete(Space::kExtents, format::ExtentKey(4, 0));
  c.Apply(d);
  EXPECT_EQ(c.inline_bytes(), 3100u);
  EXPECT_EQ(Held(&c, 4), "");
  c.Forget(3);
  EXPECT_EQ(c.inline_bytes(), 100u);
  EXPECT_LE(c.bytes(), ExtentMapCache::MaxBytes(1000, 10000));
}

}  // namespace
}  // namespace ckptfs::engine
