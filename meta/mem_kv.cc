#include "meta/mem_kv.h"

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace ckptfs::meta {

// One version of a key: its value as of commit `seq` (nullopt: deleted).
struct MemVersion {
  uint64_t seq;
  std::optional<std::string> value;
};

// What a read-write transaction read, checked at its commit.
struct MemReads {
  std::vector<std::pair<Space, std::string>> keys;
  struct Range {
    Space space;
    std::string begin, end;  // end empty: to the end of the space
  };
  std::vector<Range> ranges;
};

class MemIndex {
 public:
  // A snapshot of the latest commit, held until Release.
  uint64_t Acquire() {
    MutexLock l(&mu_);
    snapshots_.insert(seq_);
    return seq_;
  }
  void Release(uint64_t snap) {
    MutexLock l(&mu_);
    snapshots_.erase(snapshots_.find(snap));
  }

  std::optional<std::string> Get(Space s, const std::string& key, uint64_t snap) {
    MutexLock l(&mu_);
    const auto& m = space(s);
    auto it = m.find(key);
    return it == m.end() ? std::nullopt : At(it->second, snap);
  }

  // The keys of [begin, end) at `snap` that have a value, in order.
  std::vector<KeyValue> Range(Space s, std::string_view begin, std::string_view end,
                              uint64_t snap) {
    std::vector<KeyValue> out;
    MutexLock l(&mu_);
    const auto& m = space(s);
    for (auto it = m.lower_bound(std::string(begin)); it != m.end(); ++it) {
      if (!end.empty() && it->first >= end) break;
      std::optional<std::string> v = At(it->second, snap);
      if (v.has_value()) out.push_back(KeyValue{it->first, std::move(*v)});
    }
    return out;
  }

  // Bytes of the latest keys and values.
  uint64_t Bytes() {
    MutexLock l(&mu_);
    uint64_t n = 0;
    for (const Versions& m : spaces_) {
      for (const auto& [key, chain] : m) {
        if (chain.back().value.has_value()) n += key.size() + chain.back().value->size();
      }
    }
    return n;
  }

  // Applies `writes` atomically, or nothing: a conflict when a commit after
  // `snap` (nullopt: no reads) changed what `reads` or the puts and deletes
  // name; EEXIST for an Insert of a key that exists; ApplyMerge's errors.
  Status Commit(const Writes& writes, std::optional<uint64_t> snap, const MemReads& reads) {
    MutexLock l(&mu_);
    if (snap.has_value()) CKPTFS_RETURN_IF_ERROR(CheckUnchanged(writes, *snap, reads));
    for (const Writes::Range& r : writes.empty_ranges()) {
      const auto& m = space(r.space);
      for (auto it = m.lower_bound(r.begin); it != m.end(); ++it) {
        if (!r.end.empty() && it->first >= r.end) break;
        if (it->second.back().value.has_value()) {
          return RangeHeldStatus(std::string("commit: a key of the ") + SpaceName(r.space) +
                                 " range it requires empty exists");
        }
      }
    }
    std::map<std::pair<Space, std::string>, std::optional<std::string>> staged;
    for (const Write& w : writes.list()) {
      auto key = std::make_pair(w.space, w.key);
      auto it = staged.find(key);
      std::optional<std::string> now =
          it != staged.end() ? it->second : Latest(w.space, w.key);
      switch (w.kind) {
        case Write::Kind::kPut: now = w.value; break;
        case Write::Kind::kDelete: now.reset(); break;
        case Write::Kind::kInsert:
          if (now.has_value()) {
            return Status(EEXIST,
                          std::string("insert into ") + SpaceName(w.space) + ": key exists");
          }
          now = w.value;
          break;
        case Write::Kind::kMerge: {
          std::string out;
          std::optional<std::string_view> have;
          if (now.has_value()) have = *now;
          CKPTFS_RETURN_IF_ERROR(ApplyMerge(w.space, have, w.value, &out));
          now = std::move(out);
          break;
        }
      }
      staged[key] = std::move(now);
    }
    ++seq_;
    if (!writes.notifies().empty()) {
      for (const std::string& c : writes.notifies()) ++notified_[c];
      notify_cv_.SignalAll();
    }
    const uint64_t oldest = snapshots_.empty() ? seq_ : *snapshots_.begin();
    for (auto& [key, value] : staged) {
      auto& m = space(key.first);
      std::vector<MemVersion>& chain = m[key.second];
      chain.push_back(MemVersion{seq_, std::move(value)});
      Prune(&chain, oldest);
      if (chain.size() == 1 && !chain[0].value.has_value()) m.erase(key.second);
    }
    return Status::OK();
  }

  // The notifications of `channel` so far.
  uint64_t Notified(const std::string& channel) {
    MutexLock l(&mu_);
    return notified_[channel];
  }
  // Waits until `channel` had more than `seen` notifications (true, and
  // `*seen` updated) or `deadline` passed (false).
  bool WaitNotified(const std::string& channel, uint64_t* seen,
                    std::chrono::steady_clock::time_point deadline) {
    MutexLock l(&mu_);
    for (;;) {
      const uint64_t now = notified_[channel];
      if (now != *seen) {
        *seen = now;
        return true;
      }
      if (!notify_cv_.WaitUntil(&mu_, deadline) && notified_[channel] == *seen) return false;
    }
  }

 private:
  using Versions = std::map<std::string, std::vector<MemVersion>>;

  Versions& space(Space s) REQUIRES(mu_) { return spaces_[static_cast<size_t>(s)]; }

  static std::optional<std::string> At(const std::vector<MemVersion>& chain, uint64_t snap) {
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (it->seq <= snap) return it->value;
    }
    return std::nullopt;
  }

  std::optional<std::string> Latest(Space s, const std::string& key) REQUIRES(mu_) {
    const auto& m = space(s);
    auto it = m.find(key);
    return it == m.end() ? std::nullopt : it->second.back().value;
  }

  // Whether `key` of `s` changed after `snap`.
  bool Changed(Space s, const std::string& key, uint64_t snap) REQUIRES(mu_) {
    const auto& m = space(s);
    auto it = m.find(key);
    return it != m.end() && it->second.back().seq > snap;
  }

  Status CheckUnchanged(const Writes& writes, uint64_t snap, const MemReads& reads)
      REQUIRES(mu_) {
    const Status conflict =
        ConflictStatus("could not serialize access: the index changed since the snapshot");
    for (const auto& [s, key] : reads.keys) {
      if (Changed(s, key, snap)) return conflict;
    }
    for (const MemReads::Range& r : reads.ranges) {
      const auto& m = space(r.space);
      for (auto it = m.lower_bound(r.begin); it != m.end(); ++it) {
        if (!r.end.empty() && it->first >= r.end) break;
        if (it->second.back().seq > snap) return conflict;
      }
    }
    for (const Write& w : writes.list()) {
      if (w.kind != Write::Kind::kMerge && Changed(w.space, w.key, snap)) return conflict;
    }
    return Status::OK();
  }

  // Drops the versions that no snapshot from `oldest` on can see.
  static void Prune(std::vector<MemVersion>* chain, uint64_t oldest) {
    size_t keep = 0;  // the newest version at or before `oldest`
    for (size_t i = 0; i < chain->size(); ++i) {
      if ((*chain)[i].seq <= oldest) keep = i;
    }
    chain->erase(chain->begin(), chain->begin() + static_cast<ptrdiff_t>(keep));
  }

  Mutex mu_;
  uint64_t seq_ GUARDED_BY(mu_) = 0;  // the last commit
  Versions spaces_[kSpaceCount] GUARDED_BY(mu_);
  std::multiset<uint64_t> snapshots_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> notified_ GUARDED_BY(mu_);  // by channel
  CondVar notify_cv_;
};

namespace {

// The reads of a transaction of type `Base` (ReadTxn or Txn), all at one
// snapshot taken at the first; `reads_` records them for a Txn's commit.
template <class Base>
class MemReader : public Base {
 public:
  explicit MemReader(MemIndex* index) : index_(index) {}
  ~MemReader() override {
    if (snap_.has_value()) index_->Release(*snap_);
  }

  Result<std::optional<std::string>> Get(Space s, std::string_view key) override {
    std::string k(key);
    reads_.keys.emplace_back(s, k);
    return index_->Get(s, k, Snapshot());
  }

  Status Scan(Space s, std::string_view begin, std::string_view end, const ScanFn& fn) override {
    reads_.ranges.push_back(MemReads::Range{s, std::string(begin), std::string(end)});
    for (const KeyValue& kv : index_->Range(s, begin, end, Snapshot())) {
      if (!fn(kv.key, kv.value)) break;
    }
    return Status::OK();
  }

  Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                       std::string_view end) override {
    reads_.ranges.push_back(MemReads::Range{s, std::string(begin), std::string(end)});
    std::vector<KeyValue> all = index_->Range(s, begin, end, Snapshot());
    if (all.empty()) return std::optional<KeyValue>();
    return std::optional<KeyValue>(std::move(all.back()));
  }

 protected:
  uint64_t Snapshot() {
    if (!snap_.has_value()) snap_ = index_->Acquire();
    return *snap_;
  }

  MemIndex* const index_;
  std::optional<uint64_t> snap_;
  MemReads reads_;
};

class MemReadTxn final : public MemReader<ReadTxn> {
 public:
  using MemReader::MemReader;
};

class MemTxn final : public MemReader<Txn> {
 public:
  using MemReader::MemReader;

  Status Commit(Durability) override {
    if (committed_) return Status(EINVAL, "transaction already ended");
    committed_ = true;
    if (writes_.empty()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(writes_.Check());
    return index_->Commit(writes_, snap_, reads_);
  }

 private:
  bool committed_ = false;
};

class MemListener final : public Listener {
 public:
  MemListener(std::shared_ptr<MemIndex> index, std::string channel)
      : index_(std::move(index)), channel_(std::move(channel)),
        seen_(index_->Notified(channel_)) {}
  Result<bool> Wait(int64_t timeout_ms) override {
    return index_->WaitNotified(
        channel_, &seen_, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms));
  }

 private:
  const std::shared_ptr<MemIndex> index_;
  const std::string channel_;
  uint64_t seen_;
};

// The process's named indexes (MemKv::Named).
struct NamedIndexes {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<MemIndex>> by_name;
};

NamedIndexes& Registry() {
  static NamedIndexes* named = new NamedIndexes();
  return *named;
}

}  // namespace

MemKv::MemKv() : MemKv(std::make_shared<MemIndex>(), "") {}

MemKv::MemKv(std::shared_ptr<MemIndex> index, std::string name)
    : index_(std::move(index)), name_(std::move(name)) {}

MemKv::~MemKv() = default;

Result<std::unique_ptr<MemKv>> MemKv::Named(const std::string& name, bool create) {
  NamedIndexes& named = Registry();
  std::lock_guard<std::mutex> l(named.mu);
  std::shared_ptr<MemIndex>& index = named.by_name[name];
  if (index == nullptr) {
    if (!create) {
      named.by_name.erase(name);
      return Status(ENOENT, "no index in memory named " + name);
    }
    index = std::make_shared<MemIndex>();
  }
  return std::unique_ptr<MemKv>(new MemKv(index, name));
}

Result<std::unique_ptr<ReadTxn>> MemKv::BeginRead() {
  return std::unique_ptr<ReadTxn>(std::make_unique<MemReadTxn>(index_.get()));
}

Result<std::unique_ptr<Txn>> MemKv::Begin() {
  return std::unique_ptr<Txn>(std::make_unique<MemTxn>(index_.get()));
}

Result<uint64_t> MemKv::StoredBytes() { return index_->Bytes(); }

Result<std::unique_ptr<Listener>> MemKv::Listen(std::string_view channel) {
  CKPTFS_RETURN_IF_ERROR(CheckChannel(channel));
  return std::unique_ptr<Listener>(std::make_unique<MemListener>(index_, std::string(channel)));
}

std::string MemKv::Describe() const {
  return name_.empty() ? "index in memory" : "index in memory mem://" + name_;
}

}  // namespace ckptfs::meta
