// DataFiles: the data files of a store's large files (STORE/data/), one per
// inode that has one, in which byte N is the file's byte N
// (docs/FORMAT.md, "data/NNNNNNNN.dat").
//
// Files are opened on demand through an io::Env and kept open in a small
// LRU, so that a store with many large files holds a bounded number of
// descriptors. A file written to since the last SyncDirty stays open until
// that sync (at most kMaxDirty of them: past that, a write syncs the others
// first).
//
// Removal is deferred: RemoveAfterSync() queues a file, and once the index
// state that no longer uses it is durable (BeforeIndexSync/AfterIndexSync
// around the index's sync) a background thread deletes it, so that a sync
// does not wait for the unlink of a large file (and the release of its
// cached pages); a crash in between leaves a file no inode uses, which the
// store deletes at its next open. Create() of an inode whose file is queued
// at any of these stages takes it off (or waits for its deletion to end), so
// that a removal never deletes a newer file. The cached pages of a file the
// namespace no longer uses can go at once (EvictSoon, on another thread),
// as an unlink would release them, rather than stay until the deletion
// after the next sync: writes that come meanwhile reuse that memory.
//
// Reads go through the OS's cache with its own readahead off (a reader that
// jumps back would have it read again what earlier reads dropped); ReadAhead
// reads ahead of readers that go on through a file instead, so that the disk
// works while the last block read is verified and served.
//
// Thread safety: all methods are thread-safe; reads and writes of the files
// run outside the lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "io/env.h"

namespace ckptfs::engine {

class DataFiles {
 public:
  // `store_dir` is the store's directory; the files are under its data/.
  // With `bypass_cache`, Write() goes past the OS's cache where it can
  // (io::File::WriteUncachedAt).
  DataFiles(std::shared_ptr<io::Env> env, std::string store_dir, bool read_only,
            bool bypass_cache = false)
      : env_(std::move(env)),
        store_dir_(std::move(store_dir)),
        read_only_(read_only),
        bypass_cache_(bypass_cache) {}
  // Waits for the background removals.
  ~DataFiles();
  DataFiles(const DataFiles&) = delete;
  DataFiles& operator=(const DataFiles&) = delete;

  // Creates data/ when it is missing (a store made by an older build).
  Status EnsureDir();
  // The path of the data file of `ino`.
  std::string Path(uint64_t ino) const;
  // Creates an empty data file for `ino`, replacing any left over; its name
  // is durable once the next SyncDirty() returns.
  Status Create(uint64_t ino);
  // Writes `data` at `offset` of the data file of `ino`.
  Status Write(uint64_t ino, uint64_t offset, std::string_view data);
  // Reads up to `len` bytes, fewer only at the end of the file.
  Result<size_t> ReadUpTo(uint64_t ino, uint64_t offset, size_t len, char* buf);
  // ReadUpTo for bytes read once (a large sequential read, whose bytes the
  // kernel caches itself): their pages are dropped from the OS's cache after.
  Result<size_t> ReadOnce(uint64_t ino, uint64_t offset, size_t len, char* buf);
  // Drops the OS's cached pages of [offset, offset+len) of the data file of
  // `ino` (whole pages only).
  void Evict(uint64_t ino, uint64_t offset, uint64_t len);
  // Cuts the data file of `ino` to `size` bytes.
  Status Truncate(uint64_t ino, uint64_t size);
  // io::File::Refresh of the data file of `ino` where it is open: another
  // host may have written it since it was opened.
  Status Refresh(uint64_t ino);
  // The size and modification time of the data file of `ino` now, and
  // whether a write that comes after this look is sure to change one of
  // them (`settled`). It is not when the filesystem's timestamps are coarse
  // (ticks of the clock, or whole seconds; a fine-grained filesystem gives
  // a write that follows a look a timestamp of its own) and the file was
  // modified in the current step: a later write in that step would leave
  // size and mtime as they are.
  struct Look {
    uint64_t size = 0;
    int64_t modified_ns = 0;
    bool settled = false;
  };
  Result<Look> LookAt(uint64_t ino);
  // The step of the modification times of the files that `env` makes at
  // `path` (created, written and deleted to find out, in up to about 3 s):
  // 0 when a write that follows a look at the file always gets a newer one
  // (fine-grained timestamps); kUnknownStep when the mtime did not move
  // within that time.
  static Result<int64_t> ProbeTimestampStep(io::Env* env, const std::string& path);
  static constexpr int64_t kUnknownStep = INT64_MAX;
  // The probe's file in data/.
  static constexpr char kTimestampProbeName[] = "timestamps.probe";
  // The checksums (format::Checksum) of the blocks of the first `size`
  // bytes of the data file of `ino`, where blocks end at the multiples of
  // `block`, on up to kHashThreads threads. Corruption when the file is
  // shorter than `size`.
  Result<std::vector<uint64_t>> BlockChecksums(uint64_t ino, uint64_t size, uint64_t block);
  // Says that another writer (the kernel, for a passthrough writer) wrote
  // the data file of `ino`: the next SyncDirty syncs it.
  Status MarkWritten(uint64_t ino);
  // Syncs the data file of `ino` now; a failure is sticky, as SyncDirty's.
  Status SyncOne(uint64_t ino);
  // Syncs every data file written since the previous call, and data/
  // when a file was created since. Sticky on failure, as
  // SegmentSet::SyncDirty.
  Status SyncDirty();
  // Queues the data file of `ino`, of `bytes` bytes, for deletion once the
  // index state that no longer uses it (committed before this call) is
  // durable. True when the queue has grown large enough (kSyncQueueFiles
  // files or kSyncQueueBytes bytes) that the caller should sync rather than
  // wait for the next sync to come.
  bool RemoveAfterSync(uint64_t ino, uint64_t bytes);
  // Around a sync of the index: BeforeIndexSync takes what is queued so far
  // (only inodes whose change was committed before the sync), and
  // AfterIndexSync hands those to the background thread, or, when the sync
  // failed, queues them again for the next one.
  uint64_t BeforeIndexSync();
  void AfterIndexSync(uint64_t ticket, bool synced);
  // Has a background thread drop the OS's cached pages of the data file of
  // `ino` (one queued by RemoveAfterSync), unless it was written since the
  // last SyncDirty: those pages would be written back first.
  void EvictSoon(uint64_t ino);
  // Waits until the background threads have deleted (and evicted)
  // everything handed to them; the first failure of a deletion (each also
  // logged).
  Status WaitForRemovals();
  // Whether the background threads have deletions or evictions to do.
  bool RemovalsPending();
  // Deletes the data file of `ino` now.
  Status Remove(uint64_t ino);
  // The inode numbers of the data files on disk.
  Result<std::vector<uint64_t>> List();

 private:
  static constexpr size_t kMaxOpen = 64;
  static constexpr uint64_t kReadAheadBytes = 4ull << 20;
  static constexpr unsigned kHashThreads = 4;
  static constexpr size_t kMaxDirty = 256;
  static constexpr size_t kSyncQueueFiles = 1024;
  static constexpr uint64_t kSyncQueueBytes = 256ull << 20;
  Result<std::shared_ptr<io::File>> Get(uint64_t ino);
  // Get for a read of bytes the index points at: a data file that is gone
  // is damage (EIO, "missing"), not a name the caller got wrong.
  Result<std::shared_ptr<io::File>> GetToRead(uint64_t ino);
  // Before a read of [offset, offset+len) of `file`, the data file of `ino`:
  // when the read reaches the furthest byte reads have reached (a reader
  // going on through the file), asks the OS to read the next kReadAheadBytes
  // past it ahead, in the background. Only bytes no read has reached yet:
  // a byte read and dropped is never read ahead again (torch.load jumps
  // back and forth), so each byte still comes from the disk once.
  void ReadAhead(uint64_t ino, const io::File& file, uint64_t offset, size_t len);
  // Before ReadOnce drops the pages of [offset, end) of the data file of
  // `ino`: waits until every read-ahead of those bytes that ReadAhead has
  // chosen has been asked of the OS. One asked later would bring back
  // pages that no read drops again.
  void WaitForReadAhead(uint64_t ino, uint64_t offset, uint64_t end);
  // The step of the data files' modification times, measured once on a
  // file of data/ (kTimestampProbeName).
  int64_t TimestampStep();
  static Result<int64_t> MeasureTimestampStep(io::File* f);
  void Forget(uint64_t ino) REQUIRES(mu_);
  // Takes `ino` off every removal queue, or waits until the background
  // thread has deleted it.
  void CancelRemoval(uint64_t ino) REQUIRES(mu_);
  void RemoverLoop();
  // The evictions, on a thread of their own: one waiting behind the unlink
  // of a large file would come after the next writes took fresh memory.
  void EvictorLoop();
  // Drops the cached pages of the data file of `ino`, if there is one,
  // through a descriptor of its own (not one kept open: the file may be
  // deleted meanwhile).
  void EvictFile(uint64_t ino);
  // The background threads have deletions or evictions waiting or under way.
  bool RemovingLocked() const REQUIRES(mu_) {
    return !removals_.empty() || removing_ != 0 || !evictions_.empty() || evicting_;
  }

  const std::shared_ptr<io::Env> env_;
  const std::string store_dir_;
  const bool read_only_;
  const bool bypass_cache_;
  Mutex mu_;
  // Open files, most recently used at the front of lru_.
  std::list<uint64_t> lru_ GUARDED_BY(mu_);
  struct Open {
    std::shared_ptr<io::File> file;
    std::list<uint64_t>::iterator pos;
    uint64_t read_end = 0;   // the furthest byte a read of it has reached
    uint64_t ahead_end = 0;  // ReadAhead asked for the bytes up to here
  };
  std::map<uint64_t, Open> open_ GUARDED_BY(mu_);
  // The read-aheads chosen and not yet asked of the OS, by inode: how many,
  // and the bytes they span.
  struct Asking {
    int count = 0;
    uint64_t from = UINT64_MAX;
    uint64_t to = 0;
  };
  std::map<uint64_t, Asking> asking_ GUARDED_BY(mu_);
  CondVar asked_cv_;  // a read-ahead was asked of the OS
  std::map<uint64_t, std::shared_ptr<io::File>> dirty_ GUARDED_BY(mu_);
  std::set<uint64_t> remove_queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;  // given with remove_queue_'s files
  // Taken for an index sync in progress, by ticket.
  std::map<uint64_t, std::set<uint64_t>> syncing_ GUARDED_BY(mu_);
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  // The background removals: waiting, and the one being deleted (0: none).
  std::list<uint64_t> removals_ GUARDED_BY(mu_);
  uint64_t removing_ GUARDED_BY(mu_) = 0;
  // The evictions: waiting, and whether one is under way.
  std::list<uint64_t> evictions_ GUARDED_BY(mu_);
  bool evicting_ GUARDED_BY(mu_) = false;
  bool stop_remover_ GUARDED_BY(mu_) = false;
  Status removal_error_ GUARDED_BY(mu_);
  CondVar removal_cv_;  // a queue or what is under way changed, or stop_remover_ set
  std::thread remover_ GUARDED_BY(mu_);
  std::thread evictor_ GUARDED_BY(mu_);
  Status sync_error_ GUARDED_BY(mu_);
  std::once_flag timestamp_probe_;
  int64_t timestamp_step_ = kUnknownStep;  // written once, under timestamp_probe_
  // A file was created since the last sync of data/.
  std::atomic<bool> dir_unsynced_{false};
  // Serializes SyncDirty (as SegmentSet's sync_mu_).
  Mutex sync_mu_ ACQUIRED_BEFORE(mu_);
};

}  // namespace ckptfs::engine
