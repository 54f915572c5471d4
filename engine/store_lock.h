// StoreLock: one process at a time per store. An flock on STORE/LOCK, held for
// the life of the object, with the holder's name and pid written into the
// file so that a second opener can say who has the store.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace ckptfs::engine {

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
