// The store's summary against what a store holds, and the Prometheus text
// against a stats object.
#include "stats/stats.h"

#include <gtest/gtest.h>
#include <string>

#include "tests/engine/test_util.h"

namespace ckptfs::stats {
namespace {

using engine::test::TempDir;

TEST(StatsTest, SummaryCountsWhatTheStoreHolds) {
  TempDir dir;
  engine::StoreOptions o;
  o.inline_max = 0;
  auto opened = engine::Store::Open(dir.store(), o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  engine::Store& store = **opened;
  auto d = store.Mkdir(engine::kRootIno, "d", 0755, 0, 0);
  ASSERT_TRUE(d.ok());
  for (const char* name : {"a", "b"}) {
    auto f = store.Create(d->ino, name, 0644, 0, 0);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(store.Write(f->ino, 0, std::string(10000, 'x')).ok());
  }
  auto j = StoreSummary(store);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["namespace"]["files"], 2);
  EXPECT_EQ((*j)["namespace"]["directories"], 2) << "the root included";
  EXPECT_EQ((*j)["namespace"]["logical_bytes"], 20000);
  EXPECT_EQ((*j)["storage"]["live_bytes"], 20000);
  EXPECT_EQ((*j)["storage"]["dead_bytes"], 0);
  EXPECT_GE((*j)["storage"]["segments"], 1);
  EXPECT_FALSE(j->contains("last_compaction")) << "no compaction ran";
  auto text = StoreSummaryJson(store);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::ordered_json::parse(*text), *j);
  EXPECT_EQ(text->back(), '\n');
  ASSERT_TRUE(store.Close().ok());
}

TEST(StatsTest, PrometheusTextHasOneFamilyPerNumberPresent) {
  nlohmann::ordered_json j = {
      {"engine", {{"reads", 7}, {"backing_read_bytes", 4096}}},
      {"storage", {{"compression_ratio", 0.5}}},
      {"fs", {{"libfuse", "3.17.2"}, {"ops", {{"READ", 3}, {"LOOKUP", 2}}}}},
  };
  const std::string t = PrometheusText(j, "1.2.3");
  EXPECT_NE(t.find("ckptfs_info{version=\"1.2.3\",libfuse=\"3.17.2\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE ckptfs_reads_total counter\nckptfs_reads_total 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("ckptfs_backing_read_bytes_total 4096\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE ckptfs_compression_ratio gauge\nckptfs_compression_ratio 0.5\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("ckptfs_requests_by_kind_total{kind=\"READ\"} 3\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("ckptfs_writes_total"), std::string::npos) << "absent numbers make no family";
}

}  // namespace
}  // namespace ckptfs::stats
