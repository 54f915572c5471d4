#include "engine/shared/peer_reads.h"

#include <cstring>
#include <utility>

#include "engine/shared/peer_service.h"
#include "meta/hosts.h"
#include "peer/rendezvous.h"
#include "peer/wire.h"

namespace ckptfs::engine {

namespace {
// Idle connections kept to one peer.
constexpr size_t kIdlePerPeer = 8;
}  // namespace

void PeerReads::RefreshIfDue() {
  {
    MutexLock l(&mu_);
    if (refreshing_ || Clock::now() - hosts_read_ < std::chrono::milliseconds(kHostsMs)) return;
    refreshing_ = true;
  }
  std::map<std::string, std::string> live;
  auto hosts = meta::ListHosts(kv_);
  auto addresses = PeerAddresses(kv_);
  const bool read = hosts.ok() && addresses.ok();
  if (read) {
    const int64_t now_ms = meta::WallMs();
    for (const auto& [name, value] : *hosts) {
      auto a = addresses->find(name);
      if (a == addresses->end() || meta::HostIsFree(kv_, name, value, now_ms)) continue;
      if (name == self_ && !self_serves_) continue;
      live.emplace(name, a->second);
    }
  }
  MutexLock l(&mu_);
  // A failed read keeps the view it had, until the next try.
  if (read) hosts_ = std::move(live);
  hosts_read_ = Clock::now();
  refreshing_ = false;
}

PeerReads::Route PeerReads::RouteOf(const std::string& name) {
  RefreshIfDue();
  MutexLock l(&mu_);
  const auto now = Clock::now();
  std::vector<std::string> names;
  names.reserve(hosts_.size());
  bool others = false;
  for (const auto& [host, address] : hosts_) {
    auto s = shunned_.find(address);
    if (s != shunned_.end()) {
      if (s->second > now) continue;
      shunned_.erase(s);
    }
    names.push_back(host);
    others |= host != self_;
  }
  if (!others) return Route{};
  const std::string& owner = names[peer::RendezvousOwner(names, name)];
  if (owner == self_) return Route{Route::kSelf, ""};
  return Route{Route::kPeer, hosts_.at(owner)};
}

Result<size_t> PeerReads::ReadFrom(peer::Client* c, const std::string& name, uint64_t offset,
                                   size_t len, char* dst) {
  size_t done = 0;
  while (done < len) {
    const uint32_t piece = static_cast<uint32_t>(std::min<size_t>(len - done, kPeerMaxRead));
    CKPTFS_ASSIGN_OR_RETURN(std::string got, c->Read(name, offset + done, piece));
    if (got.size() > piece) return Status(EPROTO, "a peer sent more than it was asked for");
    std::memcpy(dst + done, got.data(), got.size());
    done += got.size();
    if (got.size() < piece) break;  // its file ends
  }
  return done;
}

Result<size_t> PeerReads::Read(const std::string& address, const std::string& name, uint64_t offset,
                               size_t len, char* dst) {
  std::unique_ptr<peer::Client> c;
  {
    MutexLock l(&mu_);
    auto it = idle_.find(address);
    if (it != idle_.end() && !it->second.empty()) {
      c = std::move(it->second.back());
      it->second.pop_back();
    }
  }
  if (c == nullptr) {
    Result<std::unique_ptr<peer::Client>> connected =
        peer::Client::Connect(peer::ClientOptions{address, secret_, timeout_ms_});
    if (!connected.ok()) {
      failures_++;
      Shun(address);
      return connected.status().Annotate("peer " + address);
    }
    c = std::move(*connected);
  }
  Result<size_t> n = ReadFrom(c.get(), name, offset, len, dst);
  if (!n.ok()) {
    failures_++;
    Shun(address);
    return n.status().Annotate("peer " + address + ", " + name);
  }
  reads_++;
  read_bytes_ += *n;
  MutexLock l(&mu_);
  auto& idle = idle_[address];
  if (idle.size() < kIdlePerPeer) idle.push_back(std::move(c));
  return n;
}

void PeerReads::Reject(const std::string& address, bool damaged) {
  if (!damaged) {
    failures_++;
    return;
  }
  rejected_++;
  Shun(address);
}

void PeerReads::Shun(const std::string& address) {
  MutexLock l(&mu_);
  shunned_[address] = Clock::now() + std::chrono::milliseconds(kShunMs);
  idle_.erase(address);
}

}  // namespace ckptfs::engine
