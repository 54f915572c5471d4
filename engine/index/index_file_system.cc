#include "engine/index/index_file_system.h"

#include <rocksdb/file_system.h>

#include <string>
#include <utility>

namespace ckptfs::engine {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// Runs RocksDB's operation `fn` as the `op` of hook `hook`: the operation's
// own status when it ran and failed, else the hook's.
template <typename Hook, typename Fn>
IOStatus Through(Hook&& hook, Fn&& fn) {
  IOStatus result;
  bool failed = false;
  const Status s = hook([&]() -> Status {
    result = fn();
    failed = !result.ok();
    return failed ? Status(EIO, result.ToString()) : Status::OK();
  });
  if (failed) return result;
  return s.ok() ? IOStatus::OK() : IOStatus::IOError(s.ToString());
}

// A file RocksDB appends to (log, table, manifest), through the hooks.
class HookedFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  HookedFile(std::shared_ptr<io::IndexFileHooks> hooks, std::string path, uint64_t size,
             std::unique_ptr<rocksdb::FSWritableFile> base)
      : FSWritableFileOwnerWrapper(std::move(base)),
        hooks_(std::move(hooks)),
        path_(std::move(path)),
        offset_(size) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    return Write(data, [&] { return target()->Append(data, o, dbg); });
  }
  IOStatus Append(const Slice& data, const IOOptions& o,
                  const rocksdb::DataVerificationInfo& info, IODebugContext* dbg) override {
    return Write(data, [&] { return target()->Append(data, o, info, dbg); });
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::NotSupported("positioned appends");
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&,
                            const rocksdb::DataVerificationInfo&, IODebugContext*) override {
    return IOStatus::NotSupported("positioned appends");
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* dbg) override {
    return Through([&](const io::IndexFileHooks::Op& op) { return hooks_->Truncate(path_, size, op); },
                   [&] { return target()->Truncate(size, o, dbg); });
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override {
    return DoSync([&] { return target()->Sync(o, dbg); });
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    return DoSync([&] { return target()->Fsync(o, dbg); });
  }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();  // a hint; durability comes from Sync
  }

 private:
  // RocksDB appends to one file from one thread at a time.
  template <typename Fn>
  IOStatus Write(const Slice& data, Fn&& fn) {
    IOStatus s = Through(
        [&](const io::IndexFileHooks::Op& op) {
          return hooks_->Append(path_, offset_, data.size(), op);
        },
        fn);
    if (s.ok()) offset_ += data.size();
    return s;
  }
  template <typename Fn>
  IOStatus DoSync(Fn&& fn) {
    return Through([&](const io::IndexFileHooks::Op& op) { return hooks_->Sync(path_, op); }, fn);
  }

  const std::shared_ptr<io::IndexFileHooks> hooks_;
  const std::string path_;
  uint64_t offset_;
};

// RocksDB's default filesystem, with the index's file operations passed
// through the hooks.
class HookedFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit HookedFileSystem(std::shared_ptr<io::IndexFileHooks> hooks)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), hooks_(std::move(hooks)) {}
  const char* Name() const override { return "CkptfsIndexFileSystem"; }

  IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                           std::unique_ptr<rocksdb::FSWritableFile>* r,
                           IODebugContext* dbg) override {
    return Wrap(f, 0, target()->NewWritableFile(f, fo, r, dbg), r);
  }
  IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                              std::unique_ptr<rocksdb::FSWritableFile>* r,
                              IODebugContext* dbg) override {
    // The bytes already there are durable; a missing file is created empty.
    uint64_t size = 0;
    IOStatus st = target()->GetFileSize(f, IOOptions(), &size, dbg);
    if (st.IsNotFound() || st.IsPathNotFound()) {
      size = 0;
    } else if (!st.ok()) {
      return st;
    }
    return Wrap(f, size, target()->ReopenWritableFile(f, fo, r, dbg), r);
  }
  IOStatus ReuseWritableFile(const std::string&, const std::string&, const rocksdb::FileOptions&,
                             std::unique_ptr<rocksdb::FSWritableFile>*, IODebugContext*) override {
    return IOStatus::NotSupported("recycled log files");
  }
  IOStatus NewRandomRWFile(const std::string&, const rocksdb::FileOptions&,
                           std::unique_ptr<rocksdb::FSRandomRWFile>*, IODebugContext*) override {
    return IOStatus::NotSupported("random read-write files");
  }
  IOStatus DeleteFile(const std::string& f, const IOOptions& o, IODebugContext* dbg) override {
    return Through([&](const io::IndexFileHooks::Op& op) { return hooks_->Delete(f, op); },
                   [&] { return target()->DeleteFile(f, o, dbg); });
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions& o,
                      IODebugContext* dbg) override {
    return Through([&](const io::IndexFileHooks::Op& op) { return hooks_->Rename(from, to, op); },
                   [&] { return target()->RenameFile(from, to, o, dbg); });
  }

 private:
  IOStatus Wrap(const std::string& f, uint64_t size, IOStatus s,
                std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (!s.ok()) return s;
    hooks_->Opened(f, size);
    *r = std::make_unique<HookedFile>(hooks_, f, size, std::move(*r));
    return s;
  }

  const std::shared_ptr<io::IndexFileHooks> hooks_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewIndexEnv(io::Env* env) {
  std::shared_ptr<io::IndexFileHooks> hooks = env->IndexFiles();
  if (hooks == nullptr) return nullptr;
  return rocksdb::NewCompositeEnv(std::make_shared<HookedFileSystem>(std::move(hooks)));
}

}  // namespace ckptfs::engine
