#include "fs/auto_seal.h"

#include <fnmatch.h>
#include <sys/stat.h>

namespace ckptfs::fs {

bool AutoSeal::Matches(const std::string& pattern, std::string_view name) {
  return !pattern.empty() && ::fnmatch(pattern.c_str(), std::string(name).c_str(), 0) == 0;
}

void AutoSeal::Made(engine::Ino parent, std::string_view name, engine::Ino ino) {
  if (!Matches(marker_, name)) return;
  MutexLock l(&mu_);
  if (markers_.size() >= kMaxMarkers) markers_.clear();
  markers_[ino] = parent;
}

engine::Status AutoSeal::Renamed(engine::Store& store, std::string_view name,
                                 engine::Ino new_parent, std::string_view new_name) {
  const bool from_temporary = Matches(renamed_, name);
  const bool to_marker = Matches(marker_, new_name);
  if (!from_temporary && !to_marker) return engine::Status::OK();
  CKPTFS_ASSIGN_OR_RETURN(engine::Attr moved, store.Lookup(new_parent, new_name));
  if (from_temporary && S_ISDIR(moved.mode)) return store.Seal(moved.ino).status();
  if (to_marker && S_ISREG(moved.mode)) {
    {
      MutexLock l(&mu_);
      markers_.erase(moved.ino);
    }
    return store.Seal(new_parent).status();
  }
  return engine::Status::OK();
}

engine::Status AutoSeal::Released(engine::Store& store, engine::Ino ino) {
  engine::Ino dir = 0;
  {
    MutexLock l(&mu_);
    if (markers_.empty()) return engine::Status::OK();
    auto it = markers_.find(ino);
    if (it == markers_.end()) return engine::Status::OK();
    dir = it->second;
    markers_.erase(it);
  }
  return store.Seal(dir).status();
}

}  // namespace ckptfs::fs
