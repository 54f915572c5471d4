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
      epoch_ = kEpochBit | ((epoch_.load() & ~kEpochBit) + 1);
    }
  }
  until_ns_ = started + kGrantMs * kMsNs;
  if (requests.empty()) return Status::OK();
  // Each inode asked for is dropped here first; then one commit deletes
  // their owner keys (as DeleteOwner) and the requests.
  meta::Writes w;
  for (const auto& [key, ino] : requests) {
    GiveUp(ino);
    w.Delete(meta::Space::kMeta, format::OwnerKey(ino));
    w.Delete(meta::Space::kMeta, key);
  }
  CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv_, &w, meta::Durability::kLogged));
  for (const auto& [key, ino] : requests) SetFree(ino);
  given_up_ += requests.size();
  return Status::OK();
}

void Ownership::End() { until_ns_ = 0; }

Status Ownership::DropAll() {
  if (kv_ == nullptr) return Status::OK();
  std::vector<uint64_t> inos;
  {
    MutexLock l(&mu_);
    inos.reserve(owned_.size());
    for (const auto& [ino, o] : owned_) inos.push_back(ino);
    owned_.clear();
    dirs_.clear();
    names_ = 0;
  }
  constexpr size_t kPerCommit = 1000;
  for (size_t i = 0; i < inos.size(); i += kPerCommit) {
    meta::Writes w;
    for (size_t j = i; j < std::min(inos.size(), i + kPerCommit); ++j) {
      w.Delete(meta::Space::kMeta, format::OwnerKey(inos[j]));
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
  auto it = dirs_.find(dir);
  if (it == dirs_.end()) return std::nullopt;
  auto n = it->second.names.find(std::string(name));
  return n == it->second.names.end() ? 0 : n->second;
}

void Ownership::SetName(uint64_t dir, std::string_view name, uint64_t ino) {
  MutexLock l(&mu_);
  if (auto o = owned_.find(ino); o != owned_.end()) {
    std::vector<Name>& known = o->second.names;
    if (std::find(known.begin(), known.end(), Name(dir, name)) == known.end()) {
      known.emplace_back(dir, name);
    }
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
  {
    MutexLock l(&mu_);
    if (auto o = owned_.find(ino); o != owned_.end()) {
      names = std::move(o->second.names);
      owned_.erase(o);
    }
    if (auto it = dirs_.find(ino); it != dirs_.end()) {
      for (const auto& [name, child] : it->second.names) names.emplace_back(ino, name);
      names_ -= it->second.names.size();
      dirs_.erase(it);
    }
  }
  if (give_up_) give_up_(ino, names);
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

}  // namespace ckptfs::engine
