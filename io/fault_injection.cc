#include "io/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

namespace ckptfs::io {

// A segment file of the FaultInjectionEnv.
class FaultFile final : public File {
 public:
  FaultFile(std::shared_ptr<FaultInjectionEnv> env, std::unique_ptr<File> base)
      : File(base->path()), env_(std::move(env)), base_(std::move(base)) {}

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
    Result<size_t> n = base_->ReadAt(offset, len, buf);
    env_->AfterRead(path(), offset);
    return n;
  }
  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    if (env_->cut()) return Status::OK();  // never reaches the disk
    bool torn = false;
    Status s = env_->BeforeWrite(path(), &torn);
    uint64_t total = 0;
    for (std::string_view p : pieces) total += p.size();
    if (!s.ok() && torn) {
      // The first half of the bytes reach the file; the write still fails.
      std::string all;
      for (std::string_view p : pieces) all.append(p);
      const std::string_view half[] = {std::string_view(all).substr(0, all.size() / 2)};
      if (base_->WriteAt(offset, half).ok()) env_->RecordWrite(path(), offset, half[0].size());
    }
    if (!s.ok()) return s;
    CKPTFS_RETURN_IF_ERROR(base_->WriteAt(offset, pieces));
    env_->RecordWrite(path(), offset, total);
    return Status::OK();
  }
  Status Sync() override {
    ReaderMutexLock cut(&env_->cut_mu_);
    CKPTFS_RETURN_IF_ERROR(env_->BeforeSync(path(), /*segment=*/true));
    if (env_->cut()) return Status::OK();  // nothing is durable after the cut
    const size_t n = env_->PendingWrites(path());
    CKPTFS_RETURN_IF_ERROR(base_->Sync());
    env_->MarkSynced(path(), n);
    return Status::OK();
  }
  Result<uint64_t> Size() const override { return base_->Size(); }
  Result<int64_t> ModifiedNs() const override {
    CKPTFS_ASSIGN_OR_RETURN(const int64_t ns, base_->ModifiedNs());
    const int64_t step = env_->timestamp_step_.load();
    return step == 0 ? ns : ns - ns % step;
  }
  Status Truncate(uint64_t size) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    if (env_->cut()) return Status::OK();  // never reaches the disk
    CKPTFS_RETURN_IF_ERROR(base_->Truncate(size));
    env_->Truncated(path(), size);
    return Status::OK();
  }
  void Prefetch(uint64_t offset, uint64_t len) const override { base_->Prefetch(offset, len); }
  void Evict(uint64_t offset, uint64_t len) const override { base_->Evict(offset, len); }
  void NoReadahead() const override { base_->NoReadahead(); }
  Status Refresh() const override { return base_->Refresh(); }

 private:
  const std::shared_ptr<FaultInjectionEnv> env_;
  const std::unique_ptr<File> base_;
};

// The index's file operations (IndexFileHooks), tracked as the store's
// files' are: what a power cut would drop of them.
class FaultIndexFiles final : public IndexFileHooks {
 public:
  explicit FaultIndexFiles(std::shared_ptr<FaultInjectionEnv> env) : env_(std::move(env)) {}

  void Opened(const std::string& path, uint64_t size) override {
    env_->Track(path, size, /*index=*/true);
    if (env_->cut()) env_->CreatedAfterCut(path);
  }
  Status Append(const std::string& path, uint64_t offset, uint64_t length, const Op& op) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    CKPTFS_RETURN_IF_ERROR(op());
    env_->RecordWrite(path, offset, length);
    return Status::OK();
  }
  Status Truncate(const std::string& path, uint64_t size, const Op& op) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    if (env_->cut()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(op());
    env_->Truncated(path, size);
    return Status::OK();
  }
  Status Sync(const std::string& path, const Op& op) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    CKPTFS_RETURN_IF_ERROR(env_->BeforeSync(path, /*segment=*/false));
    if (env_->cut()) return Status::OK();
    const size_t n = env_->PendingWrites(path);
    CKPTFS_RETURN_IF_ERROR(op());
    env_->MarkSynced(path, n);
    return Status::OK();
  }
  Status Delete(const std::string& path, const Op& op) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    if (env_->cut()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(op());
    env_->Forget(path);
    return Status::OK();
  }
  Status Rename(const std::string& from, const std::string& to, const Op& op) override {
    ReaderMutexLock cut(&env_->cut_mu_);
    if (env_->cut()) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(op());
    env_->Renamed(from, to);
    return Status::OK();
  }

 private:
  const std::shared_ptr<FaultInjectionEnv> env_;
};

FaultInjectionEnv::FaultInjectionEnv() : base_(Env::Posix()) {}

std::shared_ptr<FaultInjectionEnv> FaultInjectionEnv::Make() {
  return std::shared_ptr<FaultInjectionEnv>(new FaultInjectionEnv());
}

void FaultInjectionEnv::FailWrite(uint64_t n, bool torn) {
  fail_write_torn_ = torn;
  fail_write_at_ = writes_.load() + n;
}

void FaultInjectionEnv::FailSync(uint64_t n) { fail_sync_at_ = syncs_.load() + n; }

void FaultInjectionEnv::SetReadHook(ReadHook hook) {
  std::shared_ptr<const ReadHook> h = hook ? std::make_shared<const ReadHook>(std::move(hook)) : nullptr;
  MutexLock l(&mu_);
  read_hook_ = std::move(h);
}

void FaultInjectionEnv::AfterRead(const std::string& path, uint64_t offset) {
  std::shared_ptr<const ReadHook> hook;
  {
    MutexLock l(&mu_);
    hook = read_hook_;
  }
  if (hook) (*hook)(path, offset);
}

Status FaultInjectionEnv::BeforeWrite(const std::string& path, bool* torn) {
  *torn = false;
  if (cut_) return Status::OK();
  const uint64_t n = ++writes_;
  if (n == fail_write_at_.load()) {
    *torn = fail_write_torn_.load();
    return Status(EIO, "write " + path + ": injected failure");
  }
  return Status::OK();
}

Status FaultInjectionEnv::BeforeSync(const std::string& path, bool segment) {
  if (cut_) return Status::OK();
  if (segment && ++syncs_ == fail_sync_at_.load()) {
    return Status(EIO, "fdatasync " + path + ": injected failure");
  }
  return Status::OK();
}

void FaultInjectionEnv::Track(const std::string& path, uint64_t size, bool index) {
  MutexLock l(&mu_);
  Unsynced& u = files_[path];
  u = Unsynced{};
  u.size = u.synced_size = size;
  u.index = index;
}

void FaultInjectionEnv::RecordWrite(const std::string& path, uint64_t offset, uint64_t length) {
  MutexLock l(&mu_);
  Unsynced& u = files_[path];
  u.writes.emplace_back(offset, length);
  u.size = std::max(u.size, offset + length);
}

size_t FaultInjectionEnv::PendingWrites(const std::string& path) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second.writes.size();
}

void FaultInjectionEnv::MarkSynced(const std::string& path, size_t n) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  Unsynced& u = it->second;
  n = std::min(n, u.writes.size());
  for (size_t i = 0; i < n; ++i) {
    u.synced_size = std::max(u.synced_size, u.writes[i].first + u.writes[i].second);
  }
  u.writes.erase(u.writes.begin(), u.writes.begin() + static_cast<ptrdiff_t>(n));
}

void FaultInjectionEnv::Truncated(const std::string& path, uint64_t size) {
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  Unsynced& u = it->second;
  u.size = std::min(u.size, size);
  u.synced_size = std::min(u.synced_size, size);
}

void FaultInjectionEnv::Forget(const std::string& path) {
  MutexLock l(&mu_);
  files_.erase(path);
  unsynced_names_.erase(path);
}

void FaultInjectionEnv::Renamed(const std::string& from, const std::string& to) {
  MutexLock l(&mu_);
  auto it = files_.find(from);
  if (it == files_.end()) {
    files_.erase(to);
    return;
  }
  Unsynced u = std::move(it->second);
  files_.erase(it);
  files_[to] = std::move(u);
}

Status FaultInjectionEnv::Drop(const std::string& path, const Unsynced& u, uint64_t* dropped) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::OK() : Status::IOError(errno, "open " + path);
  Status s;
  // Writes inside the synced size landed in a stretch that was a hole when
  // it was synced: it reads as zeros again.
  for (const auto& [offset, length] : u.writes) {
    if (offset >= u.synced_size) continue;
    const std::string zeros(std::min(length, u.synced_size - offset), '\0');
    if (::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(zeros.size())) {
      s = Status::IOError(errno, "write " + path);
    }
    *dropped += zeros.size();
  }
  if (u.size > u.synced_size) *dropped += u.size - u.synced_size;
  if (s.ok() && ::ftruncate(fd, static_cast<off_t>(u.synced_size)) != 0) {
    s = Status::IOError(errno, "truncate " + path);
  }
  ::close(fd);
  return s;
}

void FaultInjectionEnv::PowerCut() {
  WriterMutexLock cut(&cut_mu_);
  cut_ = true;
  MutexLock l(&mu_);
  for (auto& [path, u] : files_) u.size_at_cut = u.size;
}

void FaultInjectionEnv::CreatedAfterCut(const std::string& path) {
  MutexLock l(&mu_);
  created_after_cut_.push_back(path);
}

Result<uint64_t> FaultInjectionEnv::Restore(IndexTail index_tail) {
  WriterMutexLock cut(&cut_mu_);
  MutexLock l(&mu_);
  uint64_t dropped = 0;
  for (const std::string& path : created_after_cut_) unsynced_names_.insert(path);
  created_after_cut_.clear();
  for (const std::string& path : unsynced_names_) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::IOError(errno, "delete " + path);
    files_.erase(path);
  }
  unsynced_names_.clear();
  for (auto& [path, u] : files_) {
    if (u.index && index_tail == IndexTail::kWritten) {
      // What the index appended before the cut reached the disk; what it
      // appended after did not.
      u.writes.clear();
      u.synced_size = std::max(u.synced_size, std::min(u.size, u.size_at_cut));
    }
    CKPTFS_RETURN_IF_ERROR(Drop(path, u, &dropped));
  }
  for (auto& [path, u] : files_) {
    u.size = u.synced_size;
    u.writes.clear();
  }
  cut_ = false;
  return dropped;
}

Result<std::unique_ptr<File>> FaultInjectionEnv::Open(const std::string& path, OpenMode mode) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->Open(path, mode));
  if (mode == OpenMode::kRead) return f;
  {
    MutexLock l(&mu_);
    if (files_.find(path) == files_.end()) {
      CKPTFS_ASSIGN_OR_RETURN(uint64_t size, f->Size());
      files_[path].size = files_[path].synced_size = size;
    }
  }
  return std::unique_ptr<File>(new FaultFile(shared_from_this(), std::move(f)));
}

Result<std::unique_ptr<File>> FaultInjectionEnv::Create(const std::string& path,
                                                        std::string_view contents) {
  ReaderMutexLock cut(&cut_mu_);
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->Create(path, contents));
  Track(path, contents.size());
  if (cut_) CreatedAfterCut(path);
  return std::unique_ptr<File>(new FaultFile(shared_from_this(), std::move(f)));
}

Result<std::unique_ptr<File>> FaultInjectionEnv::CreateUnsynced(const std::string& path) {
  ReaderMutexLock cut(&cut_mu_);
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->CreateUnsynced(path));
  Track(path, 0);
  if (cut_) {
    CreatedAfterCut(path);
  } else {
    MutexLock l(&mu_);
    unsynced_names_.insert(path);
  }
  return std::unique_ptr<File>(new FaultFile(shared_from_this(), std::move(f)));
}

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  ReaderMutexLock cut(&cut_mu_);
  if (cut_) return Status::OK();  // not performed
  CKPTFS_RETURN_IF_ERROR(base_->SyncDir(dir));
  MutexLock l(&mu_);
  const std::string prefix = dir + "/";
  for (auto it = unsynced_names_.lower_bound(prefix);
       it != unsynced_names_.end() && it->compare(0, prefix.size(), prefix) == 0;) {
    // Only the directory's own entries, not those of its subdirectories.
    if (it->find('/', prefix.size()) == std::string::npos) {
      it = unsynced_names_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::OK();
}

Status FaultInjectionEnv::Remove(const std::string& path) {
  ReaderMutexLock cut(&cut_mu_);
  if (cut_) return Status::OK();  // the deletion never reaches the disk
  CKPTFS_RETURN_IF_ERROR(base_->Remove(path));
  Forget(path);
  return Status::OK();
}

Result<std::vector<std::string>> FaultInjectionEnv::List(const std::string& dir) {
  return base_->List(dir);
}

std::shared_ptr<IndexFileHooks> FaultInjectionEnv::IndexFiles() {
  // A new one each time (its state is this env's): the env keeping one
  // would be a reference cycle, as the hooks keep the env.
  return std::make_shared<FaultIndexFiles>(shared_from_this());
}

}  // namespace ckptfs::io
