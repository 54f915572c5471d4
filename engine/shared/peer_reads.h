// PeerReads: where a mount of a shared store reads a range of the store's
// segment and data files (docs/SHARED.md, "Peers"). Each file is served to
// the others by one of the mounted hosts that serve (rendezvous hashing
// over their names, peer/rendezvous.h): a range of a file that another host
// serves is read from that host over TCP; one of a file this host serves
// is read through its RangeCache, which its server shares, so that the
// storage serves it once; with no other host serving, from the storage.
//
// A peer that fails (refuses, times out, closes) or sends a range that
// fails its checksum (the caller says so: Reject) is not asked again for
// kShunMs, and its files go to the hosts that scored next; the caller reads
// the storage itself for the range that failed.
//
// Thread safety: thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "meta/kv.h"
#include "peer/client.h"

namespace ckptfs::engine {

class PeerReads {
 public:
  // How old the view of the mounted hosts may get before it is read again.
  static constexpr int64_t kHostsMs = 1000;
  // How long a peer that failed is left alone.
  static constexpr int64_t kShunMs = 5000;

  // A mount of host `self` (which serves when `self_serves`) of `kv`'s
  // store, whose secret is `secret`; a peer slower than `timeout_ms` fails.
  PeerReads(meta::Kv* kv, std::string self, bool self_serves, std::string secret, int timeout_ms)
      : kv_(kv),
        self_(std::move(self)),
        self_serves_(self_serves),
        secret_(std::move(secret)),
        timeout_ms_(timeout_ms) {}

  // Who serves file `name` ("segments/...", "data/...").
  struct Route {
    enum Kind { kStorage, kSelf, kPeer } kind = kStorage;
    std::string address;  // kPeer: the peer's
  };
  Route RouteOf(const std::string& name) EXCLUDES(mu_);

  // Up to `len` bytes of `name` at `offset` from the peer at `address`
  // into `dst` (fewer where its file ends); an error shuns the peer.
  Result<size_t> Read(const std::string& address, const std::string& name, uint64_t offset,
                      size_t len, char* dst) EXCLUDES(mu_);
  // The range read from `address` failed its checksum: counted, and when
  // it was `damaged` (all there, but wrong) the peer is shunned; a short
  // one is a peer whose view of the file is older (its client caches an
  // older size), counted as a failure.
  void Reject(const std::string& address, bool damaged) EXCLUDES(mu_);

  struct Stats {
    uint64_t reads = 0;       // ranges read from peers
    uint64_t read_bytes = 0;  // their bytes
    uint64_t failures = 0;    // reads that failed (then read from storage)
    uint64_t rejected = 0;    // ranges that failed their checksum
  };
  Stats stats() const {
    return Stats{reads_.load(), read_bytes_.load(), failures_.load(), rejected_.load()};
  }

 private:
  using Clock = std::chrono::steady_clock;
  // Reads the mounted hosts and their addresses when the view is older
  // than kHostsMs (one caller at a time; the others use the old view).
  void RefreshIfDue() EXCLUDES(mu_);
  // Leaves the peer alone for kShunMs and drops its idle connections.
  void Shun(const std::string& address) EXCLUDES(mu_);
  Result<size_t> ReadFrom(peer::Client* c, const std::string& name, uint64_t offset, size_t len,
                          char* dst);

  meta::Kv* const kv_;
  const std::string self_;
  const bool self_serves_;
  const std::string secret_;
  const int timeout_ms_;

  Mutex mu_;
  // Mounted hosts that serve, by name: their addresses.
  std::map<std::string, std::string> hosts_ GUARDED_BY(mu_);
  Clock::time_point hosts_read_ GUARDED_BY(mu_);
  bool refreshing_ GUARDED_BY(mu_) = false;
  std::map<std::string, Clock::time_point> shunned_ GUARDED_BY(mu_);  // address: until
  std::map<std::string, std::vector<std::unique_ptr<peer::Client>>> idle_ GUARDED_BY(mu_);

  std::atomic<uint64_t> reads_{0}, read_bytes_{0}, failures_{0}, rejected_{0};
};

}  // namespace ckptfs::engine
