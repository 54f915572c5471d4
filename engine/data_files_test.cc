#include "engine/data_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <fstream>
#include <string>

namespace ckptfs::engine {
namespace {

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-data-files-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    files_ = std::make_unique<DataFiles>(io::Env::Posix(), dir_, /*read_only=*/false);
    ASSERT_TRUE(files_->EnsureDir().ok());
  }
  void TearDown() override {
    files_.reset();
    std::filesystem::remove_all(dir_);
  }
  bool Exists(uint64_t ino) {
    struct stat st;
    return ::stat(files_->Path(ino).c_str(), &st) == 0;
  }
  std::string Contents(uint64_t ino) {
    std::ifstream in(files_->Path(ino), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  std::unique_ptr<DataFiles> files_;
};

TEST_F(DataFilesTest, BackgroundRemovalsDeleteWhatTheyWereGiven) {
  for (uint64_t ino = 1; ino <= 20; ++ino) {
    ASSERT_TRUE(files_->Create(ino).ok());
    ASSERT_TRUE(files_->Write(ino, 0, "bytes of " + std::to_string(ino)).ok());
  }
  files_->RemoveInBackground({2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  EXPECT_FALSE(files_->RemovalsPending());
  for (uint64_t ino = 1; ino <= 20; ++ino) {
    EXPECT_EQ(Exists(ino), ino % 2 == 1) << ino;
  }
  // Those left are still readable through the (pruned) set of open files.
  char buf[32];
  auto n = files_->ReadUpTo(7, 0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "bytes of 7");
}

TEST_F(DataFilesTest, ACreateIsNeverUndoneByARemovalQueuedBeforeIt) {
  // Each round queues the removal of an inode's file (behind others, so
  // that it is waiting or being deleted at any moment), creates the file
  // again at once and writes it: whichever way the two meet, the new file
  // stays.
  for (int round = 0; round < 200; ++round) {
    const uint64_t ino = 1 + round % 3;
    for (uint64_t other = 100; other < 104; ++other) ASSERT_TRUE(files_->Create(other).ok());
    ASSERT_TRUE(files_->Create(ino).ok());
    ASSERT_TRUE(files_->Write(ino, 0, "old").ok());
    files_->RemoveInBackground({ino, 100, 101, 102, 103});
    ASSERT_TRUE(files_->Create(ino).ok());
    const std::string now = "round " + std::to_string(round);
    ASSERT_TRUE(files_->Write(ino, 0, now).ok());
    ASSERT_TRUE(files_->WaitForRemovals().ok());
    ASSERT_TRUE(Exists(ino)) << "round " << round;
    ASSERT_EQ(Contents(ino), now) << "round " << round;
  }
}

TEST_F(DataFilesTest, AFailedRemovalIsReportedAndLeavesThePathAlone) {
  // A path that unlink(2) refuses: a directory where the file would be.
  const std::string path = files_->Path(9);
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  ASSERT_TRUE(files_->Create(10).ok());
  files_->RemoveInBackground({9, 10});
  const Status s = files_->WaitForRemovals();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), EISDIR) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_TRUE(std::filesystem::is_directory(path));
  EXPECT_FALSE(Exists(10));  // the next one still went
}

TEST_F(DataFilesTest, DestroyingWaitsForTheQueue) {
  for (uint64_t ino = 1; ino <= 50; ++ino) ASSERT_TRUE(files_->Create(ino).ok());
  std::set<uint64_t> all;
  for (uint64_t ino = 1; ino <= 50; ++ino) all.insert(ino);
  files_->RemoveInBackground(all);
  files_.reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/data"));
}

}  // namespace
}  // namespace ckptfs::engine
