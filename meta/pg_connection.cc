#include "meta/pg_connection.h"

#include <poll.h>

#include <cstdio>
#include <thread>

#include "meta/pg_kv.h"

namespace ckptfs::meta {
namespace {

constexpr Oid kByteaOid = 17;
constexpr Oid kByteaArrayOid = 1001;

}  // namespace

std::string FirstLine(const char* msg) {
  std::string s = msg == nullptr ? "" : msg;
  size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

Status StatementError(PGconn* c, const PGresult* r, const std::string& what) {
  const char* state = r == nullptr ? nullptr : PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const std::string msg = what + ": " +
                          FirstLine(r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(c));
  if (PQstatus(c) != CONNECTION_OK || state == nullptr) {
    // Nothing of the transaction was committed; a new connection may work.
    return ConflictStatus("lost the connection to PostgreSQL: " + msg);
  }
  const std::string_view code(state);
  // serialization_failure, deadlock_detected.
  if (code == "40001" || code == "40P01") return ConflictStatus(msg);
  // unique_violation: only an Insert writes without ON CONFLICT.
  if (code == "23505") return Status(EEXIST, msg);
  if (code == "53100") return Status(ENOSPC, msg);
  // division_by_zero: only Writes::RequireEmpty's statement divides.
  if (code == "22012") return RangeHeldStatus(msg);
  return Status(EIO, msg);
}

void PgRoundTrips::Count(std::chrono::steady_clock::time_point start) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  wait_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

IndexWaits PgRoundTrips::Get() const {
  return IndexWaits{round_trips_.load(std::memory_order_relaxed),
                    wait_ns_.load(std::memory_order_relaxed)};
}

// ---- PgConnection ----

bool PgConnection::reusable() const {
  if (out_of_step_ || lost()) return false;
  return owed_ > 0 || (PQtransactionStatus(conn_) == PQTRANS_IDLE &&
                       PQpipelineStatus(conn_) == PQ_PIPELINE_OFF);
}

Status PgConnection::Run(const std::vector<Stmt>& stmts, std::vector<PgResult>* out,
                         const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  Status st = RunUncounted(stmts, out, what);
  trips_->Count(start);
  return st;
}

Status PgConnection::RunUncounted(const std::vector<Stmt>& stmts, std::vector<PgResult>* out,
                                  const std::string& what) {
  if (out != nullptr) out->clear();
  if (out_of_step_) return ConflictStatus("lost the connection to PostgreSQL: " + what);
  if (owed_ == 0 && PQenterPipelineMode(conn_) != 1) {
    out_of_step_ = true;
    return StatementError(conn_, nullptr, what);
  }
  // Any failure below leaves the connection out of step until it is read
  // to the end.
  out_of_step_ = true;
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  std::vector<Oid> types;
  for (const Stmt& s : stmts) {
    values.clear();
    lengths.clear();
    for (std::string_view p : s.params) {
      values.push_back(p.data() == nullptr ? "" : p.data());
      lengths.push_back(static_cast<int>(p.size()));
    }
    formats.assign(s.params.size(), 1);
    types.assign(s.params.size(), s.arrays ? kByteaArrayOid : kByteaOid);
    if (PQsendQueryParams(conn_, s.sql.c_str(), static_cast<int>(s.params.size()), types.data(),
                          values.data(), lengths.data(), formats.data(), /*resultFormat=*/1) != 1) {
      return StatementError(conn_, nullptr, what);
    }
  }
  if (PQpipelineSync(conn_) != 1) return StatementError(conn_, nullptr, what);
  // The answers owed come first, in this round trip.
  out_of_step_ = false;
  if (!ReadOwed(/*wait=*/true, /*then_leave_pipeline=*/false)) {
    return StatementError(conn_, nullptr, what);
  }
  out_of_step_ = true;
  Status first;
  for (size_t i = 0; i < stmts.size(); ++i) {
    PgResult r(PQgetResult(conn_));
    if (r == nullptr) return StatementError(conn_, nullptr, what);
    const ExecStatusType t = PQresultStatus(r.get());
    // A statement after a failed one reports PGRES_PIPELINE_ABORTED.
    if (t != PGRES_TUPLES_OK && t != PGRES_COMMAND_OK && t != PGRES_PIPELINE_ABORTED &&
        first.ok()) {
      first = StatementError(conn_, r.get(), what);
    }
    if (out != nullptr) out->push_back(std::move(r));
    // Each statement's results end with a null.
    while (PGresult* extra = PQgetResult(conn_)) PQclear(extra);
  }
  PgResult sync(PQgetResult(conn_));
  if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
    return first.ok() ? StatementError(conn_, sync.get(), what) : first;
  }
  if (PQexitPipelineMode(conn_) != 1) {
    return first.ok() ? StatementError(conn_, nullptr, what) : first;
  }
  out_of_step_ = false;
  return first;
}

void PgConnection::EndLater() {
  if (out_of_step_ || lost()) return;  // not reused: closing it ends the transaction
  if (owed_ == 0 && PQenterPipelineMode(conn_) != 1) {
    out_of_step_ = true;
    return;
  }
  if (PQsendQueryParams(conn_, "ROLLBACK", 0, nullptr, nullptr, nullptr, nullptr, 0) != 1 ||
      PQpipelineSync(conn_) != 1) {
    out_of_step_ = true;
    return;
  }
  ++owed_;
}

bool PgConnection::Settle() { return ReadOwed(/*wait=*/true, /*then_leave_pipeline=*/true); }

bool PgConnection::SettleArrived() {
  if (owed_ > 0 && PQconsumeInput(conn_) != 1) out_of_step_ = true;
  return ReadOwed(/*wait=*/false, /*then_leave_pipeline=*/true);
}

bool PgConnection::ReadOwed(bool wait, bool then_leave_pipeline) {
  // Each owed pipeline answers with its statements' results, each ended
  // by a null, then its sync.
  int nulls = 0;
  while (owed_ > 0 && !out_of_step_) {
    if (!wait && PQisBusy(conn_)) return true;
    PgResult r(PQgetResult(conn_));
    if (r == nullptr) {
      // Two in a row: nothing more comes.
      if (++nulls == 2 || lost()) out_of_step_ = true;
      continue;
    }
    nulls = 0;
    if (PQresultStatus(r.get()) != PGRES_PIPELINE_SYNC) continue;
    if (--owed_ == 0 && then_leave_pipeline && PQexitPipelineMode(conn_) != 1) {
      out_of_step_ = true;
    }
  }
  return !out_of_step_;
}

// ---- PgPool ----

PgPool::~PgPool() {
  MutexLock l(&mu_);
  idle_.clear();
}

std::unique_ptr<PgConnection> PgPool::TakeIdle() {
  for (;;) {
    std::unique_ptr<PgConnection> c;
    {
      MutexLock l(&mu_);
      if (idle_.empty()) return nullptr;
      c = std::move(idle_.back());
      idle_.pop_back();
    }
    if (!c->SettleArrived()) continue;
    // Its last answer is still on the way: in use a moment ago, and read
    // with its next pipeline.
    if (c->owes()) return c;
    // An idle connection receives nothing, unless its server is going away
    // (a restart: a termination message, then the end of the stream): such
    // a connection is dropped here, rather than fail a commit whose
    // outcome would then be unknown.
    pollfd p{PQsocket(c->get()), POLLIN, 0};
    if (!c->lost() && ::poll(&p, 1, 0) == 0) return c;
  }
}

Result<std::unique_ptr<PgConnection>> PgPool::Take() {
  if (std::unique_ptr<PgConnection> c = TakeIdle()) return c;
  // No connection: wait for the server up to reconnect_wait_s, from 50 ms
  // between tries up to 1 s.
  const auto start = std::chrono::steady_clock::now();
  const auto wait = std::chrono::duration<double>(opened_ ? options_->reconnect_wait_s : 0);
  for (auto pause = std::chrono::milliseconds(50);;
       pause = std::min(pause * 2, decltype(pause)(1000))) {
    Result<std::unique_ptr<PgConnection>> c = Connect();
    if (c.ok()) return c;
    if (std::chrono::steady_clock::now() - start + pause > wait) {
      if (wait.count() == 0) return c;
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%g s", wait.count());
      return Status(EIO, c.status().message() + " (tried for " + waited + ")");
    }
    std::this_thread::sleep_for(pause);
  }
}

Result<std::unique_ptr<PgConnection>> PgPool::Connect() {
  const std::string timeout = std::to_string(options_->connect_timeout_s);
  // Notices (a DROP's cascade, say) are not errors: not printed.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", "options", nullptr};
  const char* values[] = {options_->uri.c_str(), timeout.c_str(), "ckptfs",
                          "-c client_min_messages=warning", nullptr};
  PGconn* c = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (c == nullptr) return Status(ENOMEM, "connect to PostgreSQL: out of memory");
  if (PQstatus(c) != CONNECTION_OK) {
    Status st(EIO, "cannot connect to PostgreSQL: " + FirstLine(PQerrorMessage(c)));
    PQfinish(c);
    return st;
  }
  return std::make_unique<PgConnection>(c, &trips_);
}

void PgPool::Return(std::unique_ptr<PgConnection> conn) {
  if (conn == nullptr || !conn->reusable()) return;
  MutexLock l(&mu_);
  if (idle_.size() < options_->idle_connections) idle_.push_back(std::move(conn));
  // else closed here
}

}  // namespace ckptfs::meta
