// The shared implementation of the seam (meta/kv.h): PostgreSQL through
// libpq, so that the mounts of several hosts share one index
// (docs/SHARED.md).
//
// Schema: in a PostgreSQL schema of the store's own, one table per key
// space, kv_<space>(k bytea PRIMARY KEY, v bytea), and kv_merges(sp, k,
// seq, op) for the merge operands of the spaces that take merges: a Merge
// inserts a row of its own, so that writers adding to one counter never
// touch one row; reads fold a key's operands into its value (ApplyMerge),
// and FoldMerges writes folded values back.
//
// Transactions run at SERIALIZABLE: PostgreSQL then reports (SQLSTATE 40001)
// any transaction that could not have run alone in some order, which
// becomes a conflict (IsConflict) for RunTxn to run again. The first read
// begins the transaction on the server (one round trip with the read);
// writes wait in the client and go with the COMMIT in one pipeline. An
// Insert is a plain INSERT: a unique violation (23505) is EEXIST. Reads of
// a TxnMode::kReads transaction run as statements of their own, without a
// transaction block: one round trip each, none to end it.
// Commits that are not kSynced run with synchronous_commit off: durable
// against a crash of this process at once, against a crash of the server
// once a later synced commit or Sync() returned.
//
// Thread-safe: each transaction holds one connection of a pool.
#pragma once

#include <memory>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "meta/kv.h"

typedef struct pg_conn PGconn;

namespace ckptfs::meta {

// The SQL of one key space's statements in one schema (pg_kv.cc).
struct PgSpaceSql;

struct PgOptions {
  // A libpq connection string or URI ("postgresql://host/db", "host=/run/x
  // dbname=ckptfs"); what it leaves out comes from libpq's environment
  // variables and files (PGHOST, PGUSER, ~/.pgpass, PGSERVICE ...).
  std::string uri;
  // The PostgreSQL schema that holds the store's tables: lower-case
  // letters, digits and '_', at most 63, not starting with a digit.
  std::string schema = "ckptfs";
  // Creates the schema and its tables when missing.
  bool create = false;
  // Connections kept open for transactions to reuse.
  size_t idle_connections = 8;
  // Seconds one try to connect to the server may take.
  int connect_timeout_s = 10;
  // Once open: how long a transaction that finds no connection waits for
  // the server (a restart, a failover), trying again, before it fails with
  // EIO. Open itself does not wait. Default: 60 s.
  double reconnect_wait_s = 60;
};

// `uri` (a libpq connection URI or string) as a connection string of
// key=value pairs without its password, to be written down: libpq finds
// the password in its usual places. EINVAL with libpq's reason when it
// does not parse.
Result<std::string> ConninfoWithoutPassword(const std::string& uri);

class PgKv final : public Kv {
 public:
  // Connects once (EIO with libpq's message when the server cannot be
  // reached) and checks, or creates, the schema. EINVAL for a bad schema
  // name; ENOENT when the tables are missing and `create` is false.
  static Result<std::unique_ptr<PgKv>> Open(const PgOptions& options);
  ~PgKv() override;

  using Kv::Begin;
  Result<std::unique_ptr<Txn>> Begin(TxnMode mode) override;
  Status Sync() override;
  std::string Describe() const override;
  // Folds up to kFoldPerPass keys' merge operands (FoldMerges).
  Status Maintain() override;
  IndexWaits Waits() const override;
  // Counts one round trip that began at `start`.
  void CountRoundTrip(std::chrono::steady_clock::time_point start);
  static constexpr size_t kFoldPerPass = 1024;

  // Folds the merge operands of up to `max_keys` keys into their values;
  // `*folded` gets how many keys it folded. Runs in transactions of its own
  // (RunTxn), so it may run beside any writer.
  Status FoldMerges(size_t max_keys, size_t* folded);
  // Bytes of the schema's tables with their indexes and TOAST, as
  // PostgreSQL counts them (pg_total_relation_size).
  Result<uint64_t> TableBytes();
  // Merge operands waiting to be folded, over all keys.
  Result<uint64_t> PendingMerges();
  // Drops the schema and everything in it.
  Status DropSchema();

  // The connection pool, for transactions (pg_kv.cc): an idle connection
  // that still works, or a new one (waiting as reconnect_wait_s says).
  Result<PGconn*> TakeConnection();
  // Gives a connection back; a broken one (or one over the idle bound) is
  // closed instead.
  void ReturnConnection(PGconn* conn);
  const std::string& schema() const { return options_.schema; }
  // The statements of space `s`, made once at Open.
  const PgSpaceSql& sql(Space s) const;

 private:
  explicit PgKv(PgOptions options);
  Status CreateOrCheckSchema();
  // One try to connect.
  Result<PGconn*> Connect();
  // The number that `sql` (one row, one column) answers.
  Result<uint64_t> QueryNumber(const std::string& sql, const std::string& what);

  const PgOptions options_;
  std::vector<PgSpaceSql> sql_;  // by Space
  bool opened_ = false;  // Open succeeded: TakeConnection waits for the server
  std::string server_;  // "HOST:PORT/DB", for messages
  Mutex mu_;
  std::vector<PGconn*> idle_ GUARDED_BY(mu_);
  std::atomic<uint64_t> round_trips_{0};
  std::atomic<uint64_t> wait_ns_{0};
};

}  // namespace ckptfs::meta
