// Staging logs: the local record of an open file's writes that an object
// store has not acknowledged yet, so that a process killed before its
// writes reach the store loses no more than a local disk's page cache
// would keep (docs/FORMAT.md, "Staging logs"). Each open file of an
// object-store Env has its own log, STAGING/NAME (NAME: the object's name
// with '#' for '/'), emptied whenever the store has every write of the
// file, removed at close, and sent on by the next process that writes the
// store's files. A log is never synced: a power cut loses what it holds, as
// it loses a local disk's unsynced bytes.
//
// A record: offset (u64), length (u32), checksum (u64, XXH3-64 of the
// first 12 bytes and the data), little-endian; then the data.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/env.h"

namespace ckptfs::io {

inline constexpr size_t kStagedHeaderBytes = 20;
// A log this long makes its file wait for the object store.
inline constexpr uint64_t kStagingLimit = 64ull << 20;

// The record of `data` written at `offset`.
std::string StagedRecord(uint64_t offset, std::string_view data);

// The log's name of an object, and back.
std::string StagingName(std::string_view object);
std::string ObjectOfStagingName(std::string_view name);

// The log of one open file. Not thread-safe: its file's mutex guards it.
class StagingLog {
 public:
  explicit StagingLog(std::string path) : path_(std::move(path)) {}
  StagingLog(const StagingLog&) = delete;
  StagingLog& operator=(const StagingLog&) = delete;

  const std::string& path() const { return path_; }
  uint64_t bytes() const { return end_; }

  // Appends the record of `pieces`, one after the other, written at
  // `offset`. The log is created at the first one.
  Status Append(uint64_t offset, std::span<const std::string_view> pieces);
  // The object store has every write: the log starts again empty.
  void Clear();
  // The file is closed with nothing left to send: the log goes.
  void Remove();

 private:
  const std::string path_;
  std::unique_ptr<File> file_;
  uint64_t end_ = 0;
};

// Calls `write(offset, data)` for each record of the log at `path`, in
// order; a record that is cut short or fails its checksum ends the log
// (a write cut short by the end of its process). Stops at the first error
// of `write`.
Status ReplayStagingLog(const std::string& path,
                        const std::function<Status(uint64_t, std::string_view)>& write);

// The names of the logs in `dir`, sorted; makes `dir` when it is missing.
Result<std::vector<std::string>> ListStagingLogs(const std::string& dir);

}  // namespace ckptfs::io
