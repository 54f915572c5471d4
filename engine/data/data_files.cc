#include "engine/data/data_files.h"

#include <sys/stat.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <span>
#include <thread>

#include "format/format.h"

namespace ckptfs::engine {

Status DataFiles::EnsureDir() {
  const std::string dir = store_dir_ + "/" + format::kDataDirName;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(errno, "create " + dir);
  }
  return Status::OK();
}

std::string DataFiles::Path(uint64_t ino) const {
  return store_dir_ + "/" + format::DataFileName(ino);
}

void DataFiles::Forget(uint64_t ino) {
  auto it = open_.find(ino);
  if (it == open_.end()) return;
  lru_.erase(it->second.pos);
  open_.erase(it);
}

Result<std::shared_ptr<io::File>> DataFiles::Get(uint64_t ino) {
  {
    MutexLock l(&mu_);
    auto it = open_.find(ino);
    if (it != open_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.file;
    }
  }
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f,
                          env_->Open(Path(ino), read_only_ ? io::OpenMode::kRead
                                                           : io::OpenMode::kReadWrite));
  f->NoReadahead();  // ReadAhead instead
  std::shared_ptr<io::File> file(std::move(f));
  MutexLock l(&mu_);
  auto it = open_.find(ino);
  if (it != open_.end()) return it->second.file;  // another thread opened it meanwhile
  lru_.push_front(ino);
  open_[ino] = Open{file, lru_.begin()};
  while (open_.size() > kMaxOpen) {
    // Closes once no read, write or pending sync holds it.
    const uint64_t last = lru_.back();
    lru_.pop_back();
    open_.erase(last);
  }
  return file;
}

DataFiles::~DataFiles() {
  std::thread remover, evictor;
  {
    MutexLock l(&mu_);
    stop_remover_ = true;
    remover.swap(remover_);
    evictor.swap(evictor_);
  }
  removal_cv_.SignalAll();
  if (remover.joinable()) remover.join();
  if (evictor.joinable()) evictor.join();
}

void DataFiles::CancelRemoval(uint64_t ino) {
  remove_queue_.erase(ino);
  for (auto& [ticket, inos] : syncing_) inos.erase(ino);
  removals_.remove(ino);
  evictions_.remove(ino);
  while (removing_ == ino) removal_cv_.Wait(&mu_);
}

Status DataFiles::Create(uint64_t ino) {
  if (read_only_) return Status(EROFS, "read-only store");
  {
    MutexLock l(&mu_);
    CancelRemoval(ino);
    Forget(ino);
    dirty_.erase(ino);
  }
  CKPTFS_RETURN_IF_ERROR(env_->Remove(Path(ino)));
  // Not durable: the index uses the file only once it holds bytes, and
  // those are synced, with the directory, before any commit that uses them
  // (SyncDirty).
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f, env_->CreateUnsynced(Path(ino)));
  std::shared_ptr<io::File> file(std::move(f));
  dir_unsynced_ = true;
  MutexLock l(&mu_);
  lru_.push_front(ino);
  open_[ino] = Open{file, lru_.begin()};
  return Status::OK();
}

Status DataFiles::Write(uint64_t ino, uint64_t offset, std::string_view data) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  bool too_many;
  {
    MutexLock l(&mu_);
    too_many = dirty_.size() >= kMaxDirty && dirty_.count(ino) == 0;
  }
  if (too_many) CKPTFS_RETURN_IF_ERROR(SyncDirty());  // bounds the files held open
  CKPTFS_RETURN_IF_ERROR(bypass_cache_ ? file->WriteUncachedAt(offset, data)
                                       : file->WriteAt(offset, std::span(&data, 1)));
  MutexLock l(&mu_);
  dirty_[ino] = std::move(file);
  return Status::OK();
}

Result<std::shared_ptr<io::File>> DataFiles::GetToRead(uint64_t ino) {
  Result<std::shared_ptr<io::File>> file = Get(ino);
  if (!file.ok() && file.status().code() == ENOENT) {
    return Status::Corruption("data file " + Path(ino) + " is missing");
  }
  return file;
}

void DataFiles::ReadAhead(uint64_t ino, const io::File& file, uint64_t offset, size_t len) {
  const uint64_t end = offset + len;
  uint64_t from = 0, to = 0;
  {
    MutexLock l(&mu_);
    auto it = open_.find(ino);
    if (it == open_.end()) return;
    Open& o = it->second;
    if (offset <= o.read_end && end >= o.read_end) {
      from = std::max(o.ahead_end, end);
      to = end + kReadAheadBytes;
      if (to > from) o.ahead_end = to;
    }
    o.read_end = std::max(o.read_end, end);
    if (to <= from) return;
    Asking& a = asking_[ino];
    a.count++;
    a.from = std::min(a.from, from);
    a.to = std::max(a.to, to);
  }
  file.Prefetch(from, to - from);
  {
    MutexLock l(&mu_);
    auto it = asking_.find(ino);
    if (--it->second.count == 0) asking_.erase(it);
  }
  asked_cv_.SignalAll();
}

void DataFiles::WaitForReadAhead(uint64_t ino, uint64_t offset, uint64_t end) {
  MutexLock l(&mu_);
  for (;;) {
    auto it = asking_.find(ino);
    if (it == asking_.end() || it->second.to <= offset || it->second.from >= end) return;
    asked_cv_.Wait(&mu_);
  }
}

Result<size_t> DataFiles::ReadUpTo(uint64_t ino, uint64_t offset, size_t len, char* buf) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, GetToRead(ino));
  ReadAhead(ino, *file, offset, len);
  return file->ReadAt(offset, len, buf);
}

Result<size_t> DataFiles::ReadOnce(uint64_t ino, uint64_t offset, size_t len, char* buf) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, GetToRead(ino));
  ReadAhead(ino, *file, offset, len);
  // Through the OS's cache, where ReadAhead's pages are (a direct read
  // would wait for the disk each time); the pages go at once: the reply
  // fills the FUSE file's cache.
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, file->ReadAt(offset, len, buf));
  WaitForReadAhead(ino, offset, offset + n);
  file->EvictPagesOf(offset, n);
  return n;
}

void DataFiles::Evict(uint64_t ino, uint64_t offset, uint64_t len) {
  Result<std::shared_ptr<io::File>> file = GetToRead(ino);
  if (file.ok()) (*file)->Evict(offset, len);
}

Status DataFiles::Refresh(uint64_t ino) {
  std::shared_ptr<io::File> file;
  {
    MutexLock l(&mu_);
    auto it = open_.find(ino);
    if (it == open_.end()) return Status::OK();  // the next open asks afresh
    file = it->second.file;
  }
  CKPTFS_RETURN_IF_ERROR(file->Refresh());
  file->NoReadahead();  // a hint of the open it replaced
  return Status::OK();
}

Status DataFiles::Truncate(uint64_t ino, uint64_t size) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  CKPTFS_RETURN_IF_ERROR(file->Truncate(size));
  MutexLock l(&mu_);
  dirty_[ino] = std::move(file);
  return Status::OK();
}

namespace {

// The clock the kernel stamps files with (current_time(): the coarse clock,
// or a finer one on filesystems with fine-grained timestamps).
int64_t CoarseNowNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

Result<DataFiles::Look> DataFiles::LookAt(uint64_t ino) {
  const int64_t step = TimestampStep();
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  // Before the stat: a write after it is stamped no earlier than this.
  const int64_t now = CoarseNowNs();
  Look look;
  CKPTFS_ASSIGN_OR_RETURN(look.size, file->Size());
  CKPTFS_ASSIGN_OR_RETURN(look.modified_ns, file->ModifiedNs());
  // A stamp is the clock rounded down to a step: once the clock is a step
  // past this mtime, no write can be stamped with it again.
  look.settled = step == 0 || (step != kUnknownStep && now - step >= look.modified_ns);
  return look;
}

int64_t DataFiles::TimestampStep() {
  std::call_once(timestamp_probe_, [this] {
    const std::string path = store_dir_ + "/" + format::kDataDirName + "/" + kTimestampProbeName;
    Result<int64_t> step = ProbeTimestampStep(env_.get(), path);
    if (step.ok()) {
      timestamp_step_ = *step;
    } else {
      std::fprintf(stderr, "ckptfs: %s: %s; every adoption of direct writes hashes the data file\n",
                   path.c_str(), step.status().ToString().c_str());
    }
  });
  return timestamp_step_;
}

Result<int64_t> DataFiles::ProbeTimestampStep(io::Env* env, const std::string& path) {
  CKPTFS_RETURN_IF_ERROR(env->Remove(path));  // one a crash left
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> f, env->CreateUnsynced(path));
  Result<int64_t> step = MeasureTimestampStep(f.get());
  f.reset();
  Status removed = env->Remove(path);
  if (!step.ok()) return step;
  CKPTFS_RETURN_IF_ERROR(removed);
  return step;
}

namespace {

// Writes a byte of `f` and returns its mtime after.
Result<int64_t> Touch(io::File* f) {
  const std::string_view byte = "x";
  CKPTFS_RETURN_IF_ERROR(f->WriteAt(0, std::span(&byte, 1)));
  return f->ModifiedNs();
}

}  // namespace

Result<int64_t> DataFiles::MeasureTimestampStep(io::File* f) {
  // Two writes a stat apart that leave the same mtime (in any of three
  // tries): coarse timestamps.
  int64_t first = -1;
  for (int i = 0; i < 3 && first < 0; ++i) {
    CKPTFS_ASSIGN_OR_RETURN(const int64_t before, Touch(f));
    CKPTFS_ASSIGN_OR_RETURN(const int64_t after, Touch(f));
    if (after == before) first = after;
  }
  if (first < 0) return int64_t{0};
  // How far the mtime moves when it first changes: one step.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CKPTFS_ASSIGN_OR_RETURN(const int64_t m, Touch(f));
    if (m != first) return m > first ? m - first : kUnknownStep;
  }
  return kUnknownStep;
}

Result<std::vector<uint64_t>> DataFiles::BlockChecksums(uint64_t ino, uint64_t size,
                                                       uint64_t block) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  std::vector<uint64_t> sums((size + block - 1) / block);
  // A block at a time into a buffer that stays in the CPU's cache: faster
  // than hashing a mapping or larger reads.
  std::atomic<uint64_t> next{0};
  Mutex error_mu;
  Status error;
  auto work = [&] {
    std::string buf(block, '\0');
    for (uint64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < sums.size();) {
      const uint64_t offset = i * block;
      const size_t len = std::min(block, size - offset);
      Status st = file->ReadExactly(offset, len, buf.data());
      if (!st.ok()) {
        MutexLock l(&error_mu);
        error = st;
        return;
      }
      sums[i] = format::Checksum(std::string_view(buf.data(), len));
    }
  };
  const unsigned threads = static_cast<unsigned>(std::min<uint64_t>(
      {kHashThreads, std::max(1u, std::thread::hardware_concurrency()), sums.size()}));
  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < threads; ++i) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  MutexLock l(&error_mu);
  if (!error.ok()) return error;
  return sums;
}

Status DataFiles::MarkWritten(uint64_t ino) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  MutexLock l(&mu_);
  dirty_[ino] = std::move(file);
  return Status::OK();
}

Status DataFiles::SyncOne(uint64_t ino) {
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::File> file, Get(ino));
  Status s = file->Sync();
  MutexLock l(&mu_);
  if (!s.ok() && sync_error_.ok()) sync_error_ = s;
  return s;
}

Status DataFiles::SyncDirty() {
  MutexLock sync(&sync_mu_);
  std::map<uint64_t, std::shared_ptr<io::File>> dirty;
  {
    MutexLock l(&mu_);
    if (!sync_error_.ok()) return sync_error_;
    dirty.swap(dirty_);
  }
  Status s;
  for (auto& [ino, file] : dirty) {
    s = file->Sync();
    if (!s.ok()) break;
  }
  if (s.ok() && dir_unsynced_.exchange(false)) {
    s = env_->SyncDir(store_dir_ + "/" + format::kDataDirName);
  }
  if (!s.ok()) {
    MutexLock l(&mu_);
    sync_error_ = s;
  }
  return s;
}

bool DataFiles::RemoveAfterSync(uint64_t ino, uint64_t bytes) {
  MutexLock l(&mu_);
  if (remove_queue_.insert(ino).second) queued_bytes_ += bytes;
  return remove_queue_.size() >= kSyncQueueFiles || queued_bytes_ >= kSyncQueueBytes;
}

uint64_t DataFiles::BeforeIndexSync() {
  MutexLock l(&mu_);
  const uint64_t ticket = next_ticket_++;
  syncing_[ticket].swap(remove_queue_);
  queued_bytes_ = 0;
  return ticket;
}

void DataFiles::AfterIndexSync(uint64_t ticket, bool synced) {
  {
    MutexLock l(&mu_);
    auto it = syncing_.find(ticket);
    if (it == syncing_.end()) return;
    std::set<uint64_t> inos = std::move(it->second);
    syncing_.erase(it);
    if (!synced) {
      remove_queue_.merge(inos);
      return;
    }
    if (inos.empty()) return;
    removals_.insert(removals_.end(), inos.begin(), inos.end());
    if (!remover_.joinable()) remover_ = std::thread([this] { RemoverLoop(); });
  }
  removal_cv_.SignalAll();
}

void DataFiles::EvictSoon(uint64_t ino) {
  {
    MutexLock l(&mu_);
    if (read_only_ || dirty_.count(ino) != 0) return;
    evictions_.push_back(ino);
    if (!evictor_.joinable()) evictor_ = std::thread([this] { EvictorLoop(); });
  }
  removal_cv_.SignalAll();
}

void DataFiles::EvictFile(uint64_t ino) {
  Result<std::unique_ptr<io::File>> file = env_->Open(Path(ino), io::OpenMode::kRead);
  if (!file.ok()) return;  // deleted, or replaced and deleted, meanwhile
  Result<uint64_t> size = (*file)->Size();
  if (size.ok()) (*file)->Evict(0, *size);
}

void DataFiles::EvictorLoop() {
  MutexLock l(&mu_);
  for (;;) {
    while (evictions_.empty() && !stop_remover_) removal_cv_.Wait(&mu_);
    if (stop_remover_) {
      evictions_.clear();  // what is left does not matter
      return;
    }
    const uint64_t ino = evictions_.front();
    evictions_.pop_front();
    evicting_ = true;
    l.Unlock();
    EvictFile(ino);
    l.Lock();
    evicting_ = false;
    removal_cv_.SignalAll();
  }
}

void DataFiles::RemoverLoop() {
  MutexLock l(&mu_);
  for (;;) {
    while (removals_.empty() && !stop_remover_) removal_cv_.Wait(&mu_);
    if (removals_.empty()) return;  // stopping, with nothing left to delete
    removing_ = removals_.front();
    removals_.pop_front();
    const uint64_t ino = removing_;
    l.Unlock();
    const Status s = Remove(ino);
    if (!s.ok()) std::fprintf(stderr, "ckptfs: %s\n", s.ToString().c_str());
    l.Lock();
    if (removal_error_.ok()) removal_error_ = s;
    removing_ = 0;
    removal_cv_.SignalAll();
  }
}

Status DataFiles::WaitForRemovals() {
  MutexLock l(&mu_);
  while (RemovingLocked()) removal_cv_.Wait(&mu_);
  return removal_error_;
}

bool DataFiles::RemovalsPending() {
  MutexLock l(&mu_);
  return RemovingLocked();
}

Status DataFiles::Remove(uint64_t ino) {
  {
    MutexLock l(&mu_);
    Forget(ino);
    dirty_.erase(ino);
  }
  return env_->Remove(Path(ino));
}

Result<std::vector<uint64_t>> DataFiles::List() {
  const std::string dir = store_dir_ + "/" + format::kDataDirName;
  Result<std::vector<std::string>> names = env_->List(dir);
  if (!names.ok() && names.status().code() == ENOENT) return std::vector<uint64_t>{};
  CKPTFS_RETURN_IF_ERROR(names.status());
  std::vector<uint64_t> out;
  for (const std::string& n : *names) {
    uint64_t ino;
    if (format::ParseDataFileName(n, &ino)) out.push_back(ino);
  }
  return out;
}

}  // namespace ckptfs::engine
