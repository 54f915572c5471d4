// Snapshot files: what is written reads back through the seam's read-only
// transaction, space by space; a changed byte is found at open.
#include "meta/snapshot_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace ckptfs::meta {
namespace {

class SnapshotFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-snapshot-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tree.sst";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Entries in three spaces, given out of order.
  static std::vector<SnapshotEntry> Entries() {
    std::vector<SnapshotEntry> e;
    for (int i = 9; i >= 0; --i) {
      e.push_back({Space::kDentries, "dir/" + std::to_string(i), "ino" + std::to_string(i)});
      e.push_back({Space::kInodes, std::string(7, '\0') + static_cast<char>(i), "inode" + std::to_string(i)});
    }
    e.push_back({Space::kMeta, "seal/x", "record"});
    e.push_back({Space::kXattrs, "", "empty key"});
    return e;
  }

  // Writes the snapshot of `entries` at path_.
  Status Write(std::vector<SnapshotEntry> entries) {
    Result<std::string> bytes = EncodeSnapshot(std::move(entries));
    if (!bytes.ok()) return bytes.status();
    std::ofstream(path_, std::ios::binary) << *bytes;
    return Status::OK();
  }

  std::string dir_, path_;
};

TEST_F(SnapshotFileTest, ReadsBackSpaceBySpace) {
  ASSERT_TRUE(Write(Entries()).ok());
  auto f = SnapshotFile::Open(path_);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  SnapshotFile& s = **f;
  EXPECT_EQ(s.entries(), 22u);
  EXPECT_GT(s.bytes(), 0u);

  auto v = s.Get(Space::kDentries, "dir/3");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or("?"), "ino3");
  v = s.Get(Space::kInodes, "dir/3");  // the key, in another space
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  v = s.Get(Space::kXattrs, "");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or("?"), "empty key");
  v = s.Get(Space::kExtents, "anything");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());

  // A range within a space, and a whole space (end empty), in order.
  std::vector<std::string> keys;
  ASSERT_TRUE(s.Scan(Space::kDentries, "dir/2", "dir/5", [&](std::string_view k, std::string_view) {
                 keys.emplace_back(k);
                 return true;
               }).ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"dir/2", "dir/3", "dir/4"}));
  std::map<std::string, std::string> all;
  ASSERT_TRUE(s.Scan(Space::kInodes, "", "", [&](std::string_view k, std::string_view val) {
                 all.emplace(k, val);
                 return true;
               }).ok());
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(all.begin()->second, "inode0");
  // Stopping early.
  int seen = 0;
  ASSERT_TRUE(s.Scan(Space::kDentries, "", "", [&](std::string_view, std::string_view) {
                 return ++seen < 2;
               }).ok());
  EXPECT_EQ(seen, 2);

  auto last = s.Last(Space::kDentries, "dir/", "dir/7");
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->key, "dir/6");
  last = s.Last(Space::kDentries, "", "");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->value().key, "dir/9");
  last = s.Last(Space::kDentries, "dir/3", "dir/3");
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->has_value());
  last = s.Last(Space::kSegments, "", "");
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->has_value());
}

TEST_F(SnapshotFileTest, RefusesWhatItCannotEncode) {
  EXPECT_EQ(EncodeSnapshot({}).status().code(), EINVAL);
  std::vector<SnapshotEntry> twice = Entries();
  twice.push_back(twice.front());
  EXPECT_EQ(EncodeSnapshot(twice).status().code(), EINVAL);
  EXPECT_EQ(SnapshotFile::Open(path_).status().code(), ENOENT);  // no file
}

TEST_F(SnapshotFileTest, AChangedByteIsFoundAtOpen) {
  ASSERT_TRUE(Write(Entries()).ok());
  const int fd = ::open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, 20), 1);  // in the first data block
  c ^= 0x20;
  ASSERT_EQ(::pwrite(fd, &c, 1, 20), 1);
  ::close(fd);
  auto f = SnapshotFile::Open(path_);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.status().IsCorruption()) << f.status().ToString();
  EXPECT_NE(f.status().message().find(path_), std::string::npos) << f.status().ToString();
}

}  // namespace
}  // namespace ckptfs::meta
