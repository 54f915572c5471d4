#include "io/host_cache_env.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace ckptfs::io {

// A file as one host sees it: its own unflushed writes over the file's bytes.
class HostCachedFile final : public File {
 public:
  HostCachedFile(std::shared_ptr<HostCacheEnv> env, std::unique_ptr<File> base)
      : File(base->path()), env_(std::move(env)), base_(std::move(base)) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, Size());
    if (offset >= size) return size_t{0};
    len = static_cast<size_t>(std::min<uint64_t>(len, size - offset));
    // The file's bytes up to the size this host holds.
    const uint64_t known = seen_size_.load();
    const size_t from_file = offset >= known ? 0 : static_cast<size_t>(std::min<uint64_t>(len, known - offset));
    CKPTFS_ASSIGN_OR_RETURN(size_t n, base_->ReadAt(offset, from_file, buf));
    std::memset(buf + n, 0, len - n);  // past the file's end: the host's own writes
    for (const auto& [at, bytes] : env_->PendingOf(path())) {
      const uint64_t from = std::max(at, offset);
      const uint64_t to = std::min<uint64_t>(at + bytes.size(), offset + len);
      if (from < to) std::memcpy(buf + (from - offset), bytes.data() + (from - at), to - from);
    }
    if (auto fault = env_->ReadFaultNow()) (*fault)(path(), offset, buf, len);
    return len;
  }

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    std::string bytes;
    for (std::string_view p : pieces) bytes.append(p);
    env_->AddWrite(path(), offset, std::move(bytes));
    return Status::OK();
  }

  Status Sync() override {
    CKPTFS_RETURN_IF_ERROR(Flush());
    return base_->Sync();
  }

  Result<uint64_t> Size() const override {
    uint64_t size = seen_size_.load();
    for (const auto& [at, bytes] : env_->PendingOf(path())) {
      size = std::max<uint64_t>(size, at + bytes.size());
    }
    return size;
  }

  Result<int64_t> ModifiedNs() const override { return base_->ModifiedNs(); }

  Status Truncate(uint64_t size) override {
    CKPTFS_RETURN_IF_ERROR(Flush());
    CKPTFS_RETURN_IF_ERROR(base_->Truncate(size));
    return Refresh();
  }

  Status Refresh() const override {
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, base_->Size());
    seen_size_.store(size);
    return Status::OK();
  }

 private:
  // Writes the host's cached writes of the file to it; the host knows the
  // size its own writes made.
  Status Flush() {
    for (const auto& [at, bytes] : env_->TakePending(path())) {
      const std::string_view piece[] = {bytes};
      CKPTFS_RETURN_IF_ERROR(base_->WriteAt(at, piece));
    }
    return Refresh();
  }

  const std::shared_ptr<HostCacheEnv> env_;
  const std::unique_ptr<File> base_;
  // The file's size as the host last asked for it (its open, a Refresh, its
  // own flush): what another host appended since is not read.
  mutable std::atomic<uint64_t> seen_size_{0};
};

std::shared_ptr<HostCacheEnv> HostCacheEnv::Make() {
  return std::shared_ptr<HostCacheEnv>(new HostCacheEnv());
}

uint64_t HostCacheEnv::UnflushedBytes() {
  MutexLock l(&mu_);
  uint64_t n = 0;
  for (const auto& [path, writes] : pending_) {
    for (const auto& w : writes) n += w.second.size();
  }
  return n;
}

Result<std::unique_ptr<File>> HostCacheEnv::Wrap(Result<std::unique_ptr<File>> base) {
  if (!base.ok()) return base.status();
  auto file = std::make_unique<HostCachedFile>(shared_from_this(), std::move(*base));
  CKPTFS_RETURN_IF_ERROR(file->Refresh());  // the open asks for the size
  return std::unique_ptr<File>(std::move(file));
}

Result<std::unique_ptr<File>> HostCacheEnv::Open(const std::string& path, OpenMode mode) {
  return Wrap(base_->Open(path, mode));
}

Result<std::unique_ptr<File>> HostCacheEnv::Create(const std::string& path,
                                                   std::string_view contents) {
  return Wrap(base_->Create(path, contents));
}

Result<std::unique_ptr<File>> HostCacheEnv::CreateUnsynced(const std::string& path) {
  return Wrap(base_->CreateUnsynced(path));
}

Status HostCacheEnv::SyncDir(const std::string& dir) { return base_->SyncDir(dir); }

Status HostCacheEnv::Remove(const std::string& path) {
  {
    MutexLock l(&mu_);
    pending_.erase(path);
  }
  return base_->Remove(path);
}

Result<std::vector<std::string>> HostCacheEnv::List(const std::string& dir) {
  return base_->List(dir);
}

void HostCacheEnv::AddWrite(const std::string& path, uint64_t offset, std::string bytes) {
  MutexLock l(&mu_);
  pending_[path].emplace_back(offset, std::move(bytes));
}

HostCacheEnv::Pending HostCacheEnv::PendingOf(const std::string& path) {
  MutexLock l(&mu_);
  auto it = pending_.find(path);
  return it == pending_.end() ? Pending() : it->second;
}

HostCacheEnv::Pending HostCacheEnv::TakePending(const std::string& path) {
  MutexLock l(&mu_);
  auto it = pending_.find(path);
  if (it == pending_.end()) return {};
  Pending out = std::move(it->second);
  pending_.erase(it);
  return out;
}

void HostCacheEnv::SetReadFault(ReadFault fault) {
  MutexLock l(&mu_);
  read_fault_ = fault ? std::make_shared<const ReadFault>(std::move(fault)) : nullptr;
}

std::shared_ptr<const HostCacheEnv::ReadFault> HostCacheEnv::ReadFaultNow() {
  MutexLock l(&mu_);
  return read_fault_;
}

}  // namespace ckptfs::io
