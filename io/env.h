// io/: the files a store keeps its data in (segment files, data files and,
// through IndexFileHooks, the index's), behind one
// small interface, so that the engine, fsck and the GPU loader never call
// pread/pwrite/fdatasync on a path themselves. The POSIX implementation is
// the default; tests use FaultInjectionEnv (io/fault_injection.h), and other
// backends (an object store, a shared filesystem) plug in here.
//
// Thread safety: an Env and every File it returns may be used from any number
// of threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ckptfs::io {

// One open file of a store.
class File {
 public:
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Reads up to `len` bytes at `offset` into `buf`; fewer only at the end of
  // the file.
  virtual Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const = 0;
  // Writes `pieces` one after the other starting at `offset`, all of them or
  // an error (a failed write may have written part of them).
  // REQUIRES: the file was opened for writing.
  virtual Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) = 0;
  // Writes `data` at `offset` as WriteAt does, for bytes that will not be
  // read back through this file soon (another cache holds them): where the
  // backend can, they bypass its cache. The POSIX Env writes the blocks that
  // the filesystem's direct I/O alignment allows with O_DIRECT and the ragged
  // ends through the page cache, so that the bytes cost no copy into the
  // OS's cache and take no memory there. Durable as WriteAt's: after Sync().
  // The default is WriteAt.
  // REQUIRES: the file was opened for writing.
  virtual Status WriteUncachedAt(uint64_t offset, std::string_view data);
  // Makes every byte written before the call durable (fdatasync).
  virtual Status Sync() = 0;
  // The file's size now.
  virtual Result<uint64_t> Size() const = 0;
  // When the file's bytes last changed (st_mtime), in nanoseconds since the
  // epoch: with Size(), tells whether another writer of the file wrote since
  // the last look.
  virtual Result<int64_t> ModifiedNs() const = 0;
  // Cuts or extends the file to `size` bytes (ftruncate).
  // REQUIRES: the file was opened for writing.
  virtual Status Truncate(uint64_t size) = 0;
  // Asks for [offset, offset+len) to be read ahead in the background. A hint:
  // nothing happens where a backend cannot.
  virtual void Prefetch(uint64_t offset, uint64_t len) const {}
  // Says that [offset, offset+len) will not be read again soon: a cache of
  // the backend may drop it. A hint, as Prefetch.
  virtual void Evict(uint64_t offset, uint64_t len) const {}
  // Evict of every page that [offset, offset+len) touches, the partly
  // covered ones at its ends too: after a read through the backend's cache,
  // it leaves none of the read's pages there.
  void EvictPagesOf(uint64_t offset, uint64_t len) const;
  // Says that reads through the backend's cache will not go on where the
  // last one ended: it reads no more than asked (POSIX_FADV_RANDOM, no
  // readahead). A hint, as Prefetch.
  virtual void NoReadahead() const {}
  // Reads exactly `len` bytes; a file that ends first is corruption.
  Status ReadExactly(uint64_t offset, size_t len, char* buf) const;
  // Makes this file show what other writers (other hosts of a shared
  // filesystem) made visible since it was opened: a client that keeps the
  // attributes of an open file (NFS between acregmin and acregmax, sshfs for
  // its cache timeout) reads no further than the size it holds. The POSIX
  // Env opens the path again (close-to-open: the open asks the server),
  // asks for the size afresh (statx AT_STATX_FORCE_SYNC) and reads through
  // that open from then on. The default does nothing.
  virtual Status Refresh() const { return Status::OK(); }

  const std::string& path() const { return path_; }

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}

 private:
  const std::string path_;
};

enum class OpenMode { kRead, kReadWrite };

// The files of the store's index, which the index's library (RocksDB)
// writes itself rather than through File: engine/index/index_file_system.h
// passes each of its file operations through these hooks, so that an Env
// can see them too. Each hook runs `op`, the operation itself, at most once
// and returns its status; it may skip it (and return OK, or an error of
// its own).
class IndexFileHooks {
 public:
  using Op = std::function<Status()>;
  virtual ~IndexFileHooks() = default;
  // `path` was created, or opened to append to; its first `size` bytes are
  // durable.
  virtual void Opened(const std::string& path, uint64_t size) = 0;
  // `op` writes `length` bytes at `offset` of `path`.
  virtual Status Append(const std::string& path, uint64_t offset, uint64_t length,
                        const Op& op) = 0;
  // `op` cuts `path` to `size` bytes.
  virtual Status Truncate(const std::string& path, uint64_t size, const Op& op) = 0;
  // `op` makes what was written to `path` durable.
  virtual Status Sync(const std::string& path, const Op& op) = 0;
  // `op` deletes `path`, or renames `from` to `to`.
  virtual Status Delete(const std::string& path, const Op& op) = 0;
  virtual Status Rename(const std::string& from, const std::string& to, const Op& op) = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // Opens an existing file. ENOENT when it is missing. The POSIX Env asks
  // for its size afresh (statx AT_STATX_FORCE_SYNC), so that a network
  // filesystem's client reads as far as the server's file goes.
  virtual Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) = 0;
  // Creates `path` holding `contents`, durably and atomically: the name
  // appears only once the contents and the directory entry are on disk, so a
  // crash leaves either no file or the whole of `contents`. The file is open
  // for reading and writing. EEXIST when `path` exists. Leaves at most a
  // "PATH.tmp" behind on a crash; RemoveLeftovers() deletes those.
  virtual Result<std::unique_ptr<File>> Create(const std::string& path,
                                               std::string_view contents) = 0;
  // Creates `path` empty, open for reading and writing, at the cost of an
  // open(2): not durable, the name may vanish in a crash until SyncDir() of
  // its directory returns (and the bytes until File::Sync()). EEXIST when
  // `path` exists.
  virtual Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) = 0;
  // Makes the names created in directory `dir` so far durable (fsync).
  virtual Status SyncDir(const std::string& dir) = 0;
  // Deletes a file. OK when it does not exist.
  virtual Status Remove(const std::string& path) = 0;
  // The names (not paths) of the entries of directory `dir`.
  virtual Result<std::vector<std::string>> List(const std::string& dir) = 0;
  // Deletes what an interrupted Create() left in `dir`.
  Status RemoveLeftovers(const std::string& dir);

  // The hooks through which the index's own file operations pass
  // (IndexFileHooks); nullptr (the default): the index writes its files
  // without telling the Env. A fault-injecting Env returns hooks that let
  // it drop the index's unsynced bytes together with the segments'.
  virtual std::shared_ptr<IndexFileHooks> IndexFiles() { return nullptr; }

  // The local filesystem through POSIX calls. Shared; never destroyed.
  static std::shared_ptr<Env> Posix();
};

// The suffix of Create()'s temporary names.
inline constexpr std::string_view kTmpSuffix = ".tmp";

}  // namespace ckptfs::io
