#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "io/env.h"

namespace ckptfs::io {
namespace {

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-io-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Whether the filesystem of the test directory offers direct I/O.
  bool DirectIo() const {
    const std::string probe = dir_ + "/probe";
    const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0);
    struct statx stx {};
    const bool direct = ::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
                        (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align != 0;
    ::close(fd);
    ::unlink(probe.c_str());
    return direct;
  }

  // Which pages of `path` the page cache holds.
  static std::vector<bool> Cached(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    struct stat st;
    EXPECT_EQ(::fstat(fd, &st), 0);
    const size_t len = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_NE(map, MAP_FAILED);
    std::vector<unsigned char> in((len + kPage - 1) / kPage);
    EXPECT_EQ(::mincore(map, len, in.data()), 0);
    ::munmap(map, len);
    std::vector<bool> cached;
    for (unsigned char c : in) cached.push_back(c & 1);
    return cached;
  }

  static std::string Random(size_t len, unsigned seed) {
    std::mt19937 rng(seed);
    std::string s(len, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }

  static std::string ReadAll(File* f) {
    Result<uint64_t> size = f->Size();
    EXPECT_TRUE(size.ok());
    std::string out(*size, '\0');
    EXPECT_TRUE(f->ReadExactly(0, out.size(), out.data()).ok());
    return out;
  }

  static constexpr size_t kPage = 4096;
  std::string dir_;
};

TEST_F(PosixEnvTest, UncachedWritesLandWhereWritesThroughTheCacheWould) {
  // Ragged offsets, lengths and source addresses, pieces larger than the
  // per-thread buffer, and writes over bytes that are cached (and dirty).
  const std::string src = Random(6 << 20, 1);
  struct Piece {
    uint64_t offset;
    size_t from, len;
  };
  const Piece pieces[] = {
      {0, 0, 100},                     // inside the first page
      {100, 100, 5000},                // ragged at both ends
      {5100, 5100, (3 << 20) + 1000},  // over three buffers' worth
      {12288, 1, 8192},                // aligned file offset, unaligned source
      {(4 << 20) - 7, 4, 2 << 20},     // past the end
      {4096, 4096, 4096},              // exactly one page
      {20000, 0, 10},                  // small, in the middle
  };
  Result<std::unique_ptr<File>> uncached = Env::Posix()->CreateUnsynced(dir_ + "/uncached");
  Result<std::unique_ptr<File>> cached = Env::Posix()->CreateUnsynced(dir_ + "/cached");
  ASSERT_TRUE(uncached.ok() && cached.ok());
  for (const Piece& p : pieces) {
    const std::string_view bytes(src.data() + p.from, p.len);
    ASSERT_TRUE((*uncached)->WriteUncachedAt(p.offset, bytes).ok()) << p.offset;
    ASSERT_TRUE((*cached)->WriteAt(p.offset, std::span(&bytes, 1)).ok()) << p.offset;
    // Each write reads back at once, through the file's cached descriptor.
    std::string back(p.len, '\0');
    ASSERT_TRUE((*uncached)->ReadExactly(p.offset, p.len, back.data()).ok());
    ASSERT_EQ(back, bytes) << p.offset;
  }
  ASSERT_TRUE((*uncached)->Sync().ok());
  EXPECT_EQ(*(*uncached)->Size(), *(*cached)->Size());
  EXPECT_TRUE(ReadAll(uncached->get()) == ReadAll(cached->get()));
}

TEST_F(PosixEnvTest, UncachedWritesLeaveOnlyTheRaggedEndsInThePageCache) {
  if (!DirectIo()) GTEST_SKIP() << dir_ << " offers no direct I/O";
  const std::string src = Random(4 << 20, 2);
  Result<std::unique_ptr<File>> f = Env::Posix()->CreateUnsynced(dir_ + "/f");
  ASSERT_TRUE(f.ok());
  // 1000 bytes into the first page and 300 into the last: the pages in
  // between are whole.
  const uint64_t offset = kPage - 1000;
  const size_t len = 1000 + 1000 * kPage + 300;
  ASSERT_TRUE((*f)->WriteUncachedAt(offset, std::string_view(src.data(), len)).ok());
  const std::vector<bool> cached = Cached(dir_ + "/f");
  ASSERT_EQ(cached.size(), 1002u);
  EXPECT_TRUE(cached[0]);
  EXPECT_EQ(std::count(cached.begin() + 1, cached.end() - 1, true), 0);
  EXPECT_TRUE(cached.back());
  // Through the cache, every page stays.
  Result<std::unique_ptr<File>> g = Env::Posix()->CreateUnsynced(dir_ + "/g");
  ASSERT_TRUE(g.ok());
  const std::string_view bytes(src.data(), len);
  ASSERT_TRUE((*g)->WriteAt(offset, std::span(&bytes, 1)).ok());
  const std::vector<bool> all = Cached(dir_ + "/g");
  EXPECT_EQ(std::count(all.begin(), all.end(), true), 1002);
  std::string back(len, '\0');
  ASSERT_TRUE((*f)->ReadExactly(offset, len, back.data()).ok());
  EXPECT_TRUE(back == bytes);
}

TEST_F(PosixEnvTest, ReadAtReadsUpToTheEndAtAnyAlignment) {
  const std::string src = Random((2 << 20) + 300, 3);
  Result<std::unique_ptr<File>> w = Env::Posix()->CreateUnsynced(dir_ + "/f");
  ASSERT_TRUE(w.ok());
  const std::string_view all(src);
  ASSERT_TRUE((*w)->WriteAt(0, std::span(&all, 1)).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  Result<std::unique_ptr<File>> r = Env::Posix()->Open(dir_ + "/f", OpenMode::kRead);
  ASSERT_TRUE(r.ok());
  char* buf = static_cast<char*>(std::aligned_alloc(kPage, 3 << 20));
  struct Case {
    uint64_t offset;
    size_t len, at;  // `at`: where in buf
  };
  const Case cases[] = {
      {0, 1 << 20, 0},              // aligned
      {1 << 20, 2 << 20, 0},        // aligned, past the end: fewer bytes
      {4096, 8192, 1},              // unaligned buffer
      {100, 4096, 0},               // unaligned offset
      {8192, 5000, 0},              // unaligned length
      {src.size(), 4096, 0},        // at the end
      {src.size() + 4096, 4096, 0}, // past it
  };
  for (const Case& c : cases) {
    Result<size_t> n = (*r)->ReadAt(c.offset, c.len, buf + c.at);
    ASSERT_TRUE(n.ok()) << c.offset;
    const size_t want = c.offset >= src.size() ? 0 : std::min(c.len, src.size() - c.offset);
    ASSERT_EQ(*n, want) << c.offset;
    EXPECT_TRUE(std::string_view(buf + c.at, *n) == all.substr(std::min(c.offset, src.size()), want))
        << c.offset;
  }
  std::free(buf);
}

TEST_F(PosixEnvTest, EvictPagesOfDropsThePagesAReadTouched) {
  const std::string src = Random(1 << 20, 5);
  {
    Result<std::unique_ptr<File>> w = Env::Posix()->CreateUnsynced(dir_ + "/f");
    ASSERT_TRUE(w.ok());
    const std::string_view all(src);
    ASSERT_TRUE((*w)->WriteAt(0, std::span(&all, 1)).ok());
    ASSERT_TRUE((*w)->Sync().ok());  // clean pages, which an eviction drops
  }
  Result<std::unique_ptr<File>> r = Env::Posix()->Open(dir_ + "/f", OpenMode::kRead);
  ASSERT_TRUE(r.ok());
  (*r)->Evict(0, src.size());
  std::vector<bool> cached = Cached(dir_ + "/f");
  ASSERT_EQ(std::count(cached.begin(), cached.end(), true), 0);
  // Through the cache (an unaligned offset and length), then dropped.
  std::string buf(300000, '\0');
  Result<size_t> n = (*r)->ReadAt(12345, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  (*r)->EvictPagesOf(12345, *n);
  EXPECT_TRUE(std::string_view(buf.data(), *n) == std::string_view(src).substr(12345, buf.size()));
  // (Readahead may have cached pages past them.)
  cached = Cached(dir_ + "/f");
  const size_t first = 12345 / kPage, last = (12345 + buf.size() - 1) / kPage;
  EXPECT_EQ(std::count(cached.begin() + first, cached.begin() + last + 1, true), 0);
}

}  // namespace
}  // namespace ckptfs::io
