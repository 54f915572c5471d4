// Ownership: the inodes that one mount of a shared store made, which it
// alone changes until another host asks for one (docs/SHARED.md, "Owned
// inodes"), in the manner of CephFS's capabilities and NFSv4's delegations.
//
// The index holds an owner key per owned inode (format::OwnerKey), written
// in the commit that makes the inode. While it owns an inode, a mount needs
// no round trip to know its attributes, its names (any change of a name
// locks the inode it names), and for a directory it made, which names it
// holds: every change of them went through this mount. Every
// change is still written through to the index at once, so other hosts
// read owned inodes as any others; only a change by another host needs the
// inode back. That host asks (a give-up key, format::GiveUpKey, and a
// notification on the owner's Channel), which the owner reads at once when
// it hears the notification (meta::Kv::Listen: PostgreSQL's LISTEN), and
// in any case within kPollMs, or kListenedPollMs while it listens: it
// forgets the inode, has the kernel drop what it keeps of it, and deletes
// the owner key. The asking host waits for
// that, or, from an owner that does not answer, kTakeOverMs, past the end
// of any grant the owner could still hold, and takes it. An inode that no
// host owns is never owned again.
//
// The owner trusts what it owns only while its grant runs: until kGrantMs
// after the start of its last poll that read the index. A poll that fails
// lets the grant run out; the next grant is a new epoch, which owns nothing
// from before (another host may have taken it meanwhile). This rests on
// each machine's monotonic clock running at about the same rate, never on
// clocks agreeing.
//
// Read grants (docs/SHARED.md, "Read grants"), in the manner of CephFS's
// shared capabilities: a directory that no host owns and that stays
// unchanged (Quiet) is read under a grant, a reader key
// (format::ReaderKey) written by a commit that reads its inode and finds no
// owner key. While the own grant runs, the reader trusts the directory's
// attributes and the names it read in it, and the kernel keeps them. Any
// other host's commit that changes the directory requires that no other
// reader key of it exists (ReaderRanges); when one does, that host gives
// its own grant of it up (DropReads), asks the readers (the same give-up
// key and channel as for an owned inode), waits for them to drop their
// keys or takes one whose request stays unread past kTakeOverMs (Unread),
// and commits again.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "format/format.h"
#include "meta/kv.h"

namespace ckptfs::engine {

class Ownership {
 public:
  // How often the owner reads the requests to give inodes up.
  static constexpr int64_t kPollMs = 50;
  // How often while it hears of them (Channel): often enough that its
  // grant never runs out.
  static constexpr int64_t kListenedPollMs = 250;
  // How long a grant runs from the start of the poll that gave it.
  static constexpr int64_t kGrantMs = 1000;
  // How long a host that asked waits before it takes an inode whose owner
  // did not give it up: past any grant the owner began before the request.
  static constexpr int64_t kTakeOverMs = kGrantMs + 2 * kPollMs + 250;
  // The most names of owned directories kept, and the most inodes known
  // free; past them directories are no longer listed, and the free set
  // starts again.
  static constexpr size_t kMaxNames = size_t{1} << 20;
  static constexpr size_t kMaxFree = size_t{1} << 20;
  // MayChangeAll asks inode by inode for up to this many.
  static constexpr size_t kOneByOne = 8;
  // MayChangeAll reads owner keys in one scan over the inodes' range of
  // numbers when it is at most 4 a number plus this.
  static constexpr uint64_t kDenseSlack = 4096;
  // The channel (meta::Writes::Notify) on which the host of id `host`
  // hears that another host asks for inodes of its.
  static std::string Channel(uint32_t host) { return "giveup." + std::to_string(host); }
  // Own epochs are told apart from HostSession's solo epochs by this bit.
  static constexpr uint64_t kEpochBit = uint64_t{1} << 63;

  // A name: a directory and a name in it.
  using Name = std::pair<uint64_t, std::string>;
  // What the store does with an inode this mount gives up, before the index
  // hears of it: forget what it knows of it beyond the index (waiting for a
  // change of it under way where it was `owned`, not read under a read
  // grant), and have the kernel drop what it keeps: `names`, the names of
  // the inode and, for a directory, those in it.
  using GiveUpFn = std::function<void(uint64_t ino, const std::vector<Name>& names, bool owned)>;

  Ownership() = default;
  Ownership(const Ownership&) = delete;
  Ownership& operator=(const Ownership&) = delete;

  // Owns inodes from now for `me`, over index `kv` ("*kv" outlives the use
  // of this object). Before the first PollOnce. Call at most once.
  void Start(meta::Kv* kv, format::OwnerValue me, GiveUpFn give_up) EXCLUDES(mu_);
  // Whether Start was called.
  bool started() const { return kv_ != nullptr; }
  // Reads the requests to give inodes up, gives them up, and renews the
  // grant when the read succeeded.
  Status PollOnce() EXCLUDES(mu_);
  // Ends the grant (a close).
  void End() EXCLUDES(mu_);
  // After End, at a clean close: deletes the owner keys of what this mount
  // still owns (others take them as an owner's that is gone anyway; this
  // keeps them out of the index).
  Status DropAll() EXCLUDES(mu_);

  // The running grant's epoch; 0 when none runs.
  uint64_t Epoch() const;
  // Seconds left of the grant: 0 when none runs.
  double SecondsLeft() const;
  // Whether this mount owns `ino` in the running grant.
  bool Owns(uint64_t ino) const EXCLUDES(mu_);
  // The value of this mount's owner keys.
  const std::string& owner_value() const { return owner_value_; }

  // Takes `ino`, which this mount makes in a commit not yet sent (its owner
  // key goes in that commit), as owned; for a directory (`dir`), with every
  // name in it known from now (SetName after the commit: its own name too).
  // False (nothing owned) when no grant runs.
  bool Made(uint64_t ino, bool dir) EXCLUDES(mu_);
  // `ino` is not owned: its commit failed, or it was removed.
  void Forget(uint64_t ino) EXCLUDES(mu_);

  // What an owned directory's names say of `name`: nullopt when they do
  // not know (not owned, not listed), else the inode it names (0: none).
  std::optional<uint64_t> FindName(uint64_t dir, std::string_view name) const EXCLUDES(mu_);
  // Name `name` of directory `dir` now names `ino` (0: none), by a commit
  // of this mount's.
  void SetName(uint64_t dir, std::string_view name, uint64_t ino) EXCLUDES(mu_);
  // Whether the kernel may keep a name of `dir` naming `ino`: this mount
  // owns the one or the other.
  bool OwnsName(uint64_t dir, uint64_t ino) const EXCLUDES(mu_);

  // Before this mount changes `ino`: returns once no other mount owns it,
  // having asked its owner to give it up and waited for that where one
  // did. Costs one read of the index the first time for an inode this
  // mount does not own; nothing afterwards.
  Status MayChange(uint64_t ino) EXCLUDES(mu_);
  // MayChange for many inodes at once (a seal's whole tree): their owner
  // keys read in one scan where their numbers are dense, one request per
  // inode another mount owns written in one commit, and one wait for all.
  Status MayChangeAll(const std::vector<uint64_t>& inos) EXCLUDES(mu_);
  // Whether another mount owns `ino`, without asking it for it: for a
  // change that may be left out (an access time). One read of the index
  // the first time for an inode this mount does not own.
  Result<bool> OwnedElsewhere(uint64_t ino) EXCLUDES(mu_);

  // ---- Read grants ----
  // How long a directory's change time stays the same between two reads of
  // it before Quiet says to ask for a grant; and how long after one was
  // given up to another host.
  static constexpr int64_t kQuietMs = 100;
  static constexpr int64_t kQuietAfterGiveUpMs = 1000;
  // The most directories read under grants (past it none is asked for),
  // and the most watched for quiet (the names kept in them are bounded by
  // kMaxNames).
  static constexpr size_t kMaxReads = size_t{1} << 16;
  static constexpr size_t kMaxQuiet = size_t{1} << 16;
  // Tokens of read grants (TrustEpoch) are told apart from own epochs by
  // this bit.
  static constexpr uint64_t kReadBit = uint64_t{1} << 62;

  // Whether to ask for a read grant of directory `ino`, whose inode a read
  // of the index just found as `v`: an earlier read
  // found the same at least kQuietMs before, none runs for it, this mount
  // does not own it, and none was given up in the last kQuietAfterGiveUpMs.
  bool Quiet(uint64_t ino, const format::InodeValue& v) EXCLUDES(mu_);
  // What AskRead found: the inode's value (nullopt: none) and the grant's
  // token (0: none runs: another host owns it, or no own grant runs).
  struct ReadGrant {
    std::optional<std::string> inode;
    uint64_t token = 0;
  };
  // Asks for a read grant of directory `ino`: one transaction reads its
  // inode and owner key and, when no host owns it, writes this mount's
  // reader key. The value read stays exact while the grant runs.
  Result<ReadGrant> AskRead(uint64_t ino) EXCLUDES(mu_);
  // The token of the read grant of `ino` while it runs; 0 otherwise.
  uint64_t ReadToken(uint64_t ino) const EXCLUDES(mu_);
  // While a read grant of `ino` runs: its token and the inode's value, as
  // AskRead read it or this mount's commits wrote it since (ReadsWritten).
  struct HeldRead {
    uint64_t token = 0;
    std::string value;
  };
  std::optional<HeldRead> ReadValue(uint64_t ino) const EXCLUDES(mu_);
  // After a commit of this mount's: the values of the inodes it wrote that
  // are read under grants (a removed one's grant ends), and the change
  // times Quiet compares with (a change of this mount's own breaks no
  // quiet).
  void ReadsWritten(const meta::Writes& batch) EXCLUDES(mu_);
  // Where a read of a name of `dir` begins (before it reads the index):
  // the grant that runs, and how many changes of its names this mount
  // made in it so far.
  struct ReadStamp {
    uint64_t token = 0;
    uint64_t changes = 0;
  };
  ReadStamp StampOf(uint64_t dir) const EXCLUDES(mu_);
  // Name `name` of `dir` named `ino` (0: none) in a snapshot taken after
  // `stamp`: kept while that grant runs (FindName), unless this mount
  // changed a name of `dir` since (the read may predate that change).
  void ReadName(uint64_t dir, const ReadStamp& stamp, std::string_view name, uint64_t ino)
      EXCLUDES(mu_);
  // Whether the kernel may keep a name of `dir` naming `ino` under a read
  // grant of `dir`: a name of it read under the grant names `ino`.
  bool ReadsName(uint64_t dir, uint64_t ino) const EXCLUDES(mu_);
  // The ranges of reader keys that a commit changing directories `dirs`
  // (ascending, no repeats) requires empty: every reader key of each but
  // this mount's own, or beyond kOneByOne directories one range over all
  // their numbers, this mount's keys in it included (Unread drops them).
  std::vector<meta::Writes::Range> ReaderRanges(const std::vector<uint64_t>& dirs) const;
  // A directory whose read grant this mount ended itself, and the names
  // the kernel must drop (DropReads, Unread).
  using Dropped = std::vector<std::pair<uint64_t, std::vector<Name>>>;
  // Ends this mount's own read grants of `dirs` and deletes its reader
  // keys of them: before it waits for the other readers of a directory it
  // changes, one of which may wait for this mount in turn. Adds to
  // `*dropped` what the kernel must drop.
  Status DropReads(const std::vector<uint64_t>& dirs, Dropped* dropped) EXCLUDES(mu_);
  // After a commit that required `ranges` empty was refused
  // (meta::IsRangeHeld): returns once they hold no other host's reader
  // key, having asked each reader to give its directory up and waited for
  // that. A reader that has not read the request kTakeOverMs after it was
  // made (so its grant has run out), or whose host is gone, loses the key;
  // one that answered and has a grant again is asked again. This mount's
  // own keys there it deletes, its grants ended (added to `*dropped`).
  Status Unread(const std::vector<meta::Writes::Range>& ranges, Dropped* dropped) EXCLUDES(mu_);

  // Counters for the mount's stats.
  uint64_t given_up() const { return given_up_.load(std::memory_order_relaxed); }
  uint64_t asked() const { return asked_.load(std::memory_order_relaxed); }
  uint64_t taken_over() const { return taken_over_.load(std::memory_order_relaxed); }
  // Polls that a notification on Channel began (HostSession counts them).
  void CountHeard() { heard_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t heard() const { return heard_.load(std::memory_order_relaxed); }
  // Read grants given to this mount, and those it gave up at a request;
  // those this mount asked other hosts to give up.
  uint64_t read_grants() const { return read_grants_.load(std::memory_order_relaxed); }
  uint64_t reads_given_up() const { return reads_given_up_.load(std::memory_order_relaxed); }
  uint64_t reads_asked() const { return reads_asked_.load(std::memory_order_relaxed); }

 private:
  struct Dir {
    std::unordered_map<std::string, uint64_t> names;
  };
  // An owned inode: the names this mount gave it (some may be gone since).
  struct Owned {
    std::vector<Name> names;
  };
  // A directory read under a grant: its token, whether the commit of its
  // reader key returned (before, a request finds it and drops it), and
  // the names read in it with the inodes they name (0: none).
  struct Read {
    uint64_t token = 0;
    bool granted = false;
    std::string value;  // the inode's
    std::unordered_map<std::string, uint64_t> names;
    std::unordered_map<uint64_t, uint32_t> named;  // ino -> names of it
    uint64_t changes = 0;  // of the names, by this mount's commits
  };
  // A directory watched for quiet.
  struct Quietness {
    int64_t ctime_ns = 0;
    int64_t since_ns = 0;  // 0: not read yet
    int64_t not_before_ns = 0;
  };
  // The change time Quiet compares, in nanoseconds.
  static int64_t ChangeNs(const format::InodeValue& v) {
    return v.ctime_sec * 1'000'000'000 + v.ctime_nsec;
  }
  // Sets name `name` of `r` to `ino` (0: none); a new one only while
  // fewer than kMaxNames are kept over all reads.
  void SetReadName(Read* r, std::string_view name, uint64_t ino) REQUIRES(mu_);
  void EraseRead(std::unordered_map<uint64_t, Read>::iterator r) REQUIRES(mu_);
  // Counts (`delta` +1, -1) the deletes of this mount's reader keys of
  // `inos` under way: AskRead asks for none of them meanwhile.
  void Deleting(const std::vector<uint64_t>& inos, int delta) EXCLUDES(mu_);
  // Ends the read grant of `dir`, if any, adding it to `*dropped`.
  void EndRead(uint64_t dir, Dropped* dropped) REQUIRES(mu_);
  void ClearReads() REQUIRES(mu_);
  // Whether `v` is an owner that no longer holds its host.
  Result<bool> OwnerGone(const format::OwnerValue& v);
  // Gives up `ino` at another host's request: drops it and tells the
  // store (PollOnce then deletes its owner key and the request).
  void GiveUp(uint64_t ino) EXCLUDES(mu_);
  bool IsFree(uint64_t ino) const EXCLUDES(mu_);
  void SetFree(uint64_t ino) EXCLUDES(mu_);
  // The owner key of `ino`, read in a transaction of its own.
  Result<std::optional<std::string>> ReadOwner(uint64_t ino);
  // The owner keys of `inos` (those that have one), in one transaction.
  Result<std::map<uint64_t, std::string>> ReadOwners(const std::set<uint64_t>& inos);
  // Deletes owner key `ino`, reading nothing: an owner key is written once,
  // by the commit that makes its inode, and never again, so deleting it
  // whoever deleted it before is safe.
  Status DeleteOwner(uint64_t ino);

  meta::Kv* kv_ = nullptr;
  format::OwnerValue me_;
  std::string owner_value_;
  GiveUpFn give_up_;
  // The end of the grant (steady clock, ns; 0: none), and its epoch.
  std::atomic<int64_t> until_ns_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> given_up_{0}, asked_{0}, taken_over_{0}, heard_{0};
  std::atomic<uint64_t> read_grants_{0}, reads_given_up_{0}, reads_asked_{0};

  mutable Mutex mu_;  // a leaf lock
  std::unordered_map<uint64_t, Owned> owned_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Dir> dirs_ GUARDED_BY(mu_);
  size_t names_ GUARDED_BY(mu_) = 0;
  std::unordered_set<uint64_t> free_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Read> reads_ GUARDED_BY(mu_);
  size_t read_names_ GUARDED_BY(mu_) = 0;  // names over all of reads_
  std::unordered_map<uint64_t, int> deleting_ GUARDED_BY(mu_);  // Deleting
  std::unordered_map<uint64_t, Quietness> quiet_ GUARDED_BY(mu_);
  uint64_t next_token_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs::engine
