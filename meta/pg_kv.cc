#include "meta/pg_kv.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>

#include "format/format.h"
#include "meta/pg_connection.h"
#include "meta/shared_kv.h"

namespace ckptfs::meta {
namespace {

// Statements sent in one pipeline at most: their results (a few dozen
// bytes each) then fit the socket's buffers while the client is still
// sending, so that neither side waits on the other.
constexpr size_t kPipelineMax = 256;
// Rows fetched by a Scan's first page; each next page fetches twice as
// many as the one before, up to kScanPageMax: a listing of one directory
// costs one round trip, a tree's 50,000 keys a dozen.
constexpr int kScanPage = 256;
constexpr int kScanPageMax = 16384;
// Puts of one space in a row go as one statement of up to this many rows
// (arrays of keys and values, unnest).
constexpr size_t kPutRowsMax = 4096;
constexpr size_t kPutRowsMin = 8;

// PostgreSQL's binary form of a one-dimensional bytea[] (array_send) of the
// keys or the values of `rows`.
void EncodeByteaArray(const std::map<std::string_view, std::string_view>& rows, bool keys,
                      std::string* out) {
  auto be32 = [out](uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
    out->append(b, 4);
  };
  size_t bytes = 20;
  for (const auto& [k, v] : rows) bytes += 4 + (keys ? k.size() : v.size());
  out->reserve(bytes);
  be32(1);   // dimensions
  be32(0);   // no nulls
  be32(17);  // of bytea
  be32(static_cast<uint32_t>(rows.size()));
  be32(1);  // the lower bound
  for (const auto& [k, v] : rows) {
    const std::string_view e = keys ? k : v;
    be32(static_cast<uint32_t>(e.size()));
    out->append(e);
  }
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


// "ckptfs_HASH_" (PgKv::channels_): at most 24 bytes, so that with a
// channel of kMaxChannel it stays within PostgreSQL's 63.
std::string ChannelPrefix(const std::string& schema) {
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(format::Checksum(schema)));
  return std::string("ckptfs_") + hash + "_";
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
    scan_next = "SELECT k, v FROM " + t + " WHERE k > $1 AND ($2 = ''::bytea OR k < $2) ORDER BY k LIMIT ";
    put_rows = "INSERT INTO " + t + " (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) " +
               "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v";
    scan_merged = "SELECT k, 0::bigint, v FROM " + t + " WHERE" + range +
                  " UNION ALL SELECT k, seq, op FROM " + m + " WHERE sp = " + sp + " AND" + range +
                  " ORDER BY 1, 2";
    last = "SELECT k, v FROM " + t + " WHERE" + range + " ORDER BY k DESC LIMIT 1";
    merged_keys = "SELECT DISTINCT k FROM " + m + " WHERE sp = " + sp + " ORDER BY k LIMIT ";
    // Divides by zero (SQLSTATE 22012: RangeHeld) when the range holds a
    // key or an operand, which ends the transaction.
    std::string none = "NOT EXISTS (SELECT 1 FROM " + t + " WHERE" + range + ")";
    if (merges) none += " AND NOT EXISTS (SELECT 1 FROM " + m + " WHERE sp = " + sp + " AND" + range + ")";
    require_empty = "SELECT 1 / (" + none + ")::int";
  }
  bool merges;
  // scan_next and merged_keys end with "LIMIT ": the caller adds the number.
  std::string put, put_rows, insert, del, drop_merges, merge, get, scan_first, scan_next,
      scan_merged, last, merged_keys, require_empty;
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

// The reads of a transaction of type `Base` (ReadTxn or Txn) on one
// connection: the first read begins the transaction with `begin_sql`.
template <class Base>
class PgReader : public Base {
 public:
  PgReader(PgPool* pool, const std::vector<PgSpaceSql>* sql, std::unique_ptr<PgConnection> conn,
           const char* begin_sql)
      : pool_(pool), sql_(sql), conn_(std::move(conn)), begin_sql_(begin_sql) {}
  ~PgReader() override {
    if (begun_ && !ended_) conn_->EndLater();
    pool_->Return(std::move(conn_));
  }

  Result<std::optional<std::string>> Get(Space s, std::string_view key) override {
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(
        Query(Stmt{sql(s).get, {key}}, &r, std::string("get from ") + SpaceName(s)));
    return ValueOf(s, r);
  }

  // Every key's statement in one pipeline: one round trip.
  Result<std::vector<std::optional<std::string>>> GetMany(
      const std::vector<KeyRef>& keys) override {
    if (keys.empty()) return std::vector<std::optional<std::string>>();
    std::vector<Stmt> stmts;
    stmts.reserve(keys.size());
    for (const KeyRef& k : keys) stmts.push_back(Stmt{sql(k.space).get, {k.key}});
    std::vector<PgResult> results;
    CKPTFS_RETURN_IF_ERROR(QueryAll(std::move(stmts), &results, "get many"));
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, ValueOf(keys[i].space, results[i]));
      out.push_back(std::move(v));
    }
    return out;
  }

  Status Scan(Space s, std::string_view begin, std::string_view end, const ScanFn& fn) override {
    const PgSpaceSql& q = sql(s);
    const std::string what = std::string("scan ") + SpaceName(s);
    if (q.merges) return ScanMerged(s, q, begin, end, fn, what);
    std::string from(begin);
    bool first = true;
    int page = kScanPage;
    for (;;) {
      PgResult r;
      Status st = Query(
          Stmt{first ? q.scan_first : q.scan_next + std::to_string(page), {from, end}}, &r, what);
      // Keys already passed on are not passed on again (ReadTxn::Scan).
      if (!first && IsConflict(st)) return Status(EIO, st.message());
      CKPTFS_RETURN_IF_ERROR(st);
      first = false;
      const int rows = PQntuples(r.get());
      for (int i = 0; i < rows; ++i) {
        if (!fn(Cell(r.get(), i, 0), Cell(r.get(), i, 1))) return Status::OK();
      }
      if (rows < page) return Status::OK();
      page = std::min(page * 2, kScanPageMax);
      from = std::string(Cell(r.get(), rows - 1, 0));
    }
  }

  Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                       std::string_view end) override {
    const PgSpaceSql& q = sql(s);
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

 protected:
  const PgSpaceSql& sql(Space s) const { return (*sql_)[static_cast<size_t>(s)]; }

  // Runs one read, beginning the transaction with it when it is the first.
  Status Query(const Stmt& stmt, PgResult* out, const std::string& what) {
    std::vector<PgResult> results;
    CKPTFS_RETURN_IF_ERROR(QueryAll({stmt}, &results, what));
    *out = std::move(results.back());
    return Status::OK();
  }

  // Runs reads in one round trip, beginning the transaction with them when
  // they are the first; "*out" gets one result per statement of `stmts`.
  Status QueryAll(std::vector<Stmt> stmts, std::vector<PgResult>* out, const std::string& what) {
    if (ended_) return Status(EINVAL, "transaction already ended");
    const bool begin = !begun_;
    if (begin) stmts.insert(stmts.begin(), Stmt{begin_sql_, {}});
    begun_ = true;
    std::vector<PgResult> results;
    CKPTFS_RETURN_IF_ERROR(Abandon(conn_->Run(stmts, &results, what)));
    out->clear();
    for (size_t i = begin ? 1 : 0; i < results.size(); ++i) out->push_back(std::move(results[i]));
    return Status::OK();
  }

  // The value a get's result holds, merge operands applied.
  Result<std::optional<std::string>> ValueOf(Space s, const PgResult& r) const {
    const int rows = PQntuples(r.get());
    if (!sql(s).merges) {
      if (rows == 0) return std::optional<std::string>();
      return std::optional<std::string>(std::string(Cell(r.get(), 0, 0)));
    }
    Folder f(s);
    for (int i = 0; i < rows; ++i) {
      CKPTFS_RETURN_IF_ERROR(f.Add(CellInt64(r.get(), i, 0), Cell(r.get(), i, 1)));
    }
    return f.Take();
  }

  // An error ends the transaction on the server: the one rollback.
  Status Abandon(Status st) {
    if (!st.ok() && !ended_) {
      ended_ = true;
      if (begun_) conn_->EndLater();
    }
    return st;
  }

  PgPool* const pool_;
  const std::vector<PgSpaceSql>* const sql_;
  std::unique_ptr<PgConnection> conn_;
  const char* const begin_sql_;
  bool begun_ = false;  // BEGIN sent
  bool ended_ = false;  // committed, rolled back or failed

 private:
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
};

constexpr char kBeginRead[] = "BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ";
constexpr char kBeginWrite[] = "BEGIN ISOLATION LEVEL SERIALIZABLE";

class PgReadTxn final : public PgReader<ReadTxn> {
 public:
  PgReadTxn(PgPool* pool, const std::vector<PgSpaceSql>* sql, std::unique_ptr<PgConnection> conn)
      : PgReader(pool, sql, std::move(conn), kBeginRead) {}
};

class PgTxn final : public PgReader<Txn> {
 public:
  // `channels`: the prefix of the index's channels on the server.
  PgTxn(PgPool* pool, const std::vector<PgSpaceSql>* sql, std::unique_ptr<PgConnection> conn,
        const std::string* channels)
      : PgReader(pool, sql, std::move(conn), kBeginWrite), channels_(channels) {}

  Status Commit(Durability d) override {
    if (ended_) return Status(EINVAL, "transaction already ended");
    if (writes_.empty() && !begun_) {
      ended_ = true;
      return Status::OK();
    }
    CKPTFS_RETURN_IF_ERROR(Abandon(writes_.Check()));
    std::vector<Stmt> stmts;
    if (!begun_) stmts.push_back(Stmt{kBeginWrite, {}});
    begun_ = true;
    stmts.push_back(Stmt{d == Durability::kSynced ? "SET LOCAL synchronous_commit TO on"
                                                  : "SET LOCAL synchronous_commit TO off",
                         {}});
    for (const Writes::Range& r : writes_.empty_ranges()) {
      stmts.push_back(Stmt{sql(r.space).require_empty, {r.begin, r.end}});
    }
    std::deque<std::string> arrays;
    AppendWrites(&stmts, &arrays);
    // Delivered at the commit, and only if it commits (Writes::Check
    // checked the names: nothing to quote).
    for (const std::string& c : writes_.notifies()) {
      stmts.push_back(Stmt{"SELECT pg_notify('" + *channels_ + c + "', '')", {}});
    }
    // All but the COMMIT, a pipeline at a time; then the COMMIT with the last.
    size_t at = 0;
    while (stmts.size() - at > kPipelineMax) {
      std::vector<Stmt> part(stmts.begin() + at, stmts.begin() + at + kPipelineMax);
      at += kPipelineMax;
      CKPTFS_RETURN_IF_ERROR(Abandon(conn_->Run(part, nullptr, "write index")));
    }
    std::vector<Stmt> last(stmts.begin() + at, stmts.end());
    last.push_back(Stmt{"COMMIT", {}});
    Status st = conn_->Run(last, nullptr, "commit index");
    if (st.ok()) {
      ended_ = true;
      return st;
    }
    if (conn_->lost()) {
      ended_ = true;
      return Status(EIO, "commit index: the connection to PostgreSQL was lost during the "
                         "commit; the outcome is unknown: " + st.message());
    }
    return Abandon(st);
  }

  // Keys of `s` that have merge operands, at most `limit`.
  Status MergedKeys(Space s, size_t limit, std::vector<std::string>* keys) {
    PgResult r;
    CKPTFS_RETURN_IF_ERROR(
        Query(Stmt{sql(s).merged_keys + std::to_string(limit), {}}, &r, "list merged keys"));
    for (int i = 0; i < PQntuples(r.get()); ++i) keys->emplace_back(Cell(r.get(), i, 0));
    return Status::OK();
  }

 private:
  const std::string* const channels_;

  // The statements of the writes (Writes::Check passed); `arrays` keeps
  // the parameters made for them.
  void AppendWrites(std::vector<Stmt>* stmts, std::deque<std::string>* arrays) const {
    const std::vector<Write>& list = writes_.list();
    for (size_t i = 0; i < list.size(); ++i) {
      const Write& w = list[i];
      const PgSpaceSql& q = sql(w.space);
      // Puts of one space in a row (a seal's inodes, a compaction's
      // extents): rows of one statement, the last value of a key kept.
      size_t run = i;
      while (!q.merges && run < list.size() && run - i < kPutRowsMax &&
             list[run].kind == Write::Kind::kPut && list[run].space == w.space) {
        run++;
      }
      if (run - i >= kPutRowsMin) {
        std::map<std::string_view, std::string_view> rows;
        for (size_t j = i; j < run; ++j) rows[list[j].key] = list[j].value;
        std::string& keys = arrays->emplace_back();
        std::string& values = arrays->emplace_back();
        EncodeByteaArray(rows, /*keys=*/true, &keys);
        EncodeByteaArray(rows, /*keys=*/false, &values);
        stmts->push_back(Stmt{q.put_rows, {keys, values}, /*arrays=*/true});
        i = run - 1;
        continue;
      }
      switch (w.kind) {
        case Write::Kind::kPut:
          stmts->push_back(Stmt{q.put, {w.key, w.value}});
          if (q.merges) stmts->push_back(Stmt{q.drop_merges, {w.key}});
          break;
        case Write::Kind::kInsert: stmts->push_back(Stmt{q.insert, {w.key, w.value}}); break;
        case Write::Kind::kDelete:
          stmts->push_back(Stmt{q.del, {w.key}});
          if (q.merges) stmts->push_back(Stmt{q.drop_merges, {w.key}});
          break;
        case Write::Kind::kMerge: stmts->push_back(Stmt{q.merge, {w.key, w.value}}); break;
      }
    }
  }
};

// Folds, in `t`, the merge operands of up to `max_keys` keys into their
// values; `*folded` counts the keys.
Status FoldIn(PgTxn* t, size_t max_keys, size_t* folded) {
  for (Space s : kAllSpaces) {
    if (!SpaceMerges(s)) continue;
    std::vector<std::string> keys;
    CKPTFS_RETURN_IF_ERROR(t->MergedKeys(s, max_keys - *folded, &keys));
    for (const std::string& k : keys) {
      CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, t->Get(s, k));
      if (v.has_value()) t->Put(s, k, *v);
      ++*folded;
    }
    if (*folded >= max_keys) break;
  }
  return Status::OK();
}

}  // namespace

Result<std::string> ConninfoWithoutPassword(const std::string& uri) {
  if (IsMemUri(uri)) return uri;
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

PgKv::PgKv(PgOptions options)
    : options_(std::move(options)),
      pool_(std::make_unique<PgPool>(&options_)),
      channels_(ChannelPrefix(options_.schema)) {
  for (Space s : kAllSpaces) sql_.emplace_back(options_.schema, s);
}

Result<std::unique_ptr<PgKv>> PgKv::Open(const PgOptions& options) {
  if (!ValidSchemaName(options.schema)) {
    return Status(EINVAL, "bad PostgreSQL schema name '" + options.schema +
                              "': lower-case letters, digits and '_', at most 63");
  }
  std::unique_ptr<PgKv> kv(new PgKv(options));
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, kv->pool_->Take());
  kv->server_ = std::string(PQhost(c->get())) + ":" + PQport(c->get()) + "/" + PQdb(c->get());
  kv->pool_->Return(std::move(c));
  CKPTFS_RETURN_IF_ERROR(kv->CreateOrCheckSchema());
  kv->pool_->Opened();
  return kv;
}

PgKv::~PgKv() = default;

Status PgKv::Exec(const std::string& sql, const std::string& what, std::string* first_cell) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Take());
  Status st;
  if (!c->Settle()) {
    st = Status(EIO, what + ": lost the connection to PostgreSQL");
  } else {
    PgResult r(PQexec(c->get(), sql.c_str()));
    const ExecStatusType t = PQresultStatus(r.get());
    if (t != PGRES_TUPLES_OK && t != PGRES_COMMAND_OK) {
      st = Status(EIO, what + ": " + FirstLine(PQresultErrorMessage(r.get())));
    } else if (first_cell != nullptr) {
      *first_cell = PQntuples(r.get()) > 0 ? PQgetvalue(r.get(), 0, 0) : "";
    }
    if (!c->lost() && PQtransactionStatus(c->get()) != PQTRANS_IDLE) c->EndLater();
  }
  pool_->Return(std::move(c));
  return st;
}

Status PgKv::CreateOrCheckSchema() {
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
  std::string tables;
  CKPTFS_RETURN_IF_ERROR(Exec(sql, "prepare the index in PostgreSQL " + server_, &tables));
  if (std::strtol(tables.c_str(), nullptr, 10) != kSpaceCount + 1) {
    return Status(ENOENT, "PostgreSQL " + server_ + " holds no ckptfs index in schema " + s);
  }
  return Status::OK();
}

Result<std::unique_ptr<ReadTxn>> PgKv::BeginRead() {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Take());
  return std::unique_ptr<ReadTxn>(std::make_unique<PgReadTxn>(pool_.get(), &sql_, std::move(c)));
}

Result<std::unique_ptr<Txn>> PgKv::Begin() {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Take());
  return std::unique_ptr<Txn>(
      std::make_unique<PgTxn>(pool_.get(), &sql_, std::move(c), &channels_));
}

namespace {

// LISTEN on a connection of its own, which holds nothing else.
class PgListener final : public Listener {
 public:
  explicit PgListener(std::unique_ptr<PgConnection> conn) : conn_(std::move(conn)) {}

  Result<bool> Wait(int64_t timeout_ms) override {
    PGconn* c = conn_->get();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
    for (;;) {
      if (PQconsumeInput(c) == 0) {
        return Status(EIO, "listen to PostgreSQL: " + FirstLine(PQerrorMessage(c)));
      }
      bool got = false;
      while (PGnotify* n = PQnotifies(c)) {
        PQfreemem(n);
        got = true;
      }
      if (got) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return false;
      pollfd p{PQsocket(c), POLLIN, 0};
      if (p.fd < 0) return Status(EIO, "listen to PostgreSQL: the connection is closed");
      if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
        return Status(errno, "listen to PostgreSQL: poll");
      }
    }
  }

 private:
  const std::unique_ptr<PgConnection> conn_;
};

}  // namespace

Result<std::unique_ptr<Listener>> PgKv::Listen(std::string_view channel) {
  CKPTFS_RETURN_IF_ERROR(CheckChannel(channel));
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Connect());
  CKPTFS_RETURN_IF_ERROR(c->Run({Stmt{"LISTEN \"" + channels_ + std::string(channel) + "\"", {}}},
                                nullptr, "listen"));
  return std::unique_ptr<Listener>(std::make_unique<PgListener>(std::move(c)));
}

Status PgKv::Sync() {
  // A commit with synchronous_commit on flushes the log up to its commit
  // record, and so past every commit before it, only when its transaction
  // wrote to the log: a transaction id alone writes nothing, and such a
  // commit flushes nothing. So the transaction puts a row and takes it back
  // (its key is this connection's own: syncs never wait on one another),
  // which writes the log and leaves the index as it was.
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Take());
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
  Status st = c->Run(stmts, nullptr, "sync index");
  if (!st.ok()) c->EndLater();
  pool_->Return(std::move(c));
  return IsConflict(st) ? Status(EIO, st.message()) : st;
}

std::string PgKv::Describe() const { return "PostgreSQL " + server_ + " schema " + schema(); }

IndexWaits PgKv::Waits() const { return pool_->trips()->Get(); }

std::string PgKv::LocalAddress() {
  Result<std::unique_ptr<PgConnection>> c = pool_->Take();
  if (!c.ok()) return "";
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char text[INET6_ADDRSTRLEN] = "";
  const int fd = PQsocket((*c)->get());
  if (fd >= 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    if (addr.ss_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
    } else if (addr.ss_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text,
                  sizeof(text));
    }
  }
  pool_->Return(std::move(*c));
  return text;
}

Status PgKv::Maintain() {
  size_t folded = 0;
  return FoldMerges(kFoldPerPass, &folded);
}

Status PgKv::FoldMerges(size_t max_keys, size_t* folded) {
  Retrier retry;
  for (;;) {
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> c, pool_->Take());
    PgTxn t(pool_.get(), &sql_, std::move(c), &channels_);
    *folded = 0;
    Status st = FoldIn(&t, max_keys, folded);
    if (st.ok()) st = t.Commit(Durability::kLogged);
    if (!IsConflict(st)) return st;
    if (!retry.Again()) return st.Annotate(retry.GaveUp());
  }
}

Result<uint64_t> PgKv::QueryNumber(const std::string& sql, const std::string& what) {
  std::string cell;
  CKPTFS_RETURN_IF_ERROR(Exec(sql, what, &cell));
  return static_cast<uint64_t>(std::strtoull(cell.c_str(), nullptr, 10));
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
  return Exec("DROP SCHEMA IF EXISTS " + schema() + " CASCADE", "drop schema " + schema(),
              nullptr);
}

}  // namespace ckptfs::meta
