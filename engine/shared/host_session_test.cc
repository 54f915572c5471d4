// HostSession over an index of its own in memory (meta::MemKv): hosts, solo
// grants and their epochs, and the inodes a host made.
#include "engine/shared/host_session.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "meta/mem_kv.h"

namespace ckptfs::engine {
namespace {

class HostSessionTest : public ::testing::Test {
 protected:
  meta::Kv* kv() { return &kv_; }

  meta::MemKv kv_;
};

TEST_F(HostSessionTest, ASessionWithoutAHostHasNoSoloEpoch) {
  HostSession none;
  EXPECT_EQ(none.id(), 0u);
  EXPECT_FALSE(none.lost());
  EXPECT_EQ(none.SoloEpoch(), 0u);
  EXPECT_EQ(none.SoloSecondsLeft(), 0.0);
  EXPECT_TRUE(none.RenewIfDue().ok());
  EXPECT_TRUE(none.Release(true).ok());
}

TEST_F(HostSessionTest, AHostAloneIsGrantedASoloPeriod) {
  HostSession a;
  ASSERT_TRUE(a.Claim(kv(), "a", "test").ok());
  EXPECT_NE(a.id(), 0u);
  EXPECT_EQ(a.name(), "a");
  EXPECT_EQ(a.SoloEpoch(), 0u);  // until the hosts are read
  Result<bool> others = a.WatchOnce();
  ASSERT_TRUE(others.ok()) << others.status().ToString();
  EXPECT_FALSE(*others);
  EXPECT_NE(a.SoloEpoch(), 0u);
  EXPECT_GT(a.SoloSecondsLeft(), 0.0);
  EXPECT_LE(a.SoloSecondsLeft(), HostSession::kSoloGrantMs / 1000.0);
  EXPECT_TRUE(a.Release(true).ok());
}

TEST_F(HostSessionTest, AGrantThatRanOutBeginsANewEpoch) {
  HostSession a;
  ASSERT_TRUE(a.Claim(kv(), "a", "test").ok());
  ASSERT_TRUE(a.WatchOnce().ok());
  const uint64_t first = a.SoloEpoch();
  ASSERT_TRUE(a.WatchOnce().ok());
  EXPECT_EQ(a.SoloEpoch(), first);  // the grant ran on: the same epoch
  a.StopWatch();                    // ends the grant
  EXPECT_EQ(a.SoloEpoch(), 0u);
  ASSERT_TRUE(a.WatchOnce().ok());
  EXPECT_EQ(a.SoloEpoch(), first + 1);
  EXPECT_TRUE(a.Release(true).ok());
}

TEST_F(HostSessionTest, AnotherMountedHostEndsTheGrant) {
  HostSession a;
  HostSession b;
  ASSERT_TRUE(a.Claim(kv(), "a", "test").ok());
  ASSERT_TRUE(a.WatchOnce().ok());
  ASSERT_NE(a.SoloEpoch(), 0u);
  ASSERT_TRUE(b.Claim(kv(), "b", "test").ok());
  EXPECT_NE(b.id(), a.id());
  Result<bool> others = a.WatchOnce();
  ASSERT_TRUE(others.ok());
  EXPECT_TRUE(*others);
  EXPECT_EQ(a.SoloEpoch(), 0u);
  EXPECT_EQ(a.SoloSecondsLeft(), 0.0);
  ASSERT_TRUE(b.Release(true).ok());
  others = a.WatchOnce();
  ASSERT_TRUE(others.ok());
  EXPECT_FALSE(*others);
  EXPECT_NE(a.SoloEpoch(), 0u);
  EXPECT_TRUE(a.Release(true).ok());
}

TEST_F(HostSessionTest, AMadeInodeIsTakenOnceAndTheOldestGo) {
  HostSession a;
  format::InodeValue v;
  v.mode = 0100644;
  v.size = 7;
  a.RememberMade(5, 3, v);
  std::optional<HostSession::Made> m = a.TakeMade(5);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->epoch, 3u);
  EXPECT_EQ(m->attr.size, 7u);
  EXPECT_FALSE(a.TakeMade(5).has_value());
  for (uint64_t ino = 100; ino < 100 + HostSession::kMadeMax + 1; ++ino) {
    a.RememberMade(ino, 1, v);
  }
  EXPECT_FALSE(a.TakeMade(100).has_value());  // dropped, the oldest
  EXPECT_TRUE(a.TakeMade(101).has_value());
  EXPECT_TRUE(a.TakeMade(100 + HostSession::kMadeMax).has_value());
}

}  // namespace
}  // namespace ckptfs::engine
