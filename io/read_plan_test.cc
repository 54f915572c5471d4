#include "io/read_plan.h"

#include <gtest/gtest.h>

namespace ckptfs::io {
namespace {

TEST(ReadPlanTest, OffMeansOneReadPerRecord) {
  std::vector<RecordRef> recs = {{1, 100, 50}, {1, 150, 50}, {1, 200, 50}};
  for (CoalesceSettings c : {CoalesceSettings{0, 0}, CoalesceSettings{0, 1 << 20},
                             CoalesceSettings{4096, 0}}) {
    auto plan = PlanReads(recs, c);
    ASSERT_EQ(plan.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(plan[i].offset, recs[i].offset);
      EXPECT_EQ(plan[i].length, 50u);
      EXPECT_EQ(plan[i].required, 50u);
      ASSERT_EQ(plan[i].records.size(), 1u);
    }
  }
}

TEST(ReadPlanTest, MergesWithinGapAndMax) {
  // Unsorted with a duplicate; gap of 10 between the first two, 1000 before the third.
  std::vector<RecordRef> recs = {{1, 160, 40}, {1, 100, 50}, {1, 1200, 10}, {1, 100, 50}};
  auto plan = PlanReads(recs, {16, 4096});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].offset, 100u);
  EXPECT_EQ(plan[0].required, 100u);  // 100..200
  EXPECT_EQ(plan[0].records.size(), 2u);
  EXPECT_EQ(plan[0].length, 4096u);   // extended to max for neighbours
  EXPECT_EQ(plan[1].offset, 1200u);
  EXPECT_EQ(plan[1].records.size(), 1u);
}

TEST(ReadPlanTest, NeverMergesAcrossSegmentsOrPastMax) {
  std::vector<RecordRef> recs = {{1, 0, 600}, {1, 600, 600}, {2, 1200, 10}};
  auto plan = PlanReads(recs, {1 << 20, 1000});
  ASSERT_EQ(plan.size(), 3u);  // 0..1200 exceeds max 1000; segment 2 separate
  EXPECT_EQ(plan[0].length, 1000u);
  EXPECT_EQ(plan[1].offset, 600u);
  EXPECT_EQ(plan[2].segment_id, 2u);
}

TEST(ReadPlanTest, ExtendsByAtMostMaxInAll) {
  // Four scattered small records: the first read takes 900 of the 1000, the
  // second the 100 left, the others none.
  std::vector<RecordRef> recs = {{1, 0, 100}, {1, 10000, 300}, {1, 20000, 100}, {2, 0, 100}};
  auto plan = PlanReads(recs, {64, 1000});
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].length, 1000u);
  EXPECT_EQ(plan[1].length, 400u);
  EXPECT_EQ(plan[2].length, 100u);
  EXPECT_EQ(plan[3].length, 100u);
  uint64_t extra = 0;
  for (const BackingRead& b : plan) extra += b.length - b.required;
  EXPECT_EQ(extra, 1000u);
  // A read that needs 400 leaves 400 of the 1000 for the next one.
  plan = PlanReads({{1, 0, 400}, {1, 5000, 100}, {1, 9000, 100}}, {64, 1000});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].length, 1000u);
  EXPECT_EQ(plan[1].length, 500u);
  EXPECT_EQ(plan[2].length, 100u);
}

TEST(ReadPlanTest, LargeRecordIsNotExtended) {
  auto plan = PlanReads({{3, 48, 2000}}, {64, 1000});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].length, 2000u);
  EXPECT_EQ(plan[0].required, 2000u);
}

}  // namespace
}  // namespace ckptfs::io
