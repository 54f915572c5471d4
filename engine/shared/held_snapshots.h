// HeldSnapshots: the snapshots of sealed trees (meta/snapshot_file.h) that
// one mount of a shared store holds in memory, so that the index reads of
// an inode of a held tree (its attributes, names, extents, extended
// attributes) go to the snapshot instead of the index server.
//
// A tree is held from the first read of its root's sealed attributes until
// this mount changes one of its inodes (Drop; only removals are allowed in
// a sealed tree), or until trees held later push it out (Limits). Inode
// numbers are never reused, and nothing of a sealed inode changes but by its
// removal, so what a held snapshot says of an inode is true for as long as
// the inode lives. Another host's removal of the tree is seen at the next
// lookup of its root, whose name lies in an unsealed directory and is read
// from the index.
//
// A held tree also names the directories on the path to its root (the
// root's parent up to the store's root), whose names and attributes its
// mount lets the kernel keep for kPathSeconds: a restore that opens every
// file by its full path then asks the index nothing per file.
//
// Thread safety: thread-safe; one mutex, a leaf lock, held for hash lookups
// and updates only (never while a snapshot is read).
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "meta/snapshot_file.h"

namespace ckptfs::engine {

class HeldSnapshots {
 public:
  struct Limits {
    uint64_t bytes = 16ull << 20;  // snapshot files' bytes held
    uint64_t inodes = 1ull << 18;  // inodes of held trees
  };
  // The memory one inode of a held tree takes (its map entry).
  static constexpr uint64_t kBytesPerInode = 64;
  // The most a HeldSnapshots with the default limits holds, the blocks its
  // snapshots share included (meta::kSnapshotBlockCacheBytes).
  static constexpr uint64_t MaxMemory() {
    return Limits{}.bytes + Limits{}.inodes * kBytesPerInode + meta::kSnapshotBlockCacheBytes;
  }
  // What it holds now, those blocks included.
  uint64_t MemoryBytes() const EXCLUDES(mu_);
  // What is held, and how often it served.
  struct Stats {
    uint64_t trees = 0;
    uint64_t inodes = 0;
    uint64_t bytes = 0;
    uint64_t reads = 0;     // index reads served by a snapshot
    uint64_t dropped = 0;   // trees dropped by a change or pushed out
  };

  HeldSnapshots() : HeldSnapshots(Limits{}) {}
  explicit HeldSnapshots(Limits limits) : limits_(limits) {}

  // The snapshot holding `ino`'s entries, or null; counts a read when found.
  std::shared_ptr<meta::SnapshotFile> Find(uint64_t ino) EXCLUDES(mu_);
  // Whether a held tree holds `ino` (not counted as a read).
  bool Holds(uint64_t ino) const EXCLUDES(mu_);
  // How long the kernel may keep the names and attributes on the path to
  // a held tree's root: another host's change of them (the removal of the
  // tree among them) is seen by this mount within this.
  static constexpr double kPathSeconds = 1.0;

  // Holds `file`, the snapshot of the tree under `root`, whose root lies
  // under the directories `path` (its parent first): every inode whose
  // attributes it holds maps to it. Trees held longest ago are dropped while
  // the limits are passed. False, and nothing held, when this tree alone
  // passes them (or `root` is not in it: EINVAL).
  Result<bool> Hold(uint64_t root, std::shared_ptr<meta::SnapshotFile> file,
                    std::vector<uint64_t> path = {}) EXCLUDES(mu_);
  // Whether `ino` is the root of a held tree or a directory on the path to
  // one.
  bool OnPath(uint64_t ino) const EXCLUDES(mu_);
  // Stops holding the tree that holds `ino`, if one does.
  void Drop(uint64_t ino) EXCLUDES(mu_);
  // Roots looked for and found without a snapshot to hold (an inode inside
  // a sealed tree, a seal record without one, an unreadable file): not
  // looked for again. Bounded: a full set is emptied.
  bool Tried(uint64_t ino) const EXCLUDES(mu_);
  void NoteTried(uint64_t ino) EXCLUDES(mu_);
  // Whether nothing is held: the check of every index read, with no lock.
  bool empty() const { return trees_.load(std::memory_order_acquire) == 0; }
  Stats stats() const EXCLUDES(mu_);

  static constexpr size_t kMaxTried = 1u << 16;

 private:
  struct Tree {
    uint64_t root = 0;
    std::shared_ptr<meta::SnapshotFile> file;
    std::vector<uint64_t> inos;
    std::vector<uint64_t> path;  // the root, then its parent up to the store's root
  };
  using TreeList = std::list<Tree>;  // oldest first
  void DropLocked(TreeList::iterator t) REQUIRES(mu_);

  const Limits limits_;
  mutable Mutex mu_;  // a leaf lock
  TreeList held_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, TreeList::iterator> by_ino_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, uint32_t> on_path_ GUARDED_BY(mu_);  // ino -> held trees
  std::unordered_set<uint64_t> tried_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t dropped_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> trees_{0};
  std::atomic<uint64_t> reads_{0};
};

}  // namespace ckptfs::engine
