// FaultInjectionEnv: the POSIX Env with the faults a disk and a power cut
// produce, for tests (as leveldb's fault_injection_test does):
//   - a chosen write fails with EIO, whole or torn (half of it written);
//   - a chosen sync fails with EIO;
//   - coarse timestamps (SetTimestampStep);
//   - another writer acting between two reads (SetReadHook);
//   - PowerCut(): the moment the machine loses power. The process goes on
//     as if nothing happened (writes and syncs succeed, so that RocksDB and
//     the engine close normally), but nothing done after the cut is
//     durable: syncs are not performed, writes of store files (segments,
//     data files) do not reach them (a data file is written in place past a
//     durable truncate: such a write must not change what the disk kept),
//     deletions and renames are not performed, files created are removed
//     again. Restore(), the reboot,
//     then drops every byte that was not synced before the cut, in segment
//     files and in the files of the RocksDB index (through
//     IndexFiles()), and the store can be reopened. With
//     IndexTail::kWritten the index's files keep what was written to them
//     before the cut, synced or not, as when the kernel had written the
//     index log's pages back on its own, and the store's files lose
//     their unsynced bytes all the same: the worst order in which a page
//     cache can reach the disk.
//
// Before the cut, writes and the names of files made by CreateUnsynced()
// whose directory has not been synced since (SyncDir) can be lost: Restore()
// deletes those files. Create(), Remove() and RocksDB's renames and
// deletions are treated as durable at once (the POSIX Env syncs the
// directory for Create(); the index syncs its own directory).
//
// Thread safety: every method may be called from any thread. A sync in
// progress when PowerCut() is called finishes before the cut.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "io/env.h"

namespace ckptfs::io {

class FaultInjectionEnv final : public Env,
                                public std::enable_shared_from_this<FaultInjectionEnv> {
 public:
  static std::shared_ptr<FaultInjectionEnv> Make();

  // The `n`th WriteAt from now (1 = the next one) fails with EIO. With
  // `torn`, the first half of its bytes reach the file first.
  void FailWrite(uint64_t n, bool torn = false);
  // The `n`th segment Sync from now fails with EIO; the bytes stay unsynced.
  void FailSync(uint64_t n);
  // Cuts the power: see the header comment.
  void PowerCut();
  // What the index's files keep of their unsynced bytes at the reboot.
  enum class IndexTail {
    kLost,     // nothing: only synced bytes survive, as in the store's files
    kWritten,  // every byte written before the cut
  };
  // The reboot after PowerCut(): drops what was not durable at the cut and
  // returns how many bytes that was. Call it once every user of the Env
  // (the store) is closed. Errors only on I/O errors of the test machine.
  Result<uint64_t> Restore(IndexTail index_tail = IndexTail::kLost);
  bool cut() const { return cut_.load(); }
  // The modification times of the files it writes come in steps of `ns`
  // (the filesystem's, rounded down), as on a filesystem with coarse
  // timestamps; 0, the default, leaves them as they are.
  void SetTimestampStep(int64_t ns) { timestamp_step_ = ns; }
  // Runs `hook` after each read of a file it opened, with the file's path
  // and the read's offset, before the read returns; an empty hook: none.
  using ReadHook = std::function<void(const std::string& path, uint64_t offset)>;
  void SetReadHook(ReadHook hook);

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override;
  Result<std::unique_ptr<File>> Create(const std::string& path, std::string_view contents) override;
  Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status Remove(const std::string& path) override;
  Result<std::vector<std::string>> List(const std::string& dir) override;
  std::shared_ptr<IndexFileHooks> IndexFiles() override;

 private:
  friend class FaultFile;
  friend class FaultIndexFiles;
  // What a power cut would drop of one file.
  struct Unsynced {
    uint64_t size = 0;         // bytes written so far (logical end)
    uint64_t synced_size = 0;  // bytes on disk for sure
    std::vector<std::pair<uint64_t, uint64_t>> writes;  // (offset, length) not yet synced
    bool index = false;        // a file of the RocksDB index (appended to only)
    uint64_t size_at_cut = 0;  // `size` when the power was cut
  };

  FaultInjectionEnv();
  // Called with cut_mu_ held shared, before a write of a tracked file: EIO
  // when this write is the one chosen to fail (`*torn`: write half of it
  // first). The caller holds cut_mu_ until its write is recorded.
  Status BeforeWrite(const std::string& path, bool* torn) REQUIRES_SHARED(cut_mu_);
  // Likewise before a sync; `segment`: counts toward FailSync(). With the
  // power cut, the caller skips the sync (and reports success).
  Status BeforeSync(const std::string& path, bool segment) REQUIRES_SHARED(cut_mu_);
  // A file made after the cut: Restore() removes it.
  void CreatedAfterCut(const std::string& path);
  // Starts tracking `path`, whose first `size` bytes are durable; `index`:
  // a file of the RocksDB index.
  void Track(const std::string& path, uint64_t size, bool index = false);
  void RecordWrite(const std::string& path, uint64_t offset, uint64_t length);
  // How many writes of `path` a sync starting now covers; MarkSynced(path, n)
  // after the sync succeeded forgets them.
  size_t PendingWrites(const std::string& path);
  void MarkSynced(const std::string& path, size_t n);
  void Truncated(const std::string& path, uint64_t size);
  void Forget(const std::string& path);
  void Renamed(const std::string& from, const std::string& to);
  Status Drop(const std::string& path, const Unsynced& u, uint64_t* dropped);
  // Runs the read hook, if any, outside mu_.
  void AfterRead(const std::string& path, uint64_t offset);

  const std::shared_ptr<Env> base_;
  // Shared by writes and syncs, exclusive for PowerCut. Lock order: before mu_.
  SharedMutex cut_mu_ ACQUIRED_BEFORE(mu_);
  std::atomic<bool> cut_{false};
  std::atomic<uint64_t> writes_{0}, syncs_{0};
  std::atomic<uint64_t> fail_write_at_{0}, fail_sync_at_{0};
  std::atomic<bool> fail_write_torn_{false};
  std::atomic<int64_t> timestamp_step_{0};
  Mutex mu_;  // a leaf lock
  std::map<std::string, Unsynced> files_ GUARDED_BY(mu_);
  std::vector<std::string> created_after_cut_ GUARDED_BY(mu_);
  // Made by CreateUnsynced before the cut, their directory not synced since.
  std::set<std::string> unsynced_names_ GUARDED_BY(mu_);
  std::shared_ptr<const ReadHook> read_hook_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::io
