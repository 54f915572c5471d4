// The connections of the PostgreSQL index (meta/pg_kv.h) and the
// pipelines sent on them: the pool that PgKv's transactions take a
// connection from and give it back to. Internal to meta/.
//
// Round trips: every pipeline (PgConnection::Run) is one, counted with
// the time its caller waited for the answers. The end of a transaction
// whose outcome nobody waits for (EndLater: a read-only transaction, or one
// given up) is sent without waiting, and its answer is read by the
// connection's next pipeline, in that pipeline's round trip, or by the pool
// when it has arrived by then: it costs no round trip of its own.
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "meta/kv.h"

namespace ckptfs::meta {

struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

// One statement: SQL with $n placeholders for `params` (bytea, binary;
// bytea[] in PostgreSQL's binary array form where `arrays`).
struct Stmt {
  std::string sql;
  std::vector<std::string_view> params;
  bool arrays = false;
};

// The first line of a libpq message ("" for null).
std::string FirstLine(const char* msg);

// The status of a failed statement (`r`: its result, or null for a failure
// of the connection): a conflict for a lost connection and for the
// SQLSTATEs that running the transaction again can clear, EEXIST for a
// unique violation, ENOSPC for a full disk, else EIO.
Status StatementError(PGconn* c, const PGresult* r, const std::string& what);

// Round trips to the server and the time spent waiting for them.
// Thread-safe.
class PgRoundTrips {
 public:
  // Counts one round trip that began at `start`.
  void Count(std::chrono::steady_clock::time_point start);
  IndexWaits Get() const;

 private:
  std::atomic<uint64_t> round_trips_{0};
  std::atomic<uint64_t> wait_ns_{0};
};

// One connection to the server. Not thread-safe: one transaction uses it
// at a time.
class PgConnection {
 public:
  // Takes `conn` (connected) over; `trips` counts its round trips and must
  // outlive this.
  PgConnection(PGconn* conn, PgRoundTrips* trips) : conn_(conn), trips_(trips) {}
  ~PgConnection() { PQfinish(conn_); }
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // For the statements that Run does not send (libpq's PQexec): only
  // after Settle.
  PGconn* get() const { return conn_; }
  // The connection to the server is gone.
  bool lost() const { return PQstatus(conn_) != CONNECTION_OK; }
  // Can go back to the pool: not lost, in step with the server, and no
  // transaction open on it other than one that EndLater ends.
  bool reusable() const;

  // Sends `stmts` in one pipeline and waits for all their results: one
  // round trip, counted. On success `out` (when given) holds one result per
  // statement. On failure the first statement's error (StatementError); the
  // statements after it did not run.
  Status Run(const std::vector<Stmt>& stmts, std::vector<PgResult>* out, const std::string& what);
  // Ends (rolls back) the transaction open on the connection, whatever its
  // state, without waiting for the server's answer.
  void EndLater();
  // Reads the answers that EndLater left owed, waiting for them; false when
  // the connection is not in step with the server (then not reusable).
  bool Settle();
  // Reads those of them that have arrived, without waiting; false as Settle.
  bool SettleArrived();
  // Answers owed (EndLater) are still to be read.
  bool owes() const { return owed_ > 0; }

 private:
  // Reads the owed answers, waiting for them (`wait`) or only while they
  // have arrived; leaves pipeline mode after the last when
  // `then_leave_pipeline` (not while a pipeline of its own is on the way).
  bool ReadOwed(bool wait, bool then_leave_pipeline);
  Status RunUncounted(const std::vector<Stmt>& stmts, std::vector<PgResult>* out,
                      const std::string& what);

  PGconn* const conn_;
  PgRoundTrips* const trips_;
  // Pipelines whose answers are owed (each ends with a sync); the
  // connection is in pipeline mode while there are any.
  int owed_ = 0;
  bool out_of_step_ = false;
};

struct PgOptions;

// The connections of one index: an idle one that still works, or a new
// one. Thread-safe.
class PgPool {
 public:
  // `options` must outlive this.
  explicit PgPool(const PgOptions* options) : options_(options) {}
  ~PgPool();

  // An idle connection, or a new one: when none can be made, waits for the
  // server up to options.reconnect_wait_s once `Opened` was called, else
  // fails at once (EIO with libpq's message).
  Result<std::unique_ptr<PgConnection>> Take();
  // Gives a connection back; one that is not reusable, or over the idle
  // bound, is closed instead.
  void Return(std::unique_ptr<PgConnection> conn);
  // The index is open: Take waits out a server that is away.
  void Opened() { opened_ = true; }
  PgRoundTrips* trips() { return &trips_; }
  // One try to connect: a connection outside the pool (not to be given
  // back), whose round trips the pool counts.
  Result<std::unique_ptr<PgConnection>> Connect();

 private:
  // An idle connection that still works, or null.
  std::unique_ptr<PgConnection> TakeIdle();

  const PgOptions* const options_;
  std::atomic<bool> opened_{false};
  PgRoundTrips trips_;
  Mutex mu_;
  std::vector<std::unique_ptr<PgConnection>> idle_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::meta
