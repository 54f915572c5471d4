#include "engine/store_impl.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>

#include "engine/data/data_storage.h"
#include "meta/hosts.h"

namespace ckptfs::engine {

namespace {

constexpr uint64_t kSpaceCheckBytes = 16 << 20;
constexpr uint64_t kSpaceCheckMs = 200;

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Returns 1 when `path` is a directory with entries, 0 when empty, -1 when absent.
int DirState(const std::string& path, Status* err) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return -1;
    *err = Status::IOError(errno, "open " + path);
    return 1;
  }
  int state = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      state = 1;
      break;
    }
  }
  ::closedir(d);
  return state;
}

}  // namespace

bool Store::IsStore(const std::string& dir) {
  struct stat st;
  return ::stat((dir + "/" + format::kFormatFileName).c_str(), &st) == 0;
}

Status ValidateStoreOptions(const StoreOptions& o) {
  if (o.segment_size < kSegmentSizeMin) {
    return Status(EINVAL, "segment_size must be at least 1 MiB");
  }
  if (o.inline_max > kInlineMaxLimit) return Status(EINVAL, "inline_max must be at most 64 KiB");
  if (o.max_record_bytes == 0 || o.max_record_bytes > kMaxRecordBytesLimit) {
    return Status(EINVAL, "max_record_bytes must be between 1 and 64 MiB");
  }
  if (o.compression < 0 || o.compression > kCompressionMax) {
    return Status(EINVAL, "compression must be 0 (off) to 22");
  }
  if (!(o.peer_timeout > 0 && o.peer_timeout <= 3600)) {
    return Status(EINVAL, "peer_timeout must be a number of seconds, more than 0, at most 3600");
  }
  if (!(o.meta_timeout >= 0 && o.meta_timeout < 1e9)) {
    return Status(EINVAL, "meta_timeout must be a number of seconds, 0 or more");
  }
  if (!(o.data_timeout >= 1 && o.data_timeout <= 86400)) {
    return Status(EINVAL, "data_timeout must be a number of seconds, 1 to 86400");
  }
  return Status::OK();
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, const StoreOptions& options) {
  CKPTFS_RETURN_IF_ERROR(ValidateStoreOptions(options));
  auto store = std::make_unique<StoreImpl>(dir, options);
  Status s = store->Init();
  if (!s.ok()) {
    Status closed = store->Close();
    if (!closed.ok()) s = Status(s.code(), s.message() + "; then closing: " + closed.message());
    return s;
  }
  return std::unique_ptr<Store>(std::move(store));
}

StoreImpl::StoreImpl(std::string dir, const StoreOptions& options)
    : dir_(dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.find_last_not_of('/') + 1)
                                                 : dir),
      options_(options),
      env_(options.env != nullptr ? options.env : io::Env::Posix()),
      coalesce_gap_(options.coalesce_gap),
      coalesce_max_(options.coalesce_max),
      compression_level_(options.compression) {
  if (options_.holder.empty()) {
    options_.holder = "process " + std::to_string(::getpid());
  }
}

StoreImpl::~StoreImpl() {
  if (!closed_) {
    Status s = Close();
    if (!s.ok()) std::fprintf(stderr, "ckptfs: closing %s: %s\n", dir_.c_str(), s.ToString().c_str());
  }
}

Status StoreImpl::Init() {
  Status err;
  int state = DirState(dir_, &err);
  CKPTFS_RETURN_IF_ERROR(err);
  bool creating = false;
  if (state == -1 || (state == 0)) {
    if (!options_.create_if_missing || options_.read_only) {
      return Status(ENOENT, dir_ + " is not a ckptfs store (missing or empty)");
    }
    if (state == -1 && ::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::IOError(errno, "create store directory " + dir_);
    }
    creating = true;
  } else if (!IsStore(dir_)) {
    return Status(EINVAL, dir_ + " is not a ckptfs store: it is not empty and has no " +
                              format::kFormatFileName + " file");
  }
  CKPTFS_ASSIGN_OR_RETURN(shared_, ChooseIndex(dir_, creating, options_.meta));
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::DataStorage> storage,
                          ChooseDataStorage(dir_, creating, options_.data, options_.s3_endpoint));
  mode_ = shared_.has_value() ? StoreMode::Shared(&host_) : StoreMode::Embedded();
  // A shared store is used by many mounts at once: each holds a host
  // instead (ClaimHost, below).
  if (!mode_->MountsHoldHosts()) {
    CKPTFS_ASSIGN_OR_RETURN(lock_, StoreLock::Acquire(dir_, options_.holder));
  }
  // Data in an object store: the one writer of the store (its lock held)
  // keeps staging logs, and first sends on what a killed one left; in a
  // shared store each host does so in a directory of its own, once it
  // holds its host (StartHostStaging). Read-only opens keep none.
  const std::string staging = !mode_->MountsHoldHosts() && !options_.read_only
                                  ? dir_ + "/" + format::kStagingDirName
                                  : "";
  CKPTFS_ASSIGN_OR_RETURN(env_,
                          OpenDataEnv(dir_, storage, env_, options_.data_timeout, staging));
  if (storage.has_value()) data_storage_ = storage->data;
  objects_ = std::dynamic_pointer_cast<io::ObjectStoreEnv>(env_);
  if (!creating && !options_.read_only && !mode_->MountsHoldHosts()) {
    // A crash while the store was being created leaves FORMAT without an
    // index and without segments: finish creating it.
    Status ignored;
    std::string index_dir = dir_ + "/" + format::kIndexDirName;
    std::string seg_dir = dir_ + "/" + format::kSegmentsDirName;
    if (DirState(index_dir, &ignored) == -1 && DirState(seg_dir, &ignored) <= 0) creating = true;
  }
  if (creating) {
    CKPTFS_RETURN_IF_ERROR(CreateLayout());
  } else {
    CKPTFS_RETURN_IF_ERROR(CheckFormatFile(dir_));
  }
  data_files_ =
      std::make_unique<DataFiles>(env_, dir_, options_.read_only, options_.direct_io);
  if (!options_.read_only) CKPTFS_RETURN_IF_ERROR(data_files_->EnsureDir());
  CKPTFS_RETURN_IF_ERROR(OpenIndex(creating));
  CKPTFS_RETURN_IF_ERROR(LoadMeta(creating));
  OwnedSegmentIds owned;
  if (mode_->MountsHoldHosts() && !options_.read_only) {
    CKPTFS_RETURN_IF_ERROR(ClaimHost());
    CKPTFS_RETURN_IF_ERROR(StartHostStaging());
    owned.first = (uint64_t{host_.id()} << format::kHostIdShift) + 1;
    owned.end = (uint64_t{host_.id()} + 1) << format::kHostIdShift;
  } else if (mode_->MountsHoldHosts()) {
    owned.first = owned.end = 0;  // reads only, of every host's segments
  }
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<uint64_t> sealed, SealedSegments());
  CKPTFS_ASSIGN_OR_RETURN(
      segments_, SegmentSet::Open(env_, dir_ + "/" + format::kSegmentsDirName,
                                  options_.segment_size, options_.read_only, sealed, owned));
  flush_segments_ = segments_.get();
  cache_ = std::make_unique<RecordCache>(options_.cache_size);
  syncer_ = std::make_unique<GroupCommit>([this] { return FlushDurable(); });
  if (!options_.read_only) {
    CKPTFS_RETURN_IF_ERROR(PurgeOrphans());
    CKPTFS_RETURN_IF_ERROR(RemoveUnusedDataFiles());
    CKPTFS_RETURN_IF_ERROR(RemoveUnusedSnapshots());
  }
  StartBackgroundCompaction();
  if (mode_->MountsHoldHosts() && options_.peers != "off") CKPTFS_RETURN_IF_ERROR(StartPeers());
  if (host_.id() != 0) host_.Join();
  return Status::OK();
}

Status StoreImpl::StartPeers() {
  const int timeout_ms = static_cast<int>(options_.peer_timeout * 1000);
  if (host_.id() == 0) {
    // A read-only open serves nobody, and reads from the hosts that serve
    // once one has made the store's secret.
    Result<std::string> secret = PeerSecret(kv(), /*make=*/false);
    if (!secret.ok()) return secret.status().code() == ENOENT ? Status::OK() : secret.status();
    peer_reads_ = std::make_unique<PeerReads>(kv(), "", false, std::move(*secret), timeout_ms);
    return Status::OK();
  }
  CKPTFS_ASSIGN_OR_RETURN(
      const std::string listen,
      PeerListenAddress(options_.peers, options_.peers.empty() ? kv()->LocalAddress() : ""));
  RangeCache::Loader load = [this](const std::string& name, uint64_t offset, size_t len,
                                   char* dst) { return ReadStoreFile(name, offset, len, dst); };
  if (options_.peer_cache_dir.empty()) {
    served_ = std::make_unique<RangeCache>(options_.peer_cache, std::move(load));
  } else {
    Result<std::unique_ptr<RangeCache>> cache =
        RangeCache::InDirectory(options_.peer_cache, std::move(load), options_.peer_cache_dir);
    if (!cache.ok()) return cache.status().Annotate("peer_cache_dir=" + options_.peer_cache_dir);
    served_ = std::move(*cache);
  }
  CKPTFS_ASSIGN_OR_RETURN(
      peers_, PeerService::Start(kv(), host_.name(), listen, dir_, env_,
                                 [this](const std::string& name, uint64_t offset, size_t len,
                                        char* dst) { return served_->Read(name, offset, len, dst); }));
  peer_reads_ =
      std::make_unique<PeerReads>(kv(), host_.name(), true, peers_->secret(), timeout_ms);
  return Status::OK();
}

Result<size_t> StoreImpl::ReadStoreFile(const std::string& name, uint64_t offset, size_t len,
                                        char* dst) {
  const size_t slash = name.find('/');
  const std::string dir = name.substr(0, slash);
  const std::string base = slash == std::string::npos ? "" : name.substr(slash + 1);
  uint64_t id = 0;
  if (dir == format::kSegmentsDirName && format::ParseSegmentFileName(base, &id)) {
    return ReadSegmentBytes(id, offset, len, dst);
  }
  if (dir == format::kDataDirName && format::ParseDataFileName(base, &id)) {
    return ReadDataFileBytes(id, offset, len, dst, /*once=*/false);
  }
  return Status(EACCES, name + " is not a file this store serves");
}

Result<size_t> StoreImpl::ReadSegmentBytes(uint64_t id, uint64_t offset, size_t len, char* dst) {
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, segments_->ReadUpTo(id, offset, len, dst));
  counters_.backing_reads++;
  counters_.backing_read_bytes += n;
  return n;
}

Result<size_t> StoreImpl::ReadDataFileBytes(uint64_t ino, uint64_t offset, size_t len, char* dst,
                                            bool once) {
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, once ? data_files_->ReadOnce(ino, offset, len, dst)
                                               : data_files_->ReadUpTo(ino, offset, len, dst));
  counters_.data_file_reads++;
  counters_.data_file_read_bytes += n;
  return n;
}

Status StoreImpl::ClaimHost() {
  std::string host = options_.host.empty() ? meta::MachineName() : options_.host;
  Status claimed = host_.Claim(kv(), std::move(host), options_.holder);
  if (!claimed.ok()) {
    // Said as for an embedded store in use: who holds it.
    const meta::HostHeld* held = claimed.payload<meta::HostHeld>();
    if (held == nullptr) return claimed;
    return Status(EBUSY, claimed.message())
        .WithPayload(StoreHolder{held->value.holder, static_cast<pid_t>(held->value.pid)});
  }
  format::OwnerValue me{host_.id(), static_cast<uint32_t>(::getpid()), meta::MachineName()};
  host_.ownership().Start(kv(), std::move(me),
                          [this](uint64_t ino, const std::vector<Ownership::Name>& names, bool owned) {
                            GiveUp(ino, names, owned);
                          });
  return Status::OK();
}

Status StoreImpl::StartHostStaging() {
  if (objects_ == nullptr) return Status::OK();
  const std::string top = dir_ + "/" + format::kStagingDirName;
  if (::mkdir(top.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(errno, "make staging directory " + top);
  }
  return objects_->StartStaging(dir_ + "/" + format::HostStagingDirName(host_.id()));
}

Result<std::vector<uint64_t>> StoreImpl::SealedSegments() {
  std::vector<uint64_t> sealed;
  Status bad;
  CKPTFS_RETURN_IF_ERROR(
      IndexScan(Space::kSegments, "", "", [&](std::string_view k, std::string_view v) {
        format::SegmentStat st;
        if (k.size() != 8) return true;
        const uint64_t id = format::GetBE64(k.data());
        // Only `sealed` is needed here; ListSegments checks the counters.
        Status ds = format::DecodeSegmentStat(v, &st);
        if (!ds.ok()) {
          bad = Status(ds.code(),
                       "accounting of segment " + std::to_string(id) + ": " + ds.message());
          return false;
        }
        if (st.sealed) sealed.push_back(id);
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(bad);
  return sealed;
}

Status StoreImpl::CreateLayout() {
  for (const char* sub : {format::kSegmentsDirName, format::kDataDirName}) {
    std::string d = dir_ + "/" + sub;
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return Status::IOError(errno, "create " + d);
  }
  return WriteFormatFile(dir_);
}

Status StoreImpl::OpenIndex(bool create) {
  IndexOpenOptions o;
  o.create = create;
  o.before_flush = [this] {
    // A failed sync is sticky in the set: the next fsync reports it.
    if (SegmentSet* set = flush_segments_.load()) (void)set->SyncDirty();
    if (data_files_ != nullptr) (void)data_files_->SyncDirty();
  };
  o.meta = options_.meta;
  o.meta_timeout = options_.meta_timeout;
  CKPTFS_ASSIGN_OR_RETURN(index_, StoreIndex::Open(dir_, shared_, env_.get(), o));
  return Status::OK();
}

Status StoreImpl::LoadMeta(bool creating) {
  MutexLock ino(&ino_mu_);  // uncontended (Init); next_ino_ is guarded by it
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> version,
                          IndexGet(Space::kMeta, format::kMetaFormatVersion));
  if (!version.has_value()) {
    if (!creating) return Status::Corruption(dir_ + ": index has no format_version");
    meta::Writes b;
    std::string ver;
    format::PutLE32(&ver, format::kFormatVersion);
    b.Put(Space::kMeta, format::kMetaFormatVersion, ver);
    Timespec now = Now();
    format::InodeValue root;
    root.mode = S_IFDIR | 0755;
    root.uid = ::getuid();
    root.gid = ::getgid();
    root.nlink = 2;
    root.parent = kRootIno;
    SetAllTimes(&root, now);
    PutInode(&b, kRootIno, root);
    std::string one;
    format::PutLE64(&one, 1);
    b.Put(Space::kMeta, format::kMetaInodeCount, one);
    next_ino_ = kRootIno + 1;
    ino_limit_ = next_ino_ + kInoBlock;
    std::string lim;
    format::PutLE64(&lim, ino_limit_);
    b.Put(Space::kMeta, format::kMetaNextIno, lim);
    return Commit(&b, /*sync=*/true);
  }
  if (version->size() != 4 || format::GetLE32(version->data()) != format::kFormatVersion) {
    return Status::Corruption(dir_ + ": index format_version does not match this build");
  }
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> next,
                          IndexGet(Space::kMeta, format::kMetaNextIno));
  if (!next.has_value()) return Status::Corruption(dir_ + ": index has no next_ino");
  if (next->size() != 8) return Status::Corruption("next_ino value is not 8 bytes");
  next_ino_ = ino_limit_ = format::GetLE64(next->data());
  // A shared store's hosts come and go: whether the last close was clean
  // says nothing there.
  if (!options_.read_only && !mode_->MountsHoldHosts()) {
    meta::Writes b;
    b.Delete(Space::kMeta, format::kMetaCleanShutdown);
    CKPTFS_RETURN_IF_ERROR(CommitSynced(&b));
  }
  return Status::OK();
}

Status StoreImpl::PurgeOrphans() {
  std::vector<uint64_t> orphans;
  {
    const std::string_view prefix(format::kMetaOrphanPrefix);
    const std::string mine = mode_->OrphanValue();
    CKPTFS_RETURN_IF_ERROR(
        IndexScan(Space::kMeta, prefix, "", [&](std::string_view k, std::string_view v) {
          if (!k.starts_with(prefix)) return false;
          if (k.size() == prefix.size() + 8 && (host_.id() == 0 || v == mine)) {
            orphans.push_back(format::GetBE64(k.data() + prefix.size()));
          }
          return true;
        }));
  }
  for (uint64_t ino : orphans) {
    InodeRef s(&inodes_, ino);
    MutexLock l(&s->mu);
    meta::Writes b;
    StatDeltas deltas;
    Status st = LoadLocked(s.get());
    if (st.ok()) {
      CKPTFS_RETURN_IF_ERROR(PurgeLocked(s.get(), &b, &deltas, kLatest));
    } else if (st.code() == ENOENT) {
      b.Delete(Space::kMeta, format::OrphanKey(ino));
    } else {
      return st;
    }
    EmitDeltas(deltas, &b);
    CKPTFS_RETURN_IF_ERROR(Commit(&b));
    if (s->attr.data_file_end != 0) (void)data_files_->RemoveAfterSync(ino, s->attr.data_file_end);
    s->purged = true;
  }
  return Status::OK();
}

Status StoreImpl::RemoveUnusedDataFiles() {
  CKPTFS_ASSIGN_OR_RETURN(std::vector<uint64_t> inos, data_files_->List());
  for (uint64_t ino : inos) {
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                            IndexGet(Space::kInodes, format::InodeKey(ino)));
    format::InodeValue iv;
    // An inode that cannot be decoded keeps its data file (fsck reports it).
    // On a shared store, so does every inode there is: another host may be
    // starting its data file, which the inode names only once it commits.
    if (v.has_value() && (mode_->OthersWrite() || !format::DecodeInode(*v, &iv).ok() ||
                          iv.data_file_end != 0)) {
      continue;
    }
    CKPTFS_RETURN_IF_ERROR(data_files_->Remove(ino));
  }
  return Status::OK();
}

Status StoreImpl::Close() {
  if (closed_.exchange(true)) return Status(EIO, "store already closed");
  host_.StopWatch();
  StopBackgroundCompaction();
  Status result;
  if (!options_.read_only && index_ != nullptr) {
    result = FlushDurable();
    // What this mount owned is nobody's once it is gone: its owner keys
    // would only take room (a failure leaves them, as a crash does).
    if (result.ok()) (void)host_.ownership().DropAll();
    if (peers_ != nullptr) {
      // Its address goes with a clean close; after a failed one, with the
      // lease.
      Status s = peers_->Stop(/*withdraw=*/result.ok());
      if (result.ok()) result = s;
    }
    peer_reads_.reset();
    if (host_.id() != 0) {
      Status s = host_.Release(/*release=*/result.ok());
      if (result.ok()) result = s;
    } else if (result.ok()) {
      // Marked clean only when everything written is durable.
      meta::Writes b;
      b.Put(Space::kMeta, format::kMetaCleanShutdown, "");
      result = CommitSynced(&b);
    }
    // The index at rest lives in its table files (StoreIndex::Flush).
    if (result.ok()) result = index_->Flush();
    // A failed backup leaves the store as it is: said, not failed.
    if (result.ok()) {
      if (Status b = BackupIndex(0); !b.ok()) {
        std::fprintf(stderr, "ckptfs: %s\n", b.ToString().c_str());
      }
    }
  }
  if (data_files_ != nullptr) {
    // Before the store lock goes: no deletion runs while another process
    // has the store.
    Status s = data_files_->WaitForRemovals();
    if (result.ok()) result = s;
  }
  if (index_ != nullptr) {
    Status s = index_->Close();
    if (result.ok()) result = s;
  }
  // Its server reads the segments until it stops (already, after a clean
  // close).
  if (peers_ != nullptr) (void)peers_->Stop(/*withdraw=*/false);
  peer_reads_.reset();
  flush_segments_ = nullptr;
  segments_.reset();
  extent_maps_.ForgetAll();
  lock_.reset();
  return result;
}

Status StoreImpl::Commit(meta::Writes* batch, bool sync) {
  // A durable commit goes through FlushDurable, never a synced commit of
  // the index, which would also make other writers' batches durable before
  // their records.
  const ReaderGuard guard = GuardOf(*batch);
  const std::vector<meta::Writes::Range>& readers = guard.ranges;
  Status s;
  for (int attempt = 1;; ++attempt) {
    if (readers.empty()) {
      s = meta::CommitWrites(kv(), batch, meta::Durability::kLogged);
      break;
    }
    s = meta::RunTxn(
        kv(),
        [&](meta::Txn* t) {
          t->writes().Append(*batch);
          for (const auto& r : readers) t->RequireEmpty(r.space, r.begin, r.end);
          return Status::OK();
        },
        meta::Durability::kLogged);
    if (!meta::IsRangeHeld(s) || attempt >= kUnreadAttempts) break;
    s = Unguard(guard);
    if (!s.ok()) break;
  }
  if (s.ok()) {
    // The caller still holds the mutexes of the inodes the batch changes.
    extent_maps_.Apply(*batch);
    if (!readers.empty()) host_.ownership().ReadsWritten(*batch);
    return sync ? MakeDurable() : Status::OK();
  }
  // The batch may or may not be in the index.
  extent_maps_.ForgetTouched(*batch);
  return s;
}

Status StoreImpl::CommitIn(meta::Txn* in, meta::Writes* batch, meta::Durability d) {
  in->writes().Append(*batch);
  const ReaderGuard guard = GuardOf(*batch);
  const std::vector<meta::Writes::Range>& readers = guard.ranges;
  for (const auto& r : readers) in->RequireEmpty(r.space, r.begin, r.end);
  Status s = in->Commit(d);
  if (s.ok()) {
    extent_maps_.Apply(*batch);
    if (!readers.empty()) host_.ownership().ReadsWritten(*batch);
    return s;
  }
  extent_maps_.ForgetTouched(*batch);
  if (meta::IsRangeHeld(s)) {
    // Other hosts read a directory it changes: once they gave it up, the
    // change runs again (StoreImpl::RunChange).
    CKPTFS_RETURN_IF_ERROR(Unguard(guard));
    return meta::ConflictStatus("a directory it changes was read by another host");
  }
  return s;
}

Status StoreImpl::CommitSynced(meta::Writes* batch) {
  return meta::CommitWrites(kv(), batch, meta::Durability::kSynced);
}

Result<std::optional<std::string>> StoreImpl::IndexGet(Space s, std::string_view key) {
  if (std::shared_ptr<meta::SnapshotFile> held = HeldFor(s, key, std::nullopt)) return held->Get(s, key);
  std::optional<std::string> out;
  CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv(), [&](meta::ReadTxn* t) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(out, t->Get(s, key));
    return Status::OK();
  }));
  return out;
}

Status StoreImpl::IndexScan(Space s, std::string_view begin, std::string_view end,
                            const meta::ScanFn& fn) {
  if (std::shared_ptr<meta::SnapshotFile> held = HeldFor(s, begin, end)) return held->Scan(s, begin, end, fn);
  // A conflict comes before the first key only (meta::ReadTxn::Scan).
  return meta::RunReads(kv(),
                        [&](meta::ReadTxn* t) { return t->Scan(s, begin, end, fn); });
}

Status StoreImpl::MakeDurable() {
  return syncer_ != nullptr ? syncer_->Sync() : FlushDurable();
}

Status StoreImpl::CheckWritable() const {
  if (options_.read_only) return Status(EROFS, "store is read-only");
  if (closed_) return Status(EIO, "store is closed");
  if (host_.lost()) {
    return Status(EIO, "this mount lost host \"" + host_.name() +
                           "\" of the shared store (its lease ran out); mount again");
  }
  return Status::OK();
}

Status StoreImpl::StatSpaceLocked() {
  struct statvfs vfs;
  if (::statvfs(dir_.c_str(), &vfs) != 0) return Status::IOError(errno, "statvfs " + dir_);
  space_avail_ = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  space_checked_ms_ = NowMs();
  space_since_check_ = 0;
  return Status::OK();
}

Status StoreImpl::CheckSpace(uint64_t incoming, Ino ino, uint64_t offset) {
  MutexLock l(&space_mu_);
  space_since_check_ += incoming;
  const uint64_t drawn = ino != 0 ? reservations_.Overlap(ino, offset, offset + incoming) : 0;
  if (incoming > 0 && drawn == incoming) return Status::OK();  // all of it reserved
  const uint64_t needed = options_.min_free + reservations_.charge() + (incoming - drawn);
  if (space_since_check_ >= kSpaceCheckBytes || NowMs() - space_checked_ms_ >= kSpaceCheckMs ||
      space_avail_ < needed) {
    (void)StatSpaceLocked();  // on failure, the last figure stands
  }
  if (space_avail_ < needed && data_files_->RemovalsPending()) {
    // Deleted files' data files are about to give space back (space_mu_ is
    // a leaf lock: not held while waiting).
    l.Unlock();
    (void)data_files_->WaitForRemovals();
    l.Lock();
    (void)StatSpaceLocked();
  }
  if (space_avail_ < needed) {
    return Status(ENOSPC, "no space left on the filesystem under " + dir_);
  }
  return Status::OK();
}

Status StoreImpl::Reserve(Ino ino, uint64_t start, uint64_t end) {
  MutexLock l(&space_mu_);
  const uint64_t add = reservations_.ChargeOfAdd(ino, start, end);
  if (add == 0) {
    reservations_.Add(ino, start, end);
    reserved_bytes_.store(reservations_.bytes());
    return Status::OK();
  }
  CKPTFS_RETURN_IF_ERROR(StatSpaceLocked());
  const uint64_t needed = options_.min_free + reservations_.charge();
  if (space_avail_ < needed || space_avail_ - needed < add) {
    return Status(ENOSPC, "cannot reserve " + std::to_string(end - start) +
                              " bytes: not enough free space on the filesystem under " + dir_);
  }
  reservations_.Add(ino, start, end);
  reserved_bytes_.store(reservations_.bytes());
  return Status::OK();
}

void StoreImpl::Unreserve(Ino ino, uint64_t start, uint64_t end) {
  MutexLock l(&space_mu_);
  reservations_.Remove(ino, start, end);
  reserved_bytes_.store(reservations_.bytes());
}

uint64_t StoreImpl::ReservedBytes(Ino ino) {
  if (reserved_bytes_.load() == 0) return 0;
  MutexLock l(&space_mu_);
  return reservations_.Overlap(ino, 0, UINT64_MAX);
}

Status StoreImpl::FlushDurable() {
  // segments_ is null when Init failed before opening them (e.g. a segment
  // with a damaged header); Close() still runs then.
  if (segments_ == nullptr) return kv()->Sync();
  index_syncs_.fetch_add(1);  // before any batch it makes durable is read back
  // The bulk of the segment bytes while writes go on, then, with no write
  // between its append and its commit, what was appended meanwhile and the
  // index log: no batch becomes durable before the records it points at.
  CKPTFS_RETURN_IF_ERROR(segments_->SyncDirty());
  CKPTFS_RETURN_IF_ERROR(data_files_->SyncDirty());
  // Data files no inode uses go once that is durable, on the background
  // thread: a sync does not wait for their unlinks.
  const uint64_t unused = data_files_->BeforeIndexSync();
  Status st;
  {
    CommitGate::Closed closed(&commit_gate_);
    st = segments_->SyncDirty();
    if (st.ok()) st = data_files_->SyncDirty();
    if (st.ok()) st = kv()->Sync();
  }
  // On failure the files stay queued for the next sync.
  data_files_->AfterIndexSync(unused, st.ok());
  return st;
}

Status StoreImpl::Fsync(Ino ino, bool datasync) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(Adopt(ino, /*sync=*/true));
  counters_.fsyncs++;
  return syncer_->Sync();
}

Status StoreImpl::Closed(Ino) {
  if (!SendsAtClose() || options_.read_only) return Status::OK();
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  return syncer_->Sync();
}

Status StoreImpl::SyncAll() {
  if (options_.read_only) return Status::OK();
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  counters_.fsyncs++;
  return syncer_->Sync();
}

}  // namespace ckptfs::engine
