// RangeCache over a loader that counts its reads: each block loaded once
// however many readers want it, the bound kept, a file that grew read
// again where it had ended; the same with the blocks kept in a file.
#include "engine/shared/range_cache.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace ckptfs::engine {
namespace {

constexpr uint64_t kBlock = RangeCache::kBlockBytes;

// Files of patterned bytes whose sizes the test sets; counts the loads.
class Files {
 public:
  void SetSize(const std::string& name, uint64_t size) {
    MutexLock l(&mu_);
    sizes_[name] = size;
  }
  static char ByteAt(const std::string& name, uint64_t at) {
    return static_cast<char>((at * 131 + name.size() * 7 + at / 4099) & 0xff);
  }
  RangeCache::Loader loader() {
    return
        [this](const std::string& name, uint64_t offset, size_t len, char* dst) -> Result<size_t> {
          loads_++;
          uint64_t size;
          {
            MutexLock l(&mu_);
            auto it = sizes_.find(name);
            if (it == sizes_.end()) return Status(ENOENT, name);
            size = it->second;
          }
          const size_t n = offset >= size ? 0 : std::min<uint64_t>(len, size - offset);
          for (size_t i = 0; i < n; i++) dst[i] = ByteAt(name, offset + i);
          return n;
        };
  }
  std::atomic<int> loads_{0};

 private:
  Mutex mu_;
  std::map<std::string, uint64_t> sizes_ GUARDED_BY(mu_);
};

std::string Expected(const std::string& name, uint64_t offset, size_t len) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; i++) s[i] = Files::ByteAt(name, offset + i);
  return s;
}

std::string Read(RangeCache* c, const std::string& name, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  Result<size_t> n = c->Read(name, offset, len, out.data());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

TEST(RangeCacheTest, RangesAcrossBlocksAreTheFilesBytesAndLoadEachBlockOnce) {
  Files files;
  files.SetSize("segments/a", 5 * kBlock + 100);
  RangeCache c(64 * kBlock, files.loader());
  EXPECT_EQ(Read(&c, "segments/a", kBlock - 10, 30), Expected("segments/a", kBlock - 10, 30));
  EXPECT_EQ(files.loads_, 2);
  EXPECT_EQ(Read(&c, "segments/a", 0, 3 * kBlock), Expected("segments/a", 0, 3 * kBlock));
  EXPECT_EQ(files.loads_, 3);  // block 2 only
  // Short where the file ends.
  EXPECT_EQ(Read(&c, "segments/a", 5 * kBlock, 1000), Expected("segments/a", 5 * kBlock, 100));
  EXPECT_EQ(Read(&c, "segments/a", 7 * kBlock, 10), "");
  const RangeCache::Stats st = c.stats();
  EXPECT_EQ(st.loads, 5u);  // blocks 0-2, 5, 7
  EXPECT_EQ(st.load_bytes, 3 * kBlock + 100);
  EXPECT_EQ(st.held_bytes, 3 * kBlock + 100);
  EXPECT_GE(st.hits, 2u);
}

TEST(RangeCacheTest, ABlockTheFileEndedInIsReadAgainForBytesPastItsEnd) {
  Files files;
  files.SetSize("segments/a", 1000);
  RangeCache c(64 * kBlock, files.loader());
  EXPECT_EQ(Read(&c, "segments/a", 0, 500), Expected("segments/a", 0, 500));
  EXPECT_EQ(Read(&c, "segments/a", 900, 500).size(), 100u);  // still the same size
  EXPECT_EQ(files.loads_, 2);
  files.SetSize("segments/a", 3000);  // another host appended
  EXPECT_EQ(Read(&c, "segments/a", 900, 500), Expected("segments/a", 900, 500));
  EXPECT_EQ(Read(&c, "segments/a", 0, 1000), Expected("segments/a", 0, 1000));
  EXPECT_EQ(files.loads_, 3);
  EXPECT_EQ(c.stats().held_bytes, 3000u);
}

TEST(RangeCacheTest, TheBoundDropsTheLeastRecentlyUsed) {
  Files files;
  files.SetSize("data/x", 10 * kBlock);
  RangeCache c(3 * kBlock, files.loader());
  for (uint64_t b = 0; b < 10; b++) Read(&c, "data/x", b * kBlock, 10);
  EXPECT_EQ(files.loads_, 10);
  EXPECT_LE(c.stats().held_bytes, 3 * kBlock);
  Read(&c, "data/x", 9 * kBlock, 10);  // kept
  EXPECT_EQ(files.loads_, 10);
  Read(&c, "data/x", 0, 10);  // dropped
  EXPECT_EQ(files.loads_, 11);
  RangeCache none(0, files.loader());
  EXPECT_EQ(Read(&none, "data/x", 0, 10), Expected("data/x", 0, 10));
  EXPECT_EQ(none.stats().held_bytes, 0u);
}

TEST(RangeCacheTest, ALoadThatFailsFailsItsReadersAndIsTriedAgain) {
  Files files;
  RangeCache c(64 * kBlock, files.loader());
  std::string out(10, '\0');
  EXPECT_EQ(c.Read("segments/missing", 0, 10, out.data()).status().code(), ENOENT);
  files.SetSize("segments/missing", 10);
  EXPECT_EQ(Read(&c, "segments/missing", 0, 10), Expected("segments/missing", 0, 10));
}

TEST(RangeCacheTest, ManyReadersOfOneRangeLoadItOnce) {
  Files files;
  files.SetSize("segments/a", 8 * kBlock);
  RangeCache c(64 * kBlock, files.loader());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&, t] {
      for (uint64_t b = 0; b < 8; b++) {
        const uint64_t at = ((b + t) % 8) * kBlock + 17;
        if (Read(&c, "segments/a", at, 4096) != Expected("segments/a", at, 4096)) wrong++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(files.loads_, 8);
}

// A directory of its own, removed with what is left in it.
class Dir {
 public:
  Dir() {
    char tmpl[] = "/tmp/ckptfs-range-cache-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~Dir() {
    for (const std::string& n : Names()) ::unlink((path_ + "/" + n).c_str());
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
      }
      ::closedir(d);
    }
    return names;
  }

 private:
  std::string path_;
};

TEST(RangeCacheTest, BlocksInADirectoryAreKeptInAFileWithoutAName) {
  Files files;
  files.SetSize("segments/a", 6 * kBlock + 100);
  Dir dir;
  Result<std::unique_ptr<RangeCache>> made = RangeCache::InDirectory(4 * kBlock, files.loader(), dir.path());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  RangeCache& c = **made;
  EXPECT_TRUE(Read(&c, "segments/a", kBlock - 10, 2 * kBlock) ==
              Expected("segments/a", kBlock - 10, 2 * kBlock));
  EXPECT_EQ(Read(&c, "segments/a", 6 * kBlock, 1000), Expected("segments/a", 6 * kBlock, 100));
  EXPECT_EQ(files.loads_, 4);  // blocks 0-2 and 6
  EXPECT_TRUE(Read(&c, "segments/a", 0, 3 * kBlock) == Expected("segments/a", 0, 3 * kBlock));
  EXPECT_EQ(files.loads_, 4);  // from the file
  RangeCache::Stats st = c.stats();
  EXPECT_EQ(st.held_bytes, 0u);
  EXPECT_EQ(st.file_bytes, 3 * kBlock + 100);
  EXPECT_TRUE(dir.Names().empty());
  // The bound: the least recently used go, their slots taken again.
  for (uint64_t b = 0; b < 7; b++) {
    const uint64_t at = b * kBlock + 5;
    EXPECT_TRUE(Read(&c, "segments/a", at, 50) == Expected("segments/a", at, 50)) << b;
  }
  EXPECT_LE(c.stats().file_bytes, 4 * kBlock);
  EXPECT_EQ(Read(&c, "segments/a", 6 * kBlock, 100), Expected("segments/a", 6 * kBlock, 100));
  EXPECT_EQ(Read(&c, "segments/a", 0, 10), Expected("segments/a", 0, 10));
  c.Clear();
  EXPECT_EQ(c.stats().file_bytes, 0u);
  EXPECT_EQ(Read(&c, "segments/a", 3 * kBlock, 10), Expected("segments/a", 3 * kBlock, 10));
}

TEST(RangeCacheTest, ADirectoryThatCannotHoldTheFileIsNamedInTheError) {
  Files files;
  Result<std::unique_ptr<RangeCache>> made =
      RangeCache::InDirectory(kBlock, files.loader(), "/nonexistent/peer-cache");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ENOENT);
  EXPECT_NE(made.status().message().find("/nonexistent/peer-cache"), std::string::npos)
      << made.status().ToString();
}

TEST(RangeCacheTest, BlocksAFullDiskCannotTakeAreReadButNotKept) {
  Files files;
  files.SetSize("data/x", 8 * kBlock);
  Dir dir;
  Result<std::unique_ptr<RangeCache>> made = RangeCache::InDirectory(64 * kBlock, files.loader(), dir.path());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  // Files of this process end at 2 MiB: writes past it fail (EFBIG), as on
  // a disk that is full.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const sighandler_t was = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 2 * kBlock;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  for (uint64_t b = 0; b < 8; b++) {
    EXPECT_EQ(Read(&**made, "data/x", b * kBlock, 100), Expected("data/x", b * kBlock, 100)) << b;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, was);
  EXPECT_EQ((*made)->stats().file_bytes, 2 * kBlock);
  EXPECT_EQ(files.loads_, 8);
  EXPECT_EQ(Read(&**made, "data/x", 7 * kBlock, 100), Expected("data/x", 7 * kBlock, 100));
  EXPECT_EQ(files.loads_, 9);  // not kept: loaded again
  EXPECT_EQ(Read(&**made, "data/x", 0, 100), Expected("data/x", 0, 100));
  EXPECT_EQ(files.loads_, 9);  // kept
}

TEST(RangeCacheTest, ReadersOfAFileCacheSmallerThanWhatTheyReadGetTheRightBytes) {
  Files files;
  files.SetSize("segments/a", 16 * kBlock);
  Dir dir;
  Result<std::unique_ptr<RangeCache>> made = RangeCache::InDirectory(2 * kBlock, files.loader(), dir.path());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 6; t++) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 40; i++) {
        const uint64_t at = ((i * 7 + static_cast<uint64_t>(t) * 3) % 16) * kBlock + 333;
        if (Read(&**made, "segments/a", at, 70000) != Expected("segments/a", at, 70000)) wrong++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_LE((*made)->stats().file_bytes, 2 * kBlock);
}

}  // namespace
}  // namespace ckptfs::engine
