// Fsck: the driver, findings and the repair commit. The checks are in
// check_namespace.cc, check_data.cc and check_recover.cc; engine/fsck/checker.h
// describes the whole.
#include "engine/fsck/checker.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "engine/data/data_storage.h"
#include "engine/store_options.h"
#include "engine/index/index_backup.h"
#include "engine/index/index_db.h"
#include "io/object_store_env.h"
#include "meta/hosts.h"

namespace ckptfs::engine {

uint64_t FsckReport::errors() const {
  return static_cast<uint64_t>(std::count_if(findings.begin(), findings.end(),
                                             [](const FsckFinding& f) { return !f.informational; }));
}

uint64_t FsckReport::errors_left() const {
  return static_cast<uint64_t>(
      std::count_if(findings.begin(), findings.end(),
                    [](const FsckFinding& f) { return !f.informational && !f.repaired; }));
}

Result<FsckReport> Fsck(const std::string& dir, const FsckOptions& options) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  Result<FsckReport> r = fsck::Checker(d, options).Run();
  // The embedded index opened, but a read met a damaged table file: rebuild
  // the index from what reads and check again.
  if (r.ok() || !options.repair || r.status().payload<fsck::DamagedIndexRead>() == nullptr ||
      std::filesystem::exists(d + "/" + format::kSharedFileName)) {
    return r;
  }
  fsck::Checker again(d, options);
  again.RebuildIndexFirst(r.status().message());
  return again.Run();
}

namespace fsck {

namespace {
// The files a repair of the index moved to index/lost (RocksDB's RepairDB
// keeps there what it could not read).
std::set<std::string> LostIndexFiles(const std::string& index_dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(index_dir + "/lost", ec)) {
    if (e.is_regular_file(ec)) out.insert(e.path().lexically_relative(index_dir + "/lost").string());
  }
  return out;
}

// The newest MANIFEST of `index_dir` when its CURRENT file does not name an
// existing one; nullopt when CURRENT is fine or there is no MANIFEST.
std::optional<std::string> ManifestToPointAt(const std::string& index_dir) {
  std::ifstream in(index_dir + "/CURRENT");
  std::string named;
  std::getline(in, named);
  if (named.starts_with("MANIFEST-") && named.find('/') == std::string::npos &&
      std::filesystem::exists(index_dir + "/" + named)) {
    return std::nullopt;
  }
  std::optional<std::string> newest;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(index_dir, ec)) {
    const std::string name = e.path().filename().string();
    // Zero-padded numbers: the largest name is the newest.
    if (name.starts_with("MANIFEST-") && (!newest || name > *newest)) newest = name;
  }
  return newest;
}

// Whether `index_dir` holds anything of an index to open or rebuild.
bool HasIndexFiles(const std::string& index_dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(index_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "CURRENT" || name.starts_with("MANIFEST-") || name.ends_with(".sst") ||
        name.ends_with(".log")) {
      return true;
    }
  }
  return false;
}
}  // namespace

Status Checker::Open() {
  if (::access(dir_.c_str(), F_OK) != 0) return Status(ENOENT, dir_ + " does not exist");
  if (!Store::IsStore(dir_)) {
    return Status(EINVAL, dir_ + " is not a ckptfs store (it has no " +
                              std::string(format::kFormatFileName) + " file)");
  }
  CKPTFS_ASSIGN_OR_RETURN(
      lock_, StoreLock::Acquire(dir_, "ckptfs fsck (pid " + std::to_string(::getpid()) + ")"));
  CKPTFS_RETURN_IF_ERROR(CheckFormatFile(dir_));
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::DataStorage> storage, ReadStorageFile(dir_));
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::SharedIndex> shared, ReadSharedFile(dir_));
  // The staging logs (data in an object store): what a killed writer left
  // is part of the store (StoreImpl::Init); a shared store's hosts' logs
  // are sent on once no host is mounted (OpenShared).
  const std::string staging = dir_ + "/" + format::kStagingDirName;
  CKPTFS_ASSIGN_OR_RETURN(env_, OpenDataEnv(dir_, storage, env_, StoreOptions().data_timeout,
                                            shared.has_value() ? "" : staging));

  if (shared.has_value()) return OpenShared(*shared);
  return OpenEmbedded();
}

Status Checker::SendHostsStaged() {
  auto objects = std::dynamic_pointer_cast<io::ObjectStoreEnv>(env_);
  const std::string top = dir_ + "/" + format::kStagingDirName;
  if (objects == nullptr || ::access(top.c_str(), F_OK) != 0) return Status::OK();
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<std::string> hosts, io::Env::Posix()->List(top));
  for (const std::string& h : hosts) {
    CKPTFS_RETURN_IF_ERROR(objects->SendStaged(top + "/" + h));
  }
  return Status::OK();
}

Status Checker::OpenShared(const format::SharedIndex& where) {
  if (opt_.from_backup) {
    return Status(EINVAL, dir_ + " keeps its index in PostgreSQL, which has no backups in the "
                              "store: restore it with PostgreSQL's own tools");
  }
  CKPTFS_ASSIGN_OR_RETURN(index_, StoreIndex::Open(dir_, where, env_.get(), IndexOpenOptions()));
  // The whole store, every host's files, is checked only with no host
  // mounted: a mount's writes in flight would look like damage.
  CKPTFS_RETURN_IF_ERROR(meta::CheckNoLiveHost(kv()).Annotate(dir_));
  return SendHostsStaged();
}

Status Checker::OpenRocks(bool create, bool read_only, bool strict_log) {
  IndexOpenOptions o;
  o.create = create;
  o.read_only = read_only;
  o.strict_log = strict_log;
  CKPTFS_ASSIGN_OR_RETURN(index_, StoreIndex::Open(dir_, std::nullopt, env_.get(), o));
  return Status::OK();
}

Status Checker::OpenEmbedded() {
  const std::string index_dir = dir_ + "/" + format::kIndexDirName;
  Status s;
  if (opt_.repair && opt_.from_backup) CKPTFS_RETURN_IF_ERROR(RestoreNewestBackup());
  if (!HasIndexFiles(index_dir)) return MakeNewIndex(index_dir);
  if (opt_.repair && !rebuild_because_.empty()) {
    CKPTFS_RETURN_IF_ERROR(RebuildIndex(index_dir, rebuild_because_));
  }
  s = OpenRocks(/*create=*/false, /*read_only=*/!opt_.repair, /*strict_log=*/true);
  if (s.ok() || s.code() == EBUSY) return s;
  return OpenDamagedIndex(index_dir, s);
}

Status Checker::MakeNewIndex(const std::string& index_dir) {
  const bool backed_up = !ListIndexBackups(dir_).empty();
  if (!opt_.repair || backed_up) {
    return Status::Corruption(
        "the index " + index_dir + " is gone: it holds no CURRENT, MANIFEST, table or log file" +
        (backed_up
             ? " (ckptfs fsck --repair --from-backup restores its newest backup)"
             : " (ckptfs fsck --repair makes a new one and keeps every file under lost+found)"));
  }
  // Nothing to rebuild from and no backup: a new index, into which the
  // checks put every file the segments and data files hold.
  std::error_code ec;
  std::filesystem::create_directories(index_dir, ec);
  if (ec) return Status(EIO, "create " + index_dir + ": " + ec.message());
  CKPTFS_RETURN_IF_ERROR(OpenRocks(/*create=*/true, /*read_only=*/false));
  index_replaced_ = true;
  Add(kIndexRebuilt, {},
      "the index " + index_dir +
          " was gone and the store has no backup of it: a new one "
          "holds every file whose bytes the segments and data files keep, under lost+found "
          "by inode number; names, attributes and files of up to 4 KiB were in the index",
      true);
  return Status::OK();
}

Status Checker::OpenDamagedIndex(const std::string& index_dir, const Status& s) {
  // Damage in the log past a torn last record: replayed up to it, the index
  // opens without what the log held after it.
  if (s.IsCorruption() && OpenRocks(/*create=*/false, /*read_only=*/!opt_.repair).ok()) {
    index_replaced_ = index_is_past_state_ = opt_.repair;
    Add(kIndexRebuilt, {},
        "the index's log is damaged (" + s.message() + "); " +
            (opt_.repair ? "replayed up to the damage" : "repair replays it up to the damage") +
            ": what it held after is lost, and files created there are kept under lost+found",
        opt_.repair);
    return Status::OK();
  }
  if (!opt_.repair) {
    return Status::Corruption("the index does not open (ckptfs fsck --repair rebuilds it): " +
                              s.message());
  }
  // CURRENT names the MANIFEST to read. When it names none that exists, the
  // newest MANIFEST is the one RocksDB wrote last: pointed at it, the index
  // opens with its logs replayed in full.
  if (std::optional<std::string> manifest = ManifestToPointAt(index_dir)) {
    const std::string tmp = index_dir + "/CURRENT.repair";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << *manifest << "\n";
      out.flush();
      if (!out) return Status(EIO, "write " + tmp);
    }
    if (::rename(tmp.c_str(), (index_dir + "/CURRENT").c_str()) != 0) {
      return Status::IOError(errno, "rename " + tmp);
    }
    Status again = OpenRocks(/*create=*/false, /*read_only=*/false);
    if (again.ok()) {
      Add(kIndexRebuilt, {},
          "the index did not open (" + s.message() + "); its CURRENT file now names " +
              *manifest + ", the newest MANIFEST",
          true);
      return again;
    }
  }
  CKPTFS_RETURN_IF_ERROR(RebuildIndex(index_dir, "it did not open: " + s.message()));
  return OpenRocks(/*create=*/false, /*read_only=*/false);
}

Status Checker::RestoreNewestBackup() {
  const std::vector<std::string> backups = ListIndexBackups(dir_);
  if (backups.empty()) {
    return Status(ENOENT, "no index backup in " + dir_ + "/" + kBackupDirName);
  }
  std::string kept_as;
  CKPTFS_RETURN_IF_ERROR(RestoreIndexBackup(dir_, backups.front(), ::time(nullptr), &kept_as));
  index_replaced_ = index_is_past_state_ = true;
  const time_t taken = static_cast<time_t>(std::stoll(backups.front()));
  char when[64];
  struct tm tm;
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&taken, &tm));
  std::string detail = std::string("the index is the backup taken ") + when +
                       "; files created after it are kept under lost+found by inode number";
  if (!kept_as.empty()) detail += "; the index it replaced is kept as " + kept_as;
  Add(kIndexRestored, {}, std::move(detail), true);
  return Status::OK();
}

Status Checker::RebuildIndex(const std::string& index_dir, const std::string& why) {
  const std::set<std::string> lost_before = LostIndexFiles(index_dir);
  std::vector<std::string> seeds;
  CKPTFS_RETURN_IF_ERROR(RepairIndexDb(index_dir, env_.get(), &seeds));
  index_replaced_ = true;
  std::string detail =
      "the index was damaged (" + why + "); rebuilt from its table files and logs";
  std::string lost;
  for (const std::string& name : LostIndexFiles(index_dir)) {
    // The repair also keeps the old MANIFEST and the logs it replayed there.
    if (!lost_before.count(name) && name.ends_with(".sst") &&
        std::find(seeds.begin(), seeds.end(), name) == seeds.end()) {
      lost += (lost.empty() ? "" : ", ") + name;
    }
  }
  if (!lost.empty()) detail += "; table files that did not read, kept in index/lost: " + lost;
  Add(kIndexRebuilt, {}, std::move(detail), true);
  return Status::OK();
}

Status Checker::Get(Space s, const std::string& key, std::string* v, bool* found) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<meta::ReadTxn> t, kv()->BeginRead());
  Result<std::optional<std::string>> read = t->Get(s, key);
  if (!read.ok()) return TagIndexDamage(read.status());
  std::optional<std::string>& got = *read;
  *found = got.has_value();
  if (got.has_value()) *v = std::move(*got);
  return Status::OK();
}

Status Checker::ScanAll(Space s,
                        const std::function<void(std::string_view, std::string_view)>& fn) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<meta::ReadTxn> t, kv()->BeginRead());
  return TagIndexDamage(t->Scan(s, "", "", [&](std::string_view k, std::string_view v) {
    fn(k, v);
    return true;
  }));
}

Status Checker::TagIndexDamage(Status s) {
  if (!s.IsCorruption()) return s;
  return s.WithPayload(DamagedIndexRead{});
}

namespace {
bool IsInformational(std::string_view kind) {
  for (const char* k :
       {kUnreferencedRecords, kUnparsableBytes, kPendingOrphan, kStaleSegmentEntry, kUnusedDataFile,
        kUnusedSnapshot}) {
    if (kind == k) return true;
  }
  return false;
}
}  // namespace

void Checker::Add(const char* kind, Subject at, std::string detail, bool repaired) {
  FsckFinding f;
  f.kind = kind;
  f.path = std::move(at.path);
  f.ino = at.ino;
  f.segment_id = at.segment_id;
  f.offset = at.offset;
  f.length = at.length;
  f.detail = std::move(detail);
  f.repaired = repaired;
  f.informational = IsInformational(kind);
  report_.findings.push_back(std::move(f));
}

void Checker::AddData(const char* kind, uint64_t ino, uint64_t segment, uint64_t off,
                      uint64_t len, std::string detail, bool repairable) {
  if (!report_.findings.empty()) {
    FsckFinding& last = report_.findings.back();
    if (last.kind == kind && last.ino == ino && last.segment_id == segment &&
        last.offset + last.length == off && !last.informational) {
      last.length += len;
      return;
    }
  }
  Add(kind, FileRange(ino, PathOf(ino), off, len, segment),
      std::move(detail), opt_.repair && repairable);
}

std::string Checker::PathOf(uint64_t ino) const {
  auto it = nodes_.find(ino);
  if (it != nodes_.end() && !it->second.path.empty()) return it->second.path;
  if (orphan_keys_.count(ino)) return "(unlinked inode " + std::to_string(ino) + ")";
  return "(inode " + std::to_string(ino) + ")";
}

Status Checker::ApplyRepairs() {
  // Segment headers first: they are needed to open the store at all, and
  // rewriting one changes no record.
  for (auto& [id, seg] : segments_) {
    if (!seg.has_file || seg.header_ok) continue;
    const std::string path = dir_ + "/" + format::SegmentFileName(id);
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file,
                            env_->Open(path, io::OpenMode::kReadWrite));
    const std::string bytes = format::EncodeSegmentHeader(id);
    const std::string_view hdr[] = {bytes};
    Status s = file->WriteAt(0, hdr);
    if (s.ok()) s = file->Sync();
    if (!s.ok()) return s.Annotate("rewrite header of " + path);
  }
  for (auto& [ino, n] : nodes_) {
    if (n.attr_dirty) {
      batch_.Put(Space::kInodes, format::InodeKey(ino), format::EncodeInode(n.v));
      batch_used_ = true;
    }
  }
  if (!batch_used_) return Status::OK();
  return meta::CommitWrites(kv(), &batch_, meta::Durability::kSynced).Annotate("write repairs");
}

Status Checker::Check() {
  CKPTFS_RETURN_IF_ERROR(Open());
  CKPTFS_RETURN_IF_ERROR(LoadNamespace());
  known_max_ino_ = max_ino_;
  // The segments first: a lost+found the namespace checks create takes an
  // inode number above every one their records name.
  CKPTFS_RETURN_IF_ERROR(LoadSegments());
  CKPTFS_RETURN_IF_ERROR(ScanSegments());
  CheckNamespace();
  CKPTFS_RETURN_IF_ERROR(CheckExtents());
  if (opt_.repair) {
    CKPTFS_RETURN_IF_ERROR(AdoptUnknownInodes());
    RecoverExtents();
    CKPTFS_RETURN_IF_ERROR(FinishAdopted());
  }
  CheckDataBytes();
  CheckSegments();
  CKPTFS_RETURN_IF_ERROR(CheckDataFiles());
  CKPTFS_RETURN_IF_ERROR(CheckXattrs());
  CheckSeals();
  CKPTFS_RETURN_IF_ERROR(CheckSnapshots());
  CheckCounters();
  if (opt_.repair) {
    Status s = ApplyRepairs();
    if (!s.ok()) return s.Annotate("repair failed");
  }
  return Status::OK();
}

Result<FsckReport> Checker::Run() {
  Status s = Check();
  Status closed = index_ != nullptr ? index_->Close() : Status::OK();
  if (!s.ok()) {
    if (!closed.ok()) s = Status(s.code(), s.message() + "; then closing the index: " + closed.message());
    return s;
  }
  CKPTFS_RETURN_IF_ERROR(closed);
  if (Status b = BringForward(); !b.ok()) return b.Annotate("repair failed");
  for (const FsckFinding& f : report_.findings) report_.counts[f.kind]++;
  for (uint64_t ino : lost_inos_) report_.lost_files.push_back(PathOf(ino));
  for (const std::string& p : lost_paths_) report_.lost_files.push_back(p);
  std::sort(report_.lost_files.begin(), report_.lost_files.end());
  report_.lost_files.erase(std::unique(report_.lost_files.begin(), report_.lost_files.end()),
                           report_.lost_files.end());
  for (const auto& [ino, n] : nodes_) {
    if (n.created) continue;
    if (n.is_dir) {
      report_.dirs_checked++;
    } else {
      report_.files_checked++;
    }
  }
  return std::move(report_);
}

}  // namespace fsck
}  // namespace ckptfs::engine
