// PostgreSQL's own cases of the seam (meta/pg_kv.h), beside the private
// cluster that scripts/with-postgres.sh starts (CKPTFS_TEST_PG): merges
// folded, a server restarted, crashed or down, its connection strings. The
// conformance suite is meta/kv_test.cc.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "format/format.h"
#include "meta/kv.h"
#include "meta/pg_kv.h"

namespace ckptfs::meta {
namespace {

// The URI of the test cluster; the test fails without one.
std::string TestPgUri() {
  const char* uri = std::getenv("CKPTFS_TEST_PG");
  return uri == nullptr ? "" : uri;
}

// An index in a schema of the test's own, dropped after it.
class PgKvTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(TestPgUri().empty())
        << "CKPTFS_TEST_PG is not set: run this through scripts/with-postgres.sh";
    PgOptions o;
    o.uri = TestPgUri();
    o.schema = "t_" + std::to_string(getpid()) + "_" + std::to_string(counter_++);
    o.create = true;
    Result<std::unique_ptr<PgKv>> kv = PgKv::Open(o);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    kv_ = std::move(*kv);
  }
  void TearDown() override {
    if (kv_ != nullptr) {
      Status st = kv_->DropSchema();
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  PgKv* pg() { return kv_.get(); }

 private:
  static inline int counter_ = 0;
  std::unique_ptr<PgKv> kv_;
};

TEST_F(PgKvTest, PostgreSqlFoldsMergesWithoutChangingValues) {
  PgKv* kv = pg();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(RunTxn(kv, [&](Txn* t) {
      t->Merge(Space::kMeta, "n", CounterOperand(i));
      t->Merge(Space::kSegments, format::SegmentKey(i % 3), format::EncodeSegmentStat({1, 0, 0, 0}));
      return Status::OK();
    }, Durability::kLogged).ok());
  }
  ASSERT_EQ(*kv->PendingMerges(), 20u);
  size_t folded = 0;
  ASSERT_TRUE(kv->FoldMerges(2, &folded).ok());
  EXPECT_EQ(folded, 2u);
  ASSERT_TRUE(kv->FoldMerges(100, &folded).ok());
  EXPECT_EQ(folded, 2u);  // the other two keys
  EXPECT_EQ(*kv->PendingMerges(), 0u);
  std::unique_ptr<Txn> t = std::move(kv->Begin()).value();
  auto n = t->Get(Space::kMeta, "n");
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ(format::GetLE64((*n)->data()), 45u);
  format::SegmentStat st;
  ASSERT_TRUE(format::DecodeSegmentStat(**t->Get(Space::kSegments, format::SegmentKey(0)), &st).ok());
  EXPECT_EQ(st.live, 4);
}

// Runs `what` ("stop", "start", "restart") on the test's server.
void Server(const char* what) {
  const char* server = std::getenv("CKPTFS_TEST_PG_SERVER");
  ASSERT_NE(server, nullptr) << "CKPTFS_TEST_PG_SERVER is not set";
  const std::string cmd = std::string(server) + " " + what;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST_F(PgKvTest, PostgreSqlRestartIsWaitedOutAndNothingIsLost) {
  PgKv* kv = pg();
  ASSERT_TRUE(RunTxn(kv, [&](Txn* t) {
    t->Put(Space::kInodes, "before", "1");
    return Status::OK();
  }, Durability::kSynced).ok());
  ASSERT_NO_FATAL_FAILURE(Server("restart"));
  // The pooled connections died with the server: new ones are made, and
  // the commit is not one whose outcome is unknown.
  Status st = RunTxn(kv, [&](Txn* t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, t->Get(Space::kInodes, "before"));
    if (v != "1") return Status(EIO, "lost the write before the restart");
    t->Put(Space::kInodes, "after", "2");
    return Status::OK();
  }, Durability::kLogged);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Writes w;
  w.Put(Space::kInodes, "third", "3");
  EXPECT_TRUE(CommitWrites(kv, &w, Durability::kLogged).ok());
}

// Runs `sql` on the test's server; its error text, empty on success.
std::string RunSql(const std::string& sql) {
  PGconn* c = PQconnectdb(TestPgUri().c_str());
  PGresult* r = PQexec(c, sql.c_str());
  const ExecStatusType t = PQresultStatus(r);
  std::string err = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? "" : PQresultErrorMessage(r);
  if (PQstatus(c) != CONNECTION_OK) err = PQerrorMessage(c);
  PQclear(r);
  PQfinish(c);
  return err;
}

// Sync() makes every commit before it survive a crash of the server (an
// immediate stop: what its log had not flushed is lost). The server's log
// writer is held off (10 s) so that only Sync can have flushed the commit.
TEST_F(PgKvTest, PostgreSqlSyncMakesEarlierCommitsSurviveAServerCrash) {
  ASSERT_EQ(RunSql("ALTER SYSTEM SET wal_writer_delay = '10s'"), "");
  ASSERT_EQ(RunSql("SELECT pg_reload_conf()"), "");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer's last nap
  PgKv* kv = pg();
  Writes w;
  w.Put(Space::kInodes, "logged", "1");
  ASSERT_TRUE(CommitWrites(kv, &w, Durability::kLogged).ok());
  ASSERT_TRUE(kv->Sync().ok());
  ASSERT_NO_FATAL_FAILURE(Server("kill"));
  ASSERT_NO_FATAL_FAILURE(Server("start"));
  EXPECT_EQ(RunSql("ALTER SYSTEM RESET wal_writer_delay"), "");
  EXPECT_EQ(RunSql("SELECT pg_reload_conf()"), "");
  Result<std::optional<std::string>> v = Status(EIO, "not read");
  Status st = RunReads(kv, [&](ReadTxn* t) -> Status {
    v = t->Get(Space::kInodes, "logged");
    return v.status();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(*v, std::optional<std::string>("1")) << "a commit before Sync() was lost";
  // Sync left no row behind.
  std::optional<KeyValue> last;
  ASSERT_TRUE(RunReads(kv, [&](ReadTxn* t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(last, t->Last(Space::kMeta, "", ""));
    return Status::OK();
  }).ok());
  EXPECT_FALSE(last.has_value()) << last->key;
}

TEST_F(PgKvTest, PostgreSqlDownFailsAfterTheWaitAndComesBack) {
  PgOptions o;
  o.uri = TestPgUri();
  o.schema = "down_" + std::to_string(getpid());
  o.create = true;
  o.reconnect_wait_s = 1;
  o.idle_connections = 0;  // every transaction connects
  Result<std::unique_ptr<PgKv>> kv = PgKv::Open(o);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  ASSERT_NO_FATAL_FAILURE(Server("stop"));
  const auto start = std::chrono::steady_clock::now();
  Status st = RunTxn(kv->get(), [&](Txn* t) {
    t->Put(Space::kInodes, "x", "1");
    return Status::OK();
  }, Durability::kLogged);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NO_FATAL_FAILURE(Server("start"));
  EXPECT_EQ(st.code(), EIO) << st.ToString();
  EXPECT_NE(st.message().find("tried for 1 s"), std::string::npos) << st.message();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 30);
  st = RunTxn(kv->get(), [&](Txn* t) {
    t->Put(Space::kInodes, "x", "2");
    return Status::OK();
  }, Durability::kLogged);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE((*kv)->DropSchema().ok());
}

TEST_F(PgKvTest, PostgreSqlUnreachableIsOneClearError) {
  PgOptions o;
  o.uri = "postgresql:///postgres?host=/nonexistent-ckptfs-socket-dir";
  o.connect_timeout_s = 2;
  Result<std::unique_ptr<PgKv>> kv = PgKv::Open(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), EIO);
  EXPECT_NE(kv.status().message().find("cannot connect to PostgreSQL"), std::string::npos);
  EXPECT_EQ(kv.status().message().find('\n'), std::string::npos) << kv.status().message();
}

TEST(PgConninfoTest, PostgreSqlConninfoLosesItsPasswordAndKeepsTheRest) {
  Result<std::string> c =
      ConninfoWithoutPassword("postgresql://trainer:s3cret@db.example:5433/ckpt?sslmode=require");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->find("s3cret"), std::string::npos) << *c;
  EXPECT_NE(c->find("host='db.example'"), std::string::npos) << *c;
  EXPECT_NE(c->find("port='5433'"), std::string::npos) << *c;
  EXPECT_NE(c->find("dbname='ckpt'"), std::string::npos) << *c;
  EXPECT_NE(c->find("user='trainer'"), std::string::npos) << *c;
  EXPECT_NE(c->find("sslmode='require'"), std::string::npos) << *c;
  c = ConninfoWithoutPassword("host='/tmp/it\\'s' dbname=x password=p");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->find("password"), std::string::npos) << *c;
  EXPECT_NE(c->find("host='/tmp/it\\'s'"), std::string::npos) << *c;
  // What it writes parses back to the same.
  Result<std::string> again = ConninfoWithoutPassword(*c);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *c);
  EXPECT_EQ(ConninfoWithoutPassword("postgresql://[bad").status().code(), EINVAL);
}

TEST_F(PgKvTest, PostgreSqlOpenWithoutCreateNeedsTheTables) {
  PgOptions o;
  o.uri = TestPgUri();
  o.schema = "never_created_" + std::to_string(getpid());
  Result<std::unique_ptr<PgKv>> kv = PgKv::Open(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), ENOENT) << kv.status().ToString();
  o.schema = "Bad-Name";
  EXPECT_EQ(PgKv::Open(o).status().code(), EINVAL);
}

}  // namespace
}  // namespace ckptfs::meta
