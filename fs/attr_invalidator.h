// Tells the kernel that the attributes it caches for an inode are stale
// (fuse_lowlevel_notify_inval_inode with a negative offset: the pages stay).
//
// With the kernel's write-back cache the kernel keeps a file's size and times
// itself but takes st_blocks from ckptfs, and a WRITE from its cache does not
// make it ask again: without a notification `du` would show what a file
// stored before its pages were written, for the whole attribute timeout.
//
// A WRITE handler must not wait for the notification: the kernel looks the
// inode up to invalidate it, and an inode that is being evicted is waited
// for; its eviction waits for the very writes in flight. So writes only
// queue the inode, and one thread of this class sends the notifications.
// An fsync, which holds the file open, notifies at once (Now), and so do a
// fallocate and a write(2) that cleared set-ID bits (fs/set_id_bits.h):
// after a FALLOCATE or a write-through WRITE the kernel refreshes only the
// size and times it caches.
//
// The same thread serves a direct write's pages (PagesNow): the kernel
// drops a file's cached pages before an O_DIRECT write and, for a
// synchronous one, again after it, but not after an asynchronous one (Linux
// AIO, io_uring), and pages that concurrent readers brought in while it was
// in flight would keep the bytes from before it.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "engine/store.h"

namespace ckptfs::fs {

class AttrInvalidator {
 public:
  AttrInvalidator() = default;
  ~AttrInvalidator() { Stop(); }
  AttrInvalidator(const AttrInvalidator&) = delete;
  AttrInvalidator& operator=(const AttrInvalidator&) = delete;

  // Starts the notifying thread for session `se`. Until then (and after
  // Stop) Queue, Now and PagesNow do nothing.
  void Start(fuse_session* se) EXCLUDES(mu_);
  // Sends what is queued and joins the thread; before the session is
  // destroyed.
  void Stop() EXCLUDES(mu_);
  // Invalidates the attributes of `ino` soon, from the notifying thread.
  void Queue(engine::Ino ino) EXCLUDES(mu_);
  // Drops the kernel's cached pages of `ino`, and its attributes, soon,
  // from the notifying thread: after the store refused a WRITE of the
  // kernel's write-back cache (a sealed file), whose bytes and size would
  // otherwise stay cached as if written.
  void QueuePages(engine::Ino ino) EXCLUDES(mu_);
  // Invalidates them before returning. Only where the kernel holds the
  // inode in use (an open file's fsync or fallocate, a write(2)), never
  // from a WRITE of the kernel's cached pages.
  void Now(engine::Ino ino) EXCLUDES(mu_);
  // Drops the kernel's cached pages of bytes [offset, offset + length) of
  // `ino` (and its attributes) before returning. For a direct write, once
  // it is in the store and before its reply: a read that starts after the
  // write completes then reads the new bytes. Safe from such a WRITE, which
  // comes from an open file: the inode cannot be evicted meanwhile.
  void PagesNow(engine::Ino ino, uint64_t offset, uint64_t length) EXCLUDES(mu_);
  // Drops the names `names` (a directory, a name in it) and the attributes
  // of `ino` before returning: the store gave `ino` up to another host
  // (Store::SetGiveUpHook), from a thread that no request waits for.
  void GaveUp(engine::Ino ino, const std::vector<std::pair<uint64_t, std::string>>& names) EXCLUDES(mu_);
  // The same soon, from the notifying thread: from a request's thread,
  // whose directory the kernel may hold until the request is answered.
  void GaveUpSoon(engine::Ino ino, const std::vector<std::pair<uint64_t, std::string>>& names)
      EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);
  fuse_session* session() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  fuse_session* se_ GUARDED_BY(mu_) = nullptr;
  bool stopping_ GUARDED_BY(mu_) = false;
  // Queued inodes, each with whether its pages go too.
  std::unordered_map<engine::Ino, bool> queued_ GUARDED_BY(mu_);
  // Queued names (GaveUpSoon).
  std::vector<std::pair<uint64_t, std::string>> names_ GUARDED_BY(mu_);
  std::thread thread_;  // started and joined by Start and Stop only
};

}  // namespace ckptfs::fs
