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
// Read-write transactions (Txn) run at SERIALIZABLE: PostgreSQL then
// reports (SQLSTATE 40001) any transaction that could not have run alone in
// some order, which becomes a conflict (IsConflict) for RunTxn to run
// again. The first read begins the transaction on the server (one round
// trip with the read); writes wait in the client and go with the COMMIT in
// one pipeline. An Insert is a plain INSERT: a unique violation (23505) is
// EEXIST. A read-only transaction (ReadTxn) is READ ONLY at REPEATABLE
// READ, one snapshot for all its reads: its BEGIN goes with its first read,
// one round trip, and its end is sent without waiting for the answer
// (meta/pg_connection.h), so that a ReadTxn of one read costs the one round
// trip of a statement alone.
// Notifications (Writes::Notify, Kv::Listen) are PostgreSQL's: a commit
// sends pg_notify in its pipeline, a listener LISTENs on a connection of
// its own.
// Commits that are not kSynced run with synchronous_commit off: durable
// against a crash of this process at once, against a crash of the server
// once a later synced commit or Sync() returned.
//
// Thread-safe: each transaction holds one connection of a pool.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meta/kv.h"

namespace ckptfs::meta {

class PgPool;
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
// does not parse. A `mem://NAME` URL (meta/shared_kv.h) comes back as it is.
Result<std::string> ConninfoWithoutPassword(const std::string& uri);

class PgKv final : public Kv {
 public:
  // Connects once (EIO with libpq's message when the server cannot be
  // reached) and checks, or creates, the schema. EINVAL for a bad schema
  // name; ENOENT when the tables are missing and `create` is false.
  static Result<std::unique_ptr<PgKv>> Open(const PgOptions& options);
  ~PgKv() override;

  Result<std::unique_ptr<ReadTxn>> BeginRead() override;
  Result<std::unique_ptr<Txn>> Begin() override;
  Status Sync() override;
  std::string Describe() const override;
  // Folds up to kFoldPerPass keys' merge operands (FoldMerges).
  Status Maintain() override;
  IndexWaits Waits() const override;
  std::string LocalAddress() override;
  Result<uint64_t> StoredBytes() override { return TableBytes(); }
  // LISTEN on a connection of its own (one try to connect); its round
  // trip is counted, the waits are not.
  Result<std::unique_ptr<Listener>> Listen(std::string_view channel) override;
  static constexpr size_t kFoldPerPass = 1024;

  // Folds the merge operands of up to `max_keys` keys into their values;
  // `*folded` gets how many keys it folded. Runs in transactions of its own
  // (as RunTxn), so it may run beside any writer.
  Status FoldMerges(size_t max_keys, size_t* folded);
  // Bytes of the schema's tables with their indexes and TOAST, as
  // PostgreSQL counts them (pg_total_relation_size).
  Result<uint64_t> TableBytes();
  // Merge operands waiting to be folded, over all keys.
  Result<uint64_t> PendingMerges();
  // Drops the schema and everything in it.
  Status DropSchema();

 private:
  explicit PgKv(PgOptions options);
  Status CreateOrCheckSchema();
  // Runs `sql` (PQexec: several statements may be in it) on a connection of
  // the pool; `*first_cell` (when given) gets the first cell of its last
  // result. EIO with PostgreSQL's message; a transaction it left open is
  // rolled back.
  Status Exec(const std::string& sql, const std::string& what, std::string* first_cell);
  // The number that `sql` (one row, one column) answers.
  Result<uint64_t> QueryNumber(const std::string& sql, const std::string& what);
  const std::string& schema() const { return options_.schema; }

  const PgOptions options_;
  std::unique_ptr<PgPool> pool_;
  std::vector<PgSpaceSql> sql_;  // by Space
  std::string server_;  // "HOST:PORT/DB", for messages
  // Channels are the server's, not the schema's: "ckptfs_HASH_", where
  // HASH is the schema's name hashed, before each channel of the index.
  const std::string channels_;
};

}  // namespace ckptfs::meta
