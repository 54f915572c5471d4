// LookupHints: the inode each name of a shared store named when this mount
// last looked it up, so that the next lookup of the name reads the name
// and that inode's attributes in one round trip to the index's server
// (StoreImpl::LookupRemote). A hint is never trusted: the lookup checks it
// against the name it reads, and reads the other inode when the name names
// another now.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace ckptfs::engine {

class LookupHints {
 public:
  // The most names held; past it the hints start again.
  static constexpr size_t kMaxNames = size_t{1} << 16;

  // The inode that the name of dentry key `key` named at its last lookup;
  // 0 when none is known.
  uint64_t Find(std::string_view key) const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    auto it = hints_.find(std::string(key));
    return it == hints_.end() ? 0 : it->second;
  }
  // The name of dentry key `key` names `ino` (0: none).
  void Set(std::string_view key, uint64_t ino) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (ino == 0) {
      hints_.erase(std::string(key));
      return;
    }
    if (hints_.size() >= kMaxNames) hints_.clear();
    hints_[std::string(key)] = ino;
  }

 private:
  mutable Mutex mu_;  // a leaf lock
  std::unordered_map<std::string, uint64_t> hints_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::engine
