// Two hosts of one shared store (docs/SHARED.md) as two Stores in one
// process, each with a host name and an io::HostCacheEnv of its own: what a
// host writes stays in its cache until it syncs, as on an NFS client, and
// the other host reads only what reached the files.
//
// Beside PostgreSQL as pg.shared_store_test (scripts/with-postgres.sh
// --meta sets CKPTFS_TEST_META); otherwise over an index in this process's
// memory (mem://, meta/shared_kv.h), which the two Stores share.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "engine/store.h"
#include "format/format.h"
#include "io/host_cache_env.h"
#include "peer/rendezvous.h"
#include "tests/engine/pattern.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(a_, OpenHost("a", env_a_));
    ASSERT_OK_AND_ASSIGN(b_, OpenHost("b", env_b_));
  }
  void TearDown() override {
    if (b_) {
      EXPECT_OK(b_->Close());
    }
    if (a_) {
      EXPECT_OK(a_->Close());
    }
  }
  Result<std::unique_ptr<Store>> OpenHost(const std::string& host,
                                          const std::shared_ptr<io::Env>& env,
                                          uint64_t data_file_min = 0) {
    StoreOptions o = TestOptions();
    if (data_file_min != 0) o.data_file_min = data_file_min;
    // Each store names an index of its own in memory (its SHARED file adds
    // a schema of its own to the name).
    if (o.meta.empty()) o.meta = "mem://shared_store_test";
    o.host = host;
    o.env = env;
    o.holder = "host " + host;
    o.segment_size = 1u << 20;  // the smallest: several sealed segments to compact
    return Store::Open(dir_.store(), o);
  }

  TempDir dir_;
  std::shared_ptr<io::HostCacheEnv> env_a_ = io::HostCacheEnv::Make();
  std::shared_ptr<io::HostCacheEnv> env_b_ = io::HostCacheEnv::Make();
  std::unique_ptr<Store> a_, b_;
};

// A file's bytes reach another host once its writer synced them: a shared
// store shows the other hosts its extents at once, and they fail to read
// bytes that are still in the writer's cache (EIO, never other bytes) until
// the writer's fsync flushes them.
TEST_F(SharedStoreTest, AnotherHostReadsAFileOnceItsWriterSyncedIt) {
  const std::string data = PatternData(7, 0, 200'000);
  ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), f.ino, 0, data));
  ASSERT_GT(env_a_->UnflushedBytes(), data.size() - 1);
  ASSERT_OK_AND_ASSIGN(std::string mine, ReadAll(a_.get(), f.ino));
  EXPECT_EQ(mine, data);

  ASSERT_OK_AND_ASSIGN(Attr seen, b_->Lookup(kRootIno, "f"));
  EXPECT_EQ(seen.size, data.size());
  b_->Reread(f.ino);
  Result<std::string> early = ReadAll(b_.get(), f.ino);
  ASSERT_FALSE(early.ok()) << "read bytes host a has not flushed";
  EXPECT_EQ(early.status().code(), EIO) << early.status().ToString();

  ASSERT_OK(a_->Fsync(f.ino, /*datasync=*/true));
  EXPECT_EQ(env_a_->UnflushedBytes(), 0u);
  b_->Reread(f.ino);
  ASSERT_OK_AND_ASSIGN(std::string theirs, ReadAll(b_.get(), f.ino));
  EXPECT_EQ(theirs, data);
}

// A host's client of the shared filesystem keeps the size of a file it has
// open (io::HostCacheEnv, as NFS and sshfs clients do). Bytes that another
// host appended since to a segment or a data file that this host has open
// read all the same once their writer synced them: the reader opens the
// file again, which asks the server.
TEST_F(SharedStoreTest, BytesAnotherHostAppendedToAFileThisHostHasOpen) {
  ASSERT_OK(b_->Close());
  ASSERT_OK(a_->Close());
  ASSERT_OK_AND_ASSIGN(a_, OpenHost("a", env_a_, /*data_file_min=*/1u << 20));
  ASSERT_OK_AND_ASSIGN(b_, OpenHost("b", env_b_, /*data_file_min=*/1u << 20));

  // b reads a file of a's, and so has a's segment open.
  const std::string first = PatternData(1, 0, 20'000);
  ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(kRootIno, "first", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), f.ino, 0, first));
  ASSERT_OK(a_->Fsync(f.ino, true));
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(b_.get(), f.ino));
  ASSERT_EQ(got, first);
  ASSERT_OK_AND_ASSIGN(EngineStats before, b_->GetStats());

  // a appends 50 files to that segment; b reads each at once.
  std::map<Ino, std::string> files;
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(Attr p, a_->Create(kRootIno, "p" + std::to_string(i), S_IFREG | 0644,
                                            0, 0, 0));
    files[p.ino] = PatternData(100 + i, 0, 16 << 10);
    ASSERT_OK(WriteAll(a_.get(), p.ino, 0, files[p.ino]));
    ASSERT_OK(a_->Fsync(p.ino, true));
  }
  for (const auto& [ino, data] : files) {
    ASSERT_OK_AND_ASSIGN(got, ReadAll(b_.get(), ino));
    ASSERT_EQ(got, data) << "inode " << ino;
  }
  ASSERT_OK_AND_ASSIGN(EngineStats after, b_->GetStats());
  EXPECT_GT(after.file_refreshes, before.file_refreshes);
  EXPECT_EQ(after.checksum_errors, before.checksum_errors);

  // The same with a large file's data file, which a writes on.
  std::string big = PatternData(2, 0, 3 << 20);
  ASSERT_OK_AND_ASSIGN(Attr g, a_->Create(kRootIno, "big", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), g.ino, 0, big));
  ASSERT_OK(a_->Fsync(g.ino, true));
  ASSERT_OK_AND_ASSIGN(got, ReadAll(b_.get(), g.ino));
  ASSERT_EQ(got, big);
  const std::string more = PatternData(2, big.size(), 2 << 20);
  ASSERT_OK(WriteAll(a_.get(), g.ino, big.size(), more));
  ASSERT_OK(a_->Fsync(g.ino, true));
  big += more;
  b_->Reread(g.ino);
  ASSERT_OK_AND_ASSIGN(got, ReadAll(b_.get(), g.ino));
  EXPECT_EQ(got, big);
  ASSERT_OK_AND_ASSIGN(EngineStats last, b_->GetStats());
  EXPECT_GT(last.file_refreshes, after.file_refreshes);
  ASSERT_OK_AND_ASSIGN(EngineStats mine, a_->GetStats());
  EXPECT_GT(mine.data_file_writes, 0u) << "the large file was not in a data file";
}

// Names are in the index: the other host sees each change at once, and
// conflicting changes get what a local filesystem answers.
TEST_F(SharedStoreTest, NamesAndConflictsAcrossHosts) {
  ASSERT_OK_AND_ASSIGN(Attr d, a_->Mkdir(kRootIno, "step_1.tmp", 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr seen, b_->Lookup(kRootIno, "step_1.tmp"));
  EXPECT_EQ(seen.ino, d.ino);
  ASSERT_OK(b_->Create(d.ino, "x", S_IFREG | 0644, 0, 0, 0).status());
  EXPECT_ERRNO(EEXIST, a_->Create(d.ino, "x", S_IFREG | 0644, 0, 0, 0));
  EXPECT_ERRNO(EEXIST, a_->Mkdir(d.ino, "x", 0755, 0, 0));
  EXPECT_ERRNO(ENOTEMPTY, a_->Rmdir(kRootIno, "step_1.tmp"));
  ASSERT_OK(a_->Rename(kRootIno, "step_1.tmp", kRootIno, "step_1", RenameMode::kNoReplace));
  EXPECT_ERRNO(ENOENT, b_->Lookup(kRootIno, "step_1.tmp"));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(kRootIno, "step_1"));
  EXPECT_EQ(seen.ino, d.ino);
  EXPECT_EQ(seen.nlink, 2u);
  ASSERT_OK(b_->Unlink(d.ino, "x"));
  ASSERT_OK(a_->Rmdir(kRootIno, "step_1"));
  EXPECT_ERRNO(ENOENT, b_->Lookup(kRootIno, "step_1"));
  // A create in a directory the other host removed.
  EXPECT_ERRNO(ENOENT, b_->Create(d.ino, "late", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr root, b_->GetAttr(kRootIno));
  EXPECT_EQ(root.nlink, 2u);
}

// Both hosts creating in one directory at once, two threads each: no error,
// no inode number handed out twice, and each host lists every name.
// A host looks up each name another host makes, changes, replaces and
// removes as it is at that moment, whatever inode the name named at its
// last lookup there. Looked up again unchanged, a name asks the index once:
// on PostgreSQL one round trip for the name and its inode's attributes.
TEST_F(SharedStoreTest, LookupsOfAnotherHostsNamesSeeEveryChange) {
  ASSERT_OK_AND_ASSIGN(Attr d, a_->Mkdir(kRootIno, "d", S_IFDIR | 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(d.ino, "f", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), f.ino, 0, "12345"));
  ASSERT_OK_AND_ASSIGN(Attr seen, b_->Lookup(d.ino, "f"));
  EXPECT_EQ(seen.ino, f.ino);
  EXPECT_EQ(seen.size, 5u);

  ASSERT_OK(WriteAll(a_.get(), f.ino, 5, "678"));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(d.ino, "f"));
  EXPECT_EQ(seen.ino, f.ino);
  EXPECT_EQ(seen.size, 8u) << "attributes as the other host left them";

  ASSERT_OK_AND_ASSIGN(Attr g, a_->Create(d.ino, "g", S_IFREG | 0600, 0, 0, 0));
  ASSERT_OK(a_->Rename(d.ino, "g", d.ino, "f", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(d.ino, "f"));
  EXPECT_EQ(seen.ino, g.ino) << "the name names another inode now";
  EXPECT_EQ(seen.mode & 0777, 0600u);
  EXPECT_EQ(seen.size, 0u);
  EXPECT_EQ(b_->Lookup(d.ino, "g").status().code(), ENOENT);

  ASSERT_OK(a_->Unlink(d.ino, "f"));
  EXPECT_EQ(b_->Lookup(d.ino, "f").status().code(), ENOENT);
  ASSERT_OK_AND_ASSIGN(Attr h, a_->Mkdir(d.ino, "f", S_IFDIR | 0700, 0, 0));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(d.ino, "f"));
  EXPECT_EQ(seen.ino, h.ino);
  EXPECT_TRUE(S_ISDIR(seen.mode));
  ASSERT_OK(a_->Rmdir(d.ino, "f"));
  EXPECT_EQ(b_->Lookup(d.ino, "f").status().code(), ENOENT);

  // A name in a file, and in a directory that is gone.
  ASSERT_OK_AND_ASSIGN(Attr x, a_->Create(kRootIno, "x", S_IFREG | 0644, 0, 0, 0));
  EXPECT_EQ(b_->Lookup(x.ino, "y").status().code(), ENOTDIR);
  ASSERT_OK(a_->Rename(kRootIno, "d", kRootIno, "e", RenameMode::kNoReplace));
  ASSERT_OK(a_->Rmdir(kRootIno, "e"));
  EXPECT_EQ(b_->Lookup(d.ino, "f").status().code(), ENOENT);

  // An unchanged name asks the index once a lookup.
  ASSERT_OK_AND_ASSIGN(Attr k, a_->Mkdir(kRootIno, "k", S_IFDIR | 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr kf, a_->Create(k.ino, "kf", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(b_->Lookup(k.ino, "kf").status());
  ASSERT_OK_AND_ASSIGN(EngineStats before, b_->GetStats());
  constexpr int kLookups = 100;
  for (int i = 0; i < kLookups; ++i) {
    ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(k.ino, "kf"));
    ASSERT_EQ(seen.ino, kf.ino);
  }
  ASSERT_OK_AND_ASSIGN(EngineStats after, b_->GetStats());
  if (before.index_round_trips != 0) {
    // Beside them, the host's polls: a few a second.
    EXPECT_LE(after.index_round_trips - before.index_round_trips, kLookups + 20u);
  }
}

// A directory that no host owns and that stays unchanged is read under a
// read grant (docs/SHARED.md, "Read grants"): its attributes and the names
// read in it, found or not, cost no round trip while it runs. A change by
// another host has the reader give it up first, so the next call there
// sees the change; a change by the reader itself keeps it.
TEST_F(SharedStoreTest, AQuietDirectoryIsReadUnderAGrantUntilAnotherHostChangesIt) {
  ASSERT_OK_AND_ASSIGN(Attr q, a_->Mkdir(kRootIno, "q", S_IFDIR | 0755, 0, 0));
  ASSERT_OK(b_->Create(q.ino, "bf", S_IFREG | 0644, 0, 0, 0).status());  // a owns q no more
  ASSERT_OK_AND_ASSIGN(Attr af, a_->Create(q.ino, "af", S_IFREG | 0644, 0, 0, 0));
  auto settle = [&]() {
    // Two reads of the unchanged directory, Quiet's time apart.
    ASSERT_OK(b_->GetAttr(q.ino).status());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ASSERT_OK(b_->GetAttr(q.ino).status());
  };
  settle();
  ASSERT_OK_AND_ASSIGN(EngineStats b0, b_->GetStats());
  EXPECT_EQ(b0.read_grants, 1u);
  ASSERT_OK_AND_ASSIGN(Attr seen, b_->Lookup(q.ino, "af"));
  EXPECT_EQ(seen.ino, af.ino);
  EXPECT_EQ(b_->Lookup(q.ino, "none").status().code(), ENOENT);

  ASSERT_OK_AND_ASSIGN(EngineStats before, b_->GetStats());
  constexpr int kReads = 50;
  for (int i = 0; i < kReads; ++i) {
    ASSERT_OK_AND_ASSIGN(seen, b_->GetAttr(q.ino));
    ASSERT_EQ(seen.nlink, 2u);
    ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(q.ino, "af"));
    ASSERT_EQ(seen.ino, af.ino);
    ASSERT_EQ(b_->Lookup(q.ino, "none").status().code(), ENOENT);
  }
  ASSERT_OK_AND_ASSIGN(EngineStats after, b_->GetStats());
  if (before.index_round_trips != 0) {
    // The file's attributes (the lookup's reply) and the host's polls;
    // 150 without the grant.
    EXPECT_LE(after.index_round_trips - before.index_round_trips, kReads + 15u);
  }

  // Another host's changes, each seen by the next call.
  ASSERT_OK_AND_ASSIGN(Attr none, a_->Create(q.ino, "none", S_IFREG | 0600, 0, 0, 0));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(q.ino, "none"));
  EXPECT_EQ(seen.ino, none.ino) << "a name that was missing";
  ASSERT_OK_AND_ASSIGN(Attr qa, a_->GetAttr(q.ino));
  ASSERT_OK_AND_ASSIGN(seen, b_->GetAttr(q.ino));
  EXPECT_EQ(seen.ctime.sec, qa.ctime.sec);
  EXPECT_EQ(seen.ctime.nsec, qa.ctime.nsec);
  ASSERT_OK_AND_ASSIGN(EngineStats a1, a_->GetStats());
  ASSERT_OK_AND_ASSIGN(EngineStats b1, b_->GetStats());
  EXPECT_EQ(b1.read_grants_given_up, 1u);
  EXPECT_GE(a1.read_grants_asked, 1u);
  ASSERT_OK(a_->Unlink(q.ino, "af"));
  EXPECT_EQ(b_->Lookup(q.ino, "af").status().code(), ENOENT);
  SetAttrRequest chmod;
  chmod.mode = 0700;
  ASSERT_OK(a_->SetAttr(q.ino, chmod).status());
  ASSERT_OK_AND_ASSIGN(seen, b_->GetAttr(q.ino));
  EXPECT_EQ(seen.mode & 07777, 0700u);

  // Quiet again, past the wait after a give-up: a change by the reader
  // itself asks no one and keeps its grant.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  settle();
  ASSERT_OK_AND_ASSIGN(EngineStats b2, b_->GetStats());
  EXPECT_EQ(b2.read_grants, 2u);
  ASSERT_OK_AND_ASSIGN(Attr bg, b_->Create(q.ino, "bg", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK_AND_ASSIGN(seen, b_->Lookup(q.ino, "bg"));
  EXPECT_EQ(seen.ino, bg.ino);
  ASSERT_OK_AND_ASSIGN(seen, a_->Lookup(q.ino, "bg"));
  EXPECT_EQ(seen.ino, bg.ino);
  ASSERT_OK_AND_ASSIGN(EngineStats b3, b_->GetStats());
  EXPECT_EQ(b3.read_grants_asked, 0u);
  EXPECT_EQ(b3.read_grants_given_up, 1u);
  ASSERT_OK(a_->Unlink(q.ino, "bg"));
  EXPECT_EQ(b_->Lookup(q.ino, "bg").status().code(), ENOENT);
  ASSERT_OK_AND_ASSIGN(EngineStats b4, b_->GetStats());
  EXPECT_EQ(b4.read_grants_given_up, 2u);
}

TEST_F(SharedStoreTest, CreatesInOneDirectoryFromTwoHostsAtOnce) {
  ASSERT_OK_AND_ASSIGN(Attr d, a_->Mkdir(kRootIno, "hot", 0755, 0, 0));
  constexpr int kPerThread = 100;
  std::vector<std::vector<Ino>> inos(4);
  std::vector<Status> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Store* s = t % 2 == 0 ? a_.get() : b_.get();
      for (int i = 0; i < kPerThread; ++i) {
        Result<Attr> r = s->Create(d.ino, "t" + std::to_string(t) + "_" + std::to_string(i),
                                   S_IFREG | 0644, 0, 0, 0);
        if (!r.ok()) {
          errors[t] = r.status();
          return;
        }
        inos[t].push_back(r->ino);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<Ino> all;
  for (int t = 0; t < 4; ++t) {
    EXPECT_OK(errors[t]);
    all.insert(inos[t].begin(), inos[t].end());
  }
  EXPECT_EQ(all.size(), 4u * kPerThread) << "an inode number was handed out twice";
  for (Store* s : {a_.get(), b_.get()}) {
    ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> list, ListDir(s, d.ino));
    EXPECT_EQ(list.size(), 4u * kPerThread);
  }
}

// One mount per host name: a second open of a held host is EBUSY naming
// the holder; each host appends only to segments of its own id range.
TEST_F(SharedStoreTest, AHostIsHeldByOneOpenAndWritesItsOwnSegments) {
  Result<std::unique_ptr<Store>> again = OpenHost("a", io::HostCacheEnv::Make());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), EBUSY) << again.status().ToString();
  const StoreHolder* who = again.status().payload<StoreHolder>();
  ASSERT_NE(who, nullptr);
  EXPECT_EQ(who->holder, "host a");

  for (Store* s : {a_.get(), b_.get()}) {
    const std::string name = s == a_.get() ? "from_a" : "from_b";
    ASSERT_OK_AND_ASSIGN(Attr f, s->Create(kRootIno, name, S_IFREG | 0644, 0, 0, 0));
    ASSERT_OK(WriteAll(s, f.ino, 0, PatternData(f.ino, 0, 100'000)));
    ASSERT_OK(s->Fsync(f.ino, true));
  }
  std::set<uint64_t> hosts;
  for (Store* s : {a_.get(), b_.get()}) {
    ASSERT_OK_AND_ASSIGN(Attr f, s->Lookup(kRootIno, s == a_.get() ? "from_a" : "from_b"));
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, s->GetExtents(f.ino));
    ASSERT_FALSE(ex.empty());
    for (const ExtentInfo& e : ex) hosts.insert(e.value.segment_id >> format::kHostIdShift);
  }
  EXPECT_EQ(hosts.size(), 2u) << "the two hosts appended to segments of one id range";
  EXPECT_EQ(hosts.count(0), 0u) << "a shared store's host has id 0";
}

// A host alone trusts what it read and wrote since it found itself alone
// (attributes, files it made, extended attributes found absent); a host
// that opens beside it waits until that trust has run out, and its changes
// are seen at once.
TEST_F(SharedStoreTest, AHostAloneTrustsItsCachesUntilAnotherHostOpens) {
  // a reads the host records every second beside another host: within a
  // few it finds itself alone.
  auto alone = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (a_->CacheSeconds() == 0.0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return a_->CacheSeconds() > 0.0;
  };
  ASSERT_OK(b_->Close());
  b_.reset();
  EXPECT_TRUE(alone()) << "alone, a's kernel may cache";
  ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), f.ino, 0, PatternData(1, 0, 5000)));
  ASSERT_OK(a_->Fsync(f.ino, true));
  // Held open, as the kernel's knowledge of an inode holds it in a mount:
  // what a remembers of it stays.
  ASSERT_OK(a_->OpenFile(f.ino));
  ASSERT_OK_AND_ASSIGN(Attr before, a_->GetAttr(f.ino));
  EXPECT_EQ(before.size, 5000u);
  EXPECT_ERRNO(ENODATA, a_->GetXattr(f.ino, "user.tag"));

  const auto opening = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(b_, OpenHost("b", env_b_));
  EXPECT_GE(std::chrono::steady_clock::now() - opening, std::chrono::milliseconds(1000))
      << "b served before a's grant ran out";
  EXPECT_EQ(a_->CacheSeconds(), 0.0) << "beside b, a's kernel caches nothing";
  EXPECT_EQ(b_->CacheSeconds(), 0.0);
  SetAttrRequest req;
  req.size = 1234;
  ASSERT_OK(b_->SetAttr(f.ino, req).status());
  ASSERT_OK(b_->SetXattr(f.ino, "user.tag", "from b", 0));
  ASSERT_OK_AND_ASSIGN(Attr g, b_->Create(kRootIno, "g", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr seen, a_->Lookup(kRootIno, "g"));
  EXPECT_EQ(seen.ino, g.ino);
  ASSERT_OK(b_->SyncAll());

  // b goes before a looks at f again: a is alone again, and trusts nothing
  // from before b came.
  ASSERT_OK(b_->Close());
  b_.reset();
  EXPECT_TRUE(alone());
  ASSERT_OK_AND_ASSIGN(Attr after, a_->GetAttr(f.ino));
  EXPECT_EQ(after.size, 1234u);
  ASSERT_OK_AND_ASSIGN(std::string tag, a_->GetXattr(f.ino, "user.tag"));
  EXPECT_EQ(tag, "from b");
  a_->Reread(f.ino);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(a_.get(), f.ino));
  EXPECT_EQ(got, PatternData(1, 0, 1234));
  ASSERT_OK(a_->Release(f.ino));
}

// A file that host a removes while host b has it open: b reads the bytes it
// found at its open while they exist, then ESTALE (as NFS answers), never
// zeros.
TEST_F(SharedStoreTest, AFileRemovedByAnotherHostReadsEstaleNotZeros) {
  const std::string data = PatternData(3, 0, 300'000);
  ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(a_.get(), f.ino, 0, data));
  ASSERT_OK(a_->Fsync(f.ino, true));
  ASSERT_OK(b_->OpenFile(f.ino));
  b_->Reread(f.ino);
  ASSERT_OK_AND_ASSIGN(Attr seen, b_->GetAttr(f.ino));  // b knows its size
  EXPECT_EQ(seen.size, data.size());
  ASSERT_OK(a_->Unlink(kRootIno, "f"));
  std::string buf(data.size(), '\0');
  Result<size_t> n = b_->Read(f.ino, 0, buf.size(), buf.data());
  ASSERT_FALSE(n.ok()) << "read " << *n << " bytes of a removed file";
  EXPECT_EQ(n.status().code(), ESTALE) << n.status().ToString();
  ASSERT_OK(b_->Release(f.ino));
}

// A tree one host sealed is sealed for every host: another host that has
// a file of it open and written gets EROFS for its next write, sees the
// seal in the attributes, and may cache them for ever; removing the tree
// stays allowed from either host.
TEST_F(SharedStoreTest, ATreeSealedOnOneHostIsSealedOnEveryHost) {
  ASSERT_OK_AND_ASSIGN(Attr d, a_->Mkdir(kRootIno, "step", 0755, 0, 0));
  ASSERT_OK_AND_ASSIGN(Attr f, b_->Create(d.ino, "rank1", S_IFREG | 0644, 0, 0, 0));
  ASSERT_OK(WriteAll(b_.get(), f.ino, 0, "written by b"));
  ASSERT_OK(b_->OpenFile(f.ino));
  ASSERT_OK(b_->Fsync(f.ino, true));
  ASSERT_OK_AND_ASSIGN(uint64_t n, a_->Seal(d.ino));
  EXPECT_EQ(n, 2u);
  Status st = b_->Write(f.ino, 0, "more").status();
  EXPECT_EQ(st.code(), EROFS) << st.ToString();
  EXPECT_EQ(b_->Create(d.ino, "rank2", S_IFREG | 0644, 0, 0, 0).status().code(), EROFS);
  ASSERT_OK_AND_ASSIGN(Attr seen, b_->GetAttr(f.ino));
  EXPECT_TRUE(seen.sealed);
  EXPECT_TRUE(b_->KnownSealed(f.ino));
  EXPECT_EQ(b_->CacheSecondsOf(f.ino), std::numeric_limits<double>::infinity());
  ASSERT_OK_AND_ASSIGN(std::string theirs, ReadAll(a_.get(), f.ino));
  EXPECT_EQ(theirs, "written by b");
  ASSERT_OK(b_->Release(f.ino));
  ASSERT_OK(b_->Unlink(d.ino, "rank1"));
  ASSERT_OK(a_->Rmdir(kRootIno, "step"));
}

// Writes a tree under root's `name` on `s`: three directories of four
// files of up to 40 KB, an extended attribute on the first file; returns
// the files' paths and bytes.
std::map<std::string, std::string> WriteTree(Store* s, const std::string& name, Ino* root) {
  std::map<std::string, std::string> files;
  Result<Attr> d = s->Mkdir(kRootIno, name, 0755, 0, 0);
  EXPECT_OK(d.status());
  *root = d->ino;
  for (int i = 0; i < 3; ++i) {
    Result<Attr> sub = s->Mkdir(d->ino, "p" + std::to_string(i), 0755, 0, 0);
    EXPECT_OK(sub.status());
    for (int j = 0; j < 4; ++j) {
      Result<Attr> f = s->Create(sub->ino, "c" + std::to_string(j), S_IFREG | 0644, 0, 0, 0);
      EXPECT_OK(f.status());
      const std::string data = PatternData(f->ino, 0, j == 0 ? 100 : 10'000 * j);
      EXPECT_OK(WriteAll(s, f->ino, 0, data));
      files["p" + std::to_string(i) + "/c" + std::to_string(j)] = data;
      if (i == 0 && j == 0) EXPECT_OK(s->SetXattr(f->ino, "user.tag", "zarr", 0));
    }
  }
  EXPECT_OK(s->SyncAll());
  return files;
}

// Removes the tree WriteTree made under root's `name` on `s`, but for the
// files in `gone`, removed before.
void RemoveTree(Store* s, Ino root, const std::string& name,
                const std::set<std::string>& gone = {}) {
  for (int i = 0; i < 3; ++i) {
    const std::string dir = "p" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(Attr sub, s->Lookup(root, dir));
    for (int j = 0; j < 4; ++j) {
      const std::string file = "c" + std::to_string(j);
      if (!gone.count(dir + "/" + file)) ASSERT_OK(s->Unlink(sub.ino, file));
    }
    ASSERT_OK(s->Rmdir(root, dir));
  }
  ASSERT_OK(s->Rmdir(kRootIno, name));
}

// Walks the tree under `root` on `s` as a restore does (lookups, listings,
// attributes, reads, an extended attribute) and checks every byte, and
// that every file is `sealed` or not.
void RestoreTree(Store* s, Ino root, const std::map<std::string, std::string>& files,
                 bool sealed = true) {
  std::set<std::string> listed;
  ASSERT_OK(s->ReadDir(root, "", [&](const DirEntry& e) {
    listed.insert(e.name);
    return true;
  }));
  EXPECT_EQ(listed, (std::set<std::string>{"p0", "p1", "p2"}));
  for (const auto& [path, data] : files) {
    const std::string dir = path.substr(0, path.find('/'));
    ASSERT_OK_AND_ASSIGN(Attr d, s->Lookup(root, dir));
    ASSERT_OK_AND_ASSIGN(Attr f, s->Lookup(d.ino, path.substr(path.find('/') + 1)));
    EXPECT_EQ(f.sealed, sealed) << path;
    EXPECT_EQ(f.size, data.size()) << path;
    ASSERT_OK(s->OpenFile(f.ino));
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s, f.ino));
    EXPECT_EQ(got, data) << path;
    ASSERT_OK(s->Release(f.ino));
  }
  ASSERT_OK_AND_ASSIGN(Attr p0, s->Lookup(root, "p0"));
  ASSERT_OK_AND_ASSIGN(Attr c0, s->Lookup(p0.ino, "c0"));
  ASSERT_OK_AND_ASSIGN(std::string tag, s->GetXattr(c0.ino, "user.tag"));
  EXPECT_EQ(tag, "zarr");
  EXPECT_ERRNO(ENOENT, s->Lookup(p0.ino, "c9"));
}

// Another host reads a sealed tree from its snapshot: once it has looked
// up the tree's root, its names, attributes, listings, extents and extended
// attributes are answered with no round trip to the index (the only ones
// left are the hosts watch's polls, a few a second). The sealing host reads
// it from the snapshot it wrote.
TEST_F(SharedStoreTest, AnotherHostReadsASealedTreeFromItsSnapshot) {
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  // The same walk before the seal, for its round trips.
  ASSERT_OK_AND_ASSIGN(EngineStats before, b_->GetStats());
  ASSERT_OK(b_->Lookup(kRootIno, "step").status());
  RestoreTree(b_.get(), root, files, /*sealed=*/false);
  ASSERT_OK_AND_ASSIGN(EngineStats unsealed, b_->GetStats());
  EXPECT_EQ(unsealed.snapshot_reads, 0u);

  ASSERT_OK_AND_ASSIGN(uint64_t n, a_->Seal(root));
  EXPECT_EQ(n, 1u + 3 + 12);
  ASSERT_OK_AND_ASSIGN(EngineStats sa, a_->GetStats());
  EXPECT_EQ(sa.sealed_trees_held, 1u);
  EXPECT_EQ(sa.sealed_inodes_held, 16u);

  EXPECT_EQ(unsealed.sealed_trees_held, 0u);
  ASSERT_OK_AND_ASSIGN(Attr r, b_->Lookup(kRootIno, "step"));  // reads the snapshot
  EXPECT_TRUE(r.sealed);
  ASSERT_OK_AND_ASSIGN(EngineStats held, b_->GetStats());
  EXPECT_EQ(held.sealed_trees_held, 1u);
  EXPECT_EQ(held.sealed_inodes_held, 16u);
  // The root's name and the directories above it are kept a moment: a
  // walk by full paths asks nothing either.
  EXPECT_EQ(b_->CacheSecondsOfName(kRootIno, root), 1.0);
  EXPECT_EQ(b_->CacheSecondsOf(kRootIno), 1.0);
  RestoreTree(b_.get(), root, files);
  ASSERT_OK_AND_ASSIGN(EngineStats after, b_->GetStats());
  // 12 files: a lookup, attributes and extents each, and more.
  EXPECT_GE(after.snapshot_reads - held.snapshot_reads, 3u * 12);
  const uint64_t walk = unsealed.index_round_trips - before.index_round_trips;
  const uint64_t sealed_walk = after.index_round_trips - held.index_round_trips;
  EXPECT_LE(sealed_walk * 4, walk) << "the walk of a held tree asked the index " << sealed_walk
                                   << " times; unsealed, " << walk;
  RestoreTree(a_.get(), root, files);
  ASSERT_OK_AND_ASSIGN(EngineStats sa2, a_->GetStats());
  EXPECT_GE(sa2.snapshot_reads - sa.snapshot_reads, 3u * 12);
}

// Hosts read a sealed tree's files from the host that serves each
// (rendezvous over the hosts mounted), never a byte that fails its
// checksum: a host whose storage returns damaged bytes serves them, and
// the reader reads the storage itself instead; once that host is gone,
// the other reads on.
TEST_F(SharedStoreTest, HostsReadSealedFilesFromTheHostThatServesEach) {
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  ASSERT_OK_AND_ASSIGN(uint64_t sealed, a_->Seal(root));
  EXPECT_EQ(sealed, 1u + 3 + 12);
  // Which host serves the segments of the tree's files.
  std::set<uint64_t> segments;
  for (const auto& [path, data] : files) {
    const std::string dir = path.substr(0, path.find('/'));
    ASSERT_OK_AND_ASSIGN(Attr d, a_->Lookup(root, dir));
    ASSERT_OK_AND_ASSIGN(Attr f, a_->Lookup(d.ino, path.substr(path.find('/') + 1)));
    ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> ex, a_->GetExtents(f.ino));
    for (const ExtentInfo& e : ex) {
      if (!e.value.is_inline && !e.value.in_data_file) segments.insert(e.value.segment_id);
    }
  }
  ASSERT_FALSE(segments.empty());
  const std::vector<std::string> hosts = {"a", "b"};
  bool a_serves = false, a_serves_all = true;
  for (uint64_t id : segments) {
    const bool a = peer::RendezvousOwner(hosts, format::SegmentFileName(id)) == 0;
    a_serves |= a;
    a_serves_all &= a;
  }
  EXPECT_FALSE(a_->PeerAddress().empty());
  EXPECT_FALSE(b_->PeerAddress().empty());

  RestoreTree(b_.get(), root, files);
  ASSERT_OK_AND_ASSIGN(EngineStats sb, b_->GetStats());
  ASSERT_OK_AND_ASSIGN(EngineStats sa, a_->GetStats());
  EXPECT_EQ(sb.peer_failures, 0u);
  EXPECT_EQ(sb.peer_rejected, 0u);
  if (a_serves) {
    EXPECT_GE(sb.peer_reads, 1u);
    EXPECT_EQ(sa.peer_bytes_served, sb.peer_read_bytes);
    EXPECT_EQ(sa.peer_connections, 1u);
    // What a serves, b did not read from the storage.
    if (a_serves_all) EXPECT_EQ(sb.backing_read_bytes, 0u);
  } else {
    EXPECT_EQ(sb.peer_reads, 0u);
    EXPECT_EQ(sa.peer_requests, 0u);
  }

  // Host a's storage flips a byte of every 4 KiB it reads: what it serves
  // fails its checksum, and b reads the storage itself.
  env_a_->SetReadFault([](const std::string& path, uint64_t, char* buf, size_t n) {
    if (path.find("/segments/") == std::string::npos) return;
    for (size_t i = 100; i < n; i += 4096) buf[i] ^= 0x20;
  });
  a_->DropCache();
  b_->DropCache();
  RestoreTree(b_.get(), root, files);
  env_a_->SetReadFault(nullptr);
  ASSERT_OK_AND_ASSIGN(EngineStats sb2, b_->GetStats());
  if (a_serves) {
    EXPECT_GE(sb2.peer_rejected, 1u);
  } else {
    EXPECT_EQ(sb2.peer_rejected, 0u);
  }
  EXPECT_EQ(sb2.checksum_errors, 0u);

  // Host a gone: b reads on, from the storage.
  EXPECT_OK(a_->Close());
  a_.reset();
  b_->DropCache();
  RestoreTree(b_.get(), root, files);
}

// A sealed tree's large files: their data files' blocks come from the
// host that serves each, checked; damaged ones are read from the storage.
TEST_F(SharedStoreTest, HostsReadSealedDataFilesFromTheHostThatServesEach) {
  ASSERT_OK(b_->Close());
  ASSERT_OK(a_->Close());
  ASSERT_OK_AND_ASSIGN(a_, OpenHost("a", env_a_, /*data_file_min=*/1u << 20));
  ASSERT_OK_AND_ASSIGN(b_, OpenHost("b", env_b_, /*data_file_min=*/1u << 20));
  ASSERT_OK_AND_ASSIGN(Attr dir, a_->Mkdir(kRootIno, "ranks", 0755, 0, 0));
  std::map<std::string, std::string> files;
  bool a_serves = false;
  const std::vector<std::string> hosts = {"a", "b"};
  for (int r = 0; r < 6; ++r) {
    const std::string name = "rank" + std::to_string(r);
    ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(dir.ino, name, S_IFREG | 0644, 0, 0, 0));
    files[name] = PatternData(f.ino, 0, 3 << 20);
    ASSERT_OK(WriteAll(a_.get(), f.ino, 0, files[name]));
    a_serves |= peer::RendezvousOwner(hosts, format::DataFileName(f.ino)) == 0;
  }
  ASSERT_OK(a_->SyncAll());
  ASSERT_OK(a_->Seal(dir.ino).status());
  auto restore = [&] {
    ASSERT_OK_AND_ASSIGN(Attr d, b_->Lookup(kRootIno, "ranks"));
    for (const auto& [name, data] : files) {
      ASSERT_OK_AND_ASSIGN(Attr f, b_->Lookup(d.ino, name));
      EXPECT_TRUE(f.sealed);
      ASSERT_OK(b_->OpenFile(f.ino));
      ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(b_.get(), f.ino));
      EXPECT_TRUE(got == data) << name;
      ASSERT_OK(b_->Release(f.ino));
    }
  };
  restore();
  ASSERT_OK_AND_ASSIGN(EngineStats sb, b_->GetStats());
  EXPECT_EQ(sb.peer_failures + sb.peer_rejected, 0u);
  if (a_serves) EXPECT_GE(sb.peer_read_bytes, 1u << 20);

  env_a_->SetReadFault([](const std::string& path, uint64_t, char* buf, size_t n) {
    if (path.find("/data/") == std::string::npos) return;
    for (size_t i = 100; i < n; i += 4096) buf[i] ^= 0x01;
  });
  a_->DropCache();
  b_->DropCache();
  restore();
  env_a_->SetReadFault(nullptr);
  ASSERT_OK_AND_ASSIGN(EngineStats sb2, b_->GetStats());
  if (a_serves) EXPECT_GE(sb2.peer_rejected, 1u);
  EXPECT_EQ(sb2.checksum_errors, 0u);
}

// Hosts that come and go while another restores a sealed tree move the
// files they serve; the restore reads every byte right throughout.
TEST_F(SharedStoreTest, HostsComingAndGoingDuringARestoreMoveNoWrongByte) {
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  ASSERT_OK(a_->Seal(root).status());
  std::atomic<bool> done{false};
  std::thread restorer([&] {
    for (int round = 0; !done || round < 3; ++round) {
      b_->DropCache();
      RestoreTree(b_.get(), root, files);
    }
  });
  auto env_c = io::HostCacheEnv::Make();
  for (int i = 0; i < 2; ++i) {
    Result<std::unique_ptr<Store>> c = OpenHost("c", env_c);
    ASSERT_OK(c.status());
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // seen by b
    c.value()->DropCache();
    EXPECT_OK(c.value()->Close());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_OK(a_->Close());  // the writer, which may serve the tree
  a_.reset();
  done = true;
  restorer.join();
  ASSERT_OK_AND_ASSIGN(EngineStats sb, b_->GetStats());
  EXPECT_EQ(sb.peer_rejected, 0u);
  EXPECT_EQ(sb.checksum_errors, 0u);
}

// A seal of a tree another host made asks that host for all of it at once,
// and both read it sealed.
TEST_F(SharedStoreTest, ASealAsksTheOwnerOfTheTreeForAllOfIt) {
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(b_.get(), "step", &root);
  ASSERT_OK_AND_ASSIGN(EngineStats a0, a_->GetStats());
  ASSERT_OK_AND_ASSIGN(EngineStats b0, b_->GetStats());
  ASSERT_OK_AND_ASSIGN(uint64_t n, a_->Seal(root));
  EXPECT_EQ(n, 16u);
  ASSERT_OK_AND_ASSIGN(EngineStats a1, a_->GetStats());
  ASSERT_OK_AND_ASSIGN(EngineStats b1, b_->GetStats());
  EXPECT_EQ(a1.owned_asked - a0.owned_asked, 16u);
  EXPECT_EQ(b1.owned_given_up - b0.owned_given_up, 16u);
  // Told by the index's notification, not found by its next poll.
  EXPECT_GE(b1.owned_requests_heard - b0.owned_requests_heard, 1u);
  ASSERT_OK(b_->Lookup(kRootIno, "step").status());
  RestoreTree(b_.get(), root, files);
  RestoreTree(a_.get(), root, files);
  ASSERT_OK_AND_ASSIGN(EngineStats b2, b_->GetStats());
  EXPECT_EQ(b2.sealed_trees_held, 1u);
}

// What the kernel writes into a file's data file (passthrough).
void WriteDirectly(const std::string& path, uint64_t offset, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(data.size()));
  ::close(fd);
}

// A host that writes files of a tree straight into their data files (the
// kernel's passthrough writes) may close them after another host sealed
// the tree: the close leaves the seal as it is, whether the data file is
// as the seal holds it (nothing to adopt) or was written on after the seal
// (EROFS, those bytes are not the file's).
TEST_F(SharedStoreTest, AHostClosingFilesOfATreeAnotherHostSealedLeavesTheSeal) {
  ASSERT_OK(b_->Close());
  ASSERT_OK(a_->Close());
  // Over the local filesystem: the kernel's writes are its own.
  ASSERT_OK_AND_ASSIGN(a_, OpenHost("a", io::Env::Posix(), /*data_file_min=*/1u << 20));
  ASSERT_OK_AND_ASSIGN(b_, OpenHost("b", io::Env::Posix(), /*data_file_min=*/1u << 20));
  ASSERT_OK_AND_ASSIGN(Attr step, a_->Mkdir(kRootIno, "step", S_IFDIR | 0755, 0, 0));
  std::map<std::string, std::string> want;
  std::map<std::string, Ino> inos;
  std::map<std::string, std::string> paths;
  for (const std::string name : {"kept", "written_on"}) {
    ASSERT_OK_AND_ASSIGN(Attr f, a_->Create(step.ino, name, S_IFREG | 0644, 0, 0));
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, a_->BeginDirectWrite(f.ino));
    ASSERT_TRUE(path.has_value()) << name;
    want[name] = PatternData(static_cast<uint64_t>(f.ino), 0, (2u << 20) + 7);
    ASSERT_NO_FATAL_FAILURE(WriteDirectly(*path, 0, want[name]));
    ASSERT_OK(a_->AdoptDirectWrites(f.ino));  // a flush
    ASSERT_OK(a_->Fsync(f.ino, true));
    inos[name] = f.ino;
    paths[name] = *path;
  }
  ASSERT_OK_AND_ASSIGN(uint64_t n, b_->Seal(step.ino));
  EXPECT_EQ(n, 3u);
  ASSERT_NO_FATAL_FAILURE(WriteDirectly(paths["written_on"], want["written_on"].size(), "after the seal"));
  EXPECT_OK(a_->EndDirectWrite(inos["kept"]));
  EXPECT_EQ(a_->EndDirectWrite(inos["written_on"]).code(), EROFS);
  for (Store* h : {a_.get(), b_.get()}) {
    for (const auto& [name, data] : want) {
      h->Reread(inos[name]);
      ASSERT_OK_AND_ASSIGN(Attr attr, h->GetAttr(inos[name]));
      EXPECT_TRUE(attr.sealed) << name;
      EXPECT_EQ(attr.size, data.size()) << name;
      ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(h, inos[name]));
      EXPECT_TRUE(got == data) << name << ": " << got.size() << " bytes";
    }
  }
  ASSERT_OK(b_->Close());
  b_.reset();
  ASSERT_OK(a_->Close());
  a_.reset();
  ASSERT_OK_AND_ASSIGN(FsckReport report, engine::Fsck(dir_.store(), FsckOptions()));
  EXPECT_TRUE(report.clean());
  for (const FsckFinding& f : report.findings) EXPECT_TRUE(f.informational) << f.kind << " " << f.path << ": " << f.detail;
}

// A removal inside a held tree stops its host reading the snapshot; the
// removal of the whole tree by another host is seen at the next lookup of
// its root.
TEST_F(SharedStoreTest, ARemovalEndsTheReadsOfASnapshot) {
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  ASSERT_OK(a_->Seal(root).status());
  ASSERT_OK(b_->Lookup(kRootIno, "step").status());
  RestoreTree(b_.get(), root, files);
  ASSERT_OK_AND_ASSIGN(Attr p1, b_->Lookup(root, "p1"));
  ASSERT_OK(b_->Unlink(p1.ino, "c3"));
  ASSERT_OK_AND_ASSIGN(EngineStats sb, b_->GetStats());
  EXPECT_EQ(sb.sealed_trees_held, 0u);
  EXPECT_ERRNO(ENOENT, b_->Lookup(p1.ino, "c3"));
  ASSERT_OK_AND_ASSIGN(Attr c2, b_->Lookup(p1.ino, "c2"));
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(b_.get(), c2.ino));
  EXPECT_EQ(got, files.at("p1/c2"));

  // a removes the tree; b's next lookup of its root finds nothing.
  RemoveTree(a_.get(), root, "step", {"p1/c3"});
  EXPECT_ERRNO(ENOENT, b_->Lookup(kRootIno, "step"));
  EXPECT_EQ(b_->CacheSecondsOf(kRootIno), 0.0) << "no held tree lies under it";
  ASSERT_OK_AND_ASSIGN(EngineStats sa, a_->GetStats());
  EXPECT_EQ(sa.sealed_trees_held, 0u);
}

// A host that holds a sealed tree's snapshot and opens a file of it after
// another host removed the tree and compacted its segments away reads
// ESTALE, never other bytes.
TEST_F(SharedStoreTest, AFileOfARemovedAndCompactedTreeReadsEstale) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(Attr g, a_->Create(kRootIno, "g" + std::to_string(i), S_IFREG | 0644, 0, 0, 0));
    ASSERT_OK(WriteAll(a_.get(), g.ino, 0, PatternData(g.ino, 0, 60'000)));
  }
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  ASSERT_OK(a_->Seal(root).status());
  ASSERT_OK(b_->Lookup(kRootIno, "step").status());
  ASSERT_OK_AND_ASSIGN(Attr p2, b_->Lookup(root, "p2"));
  ASSERT_OK_AND_ASSIGN(Attr c3, b_->Lookup(p2.ino, "c3"));
  ASSERT_OK(b_->OpenFile(c3.ino));
  ASSERT_OK_AND_ASSIGN(EngineStats held, b_->GetStats());
  ASSERT_EQ(held.sealed_trees_held, 1u);

  RemoveTree(a_.get(), root, "step");
  for (int i = 0; i < 20; ++i) ASSERT_OK(a_->Unlink(kRootIno, "g" + std::to_string(i)));
  CompactOptions co;
  co.dead_ratio = 0.01;
  ASSERT_OK_AND_ASSIGN(CompactReport r, a_->Compact(co));
  ASSERT_GE(r.segments_rewritten, 1u);

  std::string buf(files.at("p2/c3").size(), '\0');
  Result<size_t> n = b_->Read(c3.ino, 0, buf.size(), buf.data());
  // (b never read the segment: it has no descriptor of it that would
  // outlive the deletion.)
  ASSERT_FALSE(n.ok()) << "read " << *n << " bytes of a removed file";
  EXPECT_EQ(n.status().code(), ESTALE) << n.status().ToString();
  ASSERT_OK_AND_ASSIGN(EngineStats after, b_->GetStats());
  EXPECT_EQ(after.sealed_trees_held, 0u);
  ASSERT_OK(b_->Release(c3.ino));
}

// Compaction leaves the segments a snapshot points into, whatever their
// dead bytes, while the sealed tree lives; once it is removed they go.
TEST_F(SharedStoreTest, CompactionKeepsTheSegmentsOfASealedTree) {
  // Dead bytes around the tree's records: files written and removed.
  for (int i = 0; i < 30; ++i) {
    ASSERT_OK_AND_ASSIGN(Attr g, a_->Create(kRootIno, "g" + std::to_string(i), S_IFREG | 0644, 0, 0, 0));
    ASSERT_OK(WriteAll(a_.get(), g.ino, 0, PatternData(g.ino, 0, 60'000)));
  }
  Ino root = 0;
  const std::map<std::string, std::string> files = WriteTree(a_.get(), "step", &root);
  for (int i = 0; i < 30; ++i) ASSERT_OK(a_->Unlink(kRootIno, "g" + std::to_string(i)));
  ASSERT_OK(a_->Seal(root).status());
  ASSERT_OK(a_->SyncAll());
  CompactOptions co;
  co.dead_ratio = 0.01;
  ASSERT_OK_AND_ASSIGN(CompactReport r, a_->Compact(co));
  std::set<uint64_t> sealed;
  for (const KeptSegment& k : r.kept) {
    if (k.reason != KeptSegment::Reason::kSealed) continue;
    sealed.insert(k.id);
    EXPECT_EQ(DescribeKept(k, 0.01),
              "segment " + std::to_string(k.id) + ": a sealed tree's snapshot points into it");
  }
  EXPECT_FALSE(sealed.empty());
  for (uint64_t id : r.segments) EXPECT_FALSE(sealed.count(id)) << id;
  ASSERT_OK(b_->Lookup(kRootIno, "step").status());
  RestoreTree(b_.get(), root, files);

  // Removed, the tree holds its segments no more.
  RemoveTree(a_.get(), root, "step");
  ASSERT_OK_AND_ASSIGN(r, a_->Compact(co));
  for (const KeptSegment& k : r.kept) EXPECT_NE(k.reason, KeptSegment::Reason::kSealed) << k.id;
  size_t taken = 0;
  for (uint64_t id : r.segments) taken += sealed.count(id);
  EXPECT_GE(taken, 1u) << "no segment the tree held was compacted";
}

// Offline compaction takes each host that no mount holds in turn and
// compacts its segments as that host; a mounted host's segments stay for
// its mount to compact.
TEST_F(SharedStoreTest, OfflineCompactionCompactsEveryHostNoMountHolds) {
  // Each host writes 40 files of 60 KB (two sealed segments and more) and
  // deletes three in four.
  std::map<std::string, std::string> kept;  // name -> bytes
  for (Store* s : {a_.get(), b_.get()}) {
    const std::string host = s == a_.get() ? "a" : "b";
    for (int i = 0; i < 40; ++i) {
      const std::string name = host + std::to_string(i);
      ASSERT_OK_AND_ASSIGN(Attr f, s->Create(kRootIno, name, S_IFREG | 0644, 0, 0, 0));
      const std::string data = PatternData(f.ino, 0, 60'000);
      ASSERT_OK(WriteAll(s, f.ino, 0, data));
      if (i % 4 == 0) {
        kept[name] = data;
      }
    }
    for (int i = 0; i < 40; ++i) {
      if (i % 4 != 0) ASSERT_OK(s->Unlink(kRootIno, host + std::to_string(i)));
    }
    ASSERT_OK(s->SyncAll());
  }
  ASSERT_OK_AND_ASSIGN(std::vector<HostInfo> hosts, b_->Hosts());
  ASSERT_EQ(hosts.size(), 2u);
  const uint32_t a_id = hosts[0].id, b_id = hosts[1].id;
  EXPECT_EQ(hosts[0].name, "a");
  EXPECT_EQ(hosts[1].name, "b");
  EXPECT_TRUE(hosts[0].mounted && hosts[1].mounted);
  EXPECT_EQ(hosts[0].holder, "host a");
  ASSERT_OK(a_->Close());
  a_.reset();
  ASSERT_OK_AND_ASSIGN(hosts, b_->Hosts());
  EXPECT_FALSE(hosts[0].mounted) << "a closed";
  EXPECT_TRUE(hosts[1].mounted);

  CompactOptions co;
  co.dead_ratio = 0.5;
  ASSERT_OK_AND_ASSIGN(CompactReport r, Store::CompactOffline(dir_.store(), co));
  EXPECT_GE(r.segments_rewritten, 2u);
  for (uint64_t id : r.segments) EXPECT_EQ(id >> format::kHostIdShift, a_id) << id;
  size_t b_kept = 0;
  for (const KeptSegment& k : r.kept) {
    if (k.id >> format::kHostIdShift != b_id) continue;
    EXPECT_EQ(k.reason, KeptSegment::Reason::kHostMounted) << k.id;
    EXPECT_EQ(k.host, "b");
    EXPECT_EQ(DescribeKept(k, 0.5),
              "segment " + std::to_string(k.id) + ": its host \"b\" is mounted; that mount "
              "compacts it");
    ++b_kept;
  }
  EXPECT_GE(b_kept, 2u);
  // b reads a's files from their new segments, and its own.
  for (const auto& [name, data] : kept) {
    ASSERT_OK_AND_ASSIGN(Attr f, b_->Lookup(kRootIno, name));
    b_->Reread(f.ino);
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(b_.get(), f.ino));
    EXPECT_EQ(got, data) << name;
  }

  // With b closed too, its segments go the same way.
  ASSERT_OK(b_->Close());
  b_.reset();
  ASSERT_OK_AND_ASSIGN(r, Store::CompactOffline(dir_.store(), co));
  EXPECT_GE(r.segments_rewritten, 2u);
  for (uint64_t id : r.segments) EXPECT_EQ(id >> format::kHostIdShift, b_id) << id;
  for (const KeptSegment& k : r.kept) EXPECT_NE(k.reason, KeptSegment::Reason::kHostMounted);
  ASSERT_OK_AND_ASSIGN(a_, OpenHost("a", env_a_));
  for (const auto& [name, data] : kept) {
    ASSERT_OK_AND_ASSIGN(Attr f, a_->Lookup(kRootIno, name));
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(a_.get(), f.ino));
    EXPECT_EQ(got, data) << name;
  }
  FsckOptions fo;
  ASSERT_OK(a_->Close());
  a_.reset();
  ASSERT_OK_AND_ASSIGN(FsckReport report, engine::Fsck(dir_.store(), fo));
  EXPECT_TRUE(report.clean());
}

}  // namespace
}  // namespace ckptfs::engine::test
