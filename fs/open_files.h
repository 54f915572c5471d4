// The opens of store files when OPEN is answered (mount option
// "passthrough"): which ones the kernel passes through to a data file, and
// which ones the daemon serves.
//
// A read-only open of a file whose data file holds it whole
// (engine::Store::WholeDataFileOf) gets a backing file: the kernel then
// reads it, and serves its page faults, straight from the data file, and no
// READ reaches us. One backing id per inode serves all its passthrough opens;
// it is closed at the last one's RELEASE. Every other open is the daemon's.
//
// The kernel keeps an inode in one mode at a time: while passthrough opens
// are open every open must pass through too, and a cached open blocks
// passthrough. So a read-only open while the daemon serves an open of the
// same inode (a writer) is the daemon's as well, and an open for writing, or
// a truncation, while passthrough opens are open fails with ETXTBSY, as
// writing a running program does: the data file must not change under
// readers that never ask us. The kernel sends RELEASE after close(2) has
// returned, so a writer first waits a moment (kReleaseWait) for the
// releases of readers that may already be closed.
//
// With passthrough for writers (kReadsAndWrites), an open for writing of an
// empty file (or of one its O_TRUNC empties: Open's `truncate`) gets a data
// file of its own that the kernel writes directly
// (engine::Store::BeginDirectWrite), opened for reading and writing behind
// the backing id; every other open of the inode then shares it, readers
// and writers alike, and a truncation changes it at once. Its last writer's
// release ends the direct writes (engine::Store::EndDirectWrite).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "base/mutex.h"
#include "engine/store.h"
#include "fs/sharded_map.h"

namespace ckptfs::fs {

class OpenFiles {
 public:
  // Registers an open data file with the kernel (fuse_passthrough_open):
  // returns the backing id (> 0), or -errno.
  using OpenBacking = std::function<int(int fd)>;
  // Drops a backing id (fuse_passthrough_close).
  using CloseBacking = std::function<void(int backing_id)>;
  // Truncates the file to 0 bytes for an open with O_TRUNC.
  using Truncate = std::function<engine::Status()>;

  // What an open got; kept in the open's handle (fuse_file_info::fh) and
  // given back at release.
  enum Handle : uint64_t { kDaemon = 1, kPassthrough = 2, kDirectWrite = 3 };
  // Which opens may pass through.
  enum class Mode { kNone, kReads, kReadsAndWrites };
  struct Opened {
    Handle handle = kDaemon;
    int backing_id = 0;  // with kPassthrough
  };

  static constexpr std::chrono::milliseconds kReleaseWait{1000};

  // "*store" must outlive this.
  explicit OpenFiles(engine::Store* store) : store_(store) {}

  // An open of store file `ino`, read-only or not, where `mode` says which
  // opens the kernel may be handed a backing file for (kNone: every open is
  // the daemon's). ETXTBSY for a writer while read-only passthrough opens
  // are open. With `truncate` (an open with O_TRUNC, read-only or not) the
  // open is a writer's for that rule, and the file is truncated once the
  // open is sure to go ahead, before it picks its backing: so a writer that
  // truncates a file writes it directly as it would a new one. Its failure
  // is the open's.
  engine::Result<Opened> Open(engine::Ino ino, bool read_only, Mode mode,
                              const OpenBacking& open_backing, const Truncate& truncate = {});
  // The release of an open that got `handle`.
  void Release(engine::Ino ino, uint64_t handle, const CloseBacking& close_backing);
  // Whether `ino` has passthrough opens and none writes (its data file must
  // not change under them).
  bool ReadersOnly(engine::Ino ino) const;
  // Waits until ReadersOnly(ino) is false: true at once when it is, false
  // (counted as busy) when it is still true at `deadline`. A truncation
  // waits so before it changes the data file.
  bool WaitForReleases(engine::Ino ino, std::chrono::steady_clock::time_point deadline);
  bool WaitForReleases(engine::Ino ino) {
    return WaitForReleases(ino, std::chrono::steady_clock::now() + kReleaseWait);
  }

  // Counters for the stats file.
  uint64_t passthrough_opens() const { return passthrough_opens_.load(std::memory_order_relaxed); }
  uint64_t daemon_opens() const { return daemon_opens_.load(std::memory_order_relaxed); }
  // Opens of whole data files that the kernel refused a backing file.
  uint64_t backing_failures() const { return backing_failures_.load(std::memory_order_relaxed); }
  int last_backing_error() const { return last_backing_error_.load(std::memory_order_relaxed); }
  // Writers and truncations refused with ETXTBSY.
  uint64_t busy() const { return busy_.load(std::memory_order_relaxed); }
  // Inodes whose direct writes failed to begin, or to end (their last
  // bytes then stay unadopted until the next open of the store).
  uint64_t direct_write_errors() const { return direct_write_errors_.load(std::memory_order_relaxed); }
  // Inodes with a backing id now.
  uint64_t backing_files() const { return backing_files_.load(std::memory_order_relaxed); }

 private:
  struct State {
    int backing_id = 0;
    uint32_t passthrough = 0;  // opens passed through, all on backing_id
    uint32_t writers = 0;      // of those, opens for writing (kDirectWrite)
    uint32_t daemon = 0;       // opens the daemon serves
  };
  // One try of Open; sets *busy instead of waiting.
  engine::Result<Opened> TryOpen(engine::Ino ino, bool read_only, Mode mode,
                                 const OpenBacking& open_backing, const Truncate& truncate,
                                 bool* busy);
  void CountBusy() { busy_.fetch_add(1, std::memory_order_relaxed); }
  // A backing id for the data file of `ino`; 0 when the file is not whole
  // in its data file or the kernel refused.
  int Backing(engine::Ino ino, const OpenBacking& open_backing);
  // A backing id for a new data file of `ino` that the kernel writes; 0
  // when the file is not empty or the kernel refused (nothing begun then).
  int WriteBacking(engine::Ino ino, const OpenBacking& open_backing);

  engine::Store* const store_;
  ShardedMap<State> opens_;
  std::atomic<uint64_t> passthrough_opens_{0}, daemon_opens_{0}, backing_failures_{0}, busy_{0};
  std::atomic<uint64_t> backing_files_{0}, direct_write_errors_{0};
  std::atomic<int> last_backing_error_{0};
  // Signalled when an inode's last passthrough open is released. Taken
  // before the map's shard locks.
  Mutex release_mu_;
  CondVar released_;
};

}  // namespace ckptfs::fs
