// Shared helpers of the engine tests: a temporary store directory, status
// assertions, deterministic file contents and whole-file reads.
//
// Everything here uses only the public engine API (engine/store.h).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/fsck/fsck.h"
#include "engine/store.h"
#include "meta/shared_kv.h"
#include "tests/engine/pattern.h"

// CKPTFS_TSAN, CKPTFS_ASAN: defined in a build under ThreadSanitizer, or
// AddressSanitizer (gcc says so with __SANITIZE_*, clang with __has_feature).
#if defined(__SANITIZE_THREAD__)
#define CKPTFS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CKPTFS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CKPTFS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPTFS_ASAN 1
#endif
#endif

namespace ckptfs::engine::test {

// A fresh directory under /tmp (mkdtemp), removed with everything in it when
// the object goes away.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ckptfs-test-XXXXXX";
    char* p = ::mkdtemp(tmpl);
    if (p == nullptr) {
      ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
      return;
    }
    path_ = p;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Where tests put the store: a subdirectory that does not exist yet.
  std::string store() const { return path_ + "/store"; }

 private:
  std::string path_;
};

inline Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

inline std::string ErrnoName(int err) {
  return std::to_string(err) + " (" + std::strerror(err) + ")";
}

}  // namespace ckptfs::engine::test

#define CKPTFS_T_CONCAT_INNER(a, b) a##b
#define CKPTFS_T_CONCAT(a, b) CKPTFS_T_CONCAT_INNER(a, b)

namespace ckptfs::engine::test {
inline ::testing::AssertionResult IsOk(const char* expr_text, const Status& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr_text << " failed: " << s.ToString();
}
inline ::testing::AssertionResult HasErrno(const char*, const char* expr_text, int err,
                                           const Status& s) {
  if (s.code() == err) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr_text << ": expected " << ErrnoName(err) << ", got "
                                       << (s.ok() ? std::string("success") : s.ToString());
}
}  // namespace ckptfs::engine::test

// Status/Result assertions; more context can be streamed into each.
#define ASSERT_OK(expr) \
  ASSERT_PRED_FORMAT1(::ckptfs::engine::test::IsOk, ::ckptfs::engine::test::StatusOf(expr))
#define EXPECT_OK(expr) \
  EXPECT_PRED_FORMAT1(::ckptfs::engine::test::IsOk, ::ckptfs::engine::test::StatusOf(expr))
// Asserts that `expr` (a Status or a Result) fails with errno `err`.
#define ASSERT_ERRNO(err, expr)                                          \
  ASSERT_PRED_FORMAT2(::ckptfs::engine::test::HasErrno, err,             \
                      ::ckptfs::engine::test::StatusOf(expr))
#define EXPECT_ERRNO(err, expr)                                          \
  EXPECT_PRED_FORMAT2(::ckptfs::engine::test::HasErrno, err,             \
                      ::ckptfs::engine::test::StatusOf(expr))
// Declares `lhs` from a Result `expr`, failing the test (and returning) if it
// is not ok.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(CKPTFS_T_CONCAT(_r_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)                        \
  auto tmp = (expr);                                                     \
  ASSERT_TRUE(tmp.ok()) << #expr << " failed: " << tmp.status().ToString(); \
  lhs = std::move(tmp).value()

namespace ckptfs::engine::test {

// Highly compressible bytes: lines of text with a counter.
inline std::string CompressibleData(size_t len) {
  std::string out;
  out.reserve(len + 64);
  for (uint64_t i = 0; out.size() < len; ++i) {
    out += "checkpoint tensor layer " + std::to_string(i % 97) + " value 0.000000\n";
  }
  out.resize(len);
  return out;
}

// Reads the whole file (up to its current size plus one byte, so that a file
// that is longer than its size says is noticed).
inline Result<std::string> ReadAll(Store* store, Ino ino) {
  auto attr = store->GetAttr(ino);
  if (!attr.ok()) return attr.status();
  std::string out(attr->size + 1, '\0');
  size_t done = 0;
  while (done < out.size()) {
    size_t want = std::min<size_t>(out.size() - done, 4u << 20);
    auto n = store->Read(ino, done, want, out.data() + done);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    done += *n;
  }
  out.resize(done);
  return out;
}

// Reads [offset, offset+len) with one call.
inline Result<std::string> ReadRange(Store* store, Ino ino, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  auto n = store->Read(ino, offset, len, out.data());
  if (!n.ok()) return n.status();
  out.resize(*n);
  return out;
}

// Writes all of `data` at `offset`, checking the returned length.
inline Status WriteAll(Store* store, Ino ino, uint64_t offset, std::string_view data) {
  auto n = store->Write(ino, offset, data);
  if (!n.ok()) return n.status();
  if (*n != data.size()) {
    return Status::Errno(EIO, "short write: " + std::to_string(*n) + " of " +
                                  std::to_string(data.size()));
  }
  return Status::OK();
}

// All entries of directory `ino` in the order ReadDir gives them, without "."
// and ".." (should the engine list them).
inline Result<std::vector<DirEntry>> ListDir(Store* store, Ino ino) {
  std::vector<DirEntry> out;
  Status st = store->ReadDir(ino, "", [&](const DirEntry& e) {
    if (e.name != "." && e.name != "..") out.push_back(e);
    return true;
  });
  if (!st.ok()) return st;
  return out;
}

// Options with small sizes so that tests exercise record splitting, inline
// data and segment rollover with little data.
inline StoreOptions SmallOptions() {
  StoreOptions o;
  o.segment_size = 2u << 20;
  o.inline_max = 4096;
  o.max_record_bytes = 64u << 10;
  o.min_free = 0;
  o.holder = "ckptfs engine test";
  return o;
}

// The options of a test store. With CKPTFS_TEST_META set (a libpq URI: the
// pg.* runs of the engine's suites, tests/CMakeLists.txt; or mem://NAME:
// the mem.* runs), the stores the tests create keep their index in
// PostgreSQL, or in this process's memory. With CKPTFS_TEST_DATA set
// (rados://POOL/NAMESPACE or s3://BUCKET/PREFIX with CKPTFS_TEST_S3_ENDPOINT:
// the ceph.* runs beside tests/mount/ceph_bed.py), they keep their data
// there.
inline StoreOptions TestOptions() {
  StoreOptions o;
  o.min_free = 0;
  o.holder = "ckptfs engine test";
  if (const char* meta = std::getenv("CKPTFS_TEST_META")) o.meta = meta;
  if (const char* data = std::getenv("CKPTFS_TEST_DATA")) {
    o.data = data;
    const char* endpoint = std::getenv("CKPTFS_TEST_S3_ENDPOINT");
    if (o.data.starts_with("s3://") && endpoint != nullptr) o.s3_endpoint = endpoint;
  }
  return o;
}

// Whether the test stores keep their data in an object store (the ceph.*
// runs): a test that reads or damages segment files by their path has
// nothing there to look at.
inline bool DataInObjectStore() { return std::getenv("CKPTFS_TEST_DATA") != nullptr; }

// `n`, the count of files a test makes to reach a size, where each create is
// cheap: an embedded index in an optimized build. A fifth of it (at least
// one) where each create costs a round trip to PostgreSQL, or runs under a
// sanitizer, or both; what such a test checks does not depend on the size
// past a few thousand entries.
inline int ScaledCount(int n) {
  bool slow = std::getenv("CKPTFS_TEST_META") != nullptr;
#if defined(CKPTFS_TSAN) || defined(CKPTFS_ASAN)
  slow = true;
#endif
  return slow ? std::max(1, n / 5) : n;
}

// Whether stores opened with `o` keep their index in this process's memory
// (mem://): a child process that a test starts cannot open them.
inline bool IndexInMemory(const StoreOptions& o) { return meta::IsMemUri(o.meta); }

// A store in a fresh directory, opened with options_ before each test and
// closed after it.
class StoreFixture : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Reopen()); }
  void TearDown() override {
    if (store_) {
      EXPECT_OK(store_->Close());
    }
  }
  // Closes the store (when open) and opens it again with options_.
  void Reopen() {
    if (store_) {
      ASSERT_OK(store_->Close());
      store_.reset();
    }
    ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), options_));
  }
  Store* s() { return store_.get(); }

  TempDir dir_;
  StoreOptions options_ = TestOptions();
  std::unique_ptr<Store> store_;
};

// Number of regular files (and other non-directories) under `dir`.
inline size_t CountFilesRecursively(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_directory()) ++n;
  }
  return n;
}

// How many of the pages of the file at `path` the OS has cached (mincore).
inline size_t CachedPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return 0;
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  const size_t len = static_cast<size_t>(st.st_size);
  if (len == 0) {
    ::close(fd);
    return 0;
  }
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(map, MAP_FAILED) << path;
  if (map == MAP_FAILED) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((len + page - 1) / page);
  EXPECT_EQ(::mincore(map, len, in.data()), 0) << path;
  ::munmap(map, len);
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }));
}

// Whether `dir` is on a filesystem whose cached pages a posix_fadvise
// DONTNEED cannot drop (tmpfs keeps them: they are the file).
inline bool PagesStayCached(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// Sum of live and dead bytes over ListSegments().
struct SpaceTotals {
  int64_t live = 0;
  int64_t dead = 0;
  size_t segments = 0;
};
inline Result<SpaceTotals> SumSegments(Store* store) {
  Result<std::vector<SegmentInfo>> segments = store->ListSegments();
  if (!segments.ok()) return segments.status();
  SpaceTotals t;
  for (const SegmentInfo& s : *segments) {
    t.live += s.live_bytes;
    t.dead += s.dead_bytes;
    ++t.segments;
  }
  return t;
}

// The ckptfs_store_child program (path set by CMake).
inline std::string StoreChildPath() {
#ifdef CKPTFS_STORE_CHILD
  return CKPTFS_STORE_CHILD;
#else
  return "";
#endif
}

// A started ckptfs_store_child process and the read end of a pipe that is
// either its stdout or the descriptor it was told about with "{FD}".
struct Child {
  pid_t pid = -1;
  int fd = -1;
};

// Starts ckptfs_store_child with `args` (fork + exec). An argument "{FD}" is
// replaced by the number of the pipe's write end in the child; without one,
// the pipe is the child's stdout.
inline Child StartChild(std::vector<std::string> args) {
  Child c;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return c;
  }
  constexpr int kChildFd = 100;
  bool to_stdout = true;
  for (std::string& a : args) {
    if (a == "{FD}") {
      a = std::to_string(kChildFd);
      to_stdout = false;
    }
  }
  std::string prog = StoreChildPath();
  std::vector<char*> argv;
  argv.push_back(prog.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(p[0]);
    ::close(p[1]);
    return c;
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec. The child dies with
    // the test, so that a writer never outlives it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(125);
    if (::dup2(p[1], to_stdout ? 1 : kChildFd) < 0) _exit(126);
    ::execv(prog.c_str(), argv.data());
    _exit(127);
  }
  ::close(p[1]);
  c.pid = pid;
  c.fd = p[0];
  return c;
}

// Reads one line (without the newline) from `fd`; false at end of file.
inline bool ReadLine(int fd, std::string* line) {
  line->clear();
  char ch;
  for (;;) {
    ssize_t n = ::read(fd, &ch, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (ch == '\n') return true;
    line->push_back(ch);
  }
}

// Waits for `pid` and returns its wait status.
inline int WaitChild(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Kills (SIGKILL) and reaps a Child on scope exit unless Reap() was called,
// so that a failed assertion never leaves a child process behind.
class ChildGuard {
 public:
  explicit ChildGuard(Child* c) : c_(c) {}
  ~ChildGuard() {
    if (c_->pid > 0) {
      ::kill(c_->pid, SIGKILL);
      WaitChild(c_->pid);
    }
    if (c_->fd >= 0) ::close(c_->fd);
  }
  // Waits for the child (after killing it when `kill` is true) and returns
  // its wait status; the pipe stays open for reading.
  int Reap(bool kill) {
    if (kill) ::kill(c_->pid, SIGKILL);
    int status = WaitChild(c_->pid);
    c_->pid = -1;
    return status;
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;

 private:
  Child* c_;
};

}  // namespace ckptfs::engine::test
