#include "engine/data/reservations.h"

#include <gtest/gtest.h>

#include "format/format.h"

namespace ckptfs::engine {
namespace {

TEST(Reservations, ChargeCoversRecordHeaders) {
  EXPECT_EQ(Reservations::Charge(0), 0u);
  // 1 MiB written 4 KiB at a time: 256 records, plus one for an unaligned start.
  EXPECT_GE(Reservations::Charge(1 << 20), (1u << 20) + 257 * format::kRecordHeaderSize);
  EXPECT_GE(Reservations::Charge(1), 1 + format::kRecordHeaderSize);
}

TEST(Reservations, LargestFittingIsTheInverseOfCharge) {
  const uint64_t sizes[] = {0, 1, 95, 96, 97, 4000, 4191, 4192, 4193, 4240, 4241,
                            1 << 20, (1 << 20) + 4095, 75ull << 30, (75ull << 30) + 12345};
  for (uint64_t bytes : sizes) {
    const uint64_t len = Reservations::LargestFitting(bytes);
    EXPECT_LE(Reservations::Charge(len), bytes) << bytes;
    EXPECT_GT(Reservations::Charge(len + 1), bytes) << bytes;
  }
  for (uint64_t bytes = 0; bytes < 3 * 4096 * 3; bytes += 7) {
    const uint64_t len = Reservations::LargestFitting(bytes);
    ASSERT_LE(Reservations::Charge(len), bytes) << bytes;
    ASSERT_GT(Reservations::Charge(len + 1), bytes) << bytes;
  }
}

TEST(Reservations, BlocksAreTheWholeBlocksARangeTouches) {
  constexpr uint64_t B = Reservations::kBlockSize;
  auto blocks = [](uint64_t start, uint64_t end) {
    const Reservations::Range r = Reservations::Blocks(start, end);
    return std::make_pair(r.start, r.end);
  };
  EXPECT_EQ(blocks(0, B), std::make_pair(uint64_t{0}, B));
  EXPECT_EQ(blocks(B - 1, B + 1), std::make_pair(uint64_t{0}, 2 * B));  // across a boundary
  EXPECT_EQ(blocks(1, 2), std::make_pair(uint64_t{0}, B));
  EXPECT_EQ(blocks(B, 3 * B), std::make_pair(B, 3 * B));
  EXPECT_EQ(blocks(5 * B + 7, 9 * B - 7), std::make_pair(5 * B, 9 * B));
  EXPECT_EQ(blocks(B, B), std::make_pair(B, B));  // empty
}

TEST(Reservations, AddMergesAndRemoveSplits) {
  Reservations r;
  r.Add(7, 0, 4096);
  r.Add(7, 4096, 8192);  // touches: one range
  EXPECT_EQ(r.bytes(), 8192u);
  EXPECT_EQ(r.charge(), Reservations::Charge(8192));
  r.Add(7, 1000, 2000);  // already reserved
  EXPECT_EQ(r.bytes(), 8192u);
  EXPECT_EQ(r.Overlap(7, 0, 100000), 8192u);
  EXPECT_EQ(r.Overlap(7, 8000, 9000), 192u);
  EXPECT_EQ(r.Overlap(8, 0, 100000), 0u);

  r.Remove(7, 1000, 2000);  // a hole in the middle
  EXPECT_EQ(r.bytes(), 8192u - 1000);
  EXPECT_EQ(r.charge(), Reservations::Charge(1000) + Reservations::Charge(8192 - 2000));
  EXPECT_EQ(r.Overlap(7, 0, 2000), 1000u);
  EXPECT_EQ(r.Overlap(7, 1500, 1600), 0u);
  r.Remove(7, 0, 1000);
  r.Remove(7, 8000, 20000);
  EXPECT_EQ(r.bytes(), 6000u);
  EXPECT_EQ(r.Overlap(7, 0, 100000), 6000u);
  r.RemoveInode(7);
  EXPECT_EQ(r.bytes(), 0u);
  EXPECT_EQ(r.charge(), 0u);
}

TEST(Reservations, ChargeOfAddCountsOnlyTheGrowth) {
  Reservations r;
  r.Add(3, 0, 8192);
  r.Add(4, 0, 4096);
  EXPECT_EQ(r.ChargeOfAdd(3, 0, 4096), 0u);
  EXPECT_EQ(r.ChargeOfAdd(3, 4096, 16384), Reservations::Charge(16384) - Reservations::Charge(8192));
  EXPECT_EQ(r.ChargeOfAdd(5, 0, 4096), Reservations::Charge(4096));
  const uint64_t before = r.charge();
  const uint64_t add = r.ChargeOfAdd(3, 100000, 200000);
  r.Add(3, 100000, 200000);
  EXPECT_EQ(r.charge(), before + add);
  // Filling the gap between two pieces merges them: never a negative charge.
  r.Remove(3, 1000, 1004);
  EXPECT_EQ(r.ChargeOfAdd(3, 0, 5000), 0u);
}

TEST(Reservations, RemovingWhatIsNotReservedChangesNothing) {
  Reservations r;
  r.Remove(1, 0, 100);
  r.RemoveInode(1);
  r.Add(1, 100, 200);
  r.Remove(1, 0, 100);
  r.Remove(1, 200, 300);
  r.Remove(1, 150, 150);
  EXPECT_EQ(r.bytes(), 100u);
  EXPECT_EQ(r.charge(), Reservations::Charge(100));
}

}  // namespace
}  // namespace ckptfs::engine
