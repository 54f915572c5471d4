// The metadata seam: the small ordered key-value transaction interface
// through which a store reaches its index (docs/SHARED.md, "The seam").
//
// Keys and values are format/'s encodings, byte for byte, in every
// implementation: RocksDB (meta/rocks_kv.h: embedded, one host, the
// default) and PostgreSQL (meta/pg_kv.h: shared by several hosts). Keys
// sort bytewise (memcmp, then the shorter first) in each key space.
//
// A read-only transaction (ReadTxn) reads (Get, Scan, Last) one snapshot;
// a read-write one (Txn) also gathers writes (Put, Insert, Delete, Merge)
// and commits them atomically. Its reads do not see its own uncommitted
// writes. Commit fails with a conflict (IsConflict) when an
// implementation finds that another writer changed what the transaction
// read; RunTxn runs a transaction body again until it commits. The embedded
// implementation never reports conflicts: its one process serializes
// writers with its own locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ckptfs::meta {

// The key spaces of the index (docs/FORMAT.md, "Index"): RocksDB column
// families, PostgreSQL tables.
enum class Space : uint8_t { kMeta = 0, kInodes, kDentries, kExtents, kSegments, kXattrs };
inline constexpr int kSpaceCount = 6;
inline constexpr Space kAllSpaces[kSpaceCount] = {Space::kMeta,     Space::kInodes,
                                                   Space::kDentries, Space::kExtents,
                                                   Space::kSegments, Space::kXattrs};
// "meta", "inodes", ...: the space's name in messages and PostgreSQL tables.
const char* SpaceName(Space s);

// How Merge operands combine with a key's value, per space:
//   kMeta      8-byte little-endian int64 counters that add up (a Put sets one)
//   kSegments  format::SegmentStat encodings (format::MergeSegmentStat)
//   the others take no merges
// `existing`: the value so far (nullopt: none). Corruption when an operand
// or the value is not of the space's encoding; EINVAL for a space without
// merges. This one function is the rule of every implementation.
Status ApplyMerge(Space s, std::optional<std::string_view> existing, std::string_view operand,
                  std::string* out);
bool SpaceMerges(Space s);

// The operand that adds `delta` to a kMeta counter.
std::string CounterOperand(int64_t delta);

// The longest channel name (Writes::Notify).
inline constexpr size_t kMaxChannel = 32;
// EINVAL unless `channel` is a channel's name (Writes::Notify).
Status CheckChannel(std::string_view channel);

// One write of a transaction.
struct Write {
  enum class Kind : uint8_t { kPut, kInsert, kDelete, kMerge };
  Kind kind;
  Space space;
  std::string key;
  std::string value;  // kPut, kInsert: the value; kMerge: the operand; kDelete: empty
};

// The writes of a transaction, in the order they apply.
class Writes {
 public:
  void Put(Space s, std::string_view key, std::string_view value);
  // A Put of a key that must not exist yet (Txn::Insert).
  void Insert(Space s, std::string_view key, std::string_view value);
  void Delete(Space s, std::string_view key);
  void Merge(Space s, std::string_view key, std::string_view operand);
  // Wakes the listeners of `channel` (Kv::Listen) on every host once these
  // writes commit; nothing when the commit fails. A channel is 1 to 32
  // bytes of lower-case letters, digits, '_' and '.'. Once per channel.
  void Notify(std::string_view channel);
  // Commits only while no key of `s` in [begin, end) exists (end empty: to
  // the end of the space), merge operands included: otherwise the commit
  // applies nothing and fails with EBUSY (IsRangeHeld). A read of the
  // range at the commit: PostgreSQL reads it in the transaction's snapshot,
  // and a transaction that wrote into the range since and read a key this
  // one writes conflicts with it (serializable); memory and RocksDB read
  // the latest state.
  void RequireEmpty(Space s, std::string_view begin, std::string_view end);
  // Appends `other`'s writes (and notifications) after these.
  void Append(const Writes& other);
  const std::vector<Write>& list() const { return list_; }
  const std::vector<std::string>& notifies() const { return notifies_; }
  // A range that RequireEmpty named.
  struct Range {
    Space space;
    std::string begin, end;
  };
  const std::vector<Range>& empty_ranges() const { return empty_ranges_; }
  // No writes and no notifications (ranges alone commit nothing).
  bool empty() const { return list_.empty() && notifies_.empty(); }
  size_t size() const { return list_.size(); }
  // Bytes of keys and values held.
  uint64_t bytes() const { return bytes_; }
  void Clear();
  // EINVAL for a write that no implementation takes: a Merge in a space
  // without merges, an Insert in a space with them (SpaceMerges), or a bad
  // channel name. Every Txn::Commit checks its writes with this before it
  // applies any.
  Status Check() const;

 private:
  std::vector<Write> list_;
  std::vector<std::string> notifies_;
  std::vector<Range> empty_ranges_;
  uint64_t bytes_ = 0;
};

// One key of ReadTxn::GetMany.
struct KeyRef {
  Space space;
  std::string_view key;
};

// Called for each key of a Scan in order; false stops the scan.
using ScanFn = std::function<bool(std::string_view key, std::string_view value)>;

struct KeyValue {
  std::string key;
  std::string value;
};

// A conflict: another writer changed what a transaction read, or the
// transaction could not be ordered with one. Nothing of the transaction was
// applied; running it again from the start may succeed.
struct TxnConflict {};
Status ConflictStatus(std::string message);
bool IsConflict(const Status& s);

// A commit refused because a range it required empty holds a key
// (Writes::RequireEmpty): EBUSY, nothing applied.
struct RangeHeld {};
Status RangeHeldStatus(std::string message);
bool IsRangeHeld(const Status& s);

// What a commit survives when it returns.
enum class Durability : uint8_t {
  // A kill of this process; made durable against power loss by the next
  // Kv::Sync or synced commit.
  kLogged,
  // Power loss.
  kSynced,
  // Nothing: a crash may lose it (RocksDB keeps it out of its log until the
  // index is flushed or closed). For what is not worth a log write: access
  // times.
  kVolatile,
};

// A read-only transaction: its reads (Get, Scan, Last) all see one
// consistent state of the index, its snapshot, taken at its first read
// (PostgreSQL: a REPEATABLE READ transaction; RocksDB: a snapshot). It
// writes nothing, so it never conflicts with a writer; nothing of it is left
// on the index when it is destroyed. A read may still fail with a conflict
// (IsConflict) where an implementation lost its server before the read
// (RunReads runs the reads again); a Scan that already passed keys on fails
// with EIO instead, so that no key is passed on twice. Not thread-safe: one
// thread uses it at a time.
class ReadTxn {
 public:
  virtual ~ReadTxn() = default;
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;

  // The value of `key`, merge operands applied; nullopt when there is none.
  virtual Result<std::optional<std::string>> Get(Space s, std::string_view key) = 0;
  // The values of `keys` in their order, each as Get gives it, all from the
  // transaction's snapshot. PostgreSQL sends them in one round trip (as
  // JuiceFS's `gets`); the default reads them one by one.
  virtual Result<std::vector<std::optional<std::string>>> GetMany(
      const std::vector<KeyRef>& keys);
  // Calls `fn` for each key in [begin, end) in ascending order (end empty:
  // to the end of the space) until it returns false. The views are valid
  // during the call only.
  virtual Status Scan(Space s, std::string_view begin, std::string_view end,
                      const ScanFn& fn) = 0;
  // The greatest key in [begin, end) with its value; nullopt when none.
  virtual Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                               std::string_view end) = 0;

 protected:
  ReadTxn() = default;
};

// A read-write transaction: the reads of a ReadTxn, and writes gathered in
// the client and committed atomically. Its reads do not see its own
// uncommitted writes.
class Txn : public ReadTxn {
 public:
  void Put(Space s, std::string_view key, std::string_view value) { writes_.Put(s, key, value); }
  // Writes a key that must not exist: the commit fails with EEXIST, and
  // applies nothing, when it does, also when another transaction created
  // it since this one began. Unlike a Get that finds no key followed by a
  // Put, it reads nothing, so that creates of neighbouring keys from many
  // transactions do not conflict. Not in spaces that take merges.
  void Insert(Space s, std::string_view key, std::string_view value) {
    writes_.Insert(s, key, value);
  }
  void Delete(Space s, std::string_view key) { writes_.Delete(s, key); }
  void Merge(Space s, std::string_view key, std::string_view operand) {
    writes_.Merge(s, key, operand);
  }
  void Notify(std::string_view channel) { writes_.Notify(channel); }
  void RequireEmpty(Space s, std::string_view begin, std::string_view end) {
    writes_.RequireEmpty(s, begin, end);
  }
  Writes& writes() { return writes_; }

  // Applies the writes atomically, as durable as `d` says. Call at most
  // once; a transaction without writes commits nothing. EINVAL, nothing
  // applied, for writes that Writes::Check refuses. IsConflict: nothing
  // applied, run again. Other errors: nothing applied, except where the
  // message says the outcome is unknown (the connection was lost during the
  // commit).
  virtual Status Commit(Durability d) = 0;

 protected:
  Txn() = default;
  Writes writes_;
};

// Round trips to an index's server and the time the callers spent
// waiting for them, since the index was opened.
struct IndexWaits {
  uint64_t round_trips = 0;
  uint64_t wait_ns = 0;
};

// Waits for the notifications of one channel (Writes::Notify), from when
// it was made (Kv::Listen). Not thread-safe: one thread waits on it.
class Listener {
 public:
  virtual ~Listener() = default;
  // Waits up to `timeout_ms` for a notification: true when one or more
  // came since the last Wait (or the Listen), false when none came in that
  // time. An error when the listener broke (PostgreSQL: its connection was
  // lost): notifications may have been missed since; listen again.
  virtual Result<bool> Wait(int64_t timeout_ms) = 0;
};

// An index: where transactions begin. Thread-safe.
class Kv {
 public:
  virtual ~Kv() = default;
  // A read-only transaction.
  virtual Result<std::unique_ptr<ReadTxn>> BeginRead() = 0;
  // A read-write transaction.
  virtual Result<std::unique_ptr<Txn>> Begin() = 0;
  // Makes every commit that returned so far durable against power loss.
  virtual Status Sync() = 0;
  // What it is, for messages: "RocksDB at PATH", "PostgreSQL DB on HOST".
  virtual std::string Describe() const = 0;
  // Upkeep that the implementation needs now and then, run by a store's
  // background thread every second or so (PostgreSQL: folds merge
  // operands). Default: nothing.
  virtual Status Maintain() { return Status::OK(); }
  // Its server's round trips (PostgreSQL); none for an embedded index.
  virtual IndexWaits Waits() const { return {}; }
  // The IP address by which this machine reaches the index's server
  // (PostgreSQL over TCP: the local end of a connection), which the
  // store's other hosts can likely reach too; empty where there is none (a
  // unix socket, an index of one host).
  virtual std::string LocalAddress() { return ""; }
  // Listens to `channel` (Writes::Notify) from when it returns. ENOTSUP for
  // an index of one host (RocksDB), whose commits notify no one; EINVAL for
  // a bad channel name.
  virtual Result<std::unique_ptr<Listener>> Listen(std::string_view channel);
  // Bytes a shared index takes where it is kept (PostgreSQL: its tables
  // with their indexes and TOAST; memory: its keys and values). Default:
  // ENOTSUP (an embedded index, whose files the store counts itself).
  virtual Result<uint64_t> StoredBytes() {
    return Status(ENOTSUP, "the size of " + Describe() + " is that of its files");
  }
};

// How RunTxn runs a body again after a conflict.
struct RetryPolicy {
  // A transaction that conflicted runs again until it has run max_attempts
  // times and `patience` has passed since its first run: under contention
  // on one key a transaction may lose many times in a row.
  int max_attempts = 64;
  std::chrono::milliseconds patience{30'000};
  // The wait before attempt n (Retrier::Again).
  uint32_t backoff_base_us = 100;
  uint32_t backoff_max_us = 50'000;
};

// The attempts of one transaction under a RetryPolicy:
//   Retrier retry(policy);
//   do { st = Once(); } while (IsConflict(st) && retry.Again());
class Retrier {
 public:
  explicit Retrier(const RetryPolicy& policy = {})
      : policy_(policy), start_(std::chrono::steady_clock::now()) {}
  // After a conflict: false when the policy gives up; else waits a random
  // time in [0, min(max, base * 2^(n-2))) before attempt n and returns true.
  bool Again();
  int attempts() const { return attempt_; }
  // "gave up after N conflicts in T ms", for the last conflict's message.
  std::string GaveUp() const;

 private:
  const RetryPolicy policy_;
  const std::chrono::steady_clock::time_point start_;
  int attempt_ = 1;
};

// Runs `body` in a new transaction and commits what it wrote; when a read or
// the commit reports a conflict, waits a little and runs it again in a fresh
// transaction. The body's errors end it without a commit. When the policy
// gives up (Retrier), the last conflict (EAGAIN).
Status RunTxn(Kv* kv, const std::function<Status(Txn*)>& body, Durability d,
              const RetryPolicy& policy = {});

// Runs `body` in a read-only transaction, and again in a new one after a
// conflict (there: a connection lost before the reads ended); the body must
// be safe to run again.
Status RunReads(Kv* kv, const std::function<Status(ReadTxn*)>& body,
                const RetryPolicy& policy = {});

// Commits `*writes` in a transaction of its own, which reads nothing, and
// commits it again after a conflict (as RunTxn). `*writes` is left as it
// was. For a caller whose own locks keep what it read from changing.
Status CommitWrites(Kv* kv, Writes* writes, Durability d, const RetryPolicy& policy = {});

}  // namespace ckptfs::meta
