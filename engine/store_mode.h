// StoreMode: what the kind of store means to StoreImpl, which asks its mode
// rather than branching on the kind at each call site. An embedded store
// (its index in RocksDB) is used by one mount at a time, which orders its
// namespace changes itself; a shared store (its index in PostgreSQL,
// docs/SHARED.md) by mounts on many hosts at once, whose index transactions
// order them, and whose caches hold only while this host is alone
// (HostSession).
//
// Thread safety: every method is const and may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "engine/shared/host_session.h"
#include "meta/kv.h"

namespace ckptfs::engine {

class StoreMode {
 public:
  // An embedded store's mode.
  static std::unique_ptr<StoreMode> Embedded();
  // A shared store's, for the mount whose host is `host` (one that claimed
  // none: an open for reading). "*host" must outlive the mode.
  static std::unique_ptr<StoreMode> Shared(const HostSession* host);

  virtual ~StoreMode() = default;

  // Whether each mount holds a host of the store (many mounts at once);
  // otherwise an open takes the store's lock (StoreLock), one at a time.
  virtual bool MountsHoldHosts() const = 0;
  // Whether another host may change the index under this one: attributes
  // are read again before use unless this host is alone (solo-fresh),
  // extents are read again when their segment went, a hole is checked
  // against the file's removal, and data files are kept for any inode there
  // is.
  virtual bool OthersWrite() const = 0;
  // Whether every read of the index is a round trip to a server, worth
  // sparing where the answer is known.
  virtual bool RemoteIndex() const = 0;

  // The index transaction that a namespace change reads in and commits
  // within, made again when another change conflicts with it: a shared
  // store's. Null on an embedded store, whose changes read the latest state
  // and commit alone (in transactions of their own).
  virtual Result<std::unique_ptr<meta::Txn>> BeginChange(meta::Kv* kv) const = 0;
  // Whether a namespace change holds ns_mu_ exclusively (an embedded store,
  // which it orders) or shared (a shared store, whose index orders them).
  virtual bool ChangesExclusive() const = 0;
  // Whether inode numbers are taken in blocks in index transactions of
  // their own, so that hosts never hand out one number twice; otherwise the
  // block is persisted in the batch that uses it.
  virtual bool InoBlocksAlone() const = 0;
  // The value of the orphan keys this mount writes: empty, or on a shared
  // store its host id (u32 LE), so that each host purges only its own.
  virtual std::string OrphanValue() const = 0;
  // How long the kernel may keep names and attributes (Store::CacheSeconds).
  virtual double CacheSeconds() const = 0;
  // Whether the background thread runs for the index's upkeep whatever the
  // compaction settings.
  virtual bool NeedsUpkeep() const = 0;
};

}  // namespace ckptfs::engine
