#include "fs/attr_invalidator.h"

#include <vector>

namespace ckptfs::fs {

void AttrInvalidator::Start(fuse_session* se) {
  {
    MutexLock lock(&mu_);
    se_ = se;
    stopping_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void AttrInvalidator::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  se_ = nullptr;
}

void AttrInvalidator::Queue(engine::Ino ino) {
  MutexLock lock(&mu_);
  if (se_ == nullptr || stopping_) return;
  if (queued_.emplace(ino, false).second && queued_.size() == 1) cv_.Signal();
}

void AttrInvalidator::QueuePages(engine::Ino ino) {
  MutexLock lock(&mu_);
  if (se_ == nullptr || stopping_) return;
  queued_[ino] = true;
  if (queued_.size() == 1) cv_.Signal();
}

fuse_session* AttrInvalidator::session() {
  MutexLock lock(&mu_);
  return se_;
}

void AttrInvalidator::Now(engine::Ino ino) {
  // ENOENT: the kernel no longer holds the inode; nothing is cached.
  if (fuse_session* se = session(); se != nullptr) fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
}

void AttrInvalidator::PagesNow(engine::Ino ino, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  fuse_session* se = session();
  if (se != nullptr) {
    fuse_lowlevel_notify_inval_inode(se, ino, static_cast<off_t>(offset), static_cast<off_t>(length));
  }
}

void AttrInvalidator::GaveUp(engine::Ino ino, const std::vector<std::pair<uint64_t, std::string>>& names) {
  fuse_session* se = session();
  if (se == nullptr) return;
  // ENOENT: the kernel does not hold the name (or the inode).
  for (const auto& [dir, name] : names) {
    fuse_lowlevel_notify_inval_entry(se, dir, name.data(), name.size());
  }
  fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
}

void AttrInvalidator::GaveUpSoon(engine::Ino ino,
                                 const std::vector<std::pair<uint64_t, std::string>>& names) {
  MutexLock lock(&mu_);
  if (se_ == nullptr || stopping_) return;
  names_.insert(names_.end(), names.begin(), names.end());
  queued_.emplace(ino, false);
  cv_.Signal();
}

void AttrInvalidator::Run() {
  std::vector<std::pair<engine::Ino, bool>> batch;
  std::vector<std::pair<uint64_t, std::string>> names;
  fuse_session* se;
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (queued_.empty() && names_.empty() && !stopping_) cv_.Wait(&mu_);
      if (queued_.empty() && names_.empty()) return;  // stopping, and everything sent
      batch.assign(queued_.begin(), queued_.end());
      queued_.clear();
      names.swap(names_);
      names_.clear();
      se = se_;
    }
    for (const auto& [dir, name] : names) {
      fuse_lowlevel_notify_inval_entry(se, dir, name.data(), name.size());
    }
    // Offset 0 and length 0: every page, and the attributes; -1: only those.
    for (const auto& [ino, pages] : batch) fuse_lowlevel_notify_inval_inode(se, ino, pages ? 0 : -1, 0);
  }
}

}  // namespace ckptfs::fs
