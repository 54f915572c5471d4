// A snapshot file: the index entries of a sealed tree (format/'s keys and
// values), written once and never changed, read with no database. An SST
// (RocksDB's table format: sorted, in zstd blocks with checksums), whose keys
// are each entry's key behind the one byte of its space (meta::Space).
//
// SnapshotFile serves it as a read-only transaction of the index seam: the
// reads a store makes of a sealed tree go to it as they would go to the
// index.
//
// A snapshot is read from memory: its file's bytes are read once, when it
// opens.
//
// Thread safety: a SnapshotFile may be read from any number of threads at
// once (each read takes an iterator of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "meta/kv.h"

namespace rocksdb {
class Env;
class SstFileReader;
}

namespace ckptfs::meta {

struct SnapshotEntry {
  Space space = Space::kMeta;
  std::string key;
  std::string value;
};

// The bytes of a snapshot file of `entries` (in any order; no (space, key)
// twice), for the caller to write where it keeps its files (io::Env::
// Create). Built in a file of its own under the system's temporary
// directory, deleted before it returns. EINVAL for an entry given twice or
// no entry at all.
Result<std::string> EncodeSnapshot(std::vector<SnapshotEntry> entries);

// The memory every open snapshot's uncompressed blocks share (an LRU
// cache); a snapshot's file bytes are held beside it (SnapshotFile::bytes).
inline constexpr uint64_t kSnapshotBlockCacheBytes = 16ull << 20;
// What that cache holds now.
uint64_t SnapshotBlockCacheBytes();

class SnapshotFile final : public ReadTxn {
 public:
  // Reads the file at `path` into memory and opens it (FromBytes).
  static Result<std::unique_ptr<SnapshotFile>> Open(const std::string& path);
  // Opens the snapshot whose file holds `bytes`, which it keeps in memory:
  // no read touches a file. Checks every block's checksum; a corruption
  // names `name`.
  static Result<std::unique_ptr<SnapshotFile>> FromBytes(std::string name, std::string bytes);
  ~SnapshotFile() override;

  Result<std::optional<std::string>> Get(Space s, std::string_view key) override;
  Status Scan(Space s, std::string_view begin, std::string_view end, const ScanFn& fn) override;
  Result<std::optional<KeyValue>> Last(Space s, std::string_view begin,
                                       std::string_view end) override;

  // The entries it holds, and the file's size.
  uint64_t entries() const { return entries_; }
  uint64_t bytes() const { return bytes_; }

 private:
  SnapshotFile(std::string path, std::unique_ptr<rocksdb::Env> env,
               std::unique_ptr<rocksdb::SstFileReader> reader, uint64_t entries, uint64_t bytes);

  const std::string path_;
  std::unique_ptr<rocksdb::Env> env_;  // in memory: holds the file's bytes
  std::unique_ptr<rocksdb::SstFileReader> reader_;
  const uint64_t entries_;
  const uint64_t bytes_;
};

}  // namespace ckptfs::meta
