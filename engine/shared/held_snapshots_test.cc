// HeldSnapshots: every inode of a held tree finds its snapshot; a change
// of one drops the whole tree; trees held first go when the limits are
// passed; a tree over them alone is not held.
#include "engine/shared/held_snapshots.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "format/format.h"

namespace ckptfs::engine {
namespace {

// A snapshot of the inodes [first, first + n): one key each.
std::shared_ptr<meta::SnapshotFile> Tree(uint64_t first, uint64_t n) {
  std::vector<meta::SnapshotEntry> entries;
  for (uint64_t i = first; i < first + n; ++i) {
    entries.push_back({meta::Space::kInodes, format::InodeKey(i), "attrs" + std::to_string(i)});
  }
  Result<std::string> bytes = meta::EncodeSnapshot(std::move(entries));
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto f = meta::SnapshotFile::FromBytes("tree" + std::to_string(first), *bytes);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::shared_ptr<meta::SnapshotFile>(std::move(*f));
}

TEST(HeldSnapshotsTest, EveryInodeOfAHeldTreeFindsItsSnapshot) {
  HeldSnapshots held;
  EXPECT_TRUE(held.empty());
  auto tree = Tree(100, 10);
  ASSERT_TRUE(held.Hold(100, tree).value());
  EXPECT_FALSE(held.empty());
  for (uint64_t i = 100; i < 110; ++i) {
    std::shared_ptr<meta::SnapshotFile> f = held.Find(i);
    ASSERT_EQ(f, tree) << i;
    Result<std::optional<std::string>> v = f->Get(meta::Space::kInodes, format::InodeKey(i));
    ASSERT_TRUE(v.ok() && v->has_value());
    EXPECT_EQ(**v, "attrs" + std::to_string(i));
  }
  EXPECT_EQ(held.Find(99), nullptr);
  EXPECT_EQ(held.Find(110), nullptr);
  const HeldSnapshots::Stats s = held.stats();
  EXPECT_EQ(s.trees, 1u);
  EXPECT_EQ(s.inodes, 10u);
  EXPECT_EQ(s.bytes, tree->bytes());
  EXPECT_EQ(s.reads, 10u);
}

TEST(HeldSnapshotsTest, AChangeOfOneInodeDropsTheWholeTree) {
  HeldSnapshots held;
  ASSERT_TRUE(held.Hold(100, Tree(100, 10)).value());
  ASSERT_TRUE(held.Hold(200, Tree(200, 5)).value());
  held.Drop(105);
  for (uint64_t i = 100; i < 110; ++i) EXPECT_EQ(held.Find(i), nullptr) << i;
  EXPECT_NE(held.Find(202), nullptr);
  held.Drop(7);  // held by nothing
  EXPECT_EQ(held.stats().trees, 1u);
  EXPECT_EQ(held.stats().dropped, 1u);
  held.Drop(200);
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(held.stats().inodes, 0u);
  EXPECT_EQ(held.stats().bytes, 0u);
}

TEST(HeldSnapshotsTest, TreesHeldFirstGoWhenTheLimitsArePassed) {
  HeldSnapshots held(HeldSnapshots::Limits{1ull << 30, 25});
  ASSERT_TRUE(held.Hold(100, Tree(100, 10)).value());
  ASSERT_TRUE(held.Hold(200, Tree(200, 10)).value());
  ASSERT_TRUE(held.Hold(300, Tree(300, 10)).value());  // 30 > 25: the first goes
  EXPECT_EQ(held.Find(100), nullptr);
  EXPECT_NE(held.Find(200), nullptr);
  EXPECT_NE(held.Find(300), nullptr);
  EXPECT_EQ(held.stats().inodes, 20u);
  // A tree over the limits alone is not held, and pushes nothing out.
  EXPECT_FALSE(held.Hold(400, Tree(400, 26)).value());
  EXPECT_EQ(held.stats().trees, 2u);
  EXPECT_EQ(held.Find(400), nullptr);

  auto small = Tree(500, 3);
  HeldSnapshots by_bytes(HeldSnapshots::Limits{small->bytes() * 2, 1000});
  ASSERT_TRUE(by_bytes.Hold(500, small).value());
  ASSERT_TRUE(by_bytes.Hold(600, Tree(600, 3)).value());
  ASSERT_TRUE(by_bytes.Hold(700, Tree(700, 3)).value());
  EXPECT_EQ(by_bytes.Find(500), nullptr);
  EXPECT_EQ(by_bytes.stats().trees, 2u);
}

TEST(HeldSnapshotsTest, ThePathToAHeldRootIsKnownWhileItIsHeld) {
  HeldSnapshots held;
  ASSERT_TRUE(held.Hold(100, Tree(100, 3), {50, 1}).value());
  ASSERT_TRUE(held.Hold(200, Tree(200, 3), {50, 1}).value());
  for (uint64_t ino : {1, 50, 100, 200}) EXPECT_TRUE(held.OnPath(ino)) << ino;
  EXPECT_FALSE(held.OnPath(101));  // inside a tree: not on a path
  held.Drop(101);
  EXPECT_FALSE(held.OnPath(100));
  EXPECT_TRUE(held.OnPath(50)) << "the other tree lies under it";
  held.Drop(200);
  EXPECT_FALSE(held.OnPath(50));
  EXPECT_FALSE(held.OnPath(1));
}

TEST(HeldSnapshotsTest, ASnapshotWithoutItsRootIsRefused) {
  HeldSnapshots held;
  EXPECT_EQ(held.Hold(99, Tree(100, 3)).status().code(), EINVAL);
  EXPECT_TRUE(held.empty());
  EXPECT_FALSE(held.Tried(99));
  held.NoteTried(99);
  EXPECT_TRUE(held.Tried(99));
}

}  // namespace
}  // namespace ckptfs::engine
