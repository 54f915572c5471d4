// Many threads on one Store: writers on different files with overwrites and
// namespace churn in a shared directory, readers checking what they see,
// run-time setting changes, writers of one file, and concurrent Fsyncs that
// share device flushes. Also built and run under ThreadSanitizer
// (cmake -DCKPTFS_SANITIZE=thread), where the sizes shrink.
#include <sys/stat.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
#ifdef CKPTFS_TSAN
constexpr uint64_t kBytesPerWriter = 1 * kMiB;
#else
constexpr uint64_t kBytesPerWriter = 4 * kMiB;
#endif
constexpr int kWriters = 8;
constexpr int kReaders = 2;

// Content of writer `w`'s file: version 0 is written first, version 1 by
// overwrites, so any byte a reader sees must be one of the two.
uint64_t VersionSeed(int w, int version) { return 1000 + 16 * w + version; }

class ConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o = TestOptions();
    o.max_record_bytes = 128 * kKiB;
    o.segment_size = 8 * kMiB;  // rollover while threads write
    ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), o));
  }
  void TearDown() override {
    if (store_) {
      EXPECT_OK(store_->Close());
    }
  }
  Store* s() { return store_.get(); }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(ConcurrencyTest, WritersReadersAndNamespaceChurn) {
  ASSERT_OK_AND_ASSIGN(Attr shared, s()->Mkdir(kRootIno, "shared", 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr data_dir, s()->Mkdir(kRootIno, "data", 0755, 0, 0));
  std::vector<Ino> inos(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_OK_AND_ASSIGN(Attr a, s()->Create(data_dir.ino, "w" + std::to_string(w),
                                             S_IFREG | 0644, 0, 0));
    inos[w] = a.ino;
  }
  std::vector<std::string> final_data(kWriters);
  std::vector<std::set<std::string>> final_names(kWriters);
  std::atomic<int> writers_done{0};
  std::atomic<uint64_t> reader_checks{0};

  auto writer = [&](int w) {
    std::mt19937_64 rng(w);
    std::string& want = final_data[w];
    std::set<std::string>& names = final_names[w];
    const std::string prefix = "w" + std::to_string(w) + "_";
    for (int piece = 0; want.size() < kBytesPerWriter; ++piece) {
      size_t len = rng() % 3 == 0 ? 1 + rng() % 4096 : 1 + rng() % (256 * kKiB);
      std::string d = PatternData(VersionSeed(w, 0), want.size(), len);
      EXPECT_OK(WriteAll(s(), inos[w], want.size(), d));
      want += d;
      if (piece % 4 == 3) {
        uint64_t off = rng() % want.size();
        size_t olen = std::min<size_t>(want.size() - off, 1 + rng() % (128 * kKiB));
        std::string o = PatternData(VersionSeed(w, 1), off, olen);
        EXPECT_OK(WriteAll(s(), inos[w], off, o));
        want.replace(off, olen, o);
      }
      if (piece % 3 == 0) {
        // Namespace churn in the shared directory; names are per writer.
        std::string tmp = prefix + "tmp" + std::to_string(piece);
        std::string fin = prefix + "r" + std::to_string(piece % 7);
        auto c = s()->Create(shared.ino, tmp, S_IFREG | 0644, 0, 0);
        EXPECT_TRUE(c.ok()) << c.status().ToString();
        if (c.ok()) {
          EXPECT_OK(WriteAll(s(), c->ino, 0, PatternData(piece, 0, 1 + piece % 9000)));
        }
        EXPECT_OK(s()->Rename(shared.ino, tmp, shared.ino, fin, RenameMode::kReplace));
        names.insert(fin);
        std::string victim = prefix + "r" + std::to_string((piece + 3) % 7);
        Status u = s()->Unlink(shared.ino, victim);
        if (names.count(victim)) {
          EXPECT_OK(u) << victim;
          names.erase(victim);
        } else {
          EXPECT_EQ(u.code(), ENOENT) << victim << ": " << u.ToString();
        }
        if (piece % 2 == 0) {
          auto d2 = s()->Mkdir(shared.ino, prefix + "dir", 0755, 0, 0);
          if (d2.ok()) {
            names.insert(prefix + "dir");
          } else {
            EXPECT_EQ(d2.status().code(), EEXIST);
            EXPECT_OK(s()->Rmdir(shared.ino, prefix + "dir"));
            names.erase(prefix + "dir");
          }
        }
      }
      if (piece % 10 == 9) {
        EXPECT_OK(s()->Fsync(inos[w], piece % 20 == 19));
      }
    }
    writers_done++;
  };

  auto reader = [&](int r) {
    std::mt19937_64 rng(100 + r);
    std::string buf;
    while (writers_done.load() < kWriters) {
      int w = static_cast<int>(rng() % kWriters);
      auto a = s()->GetAttr(inos[w]);
      EXPECT_TRUE(a.ok()) << a.status().ToString();
      if (!a.ok() || a->size == 0) continue;
      uint64_t off = rng() % a->size;
      size_t len = 1 + rng() % (300 * kKiB);
      buf.resize(len);
      auto n = s()->Read(inos[w], off, len, buf.data());
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok()) continue;
      // The file only grows, so at least what GetAttr saw is there.
      EXPECT_GE(*n, std::min<uint64_t>(len, a->size - off));
      std::string v0 = PatternData(VersionSeed(w, 0), off, *n);
      std::string v1 = PatternData(VersionSeed(w, 1), off, *n);
      for (size_t i = 0; i < *n; ++i) {
        if (buf[i] != v0[i] && buf[i] != v1[i]) {
          ADD_FAILURE() << "reader saw a byte never written to w" << w << " at "
                        << off + i;
          break;
        }
      }
      reader_checks++;
      if (rng() % 8 == 0) {
        std::vector<std::string> seen;
        EXPECT_OK(s()->ReadDir(shared.ino, "", [&](const DirEntry& e) {
          seen.push_back(e.name);
          return true;
        }));
        for (size_t i = 1; i < seen.size(); ++i) EXPECT_LT(seen[i - 1], seen[i]);
        EXPECT_OK(s()->StatFs());
      }
    }
  };

  // Changes read settings and drops the cache while everything runs.
  auto tuner = [&] {
    int i = 0;
    while (writers_done.load() < kWriters) {
      bool on = (i++ % 2) == 0;
      EXPECT_OK(s()->UpdateOptions([on](StoreOptions* o) {
        o->coalesce_gap = on ? 262144 : 0;
        o->coalesce_max = on ? 1048576 : 0;
      }));
      EXPECT_OK(
          s()->UpdateOptions([on](StoreOptions* o) { o->cache_size = on ? 8388608 : 65536; }));
      s()->DropCache();
      EXPECT_OK(s()->GetStats());
      EXPECT_OK(s()->ListSegments());
      (void)s()->GetOptions();
      (void)s()->LastCompaction();
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) threads.emplace_back(writer, w);
  for (int r = 0; r < kReaders; ++r) threads.emplace_back(reader, r);
  threads.emplace_back(tuner);
  for (auto& t : threads) t.join();
  ASSERT_FALSE(HasFailure());

  for (int w = 0; w < kWriters; ++w) {
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), inos[w]));
    ASSERT_EQ(got.size(), final_data[w].size()) << "w" << w;
    EXPECT_TRUE(got == final_data[w]) << "w" << w << " contents differ";
  }
  std::set<std::string> want_names;
  for (const auto& n : final_names) want_names.insert(n.begin(), n.end());
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ents, ListDir(s(), shared.ino));
  std::set<std::string> got_names;
  for (const DirEntry& e : ents) got_names.insert(e.name);
  EXPECT_EQ(got_names, want_names);

  // And the same after a reopen, from disk.
  ASSERT_OK(s()->Close());
  store_.reset();
  ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), TestOptions()));
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), inos[w]));
    EXPECT_TRUE(got == final_data[w]) << "w" << w << " contents differ after reopen";
  }
  ASSERT_OK_AND_ASSIGN(ents, ListDir(s(), shared.ino));
  got_names.clear();
  for (const DirEntry& e : ents) got_names.insert(e.name);
  EXPECT_EQ(got_names, want_names);
}

TEST_F(ConcurrencyTest, WritersOfOneFileOnDisjointRanges) {
  constexpr int kThreads = 4;
  constexpr uint64_t kSlice = 64 * kKiB + 123;  // not aligned to records
#ifdef CKPTFS_TSAN
  constexpr int kSlices = 32;
#else
  constexpr int kSlices = 128;
#endif
  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(kRootIno, "one", S_IFREG | 0644, 0, 0));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<int> mine;
      for (int i = t; i < kSlices; i += kThreads) mine.push_back(i);
      std::shuffle(mine.begin(), mine.end(), rng);
      for (int i : mine) {
        EXPECT_OK(WriteAll(s(), f.ino, i * kSlice, PatternData(77, i * kSlice, kSlice)));
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f.ino));
  ASSERT_EQ(got.size(), kSlices * kSlice);
  EXPECT_TRUE(got == PatternData(77, 0, kSlices * kSlice));
}

TEST_F(ConcurrencyTest, ConcurrentFsyncsShareDeviceSyncs) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 25;
  std::vector<Ino> inos;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_OK_AND_ASSIGN(Attr a, s()->Create(kRootIno, "s" + std::to_string(t),
                                             S_IFREG | 0644, 0, 0));
    inos.push_back(a.ino);
  }
  ASSERT_OK_AND_ASSIGN(EngineStats before, s()->GetStats());
  std::vector<std::string> want(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int r = 0; r < kRounds; ++r) {
        std::string d = PatternData(300 + t, want[t].size(), 1 + rng() % (64 * kKiB));
        EXPECT_OK(WriteAll(s(), inos[t], want[t].size(), d));
        want[t] += d;
        EXPECT_OK(s()->Fsync(inos[t], r % 2 == 0));
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK_AND_ASSIGN(EngineStats after, s()->GetStats());
  const uint64_t fsyncs = after.fsyncs - before.fsyncs;
  const uint64_t device_syncs = after.device_syncs - before.device_syncs;
  EXPECT_EQ(fsyncs, static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_GE(device_syncs, 1u);
  EXPECT_LE(device_syncs, fsyncs);
  RecordProperty("fsyncs", std::to_string(fsyncs));
  RecordProperty("device_syncs", std::to_string(device_syncs));
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), inos[t]));
    EXPECT_TRUE(got == want[t]) << "file " << t;
  }
}

// Threads that miss the record cache on the same bytes at once share one
// backing read; threads reading neighbouring files all get their own bytes.
TEST_F(ConcurrencyTest, ConcurrentMissesOfOneRecordShareABackingRead) {
  constexpr int kThreads = 16;
  std::vector<Ino> inos;
  std::vector<std::string> want;
  for (int f = 0; f < kThreads; ++f) {
    ASSERT_OK_AND_ASSIGN(Attr a, s()->Create(kRootIno, "n" + std::to_string(f),
                                             S_IFREG | 0644, 0, 0));
    want.push_back(PatternData(500 + f, 0, 16 * kKiB));
    ASSERT_OK(WriteAll(s(), a.ino, 0, want.back()));
    inos.push_back(a.ino);
  }
  // Rounds 0..kSame-1: every thread reads file 0. Round kSame: each its own.
  constexpr int kSame = 20;
  for (int round = 0; round <= kSame; ++round) {
    const bool same = round < kSame;
    s()->DropCache();
    ASSERT_OK_AND_ASSIGN(const EngineStats before, s()->GetStats());
    std::atomic<int> ready{0};
    std::vector<std::string> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        const Ino ino = inos[same ? 0 : t];
        auto r = ReadAll(s(), ino);
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok()) got[t] = *r;
      });
    }
    for (auto& t : threads) t.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_TRUE(got[t] == want[same ? 0 : t]) << "round " << round << " thread " << t;
    }
    ASSERT_OK_AND_ASSIGN(const EngineStats after, s()->GetStats());
    const uint64_t reads = after.backing_reads - before.backing_reads;
    if (same) {
      EXPECT_EQ(reads, 1u) << "round " << round << ": 16 concurrent misses of one record";
    } else {
      EXPECT_GE(reads, 1u);
      EXPECT_LE(reads, static_cast<uint64_t>(kThreads));
    }
  }
}

TEST_F(ConcurrencyTest, CreatesOfOneNameHaveOneWinner) {
  constexpr int kThreads = 8;
  constexpr int kNames = 300;
  ASSERT_OK_AND_ASSIGN(Attr d, s()->Mkdir(kRootIno, "race", 0755, 0, 0));
  std::vector<std::atomic<int>> wins(kNames);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kNames; ++i) {
        int n = (i + t * 37) % kNames;  // different orders per thread
        auto a = (n % 2 == 0) ? s()->Create(d.ino, "n" + std::to_string(n), S_IFREG | 0644, 0, 0)
                              : s()->Mkdir(d.ino, "n" + std::to_string(n), 0755, 0, 0);
        if (a.ok()) {
          wins[n]++;
        } else {
          EXPECT_EQ(a.status().code(), EEXIST) << a.status().ToString();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int n = 0; n < kNames; ++n) EXPECT_EQ(wins[n].load(), 1) << "name n" << n;
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ents, ListDir(s(), d.ino));
  EXPECT_EQ(ents.size(), static_cast<size_t>(kNames));
  ASSERT_OK_AND_ASSIGN(Attr da, s()->GetAttr(d.ino));
  EXPECT_EQ(da.nlink, 2u + kNames / 2);
  ASSERT_OK_AND_ASSIGN(FsStats fs, s()->StatFs());
  EXPECT_EQ(fs.inodes, 2u + kNames) << "root, race/ and one inode per name";
}

TEST_F(ConcurrencyTest, RmdirAndCreateInsideNeverBothSucceed) {
#ifdef CKPTFS_TSAN
  constexpr int kRounds = 50;
#else
  constexpr int kRounds = 300;
#endif
  int both = 0;
  for (int i = 0; i < kRounds; ++i) {
    const std::string name = "d" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(Attr d, s()->Mkdir(kRootIno, name, 0755, 0, 0));
    std::atomic<int> ready{0};
    Status rmdir_st, create_st;
    std::thread t1([&] {
      ready++;
      while (ready.load() < 2) {
      }
      rmdir_st = s()->Rmdir(kRootIno, name);
    });
    std::thread t2([&] {
      ready++;
      while (ready.load() < 2) {
      }
      create_st = s()->Create(d.ino, "x", S_IFREG | 0644, 0, 0).status();
    });
    t1.join();
    t2.join();
    if (rmdir_st.ok() && create_st.ok()) ++both;
    if (!rmdir_st.ok()) {
      EXPECT_EQ(rmdir_st.code(), ENOTEMPTY) << rmdir_st.ToString();
    }
    if (!create_st.ok()) {
      EXPECT_TRUE(create_st.code() == ENOENT || create_st.code() == ESTALE)
          << create_st.ToString();
    }
  }
  EXPECT_EQ(both, 0) << "a file was created in a directory that was removed";
  // Every surviving directory holds its file; the inode count adds up.
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ents, ListDir(s(), kRootIno));
  uint64_t inodes = 1;
  for (const DirEntry& e : ents) {
    ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> in, ListDir(s(), e.ino));
    EXPECT_EQ(in.size(), 1u) << e.name;
    inodes += 1 + in.size();
  }
  ASSERT_OK_AND_ASSIGN(FsStats fs, s()->StatFs());
  EXPECT_EQ(fs.inodes, inodes);
}

TEST_F(ConcurrencyTest, CrossingDirectoryRenamesNeverMakeACycle) {
#ifdef CKPTFS_TSAN
  constexpr int kRounds = 300;
#else
  constexpr int kRounds = 3000;
#endif
  ASSERT_OK_AND_ASSIGN(Attr a, s()->Mkdir(kRootIno, "A", 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr b, s()->Mkdir(kRootIno, "B", 0755, 0, 0));
  // Thread 1 moves A into B and back; thread 2 moves B into A and back. If
  // both first moves succeeded, A and B would contain each other.
  auto mover = [&](const std::string& self, Ino other) {
    for (int i = 0; i < kRounds; ++i) {
      Status st = s()->Rename(kRootIno, self, other, self, RenameMode::kNoReplace);
      if (st.ok()) {
        EXPECT_OK(s()->Rename(other, self, kRootIno, self, RenameMode::kNoReplace));
      } else {
        // The other directory is inside this one right now (EINVAL), or it
        // has moved on (ENOENT).
        EXPECT_TRUE(st.code() == EINVAL || st.code() == ENOENT) << st.ToString();
      }
    }
  };
  std::thread t1(mover, "A", b.ino);
  std::thread t2(mover, "B", a.ino);
  t1.join();
  t2.join();
  // Both are back under the root, and each one's parent chain ends there.
  ASSERT_OK_AND_ASSIGN(Attr la, s()->Lookup(kRootIno, "A"));
  ASSERT_OK_AND_ASSIGN(Attr lb, s()->Lookup(kRootIno, "B"));
  EXPECT_EQ(la.ino, a.ino);
  EXPECT_EQ(lb.ino, b.ino);
  EXPECT_EQ(la.parent, kRootIno);
  EXPECT_EQ(lb.parent, kRootIno);
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ia, ListDir(s(), a.ino));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ib, ListDir(s(), b.ino));
  EXPECT_TRUE(ia.empty());
  EXPECT_TRUE(ib.empty());
  ASSERT_OK_AND_ASSIGN(Attr root, s()->GetAttr(kRootIno));
  EXPECT_EQ(root.nlink, 4u);
}

TEST_F(ConcurrencyTest, ConcurrentLinksAndUnlinksKeepNlinkExact) {
  constexpr int kThreads = 6;
  constexpr int kLinks = 200;
  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(kRootIno, "target", S_IFREG | 0644, 0, 0));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLinks; ++i) {
        std::string name = "l" + std::to_string(t) + "_" + std::to_string(i);
        EXPECT_OK(s()->Link(f.ino, kRootIno, name));
        if (i % 2 == 1) {
          EXPECT_OK(s()->Unlink(kRootIno, name));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_OK_AND_ASSIGN(Attr a, s()->GetAttr(f.ino));
  EXPECT_EQ(a.nlink, 1u + kThreads * kLinks / 2);
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ents, ListDir(s(), kRootIno));
  EXPECT_EQ(ents.size(), 1u + kThreads * kLinks / 2);
}

}  // namespace
}  // namespace ckptfs::engine::test
