#include "engine/record_cache.h"

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

}  // namespace
}  // namespace ckptfs::engine
