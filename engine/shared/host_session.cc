#include "engine/shared/host_session.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "meta/hosts.h"

namespace ckptfs::engine {
namespace {
int64_t SteadyNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
int64_t NowNs() { return SteadyNs(std::chrono::steady_clock::now()); }
}  // namespace

HostSession::~HostSession() { StopWatch(); }

Status HostSession::Claim(meta::Kv* kv, std::string name, std::string_view holder) {
  CKPTFS_ASSIGN_OR_RETURN(const uint32_t id, meta::ClaimHost(kv, name, holder, kLeaseMs));
  kv_ = kv;
  name_ = std::move(name);
  id_ = id;
  lease_renewed_ms_ = meta::WallMs();
  return Status::OK();
}

void HostSession::Join() {
  // Beside other mounted hosts, whose kernels may keep names and
  // attributes they were told before this host came: it serves once that
  // has timed out.
  const Result<bool> others = WatchOnce();
  Listen();  // before the first read of the requests: none is missed
  (void)ownership_.PollOnce();  // the first own grant
  if (!others.ok() || *others) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kJoinWaitMs));
    (void)ownership_.PollOnce();  // that grant ran out meanwhile
  }
  StartWatch();
}

Status HostSession::Release(bool release) {
  if (id_ == 0) return Status::OK();
  Status s = release ? meta::ReleaseHost(kv_, name_) : Status::OK();
  meta::LetGo(kv_, name_);
  return s;
}

Status HostSession::RenewIfDue() {
  if (id_ == 0 || lost()) return Status::OK();
  const int64_t now = meta::WallMs();
  if (now - lease_renewed_ms_.load() < kLeaseMs / 3) return Status::OK();
  Status s = meta::RenewHost(kv_, name_, kLeaseMs);
  if (s.ok()) {
    lease_renewed_ms_ = now;
  } else if (s.code() == EBUSY) {
    lost_ = true;  // another mount took the host: its segments are its own now
  }
  return s.Annotate("lease of host \"" + name_ + "\"");
}

Result<bool> HostSession::WatchOnce() {
  // The grant runs from before the read: a host that claimed its record
  // after the read's snapshot waits kJoinWaitMs, past the grant's end.
  const auto started = std::chrono::steady_clock::now();
  CKPTFS_ASSIGN_OR_RETURN(auto hosts, meta::ListHosts(kv_));
  const int64_t now_ms = meta::WallMs();
  const bool others = std::any_of(hosts.begin(), hosts.end(), [&](const auto& h) {
    return h.first != name_ && !meta::HostIsFree(kv_, h.first, h.second, now_ms);
  });
  if (others || lost()) {
    solo_until_ns_ = 0;
    return others;
  }
  // A new epoch when the last grant ran out: readers load solo_until_ns_
  // first, so one that sees the new grant sees the new epoch.
  const int64_t from = SteadyNs(started);
  if (solo_until_ns_.load() <= from) solo_epoch_.fetch_add(1);
  solo_until_ns_ = from + int64_t{kSoloGrantMs} * 1'000'000;
  return false;
}

uint64_t HostSession::SoloEpoch() const {
  const int64_t until = solo_until_ns_.load();
  if (until <= NowNs()) return 0;
  return solo_epoch_.load();
}

double HostSession::SoloSecondsLeft() const {
  const int64_t left = solo_until_ns_.load() - NowNs();
  return left > 0 ? static_cast<double>(left) / 1e9 : 0.0;
}

uint64_t HostSession::TrustEpoch(uint64_t ino) const {
  if (ownership_.Owns(ino)) {
    if (const uint64_t epoch = ownership_.Epoch(); epoch != 0) return epoch;
  }
  if (const uint64_t token = ownership_.ReadToken(ino); token != 0) return token;
  return SoloEpoch();
}

double HostSession::CacheSecondsOf(uint64_t ino) const {
  return CacheSeconds(ownership_.Owns(ino) || ownership_.ReadToken(ino) != 0);
}

double HostSession::CacheSecondsOfName(uint64_t dir, uint64_t ino) const {
  return CacheSeconds(ownership_.OwnsName(dir, ino) || ownership_.ReadsName(dir, ino));
}

double HostSession::CacheSeconds(bool owned) const {
  const double solo = SoloSecondsLeft();
  return owned ? std::max(solo, ownership_.SecondsLeft()) : solo;
}

void HostSession::Listen() {
  if (kv_ == nullptr || id_ == 0) return;
  Result<std::unique_ptr<meta::Listener>> l = kv_->Listen(Ownership::Channel(id_));
  if (l.ok()) {
    listener_ = std::move(*l);
    return;
  }
  // An index without notifications is polled every kPollMs for good;
  // one whose server is away is asked again later.
  listen_again_ = l.status().code() == ENOTSUP
                      ? std::chrono::steady_clock::time_point::max()
                      : std::chrono::steady_clock::now() + std::chrono::milliseconds(kListenAgainMs);
}

bool HostSession::WaitForPoll() {
  const bool listening = listener_ != nullptr;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(listening ? Ownership::kListenedPollMs : Ownership::kPollMs);
  for (;;) {
    {
      MutexLock l(&watch_mu_);
      if (!listener_) {
        while (!watch_stop_ && watch_cv_.WaitUntil(&watch_mu_, deadline)) {
        }
        return !watch_stop_;
      }
      if (watch_stop_) return false;
    }
    // In slices of kPollMs, so that StopWatch is heard.
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count();
    if (left <= 0) return true;
    Result<bool> heard = listener_->Wait(std::min<int64_t>(left, Ownership::kPollMs));
    if (!heard.ok()) {
      // Notifications may have been missed: poll now, listen again.
      listener_.reset();
      listen_again_ = std::chrono::steady_clock::now();
      return true;
    }
    if (*heard) {
      ownership_.CountHeard();
      return true;
    }
  }
}

void HostSession::StartWatch() {
  watch_ = std::thread([this] {
    auto hosts_due = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWatchMs);
    for (;;) {
      if (!WaitForPoll()) return;
      if (listener_ == nullptr && std::chrono::steady_clock::now() >= listen_again_) Listen();
      // A read that fails grants nothing more: the grant runs out.
      (void)ownership_.PollOnce();
      if (std::chrono::steady_clock::now() >= hosts_due) {
        const Result<bool> others = WatchOnce();
        // Beside others there is no solo grant to renew, only their going
        // to notice.
        hosts_due = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(others.ok() && *others ? kWatchBesideMs : kWatchMs);
      }
    }
  });
}

void HostSession::StopWatch() {
  solo_until_ns_ = 0;
  ownership_.End();
  if (!watch_.joinable()) return;
  {
    MutexLock l(&watch_mu_);
    watch_stop_ = true;
    watch_cv_.SignalAll();
  }
  watch_.join();
}

void HostSession::RememberMade(uint64_t ino, uint64_t epoch, format::InodeValue attr) {
  MutexLock l(&made_mu_);
  if (!made_.emplace(ino, Made{epoch, std::move(attr)}).second) return;
  made_order_.push_back(ino);
  while (made_order_.size() > kMadeMax) {
    made_.erase(made_order_.front());
    made_order_.pop_front();
  }
}

std::optional<HostSession::Made> HostSession::TakeMade(uint64_t ino) {
  MutexLock l(&made_mu_);
  if (made_.empty()) return std::nullopt;
  auto it = made_.find(ino);
  if (it == made_.end()) return std::nullopt;
  std::optional<Made> m = std::move(it->second);
  made_.erase(it);  // its id stays in made_order_ until it comes first
  return m;
}

}  // namespace ckptfs::engine
