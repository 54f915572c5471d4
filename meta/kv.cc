#include "meta/kv.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "format/format.h"

namespace ckptfs::meta {

const char* SpaceName(Space s) {
  switch (s) {
    case Space::kMeta: return "meta";
    case Space::kInodes: return format::kCfInodes;
    case Space::kDentries: return format::kCfDentries;
    case Space::kExtents: return format::kCfExtents;
    case Space::kSegments: return format::kCfSegments;
    case Space::kXattrs: return format::kCfXattrs;
  }
  return "unknown";
}

bool SpaceMerges(Space s) { return s == Space::kMeta || s == Space::kSegments; }

std::string CounterOperand(int64_t delta) {
  std::string s;
  format::PutLE64(&s, static_cast<uint64_t>(delta));
  return s;
}

Status ApplyMerge(Space s, std::optional<std::string_view> existing, std::string_view operand,
                  std::string* out) {
  switch (s) {
    case Space::kMeta: {
      int64_t a = 0;
      if (existing.has_value()) {
        if (existing->size() != 8) {
          return Status::Corruption("counter value of " + std::to_string(existing->size()) +
                                    " bytes, expected 8");
        }
        a = static_cast<int64_t>(format::GetLE64(existing->data()));
      }
      if (operand.size() != 8) {
        return Status::Corruption("counter operand of " + std::to_string(operand.size()) +
                                  " bytes, expected 8");
      }
      const int64_t b = static_cast<int64_t>(format::GetLE64(operand.data()));
      out->clear();
      format::PutLE64(out, static_cast<uint64_t>(a + b));
      return Status::OK();
    }
    case Space::kSegments: {
      format::SegmentStat a, b;
      if (existing.has_value()) {
        CKPTFS_RETURN_IF_ERROR(format::DecodeSegmentStat(*existing, &a));
      }
      CKPTFS_RETURN_IF_ERROR(format::DecodeSegmentStat(operand, &b));
      *out = format::EncodeSegmentStat(format::MergeSegmentStat(a, b));
      return Status::OK();
    }
    default:
      return Status(EINVAL, std::string("the ") + SpaceName(s) + " space takes no merges");
  }
}

void Writes::Put(Space s, std::string_view key, std::string_view value) {
  list_.push_back(Write{Write::Kind::kPut, s, std::string(key), std::string(value)});
  bytes_ += key.size() + value.size();
}

void Writes::Insert(Space s, std::string_view key, std::string_view value) {
  list_.push_back(Write{Write::Kind::kInsert, s, std::string(key), std::string(value)});
  bytes_ += key.size() + value.size();
}

void Writes::Delete(Space s, std::string_view key) {
  list_.push_back(Write{Write::Kind::kDelete, s, std::string(key), {}});
  bytes_ += key.size();
}

void Writes::Merge(Space s, std::string_view key, std::string_view operand) {
  list_.push_back(Write{Write::Kind::kMerge, s, std::string(key), std::string(operand)});
  bytes_ += key.size() + operand.size();
}

void Writes::Notify(std::string_view channel) {
  if (std::find(notifies_.begin(), notifies_.end(), channel) == notifies_.end()) {
    notifies_.emplace_back(channel);
  }
}

void Writes::RequireEmpty(Space s, std::string_view begin, std::string_view end) {
  empty_ranges_.push_back(Range{s, std::string(begin), std::string(end)});
}

void Writes::Append(const Writes& other) {
  list_.insert(list_.end(), other.list_.begin(), other.list_.end());
  empty_ranges_.insert(empty_ranges_.end(), other.empty_ranges_.begin(), other.empty_ranges_.end());
  bytes_ += other.bytes_;
  for (const std::string& c : other.notifies_) Notify(c);
}

void Writes::Clear() {
  list_.clear();
  notifies_.clear();
  empty_ranges_.clear();
  bytes_ = 0;
}

Status CheckChannel(std::string_view channel) {
  const bool good = !channel.empty() && channel.size() <= kMaxChannel &&
                    std::all_of(channel.begin(), channel.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                             c == '.';
                    });
  if (good) return Status::OK();
  return Status(EINVAL, "channel \"" + std::string(channel) + "\" is not 1 to " +
                            std::to_string(kMaxChannel) +
                            " bytes of lower-case letters, digits, '_' and '.'");
}

Result<std::unique_ptr<Listener>> Kv::Listen(std::string_view channel) {
  CKPTFS_RETURN_IF_ERROR(CheckChannel(channel));
  return Status(ENOTSUP, Describe() + " has no notifications: it serves one host");
}

Status Writes::Check() const {
  for (const std::string& c : notifies_) CKPTFS_RETURN_IF_ERROR(CheckChannel(c));
  for (const Write& w : list_) {
    if (w.kind == Write::Kind::kMerge && !SpaceMerges(w.space)) {
      return Status(EINVAL, std::string("the ") + SpaceName(w.space) + " space takes no merges");
    }
    if (w.kind == Write::Kind::kInsert && SpaceMerges(w.space)) {
      return Status(EINVAL, std::string("no inserts in the ") + SpaceName(w.space) + " space");
    }
  }
  return Status::OK();
}

Status ConflictStatus(std::string message) {
  return Status(EAGAIN, std::move(message)).WithPayload(TxnConflict{});
}

bool IsConflict(const Status& s) { return s.payload<TxnConflict>() != nullptr; }

Status RangeHeldStatus(std::string message) {
  return Status(EBUSY, std::move(message)).WithPayload(RangeHeld{});
}

bool IsRangeHeld(const Status& s) { return s.payload<RangeHeld>() != nullptr; }

bool Retrier::Again() {
  if (attempt_ >= policy_.max_attempts &&
      std::chrono::steady_clock::now() - start_ >= policy_.patience) {
    return false;
  }
  ++attempt_;
  const uint64_t cap = std::min<uint64_t>(
      policy_.backoff_max_us, static_cast<uint64_t>(policy_.backoff_base_us)
                                  << std::min(attempt_ - 2, 20));
  if (cap == 0) return true;
  thread_local std::minstd_rand rng(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % cap));
  return true;
}

std::string Retrier::GaveUp() const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
  return "gave up after " + std::to_string(attempt_) + " conflicts in " + std::to_string(ms) +
         " ms";
}

namespace {

// Runs `once` in a new transaction (`begin` makes it) until it reports no
// conflict or the policy gives up, waiting a little between tries.
template <class T, class BeginFn>
Status Retry(const BeginFn& begin, const RetryPolicy& policy,
             const std::function<Status(T*)>& once) {
  Retrier retry(policy);
  for (;;) {
    Result<std::unique_ptr<T>> txn = begin();
    if (!txn.ok()) return txn.status();
    Status st = once(txn->get());
    if (!IsConflict(st)) return st;
    if (!retry.Again()) return st.Annotate(retry.GaveUp());
  }
}

Status RetryTxn(Kv* kv, const RetryPolicy& policy, const std::function<Status(Txn*)>& once) {
  return Retry<Txn>([kv] { return kv->Begin(); }, policy, once);
}

}  // namespace

Status RunTxn(Kv* kv, const std::function<Status(Txn*)>& body, Durability d,
              const RetryPolicy& policy) {
  return RetryTxn(kv, policy, [&](Txn* t) {
    Status st = body(t);
    return st.ok() ? t->Commit(d) : st;
  });
}

Result<std::vector<std::optional<std::string>>> ReadTxn::GetMany(const std::vector<KeyRef>& keys) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const KeyRef& k : keys) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, Get(k.space, k.key));
    out.push_back(std::move(v));
  }
  return out;
}

Status RunReads(Kv* kv, const std::function<Status(ReadTxn*)>& body, const RetryPolicy& policy) {
  return Retry<ReadTxn>([kv] { return kv->BeginRead(); }, policy, body);
}

Status CommitWrites(Kv* kv, Writes* writes, Durability d, const RetryPolicy& policy) {
  return RetryTxn(kv, policy, [&](Txn* t) {
    // Lent to the transaction, not copied: the common case commits once.
    std::swap(t->writes(), *writes);
    Status st = t->Commit(d);
    std::swap(t->writes(), *writes);
    return st;
  });
}

}  // namespace ckptfs::meta
