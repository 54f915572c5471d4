// The seam's conformance suite (meta/kv.h), run on each implementation:
// RocksDB in a temporary directory, an index in memory, and PostgreSQL in
// the private cluster that scripts/with-postgres.sh starts
// (CKPTFS_TEST_PG), a schema per test. PostgreSQL's own cases are in
// meta/pg_kv_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "format/format.h"
#include "meta/kv.h"
#include "meta/mem_kv.h"
#include "meta/pg_kv.h"
#include "meta/rocks_kv.h"

namespace ckptfs::meta {
namespace {

// One implementation under test.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Kv* kv() = 0;
  // Whether it finds conflicts between transactions itself (the embedded
  // one leaves that to its caller's locks).
  virtual bool DetectsConflicts() const = 0;
  // Whether it has a server whose round trips it counts.
  virtual bool HasServer() const { return false; }
};

class RocksBackend final : public Backend {
 public:
  RocksBackend() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ckptfs-kv-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(dir_);
    Result<std::unique_ptr<OwnedRocksKv>> db = OwnedRocksKv::Open(dir_.string());
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    if (db.ok()) db_ = std::move(*db);
  }
  ~RocksBackend() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }
  Kv* kv() override { return db_ == nullptr ? nullptr : db_->kv(); }
  bool DetectsConflicts() const override { return false; }

 private:
  static inline std::atomic<int> counter_{0};
  std::filesystem::path dir_;
  std::unique_ptr<OwnedRocksKv> db_;
};

// The URI of the test cluster; the test fails without one.
std::string TestPgUri() {
  const char* uri = std::getenv("CKPTFS_TEST_PG");
  return uri == nullptr ? "" : uri;
}

class PgBackend final : public Backend {
 public:
  PgBackend() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string schema = "t_" + std::string(info->name());
    for (char& c : schema) c = std::isalnum(static_cast<unsigned char>(c)) ? std::tolower(c) : '_';
    schema = schema.substr(0, 50) + "_" + std::to_string(getpid());
    PgOptions o;
    o.uri = TestPgUri();
    o.schema = schema;
    o.create = true;
    Result<std::unique_ptr<PgKv>> kv = PgKv::Open(o);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    if (kv.ok()) kv_ = std::move(*kv);
  }
  ~PgBackend() override {
    if (kv_ != nullptr) {
      Status st = kv_->DropSchema();
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  Kv* kv() override { return kv_.get(); }
  bool DetectsConflicts() const override { return true; }
  bool HasServer() const override { return true; }

 private:
  std::unique_ptr<PgKv> kv_;
};

class MemBackend final : public Backend {
 public:
  Kv* kv() override { return &kv_; }
  bool DetectsConflicts() const override { return true; }

 private:
  MemKv kv_;
};

enum class Impl { kRocksDb, kMemory, kPostgreSql };

class KvTest : public testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (GetParam() == Impl::kPostgreSql) {
      ASSERT_FALSE(TestPgUri().empty())
          << "CKPTFS_TEST_PG is not set: run this through scripts/with-postgres.sh";
      backend_ = std::make_unique<PgBackend>();
    } else if (GetParam() == Impl::kMemory) {
      backend_ = std::make_unique<MemBackend>();
    } else {
      backend_ = std::make_unique<RocksBackend>();
    }
    ASSERT_NE(backend_->kv(), nullptr);
    kv_ = backend_->kv();
  }

  std::unique_ptr<Txn> Begin() {
    Result<std::unique_ptr<Txn>> t = kv_->Begin();
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Commits `fn`'s writes in a transaction of their own.
  void Write(const std::function<void(Txn*)>& fn, Durability d = Durability::kLogged) {
    Status st = RunTxn(kv_, [&](Txn* t) { fn(t); return Status::OK(); }, d);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::unique_ptr<ReadTxn> BeginRead() {
    Result<std::unique_ptr<ReadTxn>> t = kv_->BeginRead();
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  std::optional<std::string> Get(Space s, std::string_view key) {
    auto t = BeginRead();
    Result<std::optional<std::string>> v = t->Get(s, key);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : std::nullopt;
  }
  std::vector<std::pair<std::string, std::string>> Scan(Space s, std::string_view begin,
                                                        std::string_view end, size_t stop = 0) {
    std::vector<std::pair<std::string, std::string>> out;
    auto t = BeginRead();
    Status st = t->Scan(s, begin, end, [&](std::string_view k, std::string_view v) {
      out.emplace_back(k, v);
      return stop == 0 || out.size() < stop;
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }
  int64_t Counter(std::string_view key) {
    std::optional<std::string> v = Get(Space::kMeta, key);
    if (!v.has_value() || v->size() != 8) return -1;
    return static_cast<int64_t>(format::GetLE64(v->data()));
  }

  std::unique_ptr<Backend> backend_;
  Kv* kv_ = nullptr;
};

using namespace std::string_literals;

TEST_P(KvTest, PutGetAndDeleteKeepEveryByte) {
  const std::string key = "k\0\xff\x01"s;
  const std::string value = "v\0\x80 bytes"s;
  Write([&](Txn* t) {
    t->Put(Space::kInodes, key, value);
    t->Put(Space::kInodes, "empty", "");
  });
  EXPECT_EQ(Get(Space::kInodes, key), value);
  EXPECT_EQ(Get(Space::kInodes, "empty"), ""s);
  EXPECT_EQ(Get(Space::kInodes, "missing"), std::nullopt);
  Write([&](Txn* t) { t->Put(Space::kInodes, key, "second"); });
  EXPECT_EQ(Get(Space::kInodes, key), "second"s);
  Write([&](Txn* t) { t->Delete(Space::kInodes, key); });
  EXPECT_EQ(Get(Space::kInodes, key), std::nullopt);
}

TEST_P(KvTest, SpacesAreApart) {
  Write([&](Txn* t) {
    t->Put(Space::kDentries, "x", "dentry");
    t->Put(Space::kXattrs, "x", "xattr");
  });
  EXPECT_EQ(Get(Space::kDentries, "x"), "dentry"s);
  EXPECT_EQ(Get(Space::kXattrs, "x"), "xattr"s);
  EXPECT_EQ(Get(Space::kExtents, "x"), std::nullopt);
}

TEST_P(KvTest, ScanIsBytewiseOrderedAndBounded) {
  const std::vector<std::string> keys = {"a", "a\0"s, "a\x01", "ab", "b", "\x7f", "\x80", "\xff"};
  Write([&](Txn* t) {
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) t->Put(Space::kDentries, *it, *it + "!");
  });
  auto all = Scan(Space::kDentries, "", "");
  ASSERT_EQ(all.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(all[i].first, keys[i]) << i;
    EXPECT_EQ(all[i].second, keys[i] + "!");
  }
  // [a\0, b): the end is left out.
  auto part = Scan(Space::kDentries, "a\0"s, "b");
  ASSERT_EQ(part.size(), 3u);
  EXPECT_EQ(part.front().first, "a\0"s);
  EXPECT_EQ(part.back().first, "ab");
  EXPECT_EQ(Scan(Space::kDentries, "\x80", "").size(), 2u);
  EXPECT_EQ(Scan(Space::kDentries, "", "", /*stop=*/2).size(), 2u);
  EXPECT_TRUE(Scan(Space::kDentries, "c", "d").empty());
}

TEST_P(KvTest, ScanCrossesPages) {
  // More keys than one page of the PostgreSQL implementation, in one commit
  // larger than one of its pipelines.
  const int n = 1500;
  Write([&](Txn* t) {
    for (int i = 0; i < n; ++i) t->Put(Space::kExtents, format::ExtentKey(7, i * 4096ull), "e");
    t->Put(Space::kExtents, format::ExtentKey(8, 0), "other file");
  });
  auto got = Scan(Space::kExtents, format::ExtentPrefix(7), format::ExtentPrefix(8));
  ASSERT_EQ(got.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i].first, format::ExtentKey(7, i * 4096ull));
}

TEST_P(KvTest, ManyPutsInOneCommitKeepTheirOrder) {
  // PostgreSQL sends puts of one space in a row as rows of one statement,
  // and scans in pages that grow: 40,000 keys cross both limits.
  const uint64_t n = 40'000;
  Write([&](Txn* t) { t->Put(Space::kInodes, format::InodeKey(5), "before"); });
  Write([&](Txn* t) {
    for (uint64_t i = 0; i < n; ++i) t->Put(Space::kInodes, format::InodeKey(i), "v" + std::to_string(i));
    t->Put(Space::kInodes, format::InodeKey(7), "put twice: the last");
    t->Delete(Space::kInodes, format::InodeKey(9));
    t->Put(Space::kInodes, format::InodeKey(9), "deleted, then put twice");
    t->Put(Space::kInodes, format::InodeKey(9), "deleted, then put again");
    for (uint64_t i = 10; i < 30; ++i) t->Put(Space::kInodes, format::InodeKey(i), "again");
    t->Delete(Space::kInodes, format::InodeKey(11));
    t->Put(Space::kXattrs, format::InodeKey(1), "another space");
  });
  auto got = Scan(Space::kInodes, "", "");
  ASSERT_EQ(got.size(), n - 1);
  std::map<std::string, std::string> by_key(got.begin(), got.end());
  EXPECT_EQ(by_key[format::InodeKey(5)], "v5");
  EXPECT_EQ(by_key[format::InodeKey(7)], "put twice: the last");
  EXPECT_EQ(by_key[format::InodeKey(9)], "deleted, then put again");
  EXPECT_EQ(by_key[format::InodeKey(10)], "again");
  EXPECT_EQ(by_key.count(format::InodeKey(11)), 0u);
  EXPECT_EQ(by_key[format::InodeKey(n - 1)], "v" + std::to_string(n - 1));
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1].first, got[i].first);
  EXPECT_EQ(Get(Space::kXattrs, format::InodeKey(1)), "another space"s);
  // A scan stopped early stops.
  EXPECT_EQ(Scan(Space::kInodes, "", "", 3).size(), 3u);
}

TEST_P(KvTest, LastFindsTheGreatestKeyBeforeTheEnd) {
  Write([&](Txn* t) {
    for (uint64_t off : {0ull, 4096ull, 8192ull}) {
      t->Put(Space::kExtents, format::ExtentKey(3, off), std::to_string(off));
    }
    t->Put(Space::kExtents, format::ExtentKey(4, 0), "next");
  });
  auto t = Begin();
  auto last = t->Last(Space::kExtents, format::ExtentPrefix(3), format::ExtentKey(3, 8192));
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->key, format::ExtentKey(3, 4096));
  EXPECT_EQ((*last)->value, "4096");
  last = t->Last(Space::kExtents, format::ExtentPrefix(3), format::ExtentKey(3, 8193));
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->value, "8192");
  last = t->Last(Space::kExtents, format::ExtentPrefix(3), format::ExtentKey(3, 0));
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->has_value());
  last = t->Last(Space::kExtents, format::ExtentPrefix(3), "");
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->value, "next");
  EXPECT_TRUE(t->Commit(Durability::kLogged).ok());
}

TEST_P(KvTest, CountersAddUpAndAPutResetsThem) {
  Write([&](Txn* t) {
    t->Merge(Space::kMeta, "count", CounterOperand(5));
    t->Merge(Space::kMeta, "count", CounterOperand(-2));
  });
  EXPECT_EQ(Counter("count"), 3);
  Write([&](Txn* t) { t->Merge(Space::kMeta, "count", CounterOperand(10)); });
  EXPECT_EQ(Counter("count"), 13);
  // In one transaction, in order: a Put replaces what came before it.
  Write([&](Txn* t) {
    t->Merge(Space::kMeta, "count", CounterOperand(100));
    t->Put(Space::kMeta, "count", CounterOperand(1));
    t->Merge(Space::kMeta, "count", CounterOperand(1));
  });
  EXPECT_EQ(Counter("count"), 2);
  auto scanned = Scan(Space::kMeta, "count", "count\0"s);
  ASSERT_EQ(scanned.size(), 1u);
  EXPECT_EQ(format::GetLE64(scanned[0].second.data()), 2u);
  Write([&](Txn* t) { t->Delete(Space::kMeta, "count"); });
  EXPECT_EQ(Get(Space::kMeta, "count"), std::nullopt);
  Write([&](Txn* t) { t->Merge(Space::kMeta, "count", CounterOperand(4)); });
  EXPECT_EQ(Counter("count"), 4);
}

TEST_P(KvTest, SegmentStatsMergeAsTheFormatSays) {
  const std::string key = format::SegmentKey(9);
  Write([&](Txn* t) {
    t->Put(Space::kSegments, key, format::EncodeSegmentStat({100, 0, 0, 0}));
    t->Merge(Space::kSegments, key, format::EncodeSegmentStat({-30, 30, 0, 0}));
  });
  Write([&](Txn* t) {
    t->Merge(Space::kSegments, key, format::EncodeSegmentStat({0, 0, 1, 4096}));
    t->Merge(Space::kSegments, format::SegmentKey(10), format::EncodeSegmentStat({5, 0, 0, 0}));
  });
  std::optional<std::string> v = Get(Space::kSegments, key);
  ASSERT_TRUE(v.has_value());
  format::SegmentStat st;
  ASSERT_TRUE(format::DecodeSegmentStat(*v, &st).ok());
  EXPECT_EQ(st, (format::SegmentStat{70, 30, 1, 4096}));
  auto all = Scan(Space::kSegments, "", "");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].first, format::SegmentKey(10));
  ASSERT_TRUE(format::DecodeSegmentStat(all[1].second, &st).ok());
  EXPECT_EQ(st, (format::SegmentStat{5, 0, 0, 0}));
}

TEST_P(KvTest, ACommitThatFailsAppliesNothing) {
  auto t = Begin();
  t->Put(Space::kInodes, "a", "1");
  t->Merge(Space::kInodes, "b", CounterOperand(1));  // inodes take no merges
  Status st = t->Commit(Durability::kLogged);
  EXPECT_EQ(st.code(), EINVAL) << st.ToString();
  t.reset();
  EXPECT_EQ(Get(Space::kInodes, "a"), std::nullopt);
}

TEST_P(KvTest, ReadsDoNotSeeTheirOwnTransactionsWrites) {
  Write([&](Txn* t) { t->Put(Space::kInodes, "a", "old"); });
  auto t = Begin();
  t->Put(Space::kInodes, "a", "new");
  auto v = t->Get(Space::kInodes, "a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "old"s);
  ASSERT_TRUE(t->Commit(Durability::kLogged).ok());
  EXPECT_EQ(Get(Space::kInodes, "a"), "new"s);
}

TEST_P(KvTest, AnInsertOfAnExistingKeyIsEexistAndAppliesNothing) {
  Write([&](Txn* t) { t->Insert(Space::kDentries, "name", "first"); });
  auto t = Begin();
  t->Put(Space::kInodes, "other", "x");
  t->Insert(Space::kDentries, "name", "second");
  Status st = t->Commit(Durability::kLogged);
  EXPECT_EQ(st.code(), EEXIST) << st.ToString();
  EXPECT_FALSE(IsConflict(st));
  t.reset();
  EXPECT_EQ(Get(Space::kDentries, "name"), "first"s);
  EXPECT_EQ(Get(Space::kInodes, "other"), std::nullopt);
  t = Begin();
  t->Insert(Space::kMeta, "counter", CounterOperand(1));
  EXPECT_EQ(t->Commit(Durability::kLogged).code(), EINVAL);
}

TEST_P(KvTest, AReadOnlyTransactionReadsOneSnapshot) {
  Write([&](Txn* t) {
    t->Put(Space::kInodes, "a", "1");
    t->Put(Space::kExtents, "e1", "x");
    t->Merge(Space::kMeta, "n", CounterOperand(1));
  });
  auto r = BeginRead();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(*r->Get(Space::kInodes, "a"), "1"s);
  // Commits after its first read are not seen by any of its reads.
  Write([&](Txn* t) {
    t->Put(Space::kInodes, "a", "2");
    t->Put(Space::kInodes, "b", "new");
    t->Put(Space::kExtents, "e2", "y");
    t->Delete(Space::kExtents, "e1");
    t->Merge(Space::kMeta, "n", CounterOperand(5));
  });
  EXPECT_EQ(*r->Get(Space::kInodes, "a"), "1"s);
  EXPECT_EQ(*r->Get(Space::kInodes, "b"), std::nullopt);
  std::vector<std::string> keys;
  ASSERT_TRUE(r->Scan(Space::kExtents, "", "", [&](std::string_view k, std::string_view) {
                 keys.emplace_back(k);
                 return true;
               }).ok());
  EXPECT_EQ(keys, std::vector<std::string>{"e1"});
  auto last = r->Last(Space::kExtents, "", "");
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->key, "e1");
  auto n = r->Get(Space::kMeta, "n");
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ(format::GetLE64((*n)->data()), 1u);
  r.reset();
  // A new one sees them.
  EXPECT_EQ(Get(Space::kInodes, "a"), "2"s);
  EXPECT_EQ(Counter("n"), 6);
}

// GetMany reads keys of several spaces as Get does, in their order,
// merges applied, from the transaction's snapshot; on PostgreSQL in one
// round trip, whatever their number, and with the transaction's BEGIN when
// they are its first reads.
TEST_P(KvTest, GetManyReadsKeysOfSeveralSpacesInOneSnapshot) {
  Write([&](Txn* t) {
    t->Put(Space::kInodes, "i1", "one");
    t->Put(Space::kDentries, "d1", "\0dentry\xff"s);
    t->Merge(Space::kMeta, "n", CounterOperand(2));
  });
  Write([&](Txn* t) { t->Merge(Space::kMeta, "n", CounterOperand(3)); });
  const std::vector<KeyRef> keys = {{Space::kDentries, "d1"},
                                    {Space::kInodes, "missing"},
                                    {Space::kMeta, "n"},
                                    {Space::kInodes, "i1"},
                                    {Space::kDentries, "i1"}};
  auto r = BeginRead();
  ASSERT_NE(r, nullptr);
  const IndexWaits before = kv_->Waits();
  Result<std::vector<std::optional<std::string>>> v = r->GetMany(keys);
  const IndexWaits after = kv_->Waits();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->size(), keys.size());
  EXPECT_EQ((*v)[0], "\0dentry\xff"s);
  EXPECT_EQ((*v)[1], std::nullopt);
  ASSERT_TRUE((*v)[2].has_value());
  EXPECT_EQ(format::GetLE64((*v)[2]->data()), 5u);
  EXPECT_EQ((*v)[3], "one"s);
  EXPECT_EQ((*v)[4], std::nullopt) << "a key of another space";
  if (backend_->HasServer()) EXPECT_EQ(after.round_trips - before.round_trips, 1u);

  // Commits after the first read are not seen.
  Write([&](Txn* t) {
    t->Put(Space::kInodes, "i1", "two");
    t->Delete(Space::kDentries, "d1");
    t->Put(Space::kInodes, "missing", "now");
    t->Merge(Space::kMeta, "n", CounterOperand(10));
  });
  Result<std::vector<std::optional<std::string>>> again = r->GetMany(keys);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *v);
  Result<std::vector<std::optional<std::string>>> none = r->GetMany({});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  r.reset();

  // A read-write transaction's GetMany, then a commit from what it read.
  auto t = Begin();
  ASSERT_NE(t, nullptr);
  Result<std::vector<std::optional<std::string>>> w =
      t->GetMany({{Space::kInodes, "i1"}, {Space::kDentries, "d1"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)[0], "two"s);
  EXPECT_EQ((*w)[1], std::nullopt);
  t->Put(Space::kInodes, "i2", *(*w)[0]);
  ASSERT_TRUE(t->Commit(Durability::kLogged).ok());
  EXPECT_EQ(Get(Space::kInodes, "i2"), "two"s);
}

TEST_P(KvTest, RequireEmptyCommitsOnlyWhileTheRangeHoldsNoKey) {
  auto commit = [&](const std::string& value) {
    Writes w;
    w.RequireEmpty(Space::kDentries, "r/2/", "r/20");
    w.RequireEmpty(Space::kMeta, "c/", "c0");
    w.Put(Space::kInodes, "x", value);
    return CommitWrites(kv_, &w, Durability::kLogged);
  };
  // Keys beside the ranges, the end among them, do not hold them.
  Write([&](Txn* t) {
    t->Put(Space::kDentries, "r/1/9", "");
    t->Put(Space::kDentries, "r/20", "");
    t->Put(Space::kInodes, "r/2/1", "another space");
  });
  ASSERT_TRUE(commit("1").ok());
  EXPECT_EQ(Get(Space::kInodes, "x"), "1"s);

  Write([&](Txn* t) { t->Put(Space::kDentries, "r/2/7", ""); });
  Status held = commit("2");
  EXPECT_TRUE(IsRangeHeld(held)) << held.ToString();
  EXPECT_EQ(held.code(), EBUSY);
  EXPECT_EQ(Get(Space::kInodes, "x"), "1"s) << "nothing of a refused commit is applied";
  Write([&](Txn* t) { t->Delete(Space::kDentries, "r/2/7"); });
  ASSERT_TRUE(commit("3").ok());

  // A counter that has only merge operands holds its range too.
  Write([&](Txn* t) { t->Merge(Space::kMeta, "c/n", CounterOperand(1)); });
  held = commit("4");
  EXPECT_TRUE(IsRangeHeld(held)) << held.ToString();
  EXPECT_EQ(Get(Space::kInodes, "x"), "3"s);
  if (!backend_->DetectsConflicts()) return;

  // Ordered with the transactions that write into the range and read what
  // it writes: one that did so after this one's snapshot refuses it (or
  // conflicts with it).
  Write([&](Txn* t) { t->Delete(Space::kMeta, "c/n"); });
  auto w = Begin();
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->Get(Space::kInodes, "x").ok());
  Write([&](Txn* t) {
    ASSERT_TRUE(t->Get(Space::kInodes, "x").ok());
    t->Put(Space::kDentries, "r/2/8", "");
  });
  w->RequireEmpty(Space::kDentries, "r/2/", "r/20");
  w->Put(Space::kInodes, "x", "5");
  Status late = w->Commit(Durability::kLogged);
  EXPECT_TRUE(IsRangeHeld(late) || IsConflict(late)) << late.ToString();
  EXPECT_EQ(Get(Space::kInodes, "x"), "3"s);

  // The other order: a writer of the range that read what a guarded
  // commit changed meanwhile conflicts.
  Write([&](Txn* t) { t->Delete(Space::kDentries, "r/2/8"); });
  auto r = Begin();
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Get(Space::kInodes, "x").ok());
  ASSERT_TRUE(commit("6").ok());
  r->Put(Space::kDentries, "r/2/9", "");
  Status after = r->Commit(Durability::kLogged);
  EXPECT_TRUE(IsConflict(after)) << after.ToString();
  EXPECT_EQ(Get(Space::kDentries, "r/2/9"), std::nullopt);
}

TEST_P(KvTest, ReadOnlyTransactionsNeverConflictWithWriters) {
  Write([&](Txn* t) { t->Put(Space::kMeta, "k", CounterOperand(0)); });
  for (int i = 1; i <= 3; ++i) {
    Status st = RunReads(kv_, [&](ReadTxn* r) -> Status {
      CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, r->Get(Space::kMeta, "k"));
      // A writer of what this read commits meanwhile.
      Writes w;
      w.Put(Space::kMeta, "k", CounterOperand(i));
      CKPTFS_RETURN_IF_ERROR(CommitWrites(kv_, &w, Durability::kLogged));
      CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> again, r->Get(Space::kMeta, "k"));
      return v == again ? Status::OK() : Status(EIO, "the snapshot moved");
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_EQ(Counter("k"), 3);
}

TEST_P(KvTest, CommitWritesLeavesTheWritesAsTheyWere) {
  Writes w;
  w.Put(Space::kInodes, "a", "1");
  w.Merge(Space::kMeta, "n", CounterOperand(2));
  ASSERT_TRUE(CommitWrites(kv_, &w, Durability::kLogged).ok());
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w.list()[0].value, "1");
  ASSERT_TRUE(CommitWrites(kv_, &w, Durability::kLogged).ok());
  EXPECT_EQ(Get(Space::kInodes, "a"), "1"s);
  EXPECT_EQ(Counter("n"), 4);
}

TEST_P(KvTest, SyncedCommitsAndSync) {
  Write([&](Txn* t) { t->Put(Space::kMeta, "durable", "yes"); }, Durability::kSynced);
  Write([&](Txn* t) { t->Put(Space::kMeta, "volatile", "yes"); }, Durability::kVolatile);
  Write([&](Txn* t) { t->Put(Space::kMeta, "later", "yes"); });
  Status st = kv_->Sync();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Get(Space::kMeta, "later"), "yes"s);
  EXPECT_EQ(Get(Space::kMeta, "volatile"), "yes"s);
}

// A server's index counts its round trips and the time spent in them; an
// embedded one has none.
TEST_P(KvTest, WaitsCountTheServersRoundTrips) {
  const IndexWaits before = kv_->Waits();
  Write([&](Txn* t) { t->Put(Space::kMeta, "k", "v"); });
  EXPECT_EQ(Get(Space::kMeta, "k"), "v"s);
  ASSERT_TRUE(kv_->Sync().ok());
  const IndexWaits after = kv_->Waits();
  if (!backend_->HasServer()) {
    EXPECT_EQ(after.round_trips, 0u);
    EXPECT_EQ(after.wait_ns, 0u);
    return;
  }
  // The commit, the read and the sync: one pipeline each. The read-only
  // transaction's BEGIN goes with its read, its end with the sync.
  EXPECT_EQ(after.round_trips - before.round_trips, 3u);
  EXPECT_GT(after.wait_ns, before.wait_ns);
}

TEST_P(KvTest, MergesFromManyThreadsNeverConflictAndAddUp) {
  const int threads = 8, each = 100;
  std::atomic<int> runs{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&] {
      for (int j = 0; j < each; ++j) {
        Status st = RunTxn(kv_, [&](Txn* t) {
          ++runs;
          t->Merge(Space::kMeta, "hot", CounterOperand(1));
          return Status::OK();
        }, Durability::kLogged);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(Counter("hot"), threads * each);
  EXPECT_EQ(runs.load(), threads * each) << "a blind merge was run again";
}

TEST_P(KvTest, TwoCreatesOfOneNameConflict) {
  if (!backend_->DetectsConflicts()) GTEST_SKIP() << "the embedded index leaves this to its caller";
  auto a = Begin();
  auto b = Begin();
  ASSERT_FALSE(a->Get(Space::kDentries, "step_1")->has_value());
  ASSERT_FALSE(b->Get(Space::kDentries, "step_1")->has_value());
  a->Put(Space::kDentries, "step_1", "from a");
  b->Put(Space::kDentries, "step_1", "from b");
  ASSERT_TRUE(a->Commit(Durability::kLogged).ok());
  Status st = b->Commit(Durability::kLogged);
  EXPECT_TRUE(IsConflict(st)) << st.ToString();
  EXPECT_EQ(st.code(), EAGAIN);
  EXPECT_EQ(Get(Space::kDentries, "step_1"), "from a"s);
}

TEST_P(KvTest, AnEmptinessCheckRacingACreateConflicts) {
  // rmdir on one host (scan the directory: empty; delete it) against a
  // create in it on another (the directory is there; add a name): write
  // skew, which only a serializable index refuses.
  if (!backend_->DetectsConflicts()) GTEST_SKIP() << "the embedded index leaves this to its caller";
  Write([&](Txn* t) { t->Put(Space::kInodes, format::InodeKey(5), "dir"); });
  auto rmdir = Begin();
  auto create = Begin();
  size_t children = 0;
  ASSERT_TRUE(rmdir->Scan(Space::kDentries, format::DentryPrefix(5), format::DentryPrefix(6),
                          [&](std::string_view, std::string_view) { return ++children, true; })
                  .ok());
  EXPECT_EQ(children, 0u);
  ASSERT_TRUE(create->Get(Space::kInodes, format::InodeKey(5))->has_value());
  rmdir->Delete(Space::kInodes, format::InodeKey(5));
  create->Put(Space::kDentries, format::DentryKey(5, "file"), "child");
  Status first = rmdir->Commit(Durability::kLogged);
  Status second = create->Commit(Durability::kLogged);
  EXPECT_TRUE(first.ok() != second.ok()) << first.ToString() << " / " << second.ToString();
  EXPECT_TRUE(IsConflict(first.ok() ? second : first));
}

TEST_P(KvTest, ConcurrentInsertsOfOneKeyHaveOneWinner) {
  if (!backend_->DetectsConflicts()) GTEST_SKIP() << "the embedded index leaves this to its caller";
  const int threads = 8;
  std::atomic<int> won{0}, exists{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&, i] {
      Status st = RunTxn(kv_, [&](Txn* t) {
        t->Insert(Space::kDentries, "step_1", "host " + std::to_string(i));
        return Status::OK();
      }, Durability::kLogged);
      if (st.ok()) {
        ++won;
      } else {
        EXPECT_EQ(st.code(), EEXIST) << st.ToString();
        ++exists;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(exists.load(), threads - 1);
}

TEST_P(KvTest, CreatesInOneDirectoryFromManyThreadsDoNotConflict) {
  // Each create reads the directory's inode, inserts its entry (no read of
  // the absent key) and adds to a counter: nothing two of them write or
  // read-and-write is common, so none is run again.
  Write([&](Txn* t) { t->Put(Space::kInodes, format::InodeKey(5), "dir"); });
  const int threads = 4, each = 50;
  std::atomic<int> runs{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&, i] {
      for (int j = 0; j < each; ++j) {
        const std::string name = "param_" + std::to_string(i) + "_" + std::to_string(j);
        Status st = RunTxn(kv_, [&](Txn* t) -> Status {
          ++runs;
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> dir,
                                  t->Get(Space::kInodes, format::InodeKey(5)));
          if (!dir.has_value()) return Status(ENOENT, "no directory");
          t->Insert(Space::kDentries, format::DentryKey(5, name), "entry");
          t->Merge(Space::kMeta, "count", CounterOperand(1));
          return Status::OK();
        }, Durability::kLogged);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(Scan(Space::kDentries, format::DentryPrefix(5), format::DentryPrefix(6)).size(),
            static_cast<size_t>(threads * each));
  EXPECT_EQ(Counter("count"), threads * each);
  EXPECT_EQ(runs.load(), threads * each) << "creates conflicted";
}

TEST_P(KvTest, ReadModifyWriteFromManyThreadsIsSerializable) {
  if (!backend_->DetectsConflicts()) GTEST_SKIP() << "the embedded index leaves this to its caller";
  const int threads = 4, each = 25;
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&] {
      for (int j = 0; j < each; ++j) {
        Status st = RunTxn(kv_, [&](Txn* t) {
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, t->Get(Space::kMeta, "rmw"));
          const int64_t n = v.has_value() ? static_cast<int64_t>(format::GetLE64(v->data())) : 0;
          t->Put(Space::kMeta, "rmw", CounterOperand(n + 1));
          return Status::OK();
        }, Durability::kLogged);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(Counter("rmw"), threads * each);
}

TEST_P(KvTest, ACommitWakesTheListenersOfItsChannelsWhenItCommits) {
  Result<std::unique_ptr<Listener>> a = kv_->Listen("test.a");
  if (GetParam() == Impl::kRocksDb) {
    EXPECT_EQ(a.status().code(), ENOTSUP) << a.status().ToString();
    return;
  }
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<std::unique_ptr<Listener>> b = kv_->Listen("test.b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(kv_->Listen("Test A").status().code(), EINVAL);
  EXPECT_EQ(kv_->Listen(std::string(kMaxChannel + 1, 'a')).status().code(), EINVAL);
  auto wait = [](Listener* l, int64_t ms) {
    Result<bool> w = l->Wait(ms);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() && *w;
  };
  EXPECT_FALSE(wait(a->get(), 0));

  // A commit that fails notifies no one; a bad channel fails the commit.
  Write([&](Txn* t) { t->Insert(Space::kDentries, "name", "first"); });
  auto t = Begin();
  t->Insert(Space::kDentries, "name", "second");
  t->Notify("test.a");
  EXPECT_EQ(t->Commit(Durability::kLogged).code(), EEXIST);
  t = Begin();
  t->Put(Space::kInodes, "x", "1");
  t->Notify("no spaces");
  EXPECT_EQ(t->Commit(Durability::kLogged).code(), EINVAL);
  t.reset();
  EXPECT_EQ(Get(Space::kInodes, "x"), std::nullopt);
  EXPECT_FALSE(wait(a->get(), 200));

  // One that commits wakes its channel's listeners, also with no write.
  Write([&](Txn* t) {
    t->Put(Space::kInodes, "x", "1");
    t->Notify("test.a");
  });
  EXPECT_TRUE(wait(a->get(), 10'000));
  Writes only;
  only.Notify("test.a");
  ASSERT_TRUE(CommitWrites(kv_, &only, Durability::kLogged).ok());
  EXPECT_TRUE(wait(a->get(), 10'000));
  EXPECT_FALSE(wait(b->get(), 200));
}

TEST(RetrierTest, GivesUpOnlyAfterItsAttemptsAndItsPatience) {
  RetryPolicy p;
  p.backoff_base_us = 0;  // no waits: the test times only the patience
  p.max_attempts = 3;
  p.patience = std::chrono::milliseconds(0);
  Retrier few(p);
  EXPECT_TRUE(few.Again());
  EXPECT_TRUE(few.Again());
  EXPECT_FALSE(few.Again());
  EXPECT_EQ(few.attempts(), 3);
  EXPECT_NE(few.GaveUp().find("gave up after 3 conflicts"), std::string::npos) << few.GaveUp();

  // Past its attempts, it goes on until its patience has passed.
  p.max_attempts = 1;
  p.patience = std::chrono::milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  Retrier patient(p);
  while (patient.Again()) {
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, p.patience);
  EXPECT_GT(patient.attempts(), 1);
}

INSTANTIATE_TEST_SUITE_P(Impls, KvTest,
                         testing::Values(Impl::kRocksDb, Impl::kMemory, Impl::kPostgreSql),
                         [](const testing::TestParamInfo<Impl>& i) {
                           switch (i.param) {
                             case Impl::kRocksDb: return "RocksDb";
                             case Impl::kMemory: return "Memory";
                             case Impl::kPostgreSql: return "PostgreSql";
                           }
                           return "";
                         });

}  // namespace
}  // namespace ckptfs::meta

