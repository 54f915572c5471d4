// OpenFiles against a real store: which opens get a backing file, that one
// backing id serves an inode's passthrough opens and is closed at the last
// release, that writers wait for, then fail on, passthrough readers, and
// that with passthrough for writers an empty file's writers and readers
// share one backing file that the kernel writes, and that an open with
// O_TRUNC truncates only once it is sure to go ahead.
#include "fs/open_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "format/format.h"
#include "tests/engine/test_util.h"

namespace ckptfs::fs {
namespace {

using engine::Ino;
using engine::kRootIno;
using engine::Result;
using engine::Status;

constexpr uint64_t kMiB = 1 << 20;

class OpenFilesTest : public engine::test::StoreFixture {
 protected:
  void SetUp() override {
    options_ = engine::test::SmallOptions();
    options_.data_file_min = 1 * kMiB;
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }
  Ino MakeFile(const std::string& name, size_t size) {
    Result<engine::Attr> a = s()->Create(kRootIno, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    const std::string data = engine::test::PatternData(3, 0, size);
    for (size_t pos = 0; pos < size; pos += 256 * 1024) {
      EXPECT_OK(engine::test::WriteAll(s(), a->ino, pos, std::string_view(data).substr(pos, 256 * 1024)));
    }
    return a->ino;
  }
  // A kernel that hands out ids 1, 2, ... and records what is closed.
  OpenFiles::OpenBacking Backing() {
    return [this](int fd) {
      EXPECT_GE(fd, 0);
      struct stat st;
      EXPECT_EQ(fstat(fd, &st), 0);
      backing_sizes_.push_back(static_cast<uint64_t>(st.st_size));
      return ++next_id_;
    };
  }
  OpenFiles::CloseBacking Close() {
    return [this](int id) { closed_.push_back(id); };
  }
  int next_id_ = 0;
  std::vector<uint64_t> backing_sizes_;
  std::vector<int> closed_;
};

TEST_F(OpenFilesTest, ReadersOfAWholeDataFileShareOneBackingId) {
  const Ino big = MakeFile("big", 3 * kMiB), small = MakeFile("small", 1000);
  OpenFiles opens(s());
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened a, opens.Open(big, true, OpenFiles::Mode::kReads, Backing()));
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened b, opens.Open(big, true, OpenFiles::Mode::kReads, Backing()));
  EXPECT_EQ(a.handle, OpenFiles::kPassthrough);
  EXPECT_EQ(a.backing_id, 1);
  EXPECT_EQ(b.backing_id, 1);
  EXPECT_EQ(backing_sizes_, std::vector<uint64_t>{3 * kMiB});
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened c, opens.Open(small, true, OpenFiles::Mode::kReads, Backing()));
  EXPECT_EQ(c.handle, OpenFiles::kDaemon);
  EXPECT_TRUE(opens.ReadersOnly(big));
  EXPECT_EQ(opens.backing_files(), 1u);
  opens.Release(big, a.handle, Close());
  EXPECT_TRUE(closed_.empty());
  opens.Release(big, b.handle, Close());
  EXPECT_EQ(closed_, std::vector<int>{1});
  EXPECT_FALSE(opens.ReadersOnly(big));
  EXPECT_EQ(opens.backing_files(), 0u);
  opens.Release(small, c.handle, Close());
  EXPECT_EQ(opens.passthrough_opens(), 2u);
  EXPECT_EQ(opens.daemon_opens(), 1u);
}

TEST_F(OpenFilesTest, AWriterMakesReadersTheDaemonsAndReadersMakeWritersWait) {
  const Ino big = MakeFile("big", 3 * kMiB);
  OpenFiles opens(s());
  // A writer first: readers meanwhile are the daemon's.
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened w, opens.Open(big, false, OpenFiles::Mode::kReads, Backing()));
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened r, opens.Open(big, true, OpenFiles::Mode::kReads, Backing()));
  EXPECT_EQ(w.handle, OpenFiles::kDaemon);
  EXPECT_EQ(r.handle, OpenFiles::kDaemon);
  opens.Release(big, w.handle, Close());
  opens.Release(big, r.handle, Close());
  // A reader first: a writer fails after waiting for its release.
  ASSERT_OK_AND_ASSIGN(r, opens.Open(big, true, OpenFiles::Mode::kReads, Backing()));
  ASSERT_EQ(r.handle, OpenFiles::kPassthrough);
  const auto t0 = std::chrono::steady_clock::now();
  Result<OpenFiles::Opened> busy = opens.Open(big, false, OpenFiles::Mode::kReads, Backing());
  EXPECT_EQ(busy.status().code(), ETXTBSY);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, OpenFiles::kReleaseWait);
  EXPECT_EQ(opens.busy(), 1u);
  // A writer that arrives just before the reader's release gets in.
  std::atomic<bool> opened{false};
  std::thread writer([&] {
    Result<OpenFiles::Opened> got = opens.Open(big, false, OpenFiles::Mode::kReads, Backing());
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (got.ok()) {
      EXPECT_EQ(got->handle, OpenFiles::kDaemon);
    }
    opened = got.ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(opened.load());
  opens.Release(big, r.handle, Close());
  writer.join();
  EXPECT_TRUE(opened.load());
  EXPECT_TRUE(opens.WaitForReleases(big));
}

TEST_F(OpenFilesTest, NoPassthroughWhenNotWholeOrRefused) {
  const Ino big = MakeFile("big", 3 * kMiB);
  OpenFiles opens(s());
  // Passthrough off for this open.
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened a, opens.Open(big, true, OpenFiles::Mode::kNone, Backing()));
  EXPECT_EQ(a.handle, OpenFiles::kDaemon);
  opens.Release(big, a.handle, Close());
  // The kernel refuses the backing file.
  ASSERT_OK_AND_ASSIGN(a, opens.Open(big, true, OpenFiles::Mode::kReads, [](int) { return -EPERM; }));
  EXPECT_EQ(a.handle, OpenFiles::kDaemon);
  EXPECT_EQ(opens.backing_failures(), 1u);
  EXPECT_EQ(opens.last_backing_error(), EPERM);
  opens.Release(big, a.handle, Close());
  // Overwritten in the middle: the data file no longer holds every byte.
  ASSERT_OK(engine::test::WriteAll(s(), big, kMiB, "x"));
  ASSERT_OK_AND_ASSIGN(a, opens.Open(big, true, OpenFiles::Mode::kReads, Backing()));
  EXPECT_EQ(a.handle, OpenFiles::kDaemon);
  opens.Release(big, a.handle, Close());
  EXPECT_TRUE(backing_sizes_.empty());
  EXPECT_TRUE(closed_.empty());
}

TEST_F(OpenFilesTest, ConcurrentOpensAndReleasesBalance) {
  const Ino big = MakeFile("big", 2 * kMiB);
  OpenFiles opens(s());
  std::atomic<int> ids{0};
  std::atomic<int> closes{0};
  auto open_backing = [&](int) { return ++ids; };
  auto close_backing = [&](int) { ++closes; };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        Result<OpenFiles::Opened> o = opens.Open(big, true, OpenFiles::Mode::kReads, open_backing);
        ASSERT_TRUE(o.ok());
        opens.Release(big, o->handle, close_backing);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ids.load(), closes.load());
  EXPECT_EQ(opens.backing_files(), 0u);
  EXPECT_FALSE(opens.ReadersOnly(big));
}

TEST_F(OpenFilesTest, WritersOfAnEmptyFileShareADataFileTheKernelWrites) {
  const Ino big = MakeFile("big", 3 * kMiB), empty = MakeFile("empty", 0);
  OpenFiles opens(s());
  constexpr auto kWrites = OpenFiles::Mode::kReadsAndWrites;
  // Only with kReadsAndWrites, and only for an empty file.
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened d, opens.Open(empty, false, OpenFiles::Mode::kReads, Backing()));
  EXPECT_EQ(d.handle, OpenFiles::kDaemon);
  opens.Release(empty, d.handle, Close());
  ASSERT_OK_AND_ASSIGN(d, opens.Open(big, false, kWrites, Backing()));
  EXPECT_EQ(d.handle, OpenFiles::kDaemon);
  opens.Release(big, d.handle, Close());
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened w, opens.Open(empty, false, kWrites, Backing()));
  ASSERT_EQ(w.handle, OpenFiles::kDirectWrite);
  EXPECT_GT(w.backing_id, 0);
  ASSERT_EQ(backing_sizes_.size(), 1u);
  EXPECT_EQ(backing_sizes_[0], 0u);
  // Readers and a second writer share its backing id; a truncation does not
  // wait for them.
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened r, opens.Open(empty, true, kWrites, Backing()));
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened w2, opens.Open(empty, false, kWrites, Backing()));
  EXPECT_EQ(r.handle, OpenFiles::kPassthrough);
  EXPECT_EQ(w2.handle, OpenFiles::kDirectWrite);
  EXPECT_EQ(r.backing_id, w.backing_id);
  EXPECT_EQ(w2.backing_id, w.backing_id);
  EXPECT_FALSE(opens.ReadersOnly(empty));
  EXPECT_TRUE(opens.WaitForReleases(empty));
  // The kernel writes the data file.
  const std::string data = engine::test::PatternData(8, 0, 2 * kMiB);
  {
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> again, s()->BeginDirectWrite(empty));
    EXPECT_FALSE(again.has_value());  // already begun
    const std::string path = dir_.store() + "/" + format::DataFileName(empty);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
    ::close(fd);
  }
  opens.Release(empty, w.handle, Close());
  EXPECT_EQ(s()->GetStats()->direct_adoptions, 0u);  // a writer is left
  opens.Release(empty, w2.handle, Close());
  // The last writer's release adopted it; the reader keeps the backing id,
  // and now holds writers off.
  EXPECT_TRUE(closed_.empty());
  EXPECT_TRUE(opens.ReadersOnly(empty));
  ASSERT_OK_AND_ASSIGN(std::string got, engine::test::ReadAll(s(), empty));
  EXPECT_TRUE(got == data);
  opens.Release(empty, r.handle, Close());
  EXPECT_EQ(closed_, std::vector<int>{w.backing_id});
  EXPECT_EQ(opens.direct_write_errors(), 0u);
}

TEST_F(OpenFilesTest, AnOpenThatTruncatesTruncatesFirstAndWaitsForReadersAsAWriter) {
  const Ino big = MakeFile("big", 3 * kMiB);
  OpenFiles opens(s());
  constexpr auto kWrites = OpenFiles::Mode::kReadsAndWrites;
  int truncations = 0;
  Status truncate_result;
  const OpenFiles::Truncate truncate = [&]() -> Status {
    ++truncations;
    if (!truncate_result.ok()) return truncate_result;
    engine::SetAttrRequest q;
    q.size = 0;
    return s()->SetAttr(big, q).status();
  };
  // A passthrough reader holds it off, read-only or not, untruncated.
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened r, opens.Open(big, true, kWrites, Backing()));
  ASSERT_EQ(r.handle, OpenFiles::kPassthrough);
  for (bool read_only : {false, true}) {
    Result<OpenFiles::Opened> busy = opens.Open(big, read_only, kWrites, Backing(), truncate);
    EXPECT_EQ(busy.status().code(), ETXTBSY);
  }
  EXPECT_EQ(truncations, 0);
  EXPECT_EQ(s()->GetAttr(big)->size, 3 * kMiB);
  opens.Release(big, r.handle, Close());
  // A failed truncation fails the open and leaves nothing behind.
  truncate_result = Status::Errno(EIO, "test");
  Result<OpenFiles::Opened> failed = opens.Open(big, false, kWrites, Backing(), truncate);
  EXPECT_EQ(failed.status().code(), EIO);
  EXPECT_FALSE(opens.ReadersOnly(big));
  EXPECT_EQ(opens.passthrough_opens() + opens.daemon_opens(), 1u);  // the reader's
  // Truncated first, the file is empty: the writer writes a data file of
  // its own directly, as a new file's.
  truncate_result = Status::OK();
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened w, opens.Open(big, false, kWrites, Backing(), truncate));
  EXPECT_EQ(truncations, 2);
  EXPECT_EQ(s()->GetAttr(big)->size, 0u);
  ASSERT_EQ(w.handle, OpenFiles::kDirectWrite);
  EXPECT_EQ(backing_sizes_.back(), 0u);
  // Another open with O_TRUNC joins it and truncates the shared data file.
  const std::string path = dir_.store() + "/" + format::DataFileName(big);
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "abc", 3, 0), 3);
    ::close(fd);
  }
  ASSERT_OK_AND_ASSIGN(OpenFiles::Opened w2, opens.Open(big, true, kWrites, Backing(), truncate));
  EXPECT_EQ(truncations, 3);
  EXPECT_EQ(w2.handle, OpenFiles::kPassthrough);
  EXPECT_EQ(w2.backing_id, w.backing_id);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  opens.Release(big, w2.handle, Close());
  opens.Release(big, w.handle, Close());
  EXPECT_EQ(s()->GetAttr(big)->size, 0u);
  EXPECT_EQ(opens.direct_write_errors(), 0u);
}

}  // namespace
}  // namespace ckptfs::fs
