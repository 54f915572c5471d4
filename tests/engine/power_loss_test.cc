// Power loss, failed syncs and failed appends, through io::FaultInjectionEnv.
//
// The power-loss test writes a store from several threads (creates, writes,
// overwrites, truncates, unlinks, fsyncs), with compaction and free-on-delete
// running, cuts the power at a random moment (every byte not yet synced is
// dropped, in segment files and in the index), reopens, and checks what the
// durability contract (docs/DURABILITY.md) promises:
//   - every file that was fsynced and not changed since reads back
//     byte-identical;
//   - every file reads back as one of the versions it had (an index batch is
//     all or nothing and never points at bytes that were lost): no wrong
//     bytes, no EIO;
//   - fsck finds nothing but informational findings.
// A second run cuts in a worse order (IndexTail::kWritten): the index log's
// unsynced pages reached the disk and the store's did not. Files written
// since their last fsync may then fail to read (EIO), but never read bytes
// that were not written, and fsynced files not written since read back as
// they were. RelocationCutTest checks that bytes a write moves (an inline
// head, a large file's staged start) survive that order too.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/fault_injection.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

// What one file went through since it last became durable.
struct FileModel {
  std::string name;
  Ino ino = 0;
  // Contents after each operation since the last successful fsync;
  // versions.front() is the durable one when `durable`.
  std::vector<std::string> versions{std::string()};
  bool durable = false;   // created and fsynced
  bool unlinked = false;  // unlinked since (the unlink may be lost)
  uint64_t seed = 0;      // names the bytes of its writes
  // What happened to it (w: write, t: truncate, F: fsync, R: read back
  // after a cut, with sizes; ! failed; Fc: fsynced after the cut), for failure messages.
  std::string how;
};

// One writer thread's files, in its own directory.
struct Writer {
  Ino dir = 0;
  std::string dir_name;
  std::map<std::string, FileModel> files;
  uint64_t next_name = 0;
};

StoreOptions PowerLossOptions(std::shared_ptr<io::Env> env) {
  StoreOptions o = SmallOptions();
  o.segment_size = 1u << 20;  // the smallest: many sealed segments to compact and free
  o.max_record_bytes = 16u << 10;
  o.inline_max = 512;
  // Files that grow past 96 KiB move to data files: cuts land in both layouts.
  o.data_file_min = 96u << 10;
  o.free_empty = true;
  o.compact_dead = 128u << 10;
  o.background_interval_ms = 5;
  o.env = std::move(env);
  return o;
}

// Runs random operations on `w`'s files until `stop`, or until one fails
// (the power is out, or the index's server is): a failed change may or may
// not have reached the index (a commit whose outcome is unknown), so the
// model then allows both.
void RunWriter(Store* store, const io::FaultInjectionEnv* env, Writer* w, uint64_t seed,
               const std::atomic<bool>* stop, std::atomic<uint64_t>* fsyncs) {
  std::mt19937_64 rng(seed);
  auto pick = [&]() -> FileModel* {
    if (w->files.empty()) return nullptr;
    auto it = w->files.begin();
    std::advance(it, static_cast<long>(rng() % w->files.size()));
    return it->second.unlinked ? nullptr : &it->second;
  };
  while (!*stop) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 15 || w->files.empty()) {
      FileModel f;
      f.name = "f" + std::to_string(w->next_name++);
      f.seed = rng();
      Result<Attr> a = store->Create(w->dir, f.name, S_IFREG | 0644, 0, 0);
      if (a.ok()) f.ino = a->ino;
      w->files[f.name] = std::move(f);
      if (!a.ok()) return;
    } else if (op < 65) {
      FileModel* f = pick();
      if (f == nullptr) continue;
      std::string next = f->versions.back();
      const uint64_t size = next.size();
      // Mostly appends; sometimes an overwrite inside or a write past the end.
      uint64_t off = rng() % 4 != 0 ? size : rng() % (size + 8192);
      const size_t len = 1 + rng() % (64u << 10);
      const std::string data = PatternData(f->seed + f->versions.size(), off, len);
      const bool written = WriteAll(store, f->ino, off, data).ok();
      if (next.size() < off + len) next.resize(off + len, '\0');
      next.replace(off, len, data);
      f->versions.push_back(std::move(next));
      f->how += (written ? " w" : " W!") + std::to_string(f->versions.back().size());
      if (!written) return;
    } else if (op < 80) {
      FileModel* f = pick();
      if (f == nullptr) continue;
      if (!store->Fsync(f->ino, false).ok()) {
        f->how += " F!";
        return;
      }
      // Durable only if the power was still on when it returned (a cut waits
      // for syncs in progress).
      if (env->cut()) {
        f->how += " Fc";
        continue;
      }
      f->versions.erase(f->versions.begin(), f->versions.end() - 1);
      f->durable = true;
      f->how += " F" + std::to_string(f->versions.back().size());
      fsyncs->fetch_add(1, std::memory_order_relaxed);
    } else if (op < 88) {
      FileModel* f = pick();
      if (f == nullptr) continue;
      SetAttrRequest req;
      req.size = f->versions.back().empty() ? 0 : rng() % f->versions.back().size();
      const bool cut = store->SetAttr(f->ino, req).ok();
      f->versions.push_back(f->versions.back().substr(0, *req.size));
      f->how += (cut ? " t" : " T!") + std::to_string(*req.size);
      if (!cut) return;
    } else {
      FileModel* f = pick();
      if (f == nullptr) continue;
      const bool unlinked = store->Unlink(w->dir, f->name).ok();
      f->unlinked = true;
      if (!unlinked) return;
    }
  }
}

// Compaction in a loop, as an operator's `ckptfs compact` would run it.
void RunCompactor(Store* store, const std::atomic<bool>* stop) {
  while (!*stop) {
    CompactOptions o;
    o.dead_ratio = 0.2;
    if (!store->Compact(o).ok()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

class PowerLossTest : public ::testing::Test {
 protected:
  void Open() {
    StoreOptions o = PowerLossOptions(env_);
    if (!server_.empty()) {
      // The index in PostgreSQL, whose server the cut kills: a host name
      // per round (a killed round's lease outlives its close), and calls
      // that find no server give up at once.
      o.meta = std::getenv("CKPTFS_TEST_META");
      o.meta_timeout = 0.2;
      o.host = "round" + std::to_string(round_);
    }
    ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), o));
  }
  // Runs `what` ("kill", "start") on the PostgreSQL server.
  void Server(const std::string& what) {
    const std::string cmd = server_ + " " + what;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  void CloseAndFsck() {
    ASSERT_OK(store_->Close());
    store_.reset();
    FsckOptions fo;
    fo.env = env_;
    ASSERT_OK_AND_ASSIGN(FsckReport report, engine::Fsck(dir_.store(), fo));
    if (lost_bytes_allowed_) return;  // bytes lost under index entries are findings then
    for (const FsckFinding& f : report.findings) {
      EXPECT_TRUE(f.informational) << "round " << round_ << ": fsck: " << f.kind << " " << f.path
                                   << " " << f.detail;
    }
    ASSERT_TRUE(report.clean()) << "round " << round_;
  }

  // After the reopen: every file is one of its versions, durable ones exist.
  // Then the models restart from what is on disk now.
  void CheckAndResync(Writer* w) {
    ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> entries, ListDir(store_.get(), w->dir));
    std::map<std::string, Ino> present;
    for (const DirEntry& e : entries) present[e.name] = e.ino;
    for (const auto& [name, ino] : present) {
      ASSERT_TRUE(w->files.count(name)) << "round " << round_ << ": unknown file " << name;
    }
    for (auto it = w->files.begin(); it != w->files.end();) {
      FileModel& f = it->second;
      auto p = present.find(f.name);
      if (p == present.end()) {
        EXPECT_FALSE(f.durable && !f.unlinked)
            << "round " << round_ << ": " << w->dir_name << "/" << f.name
            << " was fsynced and is gone (" << f.how << "); inode " << f.ino << ": "
            << store_->GetAttr(f.ino).status().ToString();
        it = w->files.erase(it);
        continue;
      }
      Result<std::string> got = ReadAll(store_.get(), p->second);
      if (!got.ok() && lost_bytes_allowed_) {
        // Index batches survived without the bytes they point at (or the
        // name of the data file they point into): the read fails with EIO,
        // never returning other bytes. The file goes, and the next round
        // starts from what is left.
        EXPECT_EQ(got.status().code(), EIO) << got.status().ToString();
        EXPECT_FALSE(f.durable && f.versions.size() == 1)
            << "round " << round_ << ": " << w->dir_name << "/" << f.name
            << " was fsynced, not changed since, and reads " << got.status().ToString();
        if (f.durable && f.versions.size() == 1) fsynced_lost_++;
        lost_files_++;
        ASSERT_OK(store_->Unlink(w->dir, f.name));
        it = w->files.erase(it);
        continue;
      }
      ASSERT_OK(got) << "round " << round_ << ": " << f.name;
      bool match = false;
      for (const std::string& v : f.versions) match = match || v == *got;
      ASSERT_TRUE(match) << "round " << round_ << ": " << w->dir_name << "/" << f.name << " ("
                         << got->size() << " bytes) is none of its " << f.versions.size()
                         << " versions; durable " << f.durable << ", last version "
                         << f.versions.back().size() << " bytes (" << f.how << ")";
      if (f.durable && f.versions.size() == 1) {
        ASSERT_EQ(*got, f.versions.front()) << "round " << round_ << ": fsynced file changed";
        fsynced_checked_++;
      }
      f.ino = p->second;
      f.versions = {*got};
      f.durable = true;  // recovered from synced bytes only
      f.how += " R" + std::to_string(round_) + ":" + std::to_string(got->size());
      f.unlinked = false;
      ++it;
    }
  }

  // The power-loss load with `rounds` cuts in the order `tail` models.
  void Run(io::FaultInjectionEnv::IndexTail tail, int rounds);
  // With CKPTFS_TEST_PG_SERVER (a run beside PostgreSQL): each cut also
  // kills the server (an immediate stop, losing what its log had not
  // flushed), which is started again before the store reopens.
  std::string server_;

  TempDir dir_;
  std::shared_ptr<io::FaultInjectionEnv> env_ = io::FaultInjectionEnv::Make();
  std::unique_ptr<Store> store_;
  int round_ = 0;
  uint64_t fsynced_checked_ = 0;
  // Reads may fail where bytes were lost (IndexTail::kWritten).
  bool lost_bytes_allowed_ = false;
  uint64_t lost_files_ = 0;    // files that failed to read and were removed
  uint64_t fsynced_lost_ = 0;  // of those, fsynced and unchanged since
};

// Power cuts per run: CKPTFS_POWER_LOSS_ROUNDS, or 200 (20 under TSan, where
// the suite runs with the concurrency tests).
int Rounds() {
  const char* env = std::getenv("CKPTFS_POWER_LOSS_ROUNDS");
  if (env != nullptr) return std::max(1, std::atoi(env));
#ifdef CKPTFS_TSAN
  return 20;
#else
  return 200;
#endif
}

TEST_F(PowerLossTest, FsyncedFilesSurviveAndNothingReadsWrong) {
  Run(io::FaultInjectionEnv::IndexTail::kLost, Rounds());
}

// The index in PostgreSQL, whose server each cut kills (an immediate stop:
// what its log had not flushed is lost, as in a crash of its machine) just
// before the store's machine loses power, and which is started again
// before the store reopens. The server may keep commits whose bytes the
// cut dropped (its log writer flushes unsynced commits on its own), as when
// the index log is written back first: fsynced files stay intact and no
// read returns bytes that were not written.
TEST_F(PowerLossTest, IndexServerKilledAtTheCutKeepsFsyncedFiles) {
  const char* server = std::getenv("CKPTFS_TEST_PG_SERVER");
  if (server == nullptr || std::getenv("CKPTFS_TEST_META") == nullptr) {
    GTEST_SKIP() << "needs PostgreSQL: run as pg.power_loss_test";
  }
  server_ = server;
  Run(io::FaultInjectionEnv::IndexTail::kWritten, std::min(Rounds(), 20));
  EXPECT_EQ(fsynced_lost_, 0u);
}

// The same load with a worse cut: the index log's unsynced pages reached
// the disk (the kernel writes pages back in its own order) while the
// segments' and data files' did not. Index batches then survive without
// their bytes: files changed since their last fsync may fail to read, while
// fsynced files not changed since are intact (compaction syncs its copies
// before it points at them) and no read returns bytes that were not written.
TEST_F(PowerLossTest, IndexLogWrittenBackFirstKeepsFsyncedFilesAndReadsNothingWrong) {
  // Half the cuts: the load is the same, only the order differs.
  const int rounds = std::max(1, Rounds() / 2);
  Run(io::FaultInjectionEnv::IndexTail::kWritten, rounds);
  RecordProperty("lost_files", std::to_string(lost_files_));
  // The cuts did lose index batches' bytes: the order is the one modelled
  // (more than one file a cut here; the few cuts of a sanitizer run may not).
  if (rounds >= 20) EXPECT_GT(lost_files_, 0u);
  EXPECT_EQ(fsynced_lost_, 0u);
}

void PowerLossTest::Run(io::FaultInjectionEnv::IndexTail tail, int rounds) {
  const int kRounds = rounds;
  constexpr int kWriters = 3;
  lost_bytes_allowed_ = tail == io::FaultInjectionEnv::IndexTail::kWritten;
  ASSERT_NO_FATAL_FAILURE(Open());
  std::vector<Writer> writers(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    writers[i].dir_name = "w" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(Attr a, store_->Mkdir(kRootIno, writers[i].dir_name, 0755, 0, 0));
    writers[i].dir = a.ino;
  }
  ASSERT_OK(store_->SyncAll());
  std::mt19937_64 rng(20261122);
  uint64_t dropped_total = 0;
  for (round_ = 0; round_ < kRounds; ++round_) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> fsyncs{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kWriters; ++i) {
      threads.emplace_back(RunWriter, store_.get(), env_.get(), &writers[i], rng(), &stop,
                           &fsyncs);
    }
    threads.emplace_back(RunCompactor, store_.get(), &stop);
    // The cut comes a random moment after the round's first fsync, so that
    // every round has fsynced files to check however slow the build runs.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fsyncs.load(std::memory_order_relaxed) == 0 &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 40000));
    // The server goes first: the process goes on after the cut (its syncs
    // report success and do nothing), and its commits must not reach a
    // server that a real power cut would have kept them from.
    if (!server_.empty()) ASSERT_NO_FATAL_FAILURE(Server("kill"));
    env_->PowerCut();
    // The process goes on for a moment, then closes; none of it is durable.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 5000));
    stop = true;
    for (auto& t : threads) t.join();
    // With the server gone, the close cannot reach the index.
    Status closed = store_->Close();
    if (server_.empty()) ASSERT_OK(closed);
    store_.reset();
    ASSERT_OK_AND_ASSIGN(uint64_t dropped, env_->Restore(tail));
    dropped_total += dropped;
    if (!server_.empty()) ASSERT_NO_FATAL_FAILURE(Server("start"));

    ASSERT_NO_FATAL_FAILURE(Open());
    for (Writer& w : writers) ASSERT_NO_FATAL_FAILURE(CheckAndResync(&w));
    ASSERT_NO_FATAL_FAILURE(CloseAndFsck());
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  ASSERT_OK(store_->Close());
  // The cuts did drop data, and fsynced files were there to check.
  EXPECT_GT(dropped_total, 0u);
  EXPECT_GT(fsynced_checked_, static_cast<uint64_t>(kRounds) / 2);
  RecordProperty("dropped_bytes", std::to_string(dropped_total));
  RecordProperty("fsynced_files_checked", std::to_string(fsynced_checked_));
}

// ---- A failed sync and a failed append reach the caller as EIO ----

class IoFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), PowerLossOptions(env_)));
  }
  void Reopen() {
    (void)store_->Close();
    store_.reset();
    ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_.store(), PowerLossOptions(nullptr)));
  }
  void ExpectFsckClean() {
    ASSERT_OK(store_->Close());
    store_.reset();
    ASSERT_OK_AND_ASSIGN(FsckReport report, engine::Fsck(dir_.store(), FsckOptions()));
    for (const FsckFinding& f : report.findings) {
      EXPECT_TRUE(f.informational) << f.kind << " " << f.path << " " << f.detail;
    }
    EXPECT_TRUE(report.clean());
  }
  TempDir dir_;
  std::shared_ptr<io::FaultInjectionEnv> env_ = io::FaultInjectionEnv::Make();
  std::unique_ptr<Store> store_;
};

TEST_F(IoFaultTest, FailedSyncIsEioAndStaysEioUntilReopen) {
  ASSERT_OK_AND_ASSIGN(Attr a, store_->Create(kRootIno, "a", S_IFREG | 0644, 0, 0));
  const std::string data = PatternData(1, 0, 100000);
  ASSERT_OK(WriteAll(store_.get(), a.ino, 0, data));
  env_->FailSync(1);
  EXPECT_ERRNO(EIO, store_->Fsync(a.ino, false));
  // The bytes of a failed sync may be gone whatever a later sync says.
  EXPECT_ERRNO(EIO, store_->Fsync(a.ino, false));
  EXPECT_ERRNO(EIO, store_->SyncAll());
  // Reads still answer from what was written.
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store_.get(), a.ino));
  EXPECT_EQ(got, data);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(Attr again, store_->Lookup(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(got, ReadAll(store_.get(), again.ino));
  EXPECT_EQ(got, data);
  EXPECT_OK(store_->Fsync(again.ino, false));
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

TEST_F(IoFaultTest, FailedAppendIsEioAndChangesNothing) {
  for (bool torn : {false, true}) {
    SCOPED_TRACE(torn ? "torn write" : "failed write");
    const std::string name = torn ? "torn" : "failed";
    ASSERT_OK_AND_ASSIGN(Attr a, store_->Create(kRootIno, name, S_IFREG | 0644, 0, 0));
    const std::string first = PatternData(2, 0, 50000);
    ASSERT_OK(WriteAll(store_.get(), a.ino, 0, first));
    env_->FailWrite(1, torn);
    EXPECT_ERRNO(EIO, store_->Write(a.ino, 50000, PatternData(3, 50000, 30000)));
    ASSERT_OK_AND_ASSIGN(Attr after, store_->GetAttr(a.ino));
    EXPECT_EQ(after.size, first.size());
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store_.get(), a.ino));
    EXPECT_EQ(got, first);
    // The next write goes through.
    const std::string more = PatternData(4, 50000, 20000);
    ASSERT_OK(WriteAll(store_.get(), a.ino, 50000, more));
    ASSERT_OK(store_->Fsync(a.ino, false));
    ASSERT_OK_AND_ASSIGN(got, ReadAll(store_.get(), a.ino));
    EXPECT_EQ(got, first + more);
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  for (const char* name : {"failed", "torn"}) {
    ASSERT_OK_AND_ASSIGN(Attr a, store_->Lookup(kRootIno, name));
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store_.get(), a.ino));
    EXPECT_EQ(got, PatternData(2, 0, 50000) + PatternData(4, 50000, 20000)) << name;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectFsckClean());
}

// ---- Bytes a write moves ----
// Bytes that were durable and that a later write moves elsewhere (an inline
// head folded into a record, a file's staged start copied into its data
// file) stay readable after a cut that keeps the index log's unsynced
// pages and loses the store's.
class RelocationCutTest : public ::testing::Test {
 protected:
  // Writes `first`, fsyncs, writes `second` at its end, cuts the power,
  // reboots and checks the file reads as either version.
  void CutAfterGrowing(const std::string& first, const std::string& second) {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir_.store(), PowerLossOptions(env_)));
    ASSERT_OK_AND_ASSIGN(Attr a, store->Create(kRootIno, "f", S_IFREG | 0644, 0, 0));
    ASSERT_OK(WriteAll(store.get(), a.ino, 0, first));
    ASSERT_OK(store->Fsync(a.ino, false));
    ASSERT_OK(WriteAll(store.get(), a.ino, first.size(), second));
    env_->PowerCut();
    ASSERT_OK(store->Close());
    store.reset();
    ASSERT_OK(env_->Restore(io::FaultInjectionEnv::IndexTail::kWritten).status());
    ASSERT_OK_AND_ASSIGN(store, Store::Open(dir_.store(), PowerLossOptions(env_)));
    ASSERT_OK_AND_ASSIGN(Attr b, store->Lookup(kRootIno, "f"));
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store.get(), b.ino));
    EXPECT_TRUE(got == first || got == first + second) << got.size() << " bytes";
    ASSERT_OK(store->Close());
  }
  TempDir dir_;
  std::shared_ptr<io::FaultInjectionEnv> env_ = io::FaultInjectionEnv::Make();
};

TEST_F(RelocationCutTest, InlineHeadFoldedIntoARecord) {
  CutAfterGrowing(PatternData(1, 0, 100), PatternData(2, 100, 4000));
}

TEST_F(RelocationCutTest, StagedStartCopiedIntoTheDataFile) {
  CutAfterGrowing(PatternData(3, 0, 64u << 10), PatternData(4, 64u << 10, 64u << 10));
}

// ---- A seal cut by power loss ----
// A seal is one commit of the index: after a cut the tree is sealed whole
// (every inode and the record of its root) or not at all, its files read
// as they were, and fsck finds nothing.
TEST(SealCutTest, TheTreeIsSealedWholeOrNotAtAll) {
  for (auto tail : {io::FaultInjectionEnv::IndexTail::kLost, io::FaultInjectionEnv::IndexTail::kWritten}) {
    for (bool sync_fails : {false, true}) {
      SCOPED_TRACE(std::string(tail == io::FaultInjectionEnv::IndexTail::kLost ? "tail lost" : "tail written") +
                   (sync_fails ? ", the seal's sync fails" : ""));
      TempDir dir;
      auto env = io::FaultInjectionEnv::Make();
      ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.store(), PowerLossOptions(env)));
      ASSERT_OK_AND_ASSIGN(Attr step, store->Mkdir(kRootIno, "step", 0755, 0, 0));
      std::vector<Ino> tree = {step.ino};
      std::map<Ino, std::string> data;
      // A seal holds the mutex of every inode of its tree at once:
      // ThreadSanitizer's deadlock detector tracks at most 64 locks held by
      // one thread, so the tree has 51 inodes.
      for (int d = 0; d < 10; ++d) {
        ASSERT_OK_AND_ASSIGN(Attr p, store->Mkdir(step.ino, "p" + std::to_string(d), 0755, 0, 0));
        tree.push_back(p.ino);
        for (int c = 0; c < 4; ++c) {
          ASSERT_OK_AND_ASSIGN(Attr f, store->Create(p.ino, std::to_string(c), S_IFREG | 0644, 0, 0));
          data[f.ino] = PatternData(f.ino, 0, 3000 + 20000 * c);
          ASSERT_OK(WriteAll(store.get(), f.ino, 0, data[f.ino]));
          tree.push_back(f.ino);
        }
      }
      ASSERT_OK(store->SyncAll());
      if (sync_fails) {
        // Bytes elsewhere that the seal's sync has to sync first, and fails
        // to: the seal's commit is in the index log, not yet synced.
        ASSERT_OK_AND_ASSIGN(Attr other, store->Create(kRootIno, "other", S_IFREG | 0644, 0, 0));
        ASSERT_OK(WriteAll(store.get(), other.ino, 0, PatternData(7, 0, 50000)));
        env->FailSync(1);
      }
      Status sealed = store->Seal(step.ino).status();
      EXPECT_EQ(sealed.ok(), !sync_fails) << sealed.ToString();
      env->PowerCut();
      (void)store->Close();
      store.reset();
      ASSERT_OK(env->Restore(tail).status());
      ASSERT_OK_AND_ASSIGN(store, Store::Open(dir.store(), PowerLossOptions(env)));
      size_t n = 0;
      for (Ino i : tree) {
        ASSERT_OK_AND_ASSIGN(Attr a, store->GetAttr(i));
        n += a.sealed ? 1 : 0;
      }
      EXPECT_TRUE(n == 0 || n == tree.size()) << n << " of " << tree.size() << " sealed";
      ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> records, store->SealedTrees());
      EXPECT_EQ(records.size(), n == 0 ? 0u : 1u);
      // A seal that returned is durable; one whose sync failed survives
      // only where the index log's unsynced tail reached the disk.
      const bool kept = sealed.ok() || tail == io::FaultInjectionEnv::IndexTail::kWritten;
      EXPECT_EQ(n, kept ? tree.size() : 0u);
      for (const auto& [ino, bytes] : data) {
        ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(store.get(), ino));
        EXPECT_TRUE(got == bytes) << "inode " << ino;
      }
      ASSERT_OK(store->Close());
      store.reset();
      // (Where the index log's tail reached the disk and the segments'
      // did not, /other's extents point past its segment's end, as any
      // unsynced file's may.)
      ASSERT_OK_AND_ASSIGN(FsckReport report, engine::Fsck(dir.store(), FsckOptions()));
      for (const FsckFinding& f : report.findings) {
        if (f.path == "/other" || f.kind == "truncated_segment") continue;
        EXPECT_TRUE(f.informational) << f.kind << " " << f.path << " " << f.detail;
      }
    }
  }
}

}  // namespace
}  // namespace ckptfs::engine::test
