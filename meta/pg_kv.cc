#include "meta/pg_kv.h"

#include <libpq-fe.h>
#include <poll.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "format/format.h"

namespace ckptfs::meta {
namespace {

constexpr Oid kByteaOid = 17;
// Statements sent in one pipeline at most: their results (a few dozen
// bytes each) then fit the socket's buffers while the client is still
// sending, so that neither side waits on the other.
constexpr size_t kPipelineMax = 256;
// Rows fetched per page of a Scan.
constexpr int kScanPage = 256;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// One statement: SQL with $n placeholders for `params` (bytea, binary).
struct Stmt {
  std::string sql;
  std::vector<std::string_view> params;
};

std::string FirstLine(const char* msg) {
  std::string s = msg == nullptr ? "" : msg;
  size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

bool ConnectionLost(PGconn* c) { return PQstatus(c) != CONNECTION_OK; }

// The status of a failed statement: a conflict for the SQLSTATEs that
// running the transaction again can clear, ENOSPC for a full disk.
Status StatementError(PGconn* c, const PGresult* r, const std::string& what) {
  const char* state = r == nullptr ? nullptr : PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const std::string msg = what + ": " +
                          FirstLine(r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(c));
  if (ConnectionLost(c) || state == nullptr) {
    // Nothing of the transaction was committed; a new connection may work.
    return ConflictStatus("lost the connection to PostgreSQL: " + msg);
  }
  const std::string_view code(state);
  // serialization_failure, deadlock_detected.
  if (code == "40001" || code == "40P01") return ConflictStatus(msg);
  // unique_violation: only an Insert writes without ON CONFLICT.
  if (code == "23505") return Status(EEXIST, msg);
  if (code == "53100") return Status(ENOSPC, msg);
  return Status(EIO, msg);
}

// Sends `stmts` in one pipeline and waits for all their results: one round
// trip. On success `out` (when given) holds one result per statement. On
// failure the first statement's error; the statements after it did not run.
Status RunPipelineUncounted(PGconn* c, const std::vector<Stmt>& stmts,
                            std::vector<PgResult>* out, const std::string& what) {
  if (out != nullptr) out->clear();
  if (PQenterPipelineMode(c) != 1) return StatementError(c, nullptr, what);
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
    types.assign(s.params.size(), kByteaOid);
    if (PQsendQueryParams(c, s.sql.c_str(), static_cast<int>(s.params.size()), types.data(),
                          values.data(), lengths.data(), formats.data(), /*resultFormat=*/1) != 1) {
      Status st = StatementError(c, nullptr, what);
      PQexitPipelineMode(c);
      return st;
    }
  }
  if (PQpipelineSync(c) != 1) return StatementError(c, nullptr, what);
  Status first;
  for (size_t i = 0; i < stmts.size(); ++i) {
    PgResult r(PQgetResult(c));
    if (r == nullptr) return StatementError(c, nullptr, what);
    const ExecStatusType t = PQresultStatus(r.get());
    // A statement after a failed one reports PGRES_PIPELINE_ABORTED.
    if (t != PGRES_TUPLES_OK && t != PGRES_COMMAND_OK && t != PGRES_PIPELINE_ABORTED &&
        first.ok()) {
      first = StatementError(c, r.get(), what);
    }
    if (out != nullptr) out->push_back(std::move(r));
    // Each statement's results end with a null.
    while (PGresult* extra = PQgetResult(c)) PQclear(extra);
  }
  PgResult sync(PQgetResult(c));
  if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
    return first.ok() ? StatementError(c, sync.get(), what) : first;
  }
  PQexitPipelineMode(c);
  return first;
}

// One pipeline (statements sent at once, then their results read): one
// round trip to the server, counted in `kv`.
Status RunPipeline(PgKv* kv, PGconn* c, const std::vector<Stmt>& stmts,
                   std::vector<PgResult>* out, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  Status st = RunPipelineUncounted(c, stmts, out, what);
  kv->CountRoundTrip(start);
  return st;
}

std::string_view Cell(const PGresult* r, int row, int col) {
  return std::string_view(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
}

int64_t CellInt64(const PGresult* r, int row, int col) {
  // Binary int8: big-endian.
  const unsigned char* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col));
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

bool ValidSchemaName(const std::string& s) {
  if (s.empty() || s.size() > 63 || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char ch : s) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  }
  return true;
}


}  // namespace

// The SQL of one key space's statements in one schema.
struct PgSpaceSql {
  PgSpaceSql(const std::string& schema, Space s) {
    const std::string t = schema + ".kv_" + SpaceName(s);
    const std::string m = schema + ".kv_merges";
    const std::string sp = std::to_string(static_cast<int>(s));
    const std::string range = " k >= $1 AND ($2 = ''::bytea OR k < $2)";
    merges = SpaceMerges(s);
    put = "INSERT INTO " + t + " (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v";
    insert = "INSERT INTO " + t + " (k, v) VALUES ($1, $2)";
    del = "DELETE FROM " + t + " WHERE k = $1";
    drop_merges = "DELETE FROM " + m + " WHERE sp = " + sp + " AND k = $1";
    merge = "INSERT INTO " + m + " (sp, k, op) VALUES (" + sp + ", $1, $2)";
    get = merges ? "SELECT 0::bigint, v FROM " + t + " WHERE k = $1 UNION ALL SELECT seq, op FROM " +
                       m + " WHERE sp = " + sp + " AND k = $1 ORDER BY 1"
                 : "SELECT v FROM " + t + " WHERE k = $1";
    scan_first = "SELECT k, v FROM " + t + " WHERE" + range + " ORDER BY k LIMIT " +
                 std::to_string(kScanPage);
    scan_next = "SELECT k, v FROM " + t + " WHERE k > $1 AND ($2 = ''::bytea OR k < $2) ORDER BY k LIMIT " +
                std::to_string(kScanPage);
    scan_merged = "SELECT k, 0::bigint, v FROM " + t + " WHERE" + range +
                  " UNION ALL SELECT k, seq, op FROM " + m + " WHERE sp = " + sp + " AND" + range +
                  " ORDER BY 1, 2";
    last = "SELECT k, v FROM " + t + " WHERE" + range + " ORDER BY k DESC LIMIT 1";
    merged_keys = "SELECT DISTINCT k FROM " + m + " WHERE sp = " + sp + " ORDER BY k LIMIT ";
  }
  bool merges;
  std::string put, insert, del, drop_merges, merge, get, scan_first, scan_next, scan_merged, last,
      merged_keys;
};

namespace {

// Folds rows (value first when `seq` is 0, then operands in order) of one key.
class Folder {
 public:
  explicit Folder(Space s) : space_(s) {}
  Status Add(int64_t seq, std::string_view v) {
    if (seq == 0) {
      value_ = std::string(v);
      return Status::OK();
    }
    std::string out;
    std::optional<std::string_view> have;
    if (value_.has_value()) have = *value_;
    CKPTFS_RETURN_IF_ERROR(ApplyMerge(space_, have, v, &out));
    value_ = std::move(out);
    return Status::OK();
  }
  std::optional<std::string> Take() { return std::exchange(value_, std::nullopt); }

 private:
  const Space space_;
  std::optional<std::string> value_;
};

class PgTxn final : public Txn {
 public:
  PgTxn(PgKv* kv, PGconn* conn, TxnMode mode) : kv_(kv), conn_(conn), mode_(mode) {}
  ~PgTxn() override {
    if (begun_ && !ended_) {
      PGresult* r = PQexec(conn_, "ROLLBACK");
      PQclear(r);
    }
    kv_->ReturnConnection(conn_);
  }

  Result<std::optional<std::string>> Get(Space s, std::string_view key) override {
    const PgSpaceSql& q = kv_->sql(s);
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(Query(Stmt{q.get, {key}}, &r, std::string("get from ") + SpaceName(s)));
    const int rows = PQntuples(r.get());
    if (!q.merges) {
      if (rows == 0) return std::optional<std::string>();
      return std::optional<std::string>(std::string(Cell(r.get(), 0, 0)));
    }
    Folder f(s);
    for (int i = 0; i < rows; ++i) {
      CKPTFS_RETURN_IF_ERROR(f.Add(CellInt64(r.get(), i, 0), Cell(r.get(), i, 1)));
    }
    return f.Take();
  }

  Status Scan(Space s, std::string_view begin, std::string_view end, const ScanFn& fn) override {
    const PgSpaceSql& q = kv_->sql(s);
    const std::string what = std::string("scan ") + SpaceName(s);
    if (q.merges) return ScanMerged(s, q, begin, end, fn, what);
    std::string from(begin);
    bool first = true;
    for (;;) {
      PgResult r;
      CKPTFS_RETURN_IF_ERROR(
          Query(Stmt{first ? q.scan_first : q.scan_next, {from, end}}, &r, what));
      first = false;
      const int rows = PQntuples(r.get());
      for (int i = 0; i < rows; ++i) {
        if (!fn(Cell(r.get(), i, 0), Cell(r.get(), i, 1))) return Status::OK();
      }
      if (rows < kScanPage) return Status::OK();
      from = std::string(Cell(r.get(), rows - 1, 0));
    }
  }

  Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                       std::string_view end) override {
    const PgSpaceSql& q = kv_->sql(s);
    if (q.merges) {
      std::optional<KeyValue> last;
      CKPTFS_RETURN_IF_ERROR(Scan(s, begin, end, [&](std::string_view k, std::string_view v) {
        last = KeyValue{std::string(k), std::string(v)};
        return true;
      }));
      return last;
    }
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(
        Query(Stmt{q.last, {begin, end}}, &r, std::string("scan ") + SpaceName(s)));
    if (PQntuples(r.get()) == 0) return std::optional<KeyValue>();
    return std::optional<KeyValue>(
        KeyValue{std::string(Cell(r.get(), 0, 0)), std::string(Cell(r.get(), 0, 1))});
  }

  Status Commit(Durability d) override {
    if (ended_) return Status(EINVAL, "transaction already committed");
    if (writes_.empty() && !begun_) {
      ended_ = true;
      return Status::OK();
    }
    if (mode_ == TxnMode::kReads) {
      ended_ = true;
      if (writes_.empty()) return Status::OK();
      return Status(EINVAL, "writes in a read-only transaction");
    }
    std::vector<Stmt> stmts;
    if (!begun_) stmts.push_back(Stmt{kBegin, {}});
    begun_ = true;
    stmts.push_back(Stmt{d == Durability::kSynced ? "SET LOCAL synchronous_commit TO on"
                                                  : "SET LOCAL synchronous_commit TO off",
                         {}});
    for (const Write& w : writes_.list()) {
      const PgSpaceSql& q = kv_->sql(w.space);
      switch (w.kind) {
        case Write::Kind::kPut:
          stmts.push_back(Stmt{q.put, {w.key, w.value}});
          if (q.merges) stmts.push_back(Stmt{q.drop_merges, {w.key}});
          break;
        case Write::Kind::kInsert:
          if (q.merges) {
            return Status(EINVAL, std::string("no inserts in the ") + SpaceName(w.space) +
                                      " space");
          }
          stmts.push_back(Stmt{q.insert, {w.key, w.value}});
          break;
        case Write::Kind::kDelete:
          stmts.push_back(Stmt{q.del, {w.key}});
          if (q.merges) stmts.push_back(Stmt{q.drop_merges, {w.key}});
          break;
        case Write::Kind::kMerge:
          if (!q.merges) {
            return Status(EINVAL, std::string("the ") + SpaceName(w.space) +
                                      " space takes no merges");
          }
          stmts.push_back(Stmt{q.merge, {w.key, w.value}});
          break;
      }
    }
    // All but the COMMIT, a pipeline at a time; then the COMMIT with the last.
    size_t at = 0;
    while (stmts.size() - at > kPipelineMax) {
      std::vector<Stmt> part(stmts.begin() + at, stmts.begin() + at + kPipelineMax);
      at += kPipelineMax;
      CKPTFS_RETURN_IF_ERROR(Abandon(RunPipeline(kv_, conn_, part, nullptr, "write index")));
    }
    std::vector<Stmt> last(stmts.begin() + at, stmts.end());
    last.push_back(Stmt{"COMMIT", {}});
    Status st = RunPipeline(kv_, conn_, last, nullptr, "commit index");
    if (st.ok()) {
      ended_ = true;
      return st;
    }
    if (ConnectionLost(conn_)) {
      ended_ = true;
      return Status(EIO, "commit index: the connection to PostgreSQL was lost during the "
                         "commit; the outcome is unknown: " + st.message());
    }
    return Abandon(st);
  }

  // Keys of `s` that have merge operands, at most `limit`.
  Status MergedKeys(Space s, size_t limit, std::vector<std::string>* keys) {
    const PgSpaceSql& q = kv_->sql(s);
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(
        Query(Stmt{q.merged_keys + std::to_string(limit), {}}, &r, "list merged keys"));
    for (int i = 0; i < PQntuples(r.get()); ++i) keys->emplace_back(Cell(r.get(), i, 0));
    return Status::OK();
  }

 private:
  static constexpr char kBegin[] = "BEGIN ISOLATION LEVEL SERIALIZABLE";

  // Runs one read, beginning the transaction with it when it is the first
  // (kReadWrite; a kReads transaction has no transaction block).
  Status Query(const Stmt& stmt, PgResult* out, const std::string& what) {
    if (ended_) return Status(EINVAL, "transaction already committed");
    std::vector<Stmt> stmts;
    if (!begun_ && mode_ == TxnMode::kReadWrite) {
      stmts.push_back(Stmt{kBegin, {}});
      begun_ = true;
    }
    stmts.push_back(stmt);
    std::vector<PgResult> results;
    CKPTFS_RETURN_IF_ERROR(Abandon(RunPipeline(kv_, conn_, stmts, &results, what)));
    *out = std::move(results.back());
    return Status::OK();
  }

  Status ScanMerged(Space s, const PgSpaceSql& q, std::string_view begin, std::string_view end,
                    const ScanFn& fn, const std::string& what) {
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(Query(Stmt{q.scan_merged, {begin, end}}, &r, what));
    const int rows = PQntuples(r.get());
    for (int i = 0; i < rows;) {
      const std::string_view key = Cell(r.get(), i, 0);
      Folder f(s);
      for (; i < rows && Cell(r.get(), i, 0) == key; ++i) {
        CKPTFS_RETURN_IF_ERROR(f.Add(CellInt64(r.get(), i, 1), Cell(r.get(), i, 2)));
      }
      std::optional<std::string> v = f.Take();
      if (!fn(key, *v)) break;
    }
    return Status::OK();
  }

  // An error ends the transaction on the server: rolls it back there.
  Status Abandon(Status st) {
    if (!st.ok() && !ended_) {
      ended_ = true;
      if (!ConnectionLost(conn_) && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
        PGresult* r = PQexec(conn_, "ROLLBACK");
        PQclear(r);
      }
    }
    return st;
  }

  PgKv* const kv_;
  PGconn* const conn_;
  const TxnMode mode_;
  bool begun_ = false;  // BEGIN sent
  bool ended_ = false;  // committed, rolled back or failed
};

}  // namespace

Result<std::string> ConninfoWithoutPassword(const std::string& uri) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(uri.c_str(), &err);
  if (opts == nullptr) {
    Status st(EINVAL, "bad PostgreSQL connection string: " +
                          (err != nullptr ? FirstLine(err) : std::string("out of memory")));
    PQfreemem(err);
    return st;
  }
  std::string out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || std::string_view(o->keyword) == "password") continue;
    // Single quotes around every value, with ' and \ escaped (libpq's rules).
    std::string v = "'";
    for (const char* p = o->val; *p != '\0'; ++p) {
      if (*p == '\'' || *p == '\\') v.push_back('\\');
      v.push_back(*p);
    }
    v.push_back('\'');
    if (!out.empty()) out.push_back(' ');
    out += std::string(o->keyword) + "=" + v;
  }
  PQconninfoFree(opts);
  return out;
}

PgKv::PgKv(PgOptions options) : options_(std::move(options)) {
  for (Space s : kAllSpaces) sql_.emplace_back(options_.schema, s);
}

const PgSpaceSql& PgKv::sql(Space s) const { return sql_[static_cast<size_t>(s)]; }

Result<std::unique_ptr<PgKv>> PgKv::Open(const PgOptions& options) {
  if (!ValidSchemaName(options.schema)) {
    return Status(EINVAL, "bad PostgreSQL schema name '" + options.schema +
                              "': lower-case letters, digits and '_', at most 63");
  }
  std::unique_ptr<PgKv> kv(new PgKv(options));
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, kv->TakeConnection());
  kv->server_ = std::string(PQhost(c)) + ":" + PQport(c) + "/" + PQdb(c);
  kv->ReturnConnection(c);
  CKPTFS_RETURN_IF_ERROR(kv->CreateOrCheckSchema());
  kv->opened_ = true;
  return kv;
}

PgKv::~PgKv() {
  MutexLock l(&mu_);
  for (PGconn* c : idle_) PQfinish(c);
  idle_.clear();
}

Result<PGconn*> PgKv::TakeConnection() {
  for (;;) {
    PGconn* c = nullptr;
    {
      MutexLock l(&mu_);
      if (idle_.empty()) break;
      c = idle_.back();
      idle_.pop_back();
    }
    // An idle connection receives nothing, unless its server is going away
    // (a restart: a termination message, then the end of the stream): such
    // a connection is dropped here, rather than fail a commit whose
    // outcome would then be unknown.
    pollfd p{PQsocket(c), POLLIN, 0};
    if (PQstatus(c) == CONNECTION_OK && ::poll(&p, 1, 0) == 0) return c;
    PQfinish(c);
  }
  // No connection: wait for the server up to reconnect_wait_s, from 50 ms
  // between tries up to 1 s.
  const auto start = std::chrono::steady_clock::now();
  const auto wait = std::chrono::duration<double>(opened_ ? options_.reconnect_wait_s : 0);
  for (auto pause = std::chrono::milliseconds(50);; pause = std::min(pause * 2, decltype(pause)(1000))) {
    Result<PGconn*> c = Connect();
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

Result<PGconn*> PgKv::Connect() {
  const std::string timeout = std::to_string(options_.connect_timeout_s);
  // Notices (a DROP's cascade, say) are not errors: not printed.
  const char* keys[] = {"dbname", "connect_timeout", "application_name", "options", nullptr};
  const char* values[] = {options_.uri.c_str(), timeout.c_str(), "ckptfs",
                          "-c client_min_messages=warning", nullptr};
  PGconn* c = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (c == nullptr) return Status(ENOMEM, "connect to PostgreSQL: out of memory");
  if (PQstatus(c) != CONNECTION_OK) {
    Status st(EIO, "cannot connect to PostgreSQL: " + FirstLine(PQerrorMessage(c)));
    PQfinish(c);
    return st;
  }
  return c;
}

void PgKv::ReturnConnection(PGconn* conn) {
  if (PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE &&
      PQpipelineStatus(conn) == PQ_PIPELINE_OFF) {
    MutexLock l(&mu_);
    if (idle_.size() < options_.idle_connections) {
      idle_.push_back(conn);
      return;
    }
  }
  PQfinish(conn);
}

Status PgKv::CreateOrCheckSchema() {
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, TakeConnection());
  const std::string& s = options_.schema;
  std::string sql;
  if (options_.create) {
    // One creator at a time: CREATE ... IF NOT EXISTS races with itself.
    sql = "BEGIN; SELECT pg_advisory_xact_lock(hashtext('ckptfs schema " + s +
          "')); CREATE SCHEMA IF NOT EXISTS " + s + ";";
    for (Space sp : kAllSpaces) {
      sql += " CREATE TABLE IF NOT EXISTS " + s + ".kv_" + SpaceName(sp) +
             " (k bytea PRIMARY KEY, v bytea NOT NULL);";
    }
    sql += " CREATE TABLE IF NOT EXISTS " + s +
           ".kv_merges (sp smallint NOT NULL, k bytea NOT NULL,"
           " seq bigint GENERATED ALWAYS AS IDENTITY, op bytea NOT NULL, PRIMARY KEY (sp, k, seq));"
           " COMMIT;";
  }
  sql += " SELECT count(*) FROM information_schema.tables WHERE table_schema = '" + s +
         "' AND table_name IN ('kv_merges'";
  for (Space sp : kAllSpaces) sql += std::string(", 'kv_") + SpaceName(sp) + "'";
  sql += ")";
  PgResult r(PQexec(c, sql.c_str()));
  Status st;
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    st = Status(EIO, "prepare the index in PostgreSQL " + server_ + ": " +
                         FirstLine(PQresultErrorMessage(r.get())));
    PGresult* rb = PQexec(c, "ROLLBACK");
    PQclear(rb);
  } else if (std::strtol(PQgetvalue(r.get(), 0, 0), nullptr, 10) != kSpaceCount + 1) {
    st = Status(ENOENT, "PostgreSQL " + server_ + " holds no ckptfs index in schema " + s);
  }
  ReturnConnection(c);
  return st;
}

Result<std::unique_ptr<Txn>> PgKv::Begin(TxnMode mode) {
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, TakeConnection());
  return std::unique_ptr<Txn>(std::make_unique<PgTxn>(this, c, mode));
}

Status PgKv::Sync() {
  // A commit with synchronous_commit on flushes the log up to its commit
  // record, and so past every commit before it, only when its transaction
  // wrote to the log: a transaction id alone writes nothing, and such a
  // commit flushes nothing. So the transaction puts a row and takes it back
  // (its key is this connection's own: syncs never wait on one another),
  // which writes the log and leaves the index as it was.
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, TakeConnection());
  const std::string table = schema() + ".kv_" + SpaceName(Space::kMeta);
  const std::string key = "convert_to('sync/' || pg_backend_pid(), 'UTF8')";
  std::vector<Stmt> stmts = {
      Stmt{"BEGIN", {}},
      Stmt{"SET LOCAL synchronous_commit TO on", {}},
      Stmt{"INSERT INTO " + table + " (k, v) VALUES (" + key +
               ", ''::bytea) ON CONFLICT DO NOTHING",
           {}},
      Stmt{"DELETE FROM " + table + " WHERE k = " + key, {}},
      Stmt{"COMMIT", {}}};
  Status st = RunPipeline(this, c, stmts, nullptr, "sync index");
  if (!st.ok() && !ConnectionLost(c) && PQtransactionStatus(c) != PQTRANS_IDLE) {
    PGresult* r = PQexec(c, "ROLLBACK");
    PQclear(r);
  }
  ReturnConnection(c);
  return IsConflict(st) ? Status(EIO, st.message()) : st;
}

std::string PgKv::Describe() const { return "PostgreSQL " + server_ + " schema " + schema(); }

IndexWaits PgKv::Waits() const {
  return IndexWaits{round_trips_.load(std::memory_order_relaxed),
                    wait_ns_.load(std::memory_order_relaxed)};
}

void PgKv::CountRoundTrip(std::chrono::steady_clock::time_point start) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  wait_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

Status PgKv::Maintain() {
  size_t folded = 0;
  return FoldMerges(kFoldPerPass, &folded);
}

Status PgKv::FoldMerges(size_t max_keys, size_t* folded) {
  *folded = 0;
  return RunTxn(
      this,
      [&](Txn* t) {
        *folded = 0;
        for (Space s : kAllSpaces) {
          if (!SpaceMerges(s)) continue;
          std::vector<std::string> keys;
          CKPTFS_RETURN_IF_ERROR(
              static_cast<PgTxn*>(t)->MergedKeys(s, max_keys - *folded, &keys));
          for (const std::string& k : keys) {
            CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, t->Get(s, k));
            if (v.has_value()) t->Put(s, k, *v);
            ++*folded;
          }
          if (*folded >= max_keys) break;
        }
        return Status::OK();
      },
      Durability::kLogged);
}

Result<uint64_t> PgKv::QueryNumber(const std::string& sql, const std::string& what) {
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, TakeConnection());
  PgResult r(PQexec(c, sql.c_str()));
  Result<uint64_t> out = Status(EIO, what + ": " + FirstLine(PQresultErrorMessage(r.get())));
  if (PQresultStatus(r.get()) == PGRES_TUPLES_OK) {
    out = static_cast<uint64_t>(std::strtoull(PQgetvalue(r.get(), 0, 0), nullptr, 10));
  }
  ReturnConnection(c);
  return out;
}

Result<uint64_t> PgKv::TableBytes() {
  return QueryNumber(
      "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
      "ON n.oid = c.relnamespace WHERE n.nspname = '" + schema() + "' AND c.relkind = 'r'",
      "size of the index");
}

Result<uint64_t> PgKv::PendingMerges() {
  return QueryNumber("SELECT count(*) FROM " + schema() + ".kv_merges", "count merges");
}

Status PgKv::DropSchema() {
  CKPTFS_ASSIGN_OR_RETURN(PGconn * c, TakeConnection());
  const std::string sql = "DROP SCHEMA IF EXISTS " + schema() + " CASCADE";
  PgResult r(PQexec(c, sql.c_str()));
  Status st;
  if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
    st = Status(EIO, "drop schema " + schema() + ": " + FirstLine(PQresultErrorMessage(r.get())));
  }
  ReturnConnection(c);
  return st;
}

}  // namespace ckptfs::meta
