// StoreLock: one process at a time per store. An flock on STORE/LOCK, held for
// the life of the object, with the holder's name and pid written into the
// file so that a second opener can say who has the store.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace ckptfs::engine {

// Who has a store open: the payload (Status::payload<StoreHolder>()) of the
// EBUSY that Store::Open, Fsck (engine/fsck/fsck.h) and
// Store::CompactOffline return when another process holds the store's lock.
struct StoreHolder {
  std::string holder;  // that process's StoreOptions::holder; "" when unknown
  pid_t pid = 0;       // 0 when unknown (a store locked by an older version)
};

class StoreLock {
 public:
  // Takes the lock or fails with EBUSY: "store DIR is in use by HOLDER", with
  // the holder as a StoreHolder payload.
  static Result<std::unique_ptr<StoreLock>> Acquire(const std::string& dir,
                                                    const std::string& holder);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  explicit StoreLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace ckptfs::engine
