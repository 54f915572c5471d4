// fsck: the check and repair of a store that is not open (`ckptfs fsck`).
// A room above the store: it reads the index and the segment files itself,
// and opens the store (Store::Open) only to bring a restored index forward.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/env.h"

namespace ckptfs::engine {

struct FsckOptions {
  // Fix what can be fixed (see Fsck). Default: false (report only).
  bool repair = false;
  // Skip the payload checksums (headers, lengths and the index are still
  // checked). Default: false.
  bool quick = false;
  // Called now and then with segment bytes checked so far and the total; from
  // fsck's worker threads, one call at a time.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Where the segment files are read. Default: nullptr, io::Env::Posix().
  std::shared_ptr<io::Env> env;
  // With repair: first replace the index with its newest backup
  // (STORE/backup/), keeping the one it replaces as STORE/index.replaced-TIME.
  // Default: false.
  bool from_backup = false;
};

// One problem fsck found. `kind` is a stable snake_case name (see
// engine/fsck/checker.h for the list); `path` names the affected file when there is
// one ("" otherwise), rebuilt from the directory entries.
struct FsckFinding {
  std::string kind;
  std::string path;
  uint64_t ino = 0;
  uint64_t segment_id = 0;
  uint64_t offset = 0;  // byte range: in the file for data findings, else in the segment
  uint64_t length = 0;
  std::string detail;
  bool repaired = false;
  // Informational findings (dead space, gaps left by a crash, pending
  // orphans) are normal in a healthy store and do not make it unclean.
  bool informational = false;
};

struct FsckReport {
  std::vector<FsckFinding> findings;
  std::map<std::string, uint64_t> counts;  // findings by kind
  uint64_t files_checked = 0;    // non-directory inodes
  uint64_t dirs_checked = 0;
  uint64_t records_checked = 0;  // segment records walked
  uint64_t bytes_checked = 0;    // segment bytes walked (payloads read unless quick)
  std::vector<std::string> lost_files;  // paths of files that lost data
  uint64_t errors() const;          // non-informational findings
  uint64_t errors_left() const;     // ... of those, not repaired
  // No error findings (informational ones allowed).
  bool clean() const { return errors() == 0; }
};

// Checks a store that is not open: every index entry, every segment record
// and the namespace. Takes the store's lock (EBUSY with a StoreHolder
// payload when it is mounted). With `repair`, fixes segment counters and
// link counts, drops entries that point at missing inodes and extents that
// point at missing or corrupt data (the file keeps its size; the range
// reads as a hole and the file is listed in lost_files), and moves
// orphaned inodes under /lost+found. A non-OK result means fsck could not run.
Result<FsckReport> Fsck(const std::string& dir, const FsckOptions& options);

}  // namespace ckptfs::engine
