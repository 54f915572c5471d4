#include "engine/shared/held_snapshots.h"

#include <cerrno>
#include <string>

#include "format/format.h"

namespace ckptfs::engine {

std::shared_ptr<meta::SnapshotFile> HeldSnapshots::Find(uint64_t ino) {
  if (empty()) return nullptr;
  MutexLock l(&mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return nullptr;
  reads_.fetch_add(1, std::memory_order_relaxed);
  return it->second->file;
}

bool HeldSnapshots::Holds(uint64_t ino) const {
  if (empty()) return false;
  MutexLock l(&mu_);
  return by_ino_.count(ino) != 0;
}

Result<bool> HeldSnapshots::Hold(uint64_t root, std::shared_ptr<meta::SnapshotFile> file,
                                 std::vector<uint64_t> path) {
  Tree tree;
  tree.root = root;
  tree.path.push_back(root);
  tree.path.insert(tree.path.end(), path.begin(), path.end());
  bool has_root = false;
  bool bad_key = false;
  // Outside the lock: the snapshot's inodes are its keys of kInodes.
  CKPTFS_RETURN_IF_ERROR(file->Scan(meta::Space::kInodes, "", "",
                                    [&](std::string_view key, std::string_view) {
                                      if (key.size() != 8) {
                                        bad_key = true;
                                        return false;
                                      }
                                      tree.inos.push_back(format::GetBE64(key.data()));
                                      has_root |= tree.inos.back() == root;
                                      return true;
                                    }));
  if (bad_key) return Status::Corruption("snapshot of " + std::to_string(root) + ": an inode key is not 8 bytes");
  if (!has_root) return Status(EINVAL, "the snapshot has no inode " + std::to_string(root));
  if (file->bytes() > limits_.bytes || tree.inos.size() > limits_.inodes) return false;
  MutexLock l(&mu_);
  if (by_ino_.count(root)) return true;  // another thread held it first
  while (!held_.empty() && (bytes_ + file->bytes() > limits_.bytes ||
                            by_ino_.size() + tree.inos.size() > limits_.inodes)) {
    DropLocked(held_.begin());
  }
  bytes_ += file->bytes();
  tree.file = std::move(file);
  held_.push_back(std::move(tree));
  const TreeList::iterator t = std::prev(held_.end());
  for (uint64_t ino : t->inos) by_ino_[ino] = t;
  for (uint64_t ino : t->path) on_path_[ino]++;
  trees_.store(held_.size(), std::memory_order_release);
  return true;
}

void HeldSnapshots::Drop(uint64_t ino) {
  if (empty()) return;
  MutexLock l(&mu_);
  auto it = by_ino_.find(ino);
  if (it != by_ino_.end()) DropLocked(it->second);
}

void HeldSnapshots::DropLocked(TreeList::iterator t) {
  for (uint64_t ino : t->inos) {
    auto it = by_ino_.find(ino);
    if (it != by_ino_.end() && it->second == t) by_ino_.erase(it);
  }
  for (uint64_t ino : t->path) {
    auto it = on_path_.find(ino);
    if (it != on_path_.end() && --it->second == 0) on_path_.erase(it);
  }
  bytes_ -= t->file->bytes();
  dropped_++;
  held_.erase(t);
  trees_.store(held_.size(), std::memory_order_release);
}

bool HeldSnapshots::OnPath(uint64_t ino) const {
  if (empty()) return false;
  MutexLock l(&mu_);
  return on_path_.count(ino) != 0;
}

bool HeldSnapshots::Tried(uint64_t ino) const {
  MutexLock l(&mu_);
  return tried_.count(ino) != 0;
}

void HeldSnapshots::NoteTried(uint64_t ino) {
  MutexLock l(&mu_);
  if (tried_.size() >= kMaxTried) tried_.clear();
  tried_.insert(ino);
}

uint64_t HeldSnapshots::MemoryBytes() const {
  if (empty()) return 0;
  MutexLock l(&mu_);
  return bytes_ + by_ino_.size() * kBytesPerInode + meta::SnapshotBlockCacheBytes();
}

HeldSnapshots::Stats HeldSnapshots::stats() const {
  MutexLock l(&mu_);
  Stats s;
  s.trees = held_.size();
  s.inodes = by_ino_.size();
  s.bytes = bytes_;
  s.reads = reads_.load(std::memory_order_relaxed);
  s.dropped = dropped_;
  return s;
}

}  // namespace ckptfs::engine
