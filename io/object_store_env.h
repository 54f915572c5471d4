// What the object-store Envs (io/rados_env.h, io/s3_env.h) have in common:
// which paths of a store they keep as objects (the files directly inside
// chosen subdirectories of the store's directory, every other path going to
// a local Env), their staging logs (io/staging_log.h) and the requests they
// have sent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "io/env.h"

namespace ckptfs::io {

// Requests sent to the object store so far, by kind.
struct ObjectCounters {
  uint64_t reads = 0;   // RADOS reads, S3 GETs
  uint64_t writes = 0;  // RADOS write operations, S3 PUTs
  uint64_t other = 0;   // stats, creates, removes, truncates, listings
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

// What every object-store Env is opened with (RadosOptions, S3Options add
// where the objects go).
struct ObjectStoreOptions {
  // The local directory whose subdirectories `dirs` live in the object store.
  std::string root;
  std::vector<std::string> dirs;
  // Before every object's name (after the location's own prefix): tells
  // stores that share a pool or bucket apart.
  std::string prefix;
  // Every other path.
  std::shared_ptr<Env> local;
  // A local directory for the staging logs (made when missing); "" for
  // none: a process killed loses the writes the store had not
  // acknowledged. Connect() first sends on what earlier processes left
  // there (one writer of a store's files at a time: the store's lock).
  std::string staging;
  // How long an operation waits for the store (an OSD down, a monitor or
  // a service unreachable, 5xx answers) before it fails with EIO.
  // Default: 30 s.
  double op_timeout_s = 30;
  // A file's writes waiting before they go out in the background (in S3
  // also the most bytes of one part). Default: 8 MiB.
  size_t write_buffer = 8u << 20;
  // Background writes of one file in flight at once. Default: 4.
  int writes_in_flight = 4;
};

class ObjectStoreEnv : public Env {
 public:
  virtual ObjectCounters counters() const = 0;
  // Sends on what the staging logs in `dir` hold, and removes them (a
  // store's other writers' logs, all of them stopped). A log that cannot
  // be sent stays for the next try; storage that is full says so, and
  // what to do.
  Status SendStaged(const std::string& dir);
  // SendStaged(dir), then keeps this Env's staging logs there: for files
  // opened for writing from then on. Call it before the first such open,
  // as the one writer of what `dir` holds ("" for none).
  Status StartStaging(const std::string& dir);

 protected:
  // Sends the writes of staging log `log` to `object`'s file, up to a
  // record that fails its checksum (a write cut short by the end of its
  // process); a log of a file that is gone is dropped (OK).
  virtual Status SendStagedLog(const std::string& log, const std::string& object) = 0;
  // The staging log of `object`'s file; "" while staging is off.
  std::string StagingOf(const std::string& object) const;

 private:
  mutable Mutex staging_mu_;
  std::string staging_ GUARDED_BY(staging_mu_);
};

// The writes of one open file that wait to be sent, in arrival order: a
// write that continues the last one joins it, up to `max_run` bytes a run.
// A batch that starts with a large write (an eighth of `batch` or more) is
// given room for `batch` bytes at once, the most a file holds before it
// sends, so that the appends after it fill it without moving it.
//
// A batch's first run starts in a buffer given back (Recycle) by a write
// that completed, when one is there: a file that streams writes fills the
// same few buffers again instead of faulting in fresh pages each time.
class PendingWrites {
 public:
  struct Run {
    uint64_t offset;
    std::string bytes;
  };

  // `spares`: the most buffers kept for reuse.
  PendingWrites(size_t batch, size_t max_run, size_t spares = 0)
      : batch_(batch), max_run_(max_run), max_spares_(spares) {}

  // Returns the offset past the last byte added.
  uint64_t Add(uint64_t offset, std::span<const std::string_view> pieces) {
    for (std::string_view p : pieces) {
      if (p.empty()) continue;
      if (!runs_.empty() && runs_.back().offset + runs_.back().bytes.size() == offset &&
          runs_.back().bytes.size() < max_run_) {
        runs_.back().bytes.append(p);
      } else {
        runs_.push_back(Run{offset, {}});
        if (runs_.size() == 1) StartBatch(runs_.back().bytes, p.size());
        runs_.back().bytes.append(p);
      }
      bytes_ += p.size();
      offset += p.size();
    }
    return offset;
  }
  bool Overlaps(uint64_t offset, uint64_t len) const {
    for (const Run& r : runs_) {
      if (r.offset < offset + len && offset < r.offset + r.bytes.size()) return true;
    }
    return false;
  }
  // The runs, leaving none.
  std::vector<Run> Take() {
    bytes_ = 0;
    return std::exchange(runs_, {});
  }
  bool empty() const { return runs_.empty(); }
  size_t bytes() const { return bytes_; }

  // Keeps `b`, whose write completed, for a later batch: one that can
  // hold a whole batch, while fewer than `spares` are kept.
  void Recycle(std::string&& b) {
    if (b.capacity() < batch_ || spares_.size() >= max_spares_) return;
    b.clear();
    spares_.push_back(std::move(b));
  }
  // Frees the buffers kept (a file that stopped writing for now).
  void DropSpares() { spares_.clear(); }
  size_t spares() const { return spares_.size(); }

 private:
  void StartBatch(std::string& b, size_t first) {
    if (!spares_.empty()) {
      b = std::move(spares_.back());
      spares_.pop_back();
    } else if (first >= batch_ / 8) {
      b.reserve(std::max(first, batch_));
    }
  }

  const size_t batch_;
  const size_t max_run_;
  const size_t max_spares_;
  std::vector<Run> runs_;
  size_t bytes_ = 0;
  std::vector<std::string> spares_;
};

// "D/NAME" for path ROOT/D/NAME where D is one of `dirs` and NAME holds no
// '/' and no '@' (kept for the names of an object's other objects); "" for
// every other path. `root` has no trailing '/'.
inline std::string StoreObjectName(const std::string& root, const std::vector<std::string>& dirs,
                                   const std::string& path) {
  if (path.size() <= root.size() + 1 || path.compare(0, root.size(), root) != 0 ||
      path[root.size()] != '/') {
    return "";
  }
  const std::string rel = path.substr(root.size() + 1);
  const size_t slash = rel.find('/');
  if (slash == std::string::npos || slash + 1 == rel.size()) return "";
  if (std::find(dirs.begin(), dirs.end(), rel.substr(0, slash)) == dirs.end()) return "";
  if (rel.find('/', slash + 1) != std::string::npos || rel.find('@') != std::string::npos) {
    return "";
  }
  return rel;
}

}  // namespace ckptfs::io
