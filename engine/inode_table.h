// InodeTable: the in-memory state of inodes in use.
//
// An inode is in the table while it is pinned: for the length of one engine
// call (InodeRef) or while files are open on it. Its cached attributes are
// valid while it stays in the table, because every change of them goes
// through the entry under its mutex.
//
// Lock order: StoreImpl::ns_mu_, then a write's turn (InodeState::write_order),
// then InodeState::mu of several inodes in ascending inode number, then a
// table shard's mutex (held only briefly).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "base/mutex.h"
#include "base/write_order.h"
#include "format/format.h"

namespace ckptfs::engine {

struct InodeState {
  explicit InodeState(uint64_t i) : ino(i) {}
  const uint64_t ino;
  // Serializes every change of this inode. Lock order: see the top.
  Mutex mu;
  bool loaded GUARDED_BY(mu) = false;
  bool purged GUARDED_BY(mu) = false;  // gone from the index
  // Whether this mount wrote its orphan key (it lost its last name here
  // while open): on a shared store, only the host that did purges it.
  bool orphaned_here GUARDED_BY(mu) = false;
  format::InodeValue attr GUARDED_BY(mu);  // valid when loaded
  std::atomic<int> open_count{0};  // handles open on it
  WriteOrder write_order;  // writers take a turn before `mu`
  // Between BeginDirectWrite and EndDirectWrite (pinned meanwhile), with
  // the data file's size and mtime at the last adoption (mtime -1: none, or
  // one that a later write could repeat: DataFiles::Look::settled).
  bool direct GUARDED_BY(mu) = false;
  uint64_t adopted_size GUARDED_BY(mu) = 0;
  int64_t adopted_ns GUARDED_BY(mu) = -1;
  // StoreImpl::index_syncs_ when the file's first bytes were written since
  // it was empty (0: not known, as for a file written before the store
  // was opened): a later value there means its bytes may have been synced.
  uint64_t first_write_syncs GUARDED_BY(mu) = 0;
  // On a shared store, the trust epoch (HostSession::TrustEpoch: the solo
  // epoch, or the own epoch of an inode this mount owns) that began before
  // `attr` was last read from the index: within it no other host changes
  // the inode, so `attr` stays what the index holds. 0: none.
  uint64_t trust_epoch GUARDED_BY(mu) = 0;
  // The trust epoch in which the inode was known to have no extended
  // attributes (this host made it then, or listed none). 0: none.
  uint64_t no_xattrs_epoch GUARDED_BY(mu) = 0;
  // And the trust epoch in which the one extended attribute absent_xattr
  // was read and not found (the kernel asks for security.capability before
  // every write). 0: none.
  uint64_t absent_xattr_epoch GUARDED_BY(mu) = 0;
  std::string absent_xattr GUARDED_BY(mu);
  // Guarded by the mutex of the InodeTable shard that holds this entry
  // (which the analysis cannot name from here).
  int pins = 0;
};

class InodeTable {
 public:
  // Returns the entry for `ino`, creating it if needed, and pins it.
  InodeState* Pin(uint64_t ino);
  // Unpins; the entry is dropped when nothing pins it.
  void Unpin(InodeState* s);
  size_t size();

 private:
  static constexpr int kShards = 64;
  struct Shard {
    Mutex mu;  // the last lock taken (see the top); held briefly
    std::unordered_map<uint64_t, std::unique_ptr<InodeState>> map GUARDED_BY(mu);
  };
  Shard shards_[kShards];
};

// Pins an inode for the scope of one call.
class InodeRef {
 public:
  InodeRef() = default;
  InodeRef(InodeTable* t, uint64_t ino) : t_(t), s_(t->Pin(ino)) {}
  ~InodeRef() { reset(); }
  InodeRef(InodeRef&& o) noexcept : t_(o.t_), s_(o.s_) { o.s_ = nullptr; }
  InodeRef& operator=(InodeRef&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = o.t_;
      s_ = o.s_;
      o.s_ = nullptr;
    }
    return *this;
  }
  void reset() {
    if (s_ != nullptr) t_->Unpin(s_);
    s_ = nullptr;
  }
  InodeState* operator->() const { return s_; }
  InodeState* get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }

 private:
  InodeTable* t_ = nullptr;
  InodeState* s_ = nullptr;
};

}  // namespace ckptfs::engine
