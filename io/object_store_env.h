// What the object-store Envs (io/rados_env.h, io/s3_env.h) have in common:
// which paths of a store they keep as objects (the files directly inside
// chosen subdirectories of the store's directory, every other path going to
// a local Env), their staging logs (io/staging_log.h) and the requests they
// have sent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
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
