#include "engine/shared/ownership.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "meta/hosts.h"

namespace ckptfs::engine {
namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr int64_t kMsNs = 1'000'000;
}  // namespace

void Ownership::Start(meta::Kv* kv, format::OwnerValue me, GiveUpFn give_up) {
  kv_ = kv;
  owner_value_ = format::EncodeOwner(me);
  me_ = std::move(me);
  give_up_ = std::move(give_up);
}

Status Ownership::PollOnce() {
  if (kv_ == nullptr) return Status::OK();
  // The grant runs from before the read: a request committed before it
  // began is in what it reads.
  const int64_t started = NowNs();
  const std::string begin = format::GiveUpPrefix(me_.id);
  const std::string end = format::GiveUpPrefix(me_.id + 1);
  std::vector<std::pair<std::string, uint64_t>> requests;
  CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv_, [&](meta::ReadTxn* t) -> Status {
    requests.clear();
    return t->Scan(meta::Space::kMeta, begin, end, [&](std::string_view k, std::string_view) {
      if (k.size() == begin.size() + 8) {
        requests.emplace_back(std::string(k), format::GetBE64(k.data() + begin.size()));
      }
      return true;
    });
  }));
  {
    MutexLock l(&mu_);
    if (until_ns_.load() <= started) {
      // The last grant ran out: what it owned may have been taken since.
      owned_.clear();
      dirs_.clear();
      names_ = 0;
      ClearReads();
      epoch_ = kEpochBit | ((epoch_.load() & ~kEpochBit) + 1);
    }
  }
  until_ns_ = started + kGrantMs * kMsNs;
  if (requests.empty()) return Status::OK();
  // Each inode asked for is dropped here first; then one commit deletes
  // their owner keys (as DeleteOwner) and the requests.
  meta::Writes w;
  std::vector<uint64_t> inos;
  for (const auto& [key, ino] : requests) inos.push_back(ino);
  Deleting(inos, +1);  // no grant of them is asked for until the commit
  for (const auto& [key, ino] : requests) {
    GiveUp(ino);
    w.Delete(meta::Space::kMeta, format::OwnerKey(ino));
    w.Delete(meta::Space::kMeta, format::ReaderKey(ino, me_.id));
    w.Delete(meta::Space::kMeta, key);
  }
  const Status committed = meta::CommitWrites(kv_, &w, meta::Durability::kLogged);
  Deleting(inos, -1);
  CKPTFS_RETURN_IF_ERROR(committed);
  for (const auto& [key, ino] : requests) SetFree(ino);
  given_up_ += requests.size();
  return Status::OK();
}

void Ownership::End() { until_ns_ = 0; }

Status Ownership::DropAll() {
  if (kv_ == nullptr) return Status::OK();
  std::vector<std::string> keys;
  {
    MutexLock l(&mu_);
    keys.reserve(owned_.size() + reads_.size());
    for (const auto& [ino, o] : owned_) keys.push_back(format::OwnerKey(ino));
    for (const auto& [ino, r] : reads_) keys.push_back(format::ReaderKey(ino, me_.id));
    owned_.clear();
    dirs_.clear();
    names_ = 0;
    ClearReads();
  }
  constexpr size_t kPerCommit = 1000;
  for (size_t i = 0; i < keys.size(); i += kPerCommit) {
    meta::Writes w;
    for (size_t j = i; j < std::min(keys.size(), i + kPerCommit); ++j) {
      w.Delete(meta::Space::kMeta, keys[j]);
    }
    CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &w, meta::Durability::kLogged));
  }
  return Status::OK();
}

uint64_t Ownership::Epoch() const {
  if (until_ns_.load() <= NowNs()) return 0;
  return epoch_.load();
}

double Ownership::SecondsLeft() const {
  const int64_t left = until_ns_.load() - NowNs();
  return left > 0 ? static_cast<double>(left) / 1e9 : 0.0;
}

bool Ownership::Owns(uint64_t ino) const {
  if (Epoch() == 0) return false;
  MutexLock l(&mu_);
  return owned_.count(ino) != 0;
}

bool Ownership::OwnsName(uint64_t dir, uint64_t ino) const {
  if (Epoch() == 0) return false;
  MutexLock l(&mu_);
  return owned_.count(dir) != 0 || owned_.count(ino) != 0;
}

bool Ownership::Made(uint64_t ino, bool dir) {
  if (Epoch() == 0) return false;
  MutexLock l(&mu_);
  owned_.try_emplace(ino);
  if (dir && names_ < kMaxNames) dirs_.try_emplace(ino);
  return true;
}

void Ownership::Forget(uint64_t ino) {
  MutexLock l(&mu_);
  owned_.erase(ino);
  if (auto it = dirs_.find(ino); it != dirs_.end()) {
    names_ -= it->second.names.size();
    dirs_.erase(it);
  }
}

std::optional<uint64_t> Ownership::FindName(uint64_t dir, std::string_view name) const {
  if (Epoch() == 0) return std::nullopt;
  MutexLock l(&mu_);
  if (auto it = dirs_.find(dir); it != dirs_.end()) {
    auto n = it->second.names.find(std::string(name));
    return n == it->second.names.end() ? 0 : n->second;
  }
  auto r = reads_.find(dir);
  if (r == reads_.end() || !r->second.granted) return std::nullopt;
  auto n = r->second.names.find(std::string(name));
  if (n == r->second.names.end()) return std::nullopt;
  return n->second;
}

void Ownership::SetName(uint64_t dir, std::string_view name, uint64_t ino) {
  MutexLock l(&mu_);
  if (auto o = owned_.find(ino); o != owned_.end()) {
    std::vector<Name>& known = o->second.names;
    if (std::find(known.begin(), known.end(), Name(dir, name)) == known.end()) {
      known.emplace_back(dir, name);
    }
  }
  if (auto r = reads_.find(dir); r != reads_.end()) {
    // A change of a directory read under a grant, by this mount.
    r->second.changes++;
    if (r->second.granted) SetReadName(&r->second, name, ino);
  }
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return;
  auto& names = it->second.names;
  if (ino == 0) {
    names_ -= names.erase(std::string(name));
  } else if (names.insert_or_assign(std::string(name), ino).second) {
    names_++;
  }
}

void Ownership::GiveUp(uint64_t ino) {
  std::vector<Name> names;
  bool owned = false;
  {
    MutexLock l(&mu_);
    if (auto o = owned_.find(ino); o != owned_.end()) {
      owned = true;
      names = std::move(o->second.names);
      owned_.erase(o);
    }
    if (auto it = dirs_.find(ino); it != dirs_.end()) {
      for (const auto& [name, child] : it->second.names) names.emplace_back(ino, name);
      names_ -= it->second.names.size();
      dirs_.erase(it);
    }
    if (auto r = reads_.find(ino); r != reads_.end()) {
      for (const auto& [name, child] : r->second.names) names.emplace_back(ino, name);
      EraseRead(r);
      reads_given_up_++;
      Quietness& q = quiet_[ino];
      q.since_ns = 0;
      q.not_before_ns = NowNs() + kQuietAfterGiveUpMs * kMsNs;
    }
  }
  if (give_up_) give_up_(ino, names, owned);
}

bool Ownership::IsFree(uint64_t ino) const {
  MutexLock l(&mu_);
  return free_.count(ino) != 0;
}

void Ownership::SetFree(uint64_t ino) {
  MutexLock l(&mu_);
  if (free_.size() >= kMaxFree) free_.clear();
  free_.insert(ino);
}

Result<bool> Ownership::OwnerGone(const format::OwnerValue& v) {
  CKPTFS_ASSIGN_OR_RETURN(auto hosts, meta::ListHosts(kv_));
  const int64_t now = meta::WallMs();
  for (const auto& [name, h] : hosts) {
    if (h.id != v.id) continue;
    return h.pid != v.pid || h.machine != v.machine || meta::HostIsFree(kv_, name, h, now);
  }
  return true;
}

Status Ownership::DeleteOwner(uint64_t ino) {
  meta::Writes w;
  w.Delete(meta::Space::kMeta, format::OwnerKey(ino));
  return meta::CommitWrites(kv_, &w, meta::Durability::kLogged);
}

Result<std::optional<std::string>> Ownership::ReadOwner(uint64_t ino) {
  std::optional<std::string> v;
  CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv_, [&](meta::ReadTxn* t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(v, t->Get(meta::Space::kMeta, format::OwnerKey(ino)));
    return Status::OK();
  }));
  return v;
}

Status Ownership::MayChangeAll(const std::vector<uint64_t>& inos) {
  if (kv_ == nullptr) return Status::OK();
  std::set<uint64_t> left;
  for (uint64_t ino : inos) {
    if (!Owns(ino) && !IsFree(ino)) left.insert(ino);
  }
  if (left.size() <= kOneByOne) {
    for (uint64_t ino : left) CKPTFS_RETURN_IF_ERROR(MayChange(ino));
    return Status::OK();
  }
  int64_t asked_ns = 0;
  std::map<std::string, bool> gone;  // owner value -> whether its host is gone
  for (int64_t wait_ms = 2;; wait_ms = std::min<int64_t>(wait_ms * 2, 20)) {
    CKPTFS_ASSIGN_OR_RETURN(const auto owners, ReadOwners(left));
      for (auto it = left.begin(); it != left.end();) {
      if (owners.count(*it)) {
        ++it;
        continue;
      }
      SetFree(*it);
      it = left.erase(it);
    }
    if (left.empty()) return Status::OK();
    const bool waited_out = asked_ns != 0 && NowNs() - asked_ns > kTakeOverMs * kMsNs;
    meta::Writes asks, takes;
    uint64_t taken = 0;
    for (const auto& [ino, value] : owners) {
      format::OwnerValue owner;
      if (Status d = format::DecodeOwner(value, &owner); !d.ok()) {
        return Status(d.code(), "owner of inode " + std::to_string(ino) + ": " + d.message());
      }
      bool take = owner == me_ || waited_out;
      if (!take) {
        auto g = gone.find(value);
        if (g == gone.end()) {
          CKPTFS_ASSIGN_OR_RETURN(const bool is_gone, OwnerGone(owner));
          g = gone.emplace(value, is_gone).first;
        }
        take = g->second;
      }
      if (take) {
        takes.Delete(meta::Space::kMeta, format::OwnerKey(ino));
        if (!(owner == me_)) taken++;
        left.erase(ino);
      } else if (asked_ns == 0) {
        asks.Put(meta::Space::kMeta, format::GiveUpKey(owner.id, ino), "");
        asks.Notify(Channel(owner.id));
      }
    }
    if (takes.size() > 0) {
      CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &takes, meta::Durability::kLogged));
      taken_over_ += taken;
      for (const auto& [ino, value] : owners) {
        if (!left.count(ino)) SetFree(ino);
      }
    }
    if (left.empty()) return Status::OK();
    if (asked_ns == 0) {
      const size_t n = asks.size();
      if (n > 0) CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &asks, meta::Durability::kLogged));
      asked_ns = NowNs();
      asked_ += n;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

Result<std::map<uint64_t, std::string>> Ownership::ReadOwners(const std::set<uint64_t>& inos) {
  std::map<uint64_t, std::string> owners;
  if (inos.empty()) return owners;
  const uint64_t lo = *inos.begin();
  const uint64_t hi = *inos.rbegin() + 1;
  const std::string_view prefix = format::kMetaOwnerPrefix;
  CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv_, [&](meta::ReadTxn* t) -> Status {
    owners.clear();
    if (hi - lo <= 4 * inos.size() + kDenseSlack) {
      return t->Scan(meta::Space::kMeta, format::OwnerKey(lo), format::OwnerKey(hi),
                     [&](std::string_view k, std::string_view v) {
                                            if (k.size() != prefix.size() + 8) return true;
                       const uint64_t ino = format::GetBE64(k.data() + prefix.size());
                       if (inos.count(ino)) owners.emplace(ino, std::string(v));
                       return true;
                     });
    }
    for (uint64_t ino : inos) {
      CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                              t->Get(meta::Space::kMeta, format::OwnerKey(ino)));
      if (v.has_value()) owners.emplace(ino, std::move(*v));
    }
    return Status::OK();
  }));
  return owners;
}

Result<bool> Ownership::OwnedElsewhere(uint64_t ino) {
  if (kv_ == nullptr || Owns(ino) || IsFree(ino)) return false;
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, ReadOwner(ino));
  if (!v.has_value()) {
    SetFree(ino);
    return false;
  }
  return *v != owner_value_;
}

Status Ownership::MayChange(uint64_t ino) {
  if (kv_ == nullptr || Owns(ino) || IsFree(ino)) return Status::OK();
  int64_t asked_ns = 0;
  for (int64_t wait_ms = 2;; wait_ms = std::min<int64_t>(wait_ms * 2, 20)) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v, ReadOwner(ino));
    if (!v.has_value()) break;
    format::OwnerValue owner;
    if (Status d = format::DecodeOwner(*v, &owner); !d.ok()) {
      return Status(d.code(), "owner of inode " + std::to_string(ino) + ": " + d.message());
    }
    // This mount's from a grant that ran out, or an owner gone, or one
    // that did not answer in time: nothing owns the inode any more.
    bool take = owner == me_;
    if (!take) {
      CKPTFS_ASSIGN_OR_RETURN(take, OwnerGone(owner));
    }
    if (!take && asked_ns != 0 && NowNs() - asked_ns > kTakeOverMs * kMsNs) take = true;
    if (take) {
      CKPTFS_RETURN_IF_ERROR(DeleteOwner(ino));
      if (!(owner == me_)) taken_over_++;
      break;
    }
    if (asked_ns == 0) {
      meta::Writes w;
      w.Put(meta::Space::kMeta, format::GiveUpKey(owner.id, ino), "");
      w.Notify(Channel(owner.id));
      CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &w, meta::Durability::kLogged));
      asked_ns = NowNs();
      asked_++;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
  SetFree(ino);
  return Status::OK();
}

// ---- Read grants ----

void Ownership::ClearReads() {
  reads_.clear();
  read_names_ = 0;
}

void Ownership::EraseRead(std::unordered_map<uint64_t, Read>::iterator r) {
  read_names_ -= r->second.names.size();
  reads_.erase(r);
}

void Ownership::SetReadName(Read* r, std::string_view name, uint64_t ino) {
  auto it = r->names.find(std::string(name));
  if (it == r->names.end()) {
    // Past the bound a name is left to the index.
    if (read_names_ >= kMaxNames) return;
    it = r->names.emplace(std::string(name), 0).first;
    read_names_++;
  }
  if (it->second == ino) return;
  if (auto n = r->named.find(it->second); n != r->named.end() && --n->second == 0) {
    r->named.erase(n);
  }
  it->second = ino;
  if (ino != 0) r->named[ino]++;
}

bool Ownership::Quiet(uint64_t ino, const format::InodeValue& v) {
  const int64_t ctime_ns = ChangeNs(v);
  if (kv_ == nullptr || Epoch() == 0) return false;
  const int64_t now = NowNs();
  MutexLock l(&mu_);
  if (reads_.count(ino) != 0 || owned_.count(ino) != 0 || reads_.size() >= kMaxReads) return false;
  if (quiet_.size() >= kMaxQuiet && quiet_.count(ino) == 0) quiet_.clear();
  Quietness& q = quiet_[ino];
  if (q.since_ns == 0 || q.ctime_ns != ctime_ns) {
    q.ctime_ns = ctime_ns;
    q.since_ns = now;
    return false;
  }
  return now - q.since_ns >= kQuietMs * kMsNs && now >= q.not_before_ns;
}

Result<Ownership::ReadGrant> Ownership::AskRead(uint64_t ino) {
  ReadGrant g;
  if (kv_ == nullptr) return g;
  const uint64_t epoch = Epoch();
  if (epoch == 0) return g;
  uint64_t token = 0;
  {
    // Entered before the commit: a request that finds the key drops it.
    MutexLock l(&mu_);
    // One of its reader keys being deleted (a give-up under way) could
    // delete the new one.
    if (reads_.count(ino) != 0 || deleting_.count(ino) != 0) return g;
    token = kEpochBit | kReadBit | ++next_token_;
    reads_[ino].token = token;
  }
  // The inode and its owner key read, and the reader key written, in one
  // transaction; none is committed when another host owns it.
  bool wrote = false;
  Status st;
  meta::Retrier retry;
  for (;;) {
    wrote = false;
    Result<std::unique_ptr<meta::Txn>> t = kv_->Begin();
    if (!t.ok()) {
      st = t.status();
      break;
    }
    Result<std::vector<std::optional<std::string>>> v = (*t)->GetMany(
        {{meta::Space::kInodes, format::InodeKey(ino)}, {meta::Space::kMeta, format::OwnerKey(ino)}});
    st = v.status();
    if (st.ok()) {
      g.inode = std::move((*v)[0]);
      wrote = g.inode.has_value() && !(*v)[1].has_value();
      if (!wrote) break;
      (*t)->Put(meta::Space::kMeta, format::ReaderKey(ino, me_.id), owner_value_);
      st = (*t)->Commit(meta::Durability::kLogged);
    }
    if (!meta::IsConflict(st) || !retry.Again()) break;
  }
  bool kept = false;
  {
    MutexLock l(&mu_);
    auto r = reads_.find(ino);
    const bool mine = r != reads_.end() && r->second.token == token;
    kept = st.ok() && wrote && Epoch() == epoch && mine;
    if (kept) {
      r->second.granted = true;
      r->second.value = *g.inode;
      read_grants_++;
      g.token = token;
    } else {
      if (mine) EraseRead(r);
      if (st.ok() && !wrote) {
        // Owned by another host: not asked again for a while.
        Quietness& q = quiet_[ino];
        q.since_ns = 0;
        q.not_before_ns = NowNs() + kQuietAfterGiveUpMs * kMsNs;
      }
    }
  }
  CKPTFS_RETURN_IF_ERROR(st);
  if (wrote && !kept) {
    // Committed, but given up meanwhile or past the grant: not kept.
    meta::Writes w;
    w.Delete(meta::Space::kMeta, format::ReaderKey(ino, me_.id));
    (void)meta::CommitWrites(kv_, &w, meta::Durability::kLogged);
  }
  return g;
}

uint64_t Ownership::ReadToken(uint64_t ino) const {
  if (Epoch() == 0) return 0;
  MutexLock l(&mu_);
  auto r = reads_.find(ino);
  return r != reads_.end() && r->second.granted ? r->second.token : 0;
}

std::optional<Ownership::HeldRead> Ownership::ReadValue(uint64_t ino) const {
  if (Epoch() == 0) return std::nullopt;
  MutexLock l(&mu_);
  auto r = reads_.find(ino);
  if (r == reads_.end() || !r->second.granted) return std::nullopt;
  return HeldRead{r->second.token, r->second.value};
}

void Ownership::ReadsWritten(const meta::Writes& batch) {
  MutexLock l(&mu_);
  for (const meta::Write& w : batch.list()) {
    if (w.space != meta::Space::kInodes || w.key.size() != 8) continue;
    const uint64_t ino = format::GetBE64(w.key.data());
    if (auto q = quiet_.find(ino); q != quiet_.end() && w.kind == meta::Write::Kind::kPut) {
      format::InodeValue v;
      if (format::DecodeInode(w.value, &v).ok()) {
        q->second.ctime_ns = ChangeNs(v);
      }
    }
    auto r = reads_.find(ino);
    if (r == reads_.end()) continue;
    if (w.kind == meta::Write::Kind::kPut) {
      r->second.value = w.value;
    } else {
      EraseRead(r);
    }
  }
}

Ownership::ReadStamp Ownership::StampOf(uint64_t dir) const {
  if (Epoch() == 0) return {};
  MutexLock l(&mu_);
  auto r = reads_.find(dir);
  if (r == reads_.end() || !r->second.granted) return {};
  return ReadStamp{r->second.token, r->second.changes};
}

void Ownership::ReadName(uint64_t dir, const ReadStamp& stamp, std::string_view name,
                         uint64_t ino) {
  if (stamp.token == 0) return;
  MutexLock l(&mu_);
  auto r = reads_.find(dir);
  if (r == reads_.end() || r->second.token != stamp.token || !r->second.granted ||
      r->second.changes != stamp.changes) {
    return;
  }
  SetReadName(&r->second, name, ino);
}

bool Ownership::ReadsName(uint64_t dir, uint64_t ino) const {
  if (Epoch() == 0) return false;
  MutexLock l(&mu_);
  auto r = reads_.find(dir);
  return r != reads_.end() && r->second.granted && r->second.named.count(ino) != 0;
}

std::vector<meta::Writes::Range> Ownership::ReaderRanges(const std::vector<uint64_t>& dirs) const {
  std::vector<meta::Writes::Range> ranges;
  if (dirs.empty()) return ranges;
  if (dirs.size() > kOneByOne) {
    ranges.push_back({meta::Space::kMeta, format::ReadersPrefix(dirs.front()),
                      format::ReadersPrefix(dirs.back() + 1)});
    return ranges;
  }
  for (uint64_t dir : dirs) {
    ranges.push_back({meta::Space::kMeta, format::ReadersPrefix(dir), format::ReaderKey(dir, me_.id)});
    ranges.push_back({meta::Space::kMeta, format::ReaderKey(dir, me_.id + 1),
                      format::ReadersPrefix(dir + 1)});
  }
  return ranges;
}

void Ownership::Deleting(const std::vector<uint64_t>& inos, int delta) {
  MutexLock l(&mu_);
  for (uint64_t ino : inos) {
    if ((deleting_[ino] += delta) <= 0) deleting_.erase(ino);
  }
}

void Ownership::EndRead(uint64_t dir, Dropped* dropped) {
  auto r = reads_.find(dir);
  if (r == reads_.end()) return;
  std::vector<Name> names;
  for (const auto& [name, child] : r->second.names) names.emplace_back(dir, name);
  dropped->emplace_back(dir, std::move(names));
  EraseRead(r);
}

Status Ownership::DropReads(const std::vector<uint64_t>& dirs, Dropped* dropped) {
  if (kv_ == nullptr) return Status::OK();
  meta::Writes w;
  std::vector<uint64_t> ended;
  {
    MutexLock l(&mu_);
    for (uint64_t dir : dirs) {
      if (reads_.count(dir) == 0) continue;
      EndRead(dir, dropped);
      ended.push_back(dir);
      deleting_[dir]++;
      w.Delete(meta::Space::kMeta, format::ReaderKey(dir, me_.id));
    }
  }
  if (w.empty()) return Status::OK();
  const Status s = meta::CommitWrites(kv_, &w, meta::Durability::kLogged);
  Deleting(ended, -1);
  return s;
}

Status Ownership::Unread(const std::vector<meta::Writes::Range>& ranges, Dropped* dropped) {
  if (kv_ == nullptr) return Status::OK();
  struct Reader {
    std::string key;
    uint64_t dir = 0;
    uint32_t host = 0;
    std::string value;
    bool asked = false;  // the request this mount made is still there
  };
  const size_t key_size = format::ReaderKey(0, 0).size();
  const size_t prefix = std::string_view(format::kMetaReaderPrefix).size();
  // (host, dir) -> when this mount's request to give it up was committed.
  std::map<std::pair<uint32_t, uint64_t>, int64_t> asked_at;
  std::map<std::string, bool> gone;  // owner value -> whether its host is gone
  for (int64_t wait_ms = 2;; wait_ms = std::min<int64_t>(wait_ms * 2, 20)) {
    std::vector<Reader> readers;
    CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv_, [&](meta::ReadTxn* t) -> Status {
      readers.clear();
      for (const meta::Writes::Range& r : ranges) {
        CKPTFS_RETURN_IF_ERROR(t->Scan(r.space, r.begin, r.end, [&](std::string_view k, std::string_view v) {
          Reader x{std::string(k), 0, 0, std::string(v)};
          if (k.size() == key_size) {
            x.dir = format::GetBE64(k.data() + prefix);
            x.host = format::GetBE32(k.data() + prefix + 8);
          }
          readers.push_back(std::move(x));
          return true;
        }));
      }
      // Whether the requests made are still unread, in the same snapshot.
      std::vector<std::string> requests;
      std::vector<meta::KeyRef> keys;
      std::vector<Reader*> of;
      for (Reader& x : readers) {
        if (asked_at.count({x.host, x.dir}) == 0) continue;
        requests.push_back(format::GiveUpKey(x.host, x.dir));
        of.push_back(&x);
      }
      for (const std::string& k : requests) keys.push_back({meta::Space::kMeta, k});
      CKPTFS_ASSIGN_OR_RETURN(auto found, t->GetMany(keys));
      for (size_t i = 0; i < of.size(); ++i) of[i]->asked = found[i].has_value();
      return Status::OK();
    }));
    if (readers.empty()) return Status::OK();
    const int64_t now = NowNs();
    meta::Writes asks, takes;
    uint64_t taken = 0;
    std::vector<uint64_t> own;
    for (const Reader& r : readers) {
      bool take = false;
      if (r.key.size() != key_size || r.host == me_.id) {
        // Not a reader key of another host's: nothing to ask.
        if (r.host == me_.id) {
          MutexLock l(&mu_);
          EndRead(r.dir, dropped);
          deleting_[r.dir]++;
          own.push_back(r.dir);
        }
        take = true;
      } else {
        auto g = gone.find(r.value);
        if (g == gone.end()) {
          format::OwnerValue owner;
          bool is_gone = true;  // a value that does not decode holds nothing
          if (format::DecodeOwner(r.value, &owner).ok() && owner.id == r.host) {
            CKPTFS_ASSIGN_OR_RETURN(is_gone, OwnerGone(owner));
          }
          g = gone.emplace(r.value, is_gone).first;
        }
        take = g->second;
        auto a = asked_at.find({r.host, r.dir});
        if (!take && a != asked_at.end() && !r.asked) {
          // It read the request, gave the grant up and holds a new one.
          asked_at.erase(a);
          a = asked_at.end();
        }
        if (!take && a != asked_at.end() && now - a->second > kTakeOverMs * kMsNs) {
          take = true;  // the request unread all that time: its grant ran out
          taken++;
        }
        if (!take && a == asked_at.end()) {
          asks.Put(meta::Space::kMeta, format::GiveUpKey(r.host, r.dir), "");
          asks.Notify(Channel(r.host));
        }
      }
      if (take) takes.Delete(meta::Space::kMeta, r.key);
    }
    if (takes.size() > 0) {
      const Status s = meta::CommitWrites(kv_, &takes, meta::Durability::kLogged);
      Deleting(own, -1);
      CKPTFS_RETURN_IF_ERROR(s);
      taken_over_ += taken;
    }
    if (asks.size() > 0) {
      CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &asks, meta::Durability::kLogged));
      const int64_t at = NowNs();
      for (const meta::Write& w : asks.list()) {
        const size_t p = std::string_view(format::kMetaGiveUpPrefix).size();
        asked_at[{format::GetBE32(w.key.data() + p), format::GetBE64(w.key.data() + p + 4)}] = at;
      }
      reads_asked_ += asks.size();
    }
    if (takes.size() > 0 && asks.size() == 0) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

}  // namespace ckptfs::engine
