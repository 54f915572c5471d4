// AutoSeal: the seals a mount makes by itself, for frameworks that cannot
// call `ckptfs seal` (mount options seal_renamed and seal_marker; docs/
// SHARED.md, "Seals for unchanged frameworks"):
//   - a directory renamed from a name that matches seal_renamed is sealed
//     once renamed (orbax commits a step by renaming its temporary
//     directory: seal_renamed=*.orbax-checkpoint-tmp-*);
//   - a regular file that gets a name matching seal_marker seals the
//     directory it is in: renamed to that name (torch.distributed.checkpoint
//     renames .metadata.tmp to .metadata), or made under it and then closed,
//     where the kernel reports closes (a shared store, passthrough).
// Names match as fnmatch(3) patterns, without FNM_PATHNAME; empty: off.
//
// Thread safety: thread-safe; one mutex (a leaf lock) over the markers made
// and not yet closed.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "engine/store.h"

namespace ckptfs::fs {

class AutoSeal {
 public:
  AutoSeal(std::string renamed, std::string marker)
      : renamed_(std::move(renamed)), marker_(std::move(marker)) {}

  // A file `name` was made in `parent` as `ino`: when it is a marker, its
  // close seals `parent`.
  void Made(engine::Ino parent, std::string_view name, engine::Ino ino) EXCLUDES(mu_);
  // After `name` in `parent` became `new_name` in `new_parent`: seals what
  // the rename calls for.
  engine::Status Renamed(engine::Store& store, std::string_view name, engine::Ino new_parent,
                         std::string_view new_name) EXCLUDES(mu_);
  // A handle of `ino` was released: seals the directory of a marker made
  // through this mount.
  engine::Status Released(engine::Store& store, engine::Ino ino) EXCLUDES(mu_);

 private:
  static bool Matches(const std::string& pattern, std::string_view name);

  const std::string renamed_;
  const std::string marker_;
  Mutex mu_;
  // Markers made and not yet closed, with their directories. Bounded:
  // emptied when it holds kMaxMarkers (a marker whose close is then not
  // seen seals nothing).
  static constexpr size_t kMaxMarkers = 4096;
  std::unordered_map<engine::Ino, engine::Ino> markers_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::fs
