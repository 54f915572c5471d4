#include "engine/data/data_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "io/fault_injection.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine {
namespace {

// The POSIX Env, counting the evictions asked of its files and recording the
// ranges asked to be read ahead.
class EvictCountingEnv final : public io::Env {
 public:
  Result<std::unique_ptr<io::File>> Open(const std::string& path, io::OpenMode mode) override {
    return Wrap(base_->Open(path, mode));
  }
  Result<std::unique_ptr<io::File>> Create(const std::string& path,
                                           std::string_view contents) override {
    return Wrap(base_->Create(path, contents));
  }
  Result<std::unique_ptr<io::File>> CreateUnsynced(const std::string& path) override {
    return Wrap(base_->CreateUnsynced(path));
  }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  Status Remove(const std::string& path) override { return base_->Remove(path); }
  Result<std::vector<std::string>> List(const std::string& dir) override { return base_->List(dir); }
  uint64_t evictions() const { return evictions_.load(); }
  // [offset, end) of each Prefetch, in order.
  std::vector<std::pair<uint64_t, uint64_t>> prefetches() {
    std::lock_guard<std::mutex> l(mu_);
    return prefetches_;
  }
  // What reached the OS, in order: ('P', offset, end) of each Prefetch once
  // it was asked, ('E', offset, end) of each Evict.
  using Event = std::tuple<char, uint64_t, uint64_t>;
  std::vector<Event> events() {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  // The next Prefetch waits until Release() before it is asked of the OS,
  // as a thread that lost the CPU between choosing a read-ahead and asking
  // for it.
  void HoldNextPrefetch() {
    std::lock_guard<std::mutex> l(mu_);
    hold_next_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    released_cv_.notify_all();
  }

 private:
  class CountingFile final : public io::File {
   public:
    CountingFile(std::unique_ptr<io::File> base, EvictCountingEnv* env)
        : File(base->path()), base_(std::move(base)), env_(env) {}
    Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
      return base_->ReadAt(offset, len, buf);
    }
    Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
      return base_->WriteAt(offset, pieces);
    }
    Status Sync() override { return base_->Sync(); }
    Result<uint64_t> Size() const override { return base_->Size(); }
    Result<int64_t> ModifiedNs() const override { return base_->ModifiedNs(); }
    Status Truncate(uint64_t size) override { return base_->Truncate(size); }
    void Evict(uint64_t offset, uint64_t len) const override {
      ++env_->evictions_;
      base_->Evict(offset, len);
      std::lock_guard<std::mutex> l(env_->mu_);
      env_->events_.emplace_back('E', offset, offset + len);
    }
    void Prefetch(uint64_t offset, uint64_t len) const override {
      std::unique_lock<std::mutex> l(env_->mu_);
      env_->prefetches_.emplace_back(offset, offset + len);
      if (env_->hold_next_) {
        env_->hold_next_ = false;
        env_->released_cv_.wait(l, [this] { return env_->released_; });
      }
      base_->Prefetch(offset, len);
      env_->events_.emplace_back('P', offset, offset + len);
    }
    void NoReadahead() const override { base_->NoReadahead(); }

   private:
    const std::unique_ptr<io::File> base_;
    EvictCountingEnv* const env_;
  };
  Result<std::unique_ptr<io::File>> Wrap(Result<std::unique_ptr<io::File>> f) {
    CKPTFS_RETURN_IF_ERROR(f.status());
    return std::unique_ptr<io::File>(std::make_unique<CountingFile>(std::move(*f), this));
  }

  const std::shared_ptr<io::Env> base_ = io::Env::Posix();
  std::atomic<uint64_t> evictions_{0};
  std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> prefetches_;
  std::vector<Event> events_;
  bool hold_next_ = false;
  bool released_ = false;
  std::condition_variable released_cv_;
};

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = std::make_unique<DataFiles>(env_, tmp_.path(), /*read_only=*/false);
    ASSERT_TRUE(files_->EnsureDir().ok());
  }
  void TearDown() override { files_.reset(); }
  bool Exists(uint64_t ino) {
    struct stat st;
    return ::stat(files_->Path(ino).c_str(), &st) == 0;
  }
  size_t CachedPages(uint64_t ino) { return test::CachedPages(files_->Path(ino)); }
  std::string Contents(uint64_t ino) {
    std::ifstream in(files_->Path(ino), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  test::TempDir tmp_;
  const std::shared_ptr<EvictCountingEnv> env_ = std::make_shared<EvictCountingEnv>();
  std::unique_ptr<DataFiles> files_;
};

TEST_F(DataFilesTest, BackgroundRemovalsDeleteWhatTheyWereGiven) {
  for (uint64_t ino = 1; ino <= 20; ++ino) {
    ASSERT_TRUE(files_->Create(ino).ok());
    ASSERT_TRUE(files_->Write(ino, 0, "bytes of " + std::to_string(ino)).ok());
  }
  for (uint64_t ino = 2; ino <= 20; ino += 2) (void)files_->RemoveAfterSync(ino, 0);
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  for (uint64_t ino = 1; ino <= 20; ++ino) EXPECT_TRUE(Exists(ino)) << "no sync yet: " << ino;
  // A failed sync keeps them queued for the next one.
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/false);
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  for (uint64_t ino = 1; ino <= 20; ++ino) EXPECT_TRUE(Exists(ino)) << "sync failed: " << ino;
  // Queued during a sync: left for the next one.
  const uint64_t ticket = files_->BeforeIndexSync();
  (void)files_->RemoveAfterSync(1, 0);
  files_->AfterIndexSync(ticket, /*synced=*/true);
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  EXPECT_FALSE(files_->RemovalsPending());
  for (uint64_t ino = 1; ino <= 20; ++ino) {
    EXPECT_EQ(Exists(ino), ino % 2 == 1) << ino;
  }
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  EXPECT_FALSE(Exists(1));
  // Those left are still readable through the (pruned) set of open files.
  char buf[32];
  auto n = files_->ReadUpTo(7, 0, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "bytes of 7");
}

TEST_F(DataFilesTest, ACreateIsNeverUndoneByARemovalQueuedBeforeIt) {
  // Each round queues the removal of an inode's file and creates it again
  // at one of the removal's stages: queued for a sync, taken by a sync in
  // progress, or handed to the background thread (behind others, so that
  // it is waiting or being deleted at that moment). The new file stays.
  for (int round = 0; round < 300; ++round) {
    const uint64_t ino = 1 + round % 5;
    const int stage = round % 3;
    for (uint64_t other = 100; other < 104; ++other) ASSERT_TRUE(files_->Create(other).ok());
    ASSERT_TRUE(files_->Create(ino).ok());
    ASSERT_TRUE(files_->Write(ino, 0, "old").ok());
    for (uint64_t queued : {ino, uint64_t{100}, uint64_t{101}, uint64_t{102}, uint64_t{103}}) {
      (void)files_->RemoveAfterSync(queued, 0);
    }
    uint64_t ticket = 0;
    if (stage >= 1) ticket = files_->BeforeIndexSync();
    if (stage == 2) files_->AfterIndexSync(ticket, /*synced=*/true);
    ASSERT_TRUE(files_->Create(ino).ok());
    const std::string now = "round " + std::to_string(round);
    ASSERT_TRUE(files_->Write(ino, 0, now).ok());
    if (stage == 1) files_->AfterIndexSync(ticket, /*synced=*/true);
    files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
    ASSERT_TRUE(files_->WaitForRemovals().ok());
    ASSERT_TRUE(Exists(ino)) << "round " << round;
    ASSERT_EQ(Contents(ino), now) << "round " << round;
    ASSERT_FALSE(Exists(100)) << "round " << round;
  }
}

TEST_F(DataFilesTest, AQueueThatGrowsLargeAsksForASync) {
  for (uint64_t ino = 1; ino < 1024; ++ino) EXPECT_FALSE(files_->RemoveAfterSync(ino, 1000)) << ino;
  EXPECT_FALSE(files_->RemoveAfterSync(1, 1000));  // already queued: not counted again
  EXPECT_TRUE(files_->RemoveAfterSync(1024, 1000));
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
  EXPECT_FALSE(files_->RemoveAfterSync(1, 100u << 20));
  EXPECT_FALSE(files_->RemoveAfterSync(2, 100u << 20));
  EXPECT_TRUE(files_->RemoveAfterSync(3, 100u << 20));  // 300 MiB of copies
  ASSERT_TRUE(files_->WaitForRemovals().ok());
}

TEST_F(DataFilesTest, AFailedRemovalIsReportedAndLeavesThePathAlone) {
  // A path that unlink(2) refuses: a directory where the file would be.
  const std::string path = files_->Path(9);
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  ASSERT_TRUE(files_->Create(10).ok());
  (void)files_->RemoveAfterSync(9, 0);
  (void)files_->RemoveAfterSync(10, 0);
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
  const Status s = files_->WaitForRemovals();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), EISDIR) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  EXPECT_TRUE(std::filesystem::is_directory(path));
  EXPECT_FALSE(Exists(10));  // the next one still went
}

TEST_F(DataFilesTest, TheCachedPagesOfAQueuedFileGoAtOnceUnlessItWasWrittenSinceTheSync) {
  if (test::PagesStayCached(tmp_.path())) GTEST_SKIP() << "tmpfs keeps its pages: nothing to evict";
  const std::string bytes(8 << 20, 'x');
  const size_t pages = bytes.size() / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ASSERT_TRUE(files_->Create(1).ok());
  ASSERT_TRUE(files_->Write(1, 0, bytes).ok());
  ASSERT_TRUE(files_->SyncDirty().ok());
  ASSERT_TRUE(files_->Create(2).ok());
  ASSERT_TRUE(files_->Write(2, 0, bytes).ok());  // not synced
  ASSERT_EQ(CachedPages(1), pages);
  ASSERT_EQ(CachedPages(2), pages);
  for (uint64_t ino : {1, 2}) {
    (void)files_->RemoveAfterSync(ino, bytes.size());
    files_->EvictSoon(ino);
  }
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  EXPECT_TRUE(Exists(1));  // deleted only after the index sync
  EXPECT_EQ(CachedPages(1), 0u);
  // The dirty one is left to the deletion: evicting it would write it back.
  EXPECT_EQ(env_->evictions(), 1u);
  EXPECT_EQ(CachedPages(2), pages);
  EXPECT_EQ(Contents(1), bytes);
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
  ASSERT_TRUE(files_->WaitForRemovals().ok());
  EXPECT_FALSE(Exists(1));
  EXPECT_FALSE(Exists(2));
}

TEST_F(DataFilesTest, ReadsAheadOfAReaderGoingOnButNeverBehindTheFurthestRead) {
  constexpr uint64_t kMiB = 1 << 20;
  const std::string bytes = test::CompressibleData(16 * kMiB);
  ASSERT_TRUE(files_->Create(1).ok());
  ASSERT_TRUE(files_->Write(1, 0, bytes).ok());
  ASSERT_TRUE(files_->SyncDirty().ok());
  std::string buf(kMiB, '\0');
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
  auto read_once = [&](uint64_t offset) {
    Result<size_t> n = files_->ReadOnce(1, offset, kMiB, buf.data());
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, kMiB);
    EXPECT_EQ(buf, bytes.substr(offset, kMiB)) << offset;
  };
  // From the start on: the 4 MiB past each read, each byte asked for once.
  read_once(0);
  EXPECT_EQ(env_->prefetches(), (Ranges{{kMiB, 5 * kMiB}}));
  ASSERT_TRUE(files_->ReadUpTo(1, kMiB, kMiB, buf.data()).ok());
  EXPECT_EQ(env_->prefetches(), (Ranges{{kMiB, 5 * kMiB}, {5 * kMiB, 6 * kMiB}}));
  // A jump forward asks for nothing: it does not go on from the furthest
  // byte read ...
  read_once(10 * kMiB);
  // ... nor does a read behind that byte (what is there may have been read
  // and dropped already).
  read_once(2 * kMiB);
  EXPECT_EQ(env_->prefetches().size(), 2u);
  // Going on from the furthest byte read: ahead of it again.
  read_once(11 * kMiB);
  EXPECT_EQ(env_->prefetches().back(), std::make_pair(12 * kMiB, 16 * kMiB));
}

TEST_F(DataFilesTest, AReadDropsItsPagesOnlyOnceTheReadAheadOfThemWasAsked) {
  // A reader's read-ahead asked late, after a read of the same bytes on
  // another thread had dropped them, would leave those pages cached for
  // good: that read waits for it before it drops them.
  constexpr uint64_t kMiB = 1 << 20;
  const std::string bytes = test::CompressibleData(8 * kMiB);
  ASSERT_TRUE(files_->Create(1).ok());
  ASSERT_TRUE(files_->Write(1, 0, bytes).ok());
  ASSERT_TRUE(files_->SyncDirty().ok());
  env_->HoldNextPrefetch();
  std::string first(kMiB, '\0'), second(kMiB, '\0');
  std::thread ahead([&] { EXPECT_TRUE(files_->ReadOnce(1, 0, kMiB, first.data()).ok()); });
  // Its read-ahead of [1 MiB, 5 MiB) is chosen and held.
  while (env_->prefetches().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> done{false};
  std::thread behind([&] {
    EXPECT_TRUE(files_->ReadOnce(1, kMiB, kMiB, second.data()).ok());
    done = true;
  });
  // The second read has its bytes, and would drop them now.
  for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  env_->Release();
  ahead.join();
  behind.join();
  EXPECT_EQ(second, bytes.substr(kMiB, kMiB));
  const std::vector<EvictCountingEnv::Event> events = env_->events();
  const auto asked = std::find(events.begin(), events.end(),
                               EvictCountingEnv::Event{'P', kMiB, 5 * kMiB});
  const auto dropped = std::find(events.begin(), events.end(),
                                 EvictCountingEnv::Event{'E', kMiB, 2 * kMiB});
  ASSERT_NE(asked, events.end());
  ASSERT_NE(dropped, events.end());
  EXPECT_LT(asked, dropped);
}

TEST_F(DataFilesTest, DestroyingWaitsForTheQueue) {
  for (uint64_t ino = 1; ino <= 50; ++ino) ASSERT_TRUE(files_->Create(ino).ok());
  for (uint64_t ino = 1; ino <= 50; ++ino) (void)files_->RemoveAfterSync(ino, 0);
  files_->AfterIndexSync(files_->BeforeIndexSync(), /*synced=*/true);
  files_.reset();
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.path() + "/data"));
}

constexpr int64_t kStepNs = 300'000'000;

// The POSIX Env, and one whose files' timestamps come in steps of kStepNs.
std::shared_ptr<io::Env> CoarseEnv() {
  std::shared_ptr<io::FaultInjectionEnv> env = io::FaultInjectionEnv::Make();
  env->SetTimestampStep(kStepNs);
  return env;
}

TEST(DataFilesTimestampsTest, TheProbeMeasuresTheStepOfTheTimestamps) {
  test::TempDir tmp;
  const std::string path = tmp.path() + "/probe";
  Result<int64_t> step = DataFiles::ProbeTimestampStep(CoarseEnv().get(), path);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, kStepNs);
  // This machine's filesystem: fine-grained (0), or steps of at most a second.
  step = DataFiles::ProbeTimestampStep(io::Env::Posix().get(), path);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_LE(*step, 1'000'000'000);
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "the probe's file is left";
}

TEST(DataFilesTimestampsTest, ALookIsSettledOnlyWhereTheNextWriteChangesIt) {
  for (const bool coarse : {false, true}) {
    SCOPED_TRACE(coarse ? "steps of 300 ms" : "this machine's filesystem");
    test::TempDir tmp;
    DataFiles files(coarse ? CoarseEnv() : io::Env::Posix(), tmp.path(), /*read_only=*/false);
    ASSERT_TRUE(files.EnsureDir().ok());
    ASSERT_TRUE(files.Create(1).ok());
    int settled = 0;
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(files.Write(1, 0, "a").ok());
      Result<DataFiles::Look> before = files.LookAt(1);
      ASSERT_TRUE(before.ok()) << before.status().ToString();
      ASSERT_TRUE(files.Write(1, 0, "b").ok());  // the same size
      Result<DataFiles::Look> after = files.LookAt(1);
      ASSERT_TRUE(after.ok()) << after.status().ToString();
      if (!before->settled) continue;
      ++settled;
      EXPECT_NE(after->modified_ns, before->modified_ns) << "a settled look missed a write, round " << i;
    }
    if (coarse) {
      // Written a moment ago: most looks are not settled, until a step has passed.
      EXPECT_LT(settled, 25);
      std::this_thread::sleep_for(std::chrono::nanoseconds(2 * kStepNs));
      Result<DataFiles::Look> later = files.LookAt(1);
      ASSERT_TRUE(later.ok()) << later.status().ToString();
      EXPECT_TRUE(later->settled);
    }
  }
}

}  // namespace
}  // namespace ckptfs::engine
