// Crash recovery: a child process (ckptfs_store_child writer) writes files and
// reports each one after its Fsync returned; the test kills it with SIGKILL
// at a random moment, reopens the store and checks that every reported file
// reads back intact and that the store is consistent.
//
// CKPTFS_SEED=<n> repeats a run; CKPTFS_CRASH_ROUNDS=<n> changes its length.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "tests/engine/child_spec.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

// Appends what arrives on `fd` to `out` for `ms` milliseconds, or until end
// of file when `ms` < 0.
void DrainFor(int fd, int ms, std::string* out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[65536];
  for (;;) {
    int wait = -1;
    if (ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      wait = static_cast<int>(left.count());
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    out->append(buf, static_cast<size_t>(n));
  }
}

struct Walk {
  uint64_t inodes = 0;        // distinct inodes reached, root included
  int64_t segment_bytes = 0;  // logical bytes of all non-inline extents
  std::map<std::string, Ino> files;  // path -> ino
};

// Walks the tree checking that every entry can be looked up, that types,
// sizes and directory link counts agree, and that every file reads as many
// bytes as its size says.
void WalkAndCheck(Store* store, Ino dir, const std::string& path, Walk* walk) {
  auto list = ListDir(store, dir);
  ASSERT_TRUE(list.ok()) << path << ": " << list.status().ToString();
  uint32_t subdirs = 0;
  for (const DirEntry& e : *list) {
    std::string p = path + "/" + e.name;
    ASSERT_OK_AND_ASSIGN(Attr a, store->Lookup(dir, e.name));
    ASSERT_EQ(a.ino, e.ino) << p;
    ASSERT_EQ(a.mode & S_IFMT, e.type) << p;
    ++walk->inodes;
    if (S_ISDIR(a.mode)) {
      ++subdirs;
      ASSERT_EQ(a.parent, dir) << p;
      ASSERT_NO_FATAL_FAILURE(WalkAndCheck(store, a.ino, p, walk));
    } else if (S_ISREG(a.mode)) {
      ASSERT_EQ(a.nlink, 1u) << p;
      ASSERT_OK_AND_ASSIGN(std::string data, ReadAll(store, a.ino));
      ASSERT_EQ(data.size(), a.size) << p << ": size says " << a.size << ", read "
                                     << data.size();
      ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, store->GetExtents(a.ino));
      for (const ExtentInfo& x : ex) {
        ASSERT_LE(x.file_offset + x.value.length, a.size) << p << ": extent past the end";
        if (!x.value.is_inline) walk->segment_bytes += static_cast<int64_t>(x.value.length);
      }
      walk->files[p] = a.ino;
    }
  }
  ASSERT_OK_AND_ASSIGN(Attr self, store->GetAttr(dir));
  ASSERT_EQ(self.nlink, 2 + subdirs) << path << ": directory link count";
}

TEST(CrashTest, FsyncedFilesSurviveSigkill) {
  const char* env = std::getenv("CKPTFS_SEED");
  const uint64_t seed =
      env ? std::strtoull(env, nullptr, 10)
          : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  SCOPED_TRACE("CKPTFS_SEED=" + std::to_string(seed));
  RecordProperty("seed", std::to_string(seed));
  const char* rounds_env = std::getenv("CKPTFS_CRASH_ROUNDS");
  const int rounds = rounds_env ? std::atoi(rounds_env) : 20;
  std::mt19937_64 rng(seed);

  TempDir tmp;
  const std::string dir = tmp.store();
  {
    // Create the store up front so that every round starts from one.
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir, TestOptions()));
    ASSERT_OK(store->Close());
  }

  std::map<std::string, CrashFileSpec> durable;  // reported by some child
  std::map<std::string, CrashFileSpec> written;  // maybe begun by some child
  // Writes of final bytes whose Write call returned: path -> (offset, length).
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> acked;
  size_t acked_writes = 0;
  size_t reported_total = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t round_seed = rng() >> 1;
    Child child = StartChild(
        {"writer", dir, std::to_string(round), std::to_string(round_seed), "{FD}"});
    ChildGuard guard(&child);
    ASSERT_GT(child.pid, 0);
    std::vector<std::string> lines;
    // Most rounds wait until the child has made one file durable, so that
    // every such round tests something; every fifth kills it at once, which
    // may be during Open and recovery.
    if (round % 5 != 4) {
      std::string line;
      bool fsynced = false;
      while (!fsynced && ReadLine(child.fd, &line)) {
        lines.push_back(line);
        fsynced = line != "ready" && line.rfind("w ", 0) != 0;
      }
      ASSERT_TRUE(fsynced) << "child died before its first file";
      ASSERT_EQ(lines[0], "ready");
    }
    // Keep reading while the child runs so that it never waits on the pipe.
    std::string rest;
    DrainFor(child.fd, 5 + static_cast<int>(rng() % 96), &rest);
    int status = guard.Reap(/*kill=*/true);
    DrainFor(child.fd, -1, &rest);
    for (size_t pos = 0, nl; (nl = rest.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      lines.push_back(rest.substr(pos, nl - pos));
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended by itself (status " << status << "); see its message above";

    // What the child may have written: every file up to one past the last
    // reported one.
    uint64_t reported = 0;
    for (const std::string& l : lines) {
      if (l == "ready") continue;
      if (l.rfind("w ", 0) == 0) {
        char path[256];
        unsigned long long off = 0, len = 0;
        ASSERT_EQ(std::sscanf(l.c_str(), "w %255s %llu %llu", path, &off, &len), 3) << l;
        acked["/" + std::string(path)].push_back({off, len});
        ++acked_writes;
        continue;
      }
      size_t pos = l.rfind("_f");
      ASSERT_NE(pos, std::string::npos) << l;
      uint64_t index = std::stoull(l.substr(pos + 2));
      CrashFileSpec spec = CrashSpecFor(round_seed, round, index);
      ASSERT_EQ(spec.path(), l);
      durable["/" + l] = spec;
      reported = std::max(reported, index + 1);
      ++reported_total;
    }
    for (uint64_t i = 0; i <= reported; ++i) {
      CrashFileSpec spec = CrashSpecFor(round_seed, round, i);
      written["/" + spec.path()] = spec;
    }

    // Recovery.
    auto opened = Store::Open(dir, TestOptions());
    ASSERT_TRUE(opened.ok()) << "reopen after SIGKILL: " << opened.status().ToString();
    std::unique_ptr<Store> store = std::move(opened).value();
    Walk walk;
    walk.inodes = 1;
    ASSERT_NO_FATAL_FAILURE(WalkAndCheck(store.get(), kRootIno, "", &walk));

    // Every reported file, from this round and all before, is intact.
    for (const auto& [path, spec] : durable) {
      auto it = walk.files.find(path);
      ASSERT_NE(it, walk.files.end()) << path << " was fsynced but is gone";
      ASSERT_OK_AND_ASSIGN(std::string data, ReadAll(store.get(), it->second));
      ASSERT_EQ(data.size(), spec.size) << path;
      ASSERT_TRUE(data == PatternData(spec.seed, 0, spec.size)) << path << ": wrong contents";
    }
    // Files that were being written hold, at each byte, what some write put
    // there (the child writes wrong bytes first and overwrites some pieces)
    // or zero where no write landed: never garbage.
    for (const auto& [path, ino] : walk.files) {
      if (durable.count(path) || path.rfind("/scratch/", 0) == 0) continue;
      auto it = written.find(path);
      ASSERT_NE(it, written.end()) << "unexpected file " << path;
      ASSERT_OK_AND_ASSIGN(std::string data, ReadAll(store.get(), ino));
      ASSERT_LE(data.size(), it->second.size) << path;
      std::string want = PatternData(it->second.seed, 0, data.size());
      std::string first = PatternData(it->second.seed ^ 0xdead, 0, data.size());
      for (size_t i = 0; i < data.size(); ++i) {
        if (data[i] != want[i] && data[i] != first[i] && data[i] != 0) {
          FAIL() << path << ": byte " << i << " is neither a written byte nor zero";
        }
      }
    }
    // A Write that returned is durable against a process kill (its bytes are
    // in the segment file and its extent in the index log), fsync or not.
    for (const auto& [path, ranges] : acked) {
      auto it = walk.files.find(path);
      ASSERT_NE(it, walk.files.end()) << path << " had acknowledged writes but is gone";
      const CrashFileSpec& spec = written.at(path);
      for (const auto& [off, len] : ranges) {
        ASSERT_OK_AND_ASSIGN(std::string got, ReadRange(store.get(), it->second, off, len));
        ASSERT_TRUE(got == PatternData(spec.seed, off, len))
            << path << ": acknowledged write at " << off << " (" << len
            << " bytes) lost after SIGKILL";
      }
    }
    ASSERT_OK_AND_ASSIGN(FsStats fs, store->StatFs());
    EXPECT_EQ(fs.inodes, walk.inodes) << "inode count does not match the tree";
    ASSERT_OK_AND_ASSIGN(SpaceTotals space, SumSegments(store.get()));
    EXPECT_EQ(space.live, walk.segment_bytes) << "live bytes do not match the extents";
    ASSERT_OK(store->Close());
    if (HasFailure()) return;
  }
  EXPECT_GE(reported_total, static_cast<size_t>(rounds - rounds / 5));
  std::printf("seed %llu: %d rounds, %zu files fsynced, %zu files begun, %zu writes "
              "acknowledged\n",
              static_cast<unsigned long long>(seed), rounds, reported_total, written.size(),
              acked_writes);
}

}  // namespace
}  // namespace ckptfs::engine::test
