// HostSession: one writable mount's place among the hosts of a shared store
// (docs/SHARED.md, "Hosts and their files" and "What one host sees").
//
// It holds the host (meta/hosts.h): its name and id, under a lease that
// RenewIfDue moves on every third of its length; a mount whose lease ran out
// and was taken has lost the host and writes nothing more. A thread reads the
// host records every kWatchMs (kWatchBesideMs while others are mounted)
// and, while no other host is mounted, grants
// this one solo periods: until kSoloGrantMs after the read began, the kernel
// may cache names and attributes (CacheSeconds), and what the store read or
// wrote in the period's epoch stays exact. A host that mounts beside others
// waits kJoinWaitMs before it serves (Join): by then what the kernels of the
// others were told before they saw it has timed out. It also keeps the
// inodes it made in a solo epoch (RememberMade, TakeMade).
//
// The inodes this mount made are its own (Ownership), until another host
// asks for one; the watch thread reads those requests when it hears of one
// (the index's notifications, meta::Kv::Listen), and every
// Ownership::kListenedPollMs while it listens, else every
// Ownership::kPollMs.
//
// A session that claimed no host (an embedded store, or a shared one opened
// read-only) has id 0, is never lost, and has no solo epoch.
//
// Thread safety: every method may be called from any thread, except Claim,
// Join and Release, which the store's open and close call once each.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "engine/shared/ownership.h"
#include "format/format.h"
#include "meta/kv.h"

namespace ckptfs::engine {

class HostSession {
 public:
  // The lease's length; renewed every third of it.
  static constexpr int64_t kLeaseMs = 30'000;
  // How often the watch reads the host records: while none other is
  // mounted, and beside others.
  static constexpr int64_t kWatchMs = 250;
  static constexpr int64_t kWatchBesideMs = 1000;
  // How long a solo grant runs from the read that gave it.
  static constexpr int64_t kSoloGrantMs = 1000;
  // How long a host that mounts beside others waits before it serves.
  static constexpr int64_t kJoinWaitMs = kSoloGrantMs * 11 / 10 + 100;
  // How long after a listen failed (the server away) it is tried again.
  static constexpr int64_t kListenAgainMs = 1000;
  // The most inodes remembered as made (RememberMade), the oldest dropped.
  static constexpr size_t kMadeMax = 4096;

  HostSession() = default;
  // Stops the watch (StopWatch).
  ~HostSession();
  HostSession(const HostSession&) = delete;
  HostSession& operator=(const HostSession&) = delete;

  // Takes host `name` of `kv`'s store for this process (`holder` in
  // messages); errors as meta::ClaimHost. "*kv" must outlive the session's
  // use of it (until Release and StopWatch). Call at most once.
  Status Claim(meta::Kv* kv, std::string name, std::string_view holder);
  // Waits kJoinWaitMs when another host is mounted (or the host records
  // cannot be read), then starts the watch. Call once, after Claim, before
  // the store serves.
  void Join();
  // Stops the watch; the solo grant ends. Idempotent.
  void StopWatch() EXCLUDES(watch_mu_);
  // Ends the lease (a clean close when `release`), and lets go of the host
  // in any case (meta::LetGo). Nothing without a host.
  Status Release(bool release);

  // Renews the lease when a third of it has passed; EBUSY (and the host is
  // lost) when another mount took it. OK without a host or once lost.
  Status RenewIfDue();
  // Whether another host is mounted: a read of the host records. Grants a
  // solo period when none is (and this one has not lost its host).
  Result<bool> WatchOnce();

  // The host's name and id (0: none claimed).
  const std::string& name() const { return name_; }
  uint32_t id() const { return id_; }
  // Whether another mount took this one's host.
  bool lost() const { return lost_.load(std::memory_order_relaxed); }
  // The current solo epoch while its grant runs; 0 otherwise.
  uint64_t SoloEpoch() const;
  // Seconds left of the solo grant: 0 when none runs.
  double SoloSecondsLeft() const;
  // The epoch in which what this mount knows of `ino` stays exact: the own
  // epoch while it owns `ino`, the token of its read grant while one runs
  // (Ownership::ReadToken), else the solo epoch; 0 when none runs.
  uint64_t TrustEpoch(uint64_t ino) const;
  // How long the kernel may keep the attributes of `ino` (and, for a
  // directory, its names): while the solo grant or, for an owned inode or
  // one read under a grant, the own grant runs.
  double CacheSecondsOf(uint64_t ino) const;
  // How long the kernel may keep name `dir`/... naming `ino`: as above,
  // with the own grant where this mount owns the name (Ownership::OwnsName)
  // or read it under a read grant of `dir` (Ownership::ReadsName).
  double CacheSecondsOfName(uint64_t dir, uint64_t ino) const;

  // The inodes this mount owns; started by Claim's caller.
  Ownership& ownership() { return ownership_; }
  const Ownership& ownership() const { return ownership_; }

  // An inode this host made in solo epoch `epoch` with attributes `attr`,
  // which the kernel learns of from the reply and loads then.
  struct Made {
    uint64_t epoch = 0;
    format::InodeValue attr;
  };
  void RememberMade(uint64_t ino, uint64_t epoch, format::InodeValue attr) EXCLUDES(made_mu_);
  // Takes the entry RememberMade left for `ino`, if any.
  std::optional<Made> TakeMade(uint64_t ino) EXCLUDES(made_mu_);

 private:
  // The solo grant's seconds left, or the longer own grant's for what this
  // mount owns.
  double CacheSeconds(bool owned) const;
  // Listens to the requests for this host's inodes (Ownership::Channel);
  // on failure listen_again_ says when to try again.
  void Listen();
  // Waits until the next poll of the requests is due or one is heard of:
  // false when StopWatch stops the watch.
  bool WaitForPoll() EXCLUDES(watch_mu_);
  void StartWatch();

  meta::Kv* kv_ = nullptr;
  std::string name_;
  uint32_t id_ = 0;
  std::atomic<int64_t> lease_renewed_ms_{0};
  std::atomic<bool> lost_{false};
  // The end of the solo grant (steady clock, ns; 0: none).
  std::atomic<int64_t> solo_until_ns_{0};
  // Counts the solo periods: a grant that begins after the last one ran
  // out begins a new epoch (another host may have changed anything in
  // between).
  std::atomic<uint64_t> solo_epoch_{0};

  Mutex made_mu_;  // a leaf lock
  std::unordered_map<uint64_t, Made> made_ GUARDED_BY(made_mu_);
  std::deque<uint64_t> made_order_ GUARDED_BY(made_mu_);

  Ownership ownership_;

  // Join's, then the watch thread's alone.
  std::unique_ptr<meta::Listener> listener_;
  std::chrono::steady_clock::time_point listen_again_ = std::chrono::steady_clock::time_point::max();

  std::thread watch_;
  Mutex watch_mu_;  // a leaf lock
  CondVar watch_cv_;
  bool watch_stop_ GUARDED_BY(watch_mu_) = false;
};

}  // namespace ckptfs::engine
