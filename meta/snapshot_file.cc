#include "meta/snapshot_file.h"

#include <rocksdb/cache.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "meta/rocks_kv.h"

namespace ckptfs::meta {
namespace {

// The file's key of `key` in space `s`.
std::string FileKey(Space s, std::string_view key) {
  std::string k;
  k.reserve(1 + key.size());
  k.push_back(static_cast<char>(s));
  k.append(key);
  return k;
}

// The key just past every key of space `s`.
std::string SpaceEnd(Space s) { return std::string(1, static_cast<char>(static_cast<uint8_t>(s) + 1)); }

rocksdb::Slice ToSlice(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }

std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

std::shared_ptr<rocksdb::Cache> BlockCache() {
  static const std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(kSnapshotBlockCacheBytes);
  return cache;
}

// `readers`: for SnapshotFile, whose blocks share BlockCache.
rocksdb::Options FileOptions(bool readers = false) {
  rocksdb::Options o;
  // The inode values of one tree differ in a few bytes (times, sizes),
  // and keys share long prefixes: zstd over 16 KiB blocks.
  o.compression = rocksdb::kZSTD;
  rocksdb::BlockBasedTableOptions t;
  t.block_size = 16 << 10;
  if (readers) t.block_cache = BlockCache();
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

}  // namespace

uint64_t SnapshotBlockCacheBytes() { return BlockCache()->GetUsage(); }

Result<std::string> EncodeSnapshot(std::vector<SnapshotEntry> entries) {
  if (entries.empty()) return Status(EINVAL, "a snapshot of nothing");
  std::sort(entries.begin(), entries.end(), [](const SnapshotEntry& a, const SnapshotEntry& b) {
    return a.space != b.space ? a.space < b.space : a.key < b.key;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].space == entries[i - 1].space && entries[i].key == entries[i - 1].key) {
      return Status(EINVAL, std::string("a snapshot with a key twice in ") + SpaceName(entries[i].space));
    }
  }
  std::string path = (std::filesystem::temp_directory_path() / "ckptfs-snapshot-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return Status::Errno(errno, "create a file under " + path + ": " + std::strerror(errno));
  ::close(fd);
  struct Remove {
    const std::string& path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{path};
  const rocksdb::Options o = FileOptions();
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), o);
  CKPTFS_RETURN_IF_ERROR(FromRocksStatus(writer.Open(path), "create " + path));
  for (const SnapshotEntry& e : entries) {
    CKPTFS_RETURN_IF_ERROR(
        FromRocksStatus(writer.Put(FileKey(e.space, e.key), ToSlice(e.value)), "write " + path));
  }
  rocksdb::ExternalSstFileInfo info;
  CKPTFS_RETURN_IF_ERROR(FromRocksStatus(writer.Finish(&info), "finish " + path));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return Status(EIO, "read back " + path);
  if (bytes.size() != info.file_size) return Status(EIO, "read back " + path + ": short");
  return bytes;
}

SnapshotFile::SnapshotFile(std::string path, std::unique_ptr<rocksdb::Env> env,
                           std::unique_ptr<rocksdb::SstFileReader> reader, uint64_t entries,
                           uint64_t bytes)
    : path_(std::move(path)),
      env_(std::move(env)),
      reader_(std::move(reader)),
      entries_(entries),
      bytes_(bytes) {}

SnapshotFile::~SnapshotFile() = default;

Result<std::unique_ptr<SnapshotFile>> SnapshotFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Errno(errno, "open snapshot " + path + ": " + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Status::Errno(e, "read snapshot " + path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return FromBytes(path, std::move(bytes));
}

Result<std::unique_ptr<SnapshotFile>> SnapshotFile::FromBytes(std::string name, std::string bytes) {
  std::unique_ptr<rocksdb::Env> env(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  const std::string file = "/snapshot.sst";
  const uint64_t size = bytes.size();
  CKPTFS_RETURN_IF_ERROR(
      FromRocksStatus(rocksdb::WriteStringToFile(env.get(), bytes, file), "hold snapshot " + name));
  bytes = std::string();  // the Env holds its copy
  rocksdb::Options o = FileOptions(/*readers=*/true);
  o.env = env.get();
  auto reader = std::make_unique<rocksdb::SstFileReader>(o);
  CKPTFS_RETURN_IF_ERROR(FromRocksStatus(reader->Open(file), "open snapshot " + name));
  CKPTFS_RETURN_IF_ERROR(FromRocksStatus(reader->VerifyChecksum(), "snapshot " + name));
  std::shared_ptr<const rocksdb::TableProperties> props = reader->GetTableProperties();
  const uint64_t entries = props != nullptr ? props->num_entries : 0;
  return std::unique_ptr<SnapshotFile>(
      new SnapshotFile(std::move(name), std::move(env), std::move(reader), entries, size));
}

Result<std::optional<std::string>> SnapshotFile::Get(Space s, std::string_view key) {
  const std::string k = FileKey(s, key);
  std::unique_ptr<rocksdb::Iterator> it(reader_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(k);
  if (it->Valid() && it->key() == rocksdb::Slice(k)) {
    return std::optional<std::string>(it->value().ToString());
  }
  CKPTFS_RETURN_IF_ERROR(FromRocksStatus(it->status(), "read snapshot " + path_));
  return std::optional<std::string>();
}

Status SnapshotFile::Scan(Space s, std::string_view begin, std::string_view end,
                          const ScanFn& fn) {
  const std::string lower = FileKey(s, begin);
  const std::string upper = end.empty() ? SpaceEnd(s) : FileKey(s, end);
  const rocksdb::Slice bound(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &bound;
  std::unique_ptr<rocksdb::Iterator> it(reader_->NewIterator(ro));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    if (!fn(ToView(it->key()).substr(1), ToView(it->value()))) break;
  }
  return FromRocksStatus(it->status(), "scan snapshot " + path_);
}

Result<std::optional<KeyValue>> SnapshotFile::Last(Space s, std::string_view begin,
                                                   std::string_view end) {
  const std::string lower = FileKey(s, begin);
  const std::string upper = end.empty() ? SpaceEnd(s) : FileKey(s, end);
  std::unique_ptr<rocksdb::Iterator> it(reader_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(upper);
  // SeekForPrev lands on `upper` itself when it exists; the range ends before it.
  if (it->Valid() && it->key() == rocksdb::Slice(upper)) it->Prev();
  if (!it->Valid() || it->key().compare(rocksdb::Slice(lower)) < 0) {
    CKPTFS_RETURN_IF_ERROR(FromRocksStatus(it->status(), "scan snapshot " + path_));
    return std::optional<KeyValue>();
  }
  return std::optional<KeyValue>(
      KeyValue{std::string(ToView(it->key()).substr(1)), it->value().ToString()});
}

}  // namespace ckptfs::meta
