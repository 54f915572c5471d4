// HostCacheEnv: for tests, one host's view of a shared filesystem that
// caches what the host writes until it is flushed, as an NFS client does
// (close-to-open: another client sees a file's bytes once the writer
// flushed them, at its close or fsync). Several of these over one directory
// stand for several hosts:
//   - what a File of this Env writes stays in the host's cache, where this
//     Env's own reads find it, until File::Sync() (or a Truncate) writes it
//     to the file;
//   - the other hosts' Envs read only what reached the file;
//   - names (Create, CreateUnsynced, Remove) reach the directory at once,
//     as on NFS, where they are calls to the server;
//   - a File keeps the file's size as of its open (and of its own flushes):
//     it reads nothing that other hosts appended since, until
//     File::Refresh(), as an NFS or sshfs client keeps the attributes of an
//     open file.
// A local directory shares one page cache between all its writers, which
// would hide a store that shows other hosts extents before their bytes.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "io/env.h"

namespace ckptfs::io {

class HostCacheEnv final : public Env, public std::enable_shared_from_this<HostCacheEnv> {
 public:
  static std::shared_ptr<HostCacheEnv> Make();

  // Bytes written through this Env that no Sync has written to their files.
  uint64_t UnflushedBytes();
  // Runs `fault` on the bytes each read returns, before it returns (a
  // fault: it may change them, as a failing disk or link would); an empty
  // function: none.
  using ReadFault =
      std::function<void(const std::string& path, uint64_t offset, char* buf, size_t n)>;
  void SetReadFault(ReadFault fault);

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override;
  Result<std::unique_ptr<File>> Create(const std::string& path, std::string_view contents) override;
  Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Status Remove(const std::string& path) override;
  Result<std::vector<std::string>> List(const std::string& dir) override;

 private:
  friend class HostCachedFile;
  HostCacheEnv() = default;
  Result<std::unique_ptr<File>> Wrap(Result<std::unique_ptr<File>> base);
  // The writes of `path` not yet flushed, in the order made: (offset, bytes).
  using Pending = std::vector<std::pair<uint64_t, std::string>>;
  void AddWrite(const std::string& path, uint64_t offset, std::string bytes);
  // Copies out what `path` has pending.
  Pending PendingOf(const std::string& path);
  // Takes `path`'s pending writes (to flush them).
  Pending TakePending(const std::string& path);

  const std::shared_ptr<Env> base_ = Env::Posix();
  Mutex mu_;  // a leaf lock
  std::map<std::string, Pending> pending_ GUARDED_BY(mu_);
  std::shared_ptr<const ReadFault> read_fault_ GUARDED_BY(mu_);
  std::shared_ptr<const ReadFault> ReadFaultNow();
};

}  // namespace ckptfs::io
