// Shared mount state, attribute conversion, the init callback and the
// handler table.
#include "fs/filesystem.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "fs/mount_checks.h"
#include "stats/stats.h"

namespace ckptfs::fs {

using engine::Attr;
using engine::Ino;
using engine::Result;

namespace {

// Preferred I/O size reported in st_blksize: the largest write the kernel
// sends us, so that cp and friends use big buffers.
constexpr blksize_t kPreferredIoSize = 1 << 20;
// A mount that served no request for this long gives memory back.
constexpr std::chrono::milliseconds kIdleReleaseAfter{5000};
// ... and takes a backup of the index then, when the newest is older than
// this many seconds.
constexpr int64_t kIndexBackupEvery = 3600;

}  // namespace

Filesystem::Filesystem(engine::Store* store, const MountOptions& options)
    : store_(store),
      options_(options),
      owner_uid_(getuid()),
      owner_gid_(getgid()),
      control_(std::make_unique<Control>(store, &options_, this)),
      killpriv_(store),
      auto_seal_(options.seal_renamed, options.seal_marker),
      idle_release_([this] { return op_stats_.requests(); },
                    [this] {
                      if (engine::Status st = store_->ReleaseIdleMemory(); !st.ok()) {
                        std::fprintf(stderr, "ckptfs: %s\n", st.ToString().c_str());
                      }
                      if (engine::Status st = store_->BackupIndex(kIndexBackupEvery); !st.ok()) {
                        std::fprintf(stderr, "ckptfs: %s\n", st.ToString().c_str());
                      }
                      ReturnFreeMemory();
                    },
                    kIdleReleaseAfter),
      open_files_(store),
      lookups_(store) {}

Filesystem::~Filesystem() {
  // Pins left when the session ended without destroy (it never started).
  if (engine::Status st = lookups_.ReleaseAll(); !st.ok()) {
    std::fprintf(stderr, "ckptfs: releasing files at unmount: %s\n", st.ToString().c_str());
  }
}

Result<Attr> Filesystem::GetAttr(Ino ino) {
  if (IsControl(ino)) return control_->GetAttr(ino);
  return store_->GetAttr(ino);
}

struct stat Filesystem::ToStat(const Attr& a) const {
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_rdev = a.rdev;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blksize = kPreferredIoSize;
  // Holes excluded, reserved space included (preallocated blocks on ext4).
  const uint64_t reserved = S_ISREG(a.mode) ? store_->ReservedBytes(a.ino) : 0;
  st.st_blocks = static_cast<blkcnt_t>((a.data_bytes + reserved + 511) / 512);
  st.st_atim = {static_cast<time_t>(a.atime.sec), static_cast<long>(a.atime.nsec)};
  st.st_mtim = {static_cast<time_t>(a.mtime.sec), static_cast<long>(a.mtime.nsec)};
  st.st_ctim = {static_cast<time_t>(a.ctime.sec), static_cast<long>(a.ctime.nsec)};
  return st;
}

// The options' timeouts, within what the store allows (Store::CacheSeconds
// and CacheSecondsOf: on a shared store, while this mount is the only
// mounted host, or owns the inode). What is sealed never changes: the
// kernel keeps it with no timeout, whatever the options say.
double Filesystem::AttrTimeout(Ino ino) const {
  if (IsControlFile(ino)) return 0.0;
  if (store_->KnownSealed(ino)) return store_->CacheSecondsOf(ino);
  return std::min(options_.attr_timeout, store_->CacheSecondsOf(ino));
}

double Filesystem::EntryTimeout(Ino parent, Ino ino) const {
  if (IsControlFile(ino) || parent == 0) return 0.0;
  if (store_->KnownSealed(parent)) return store_->CacheSecondsOfName(parent, ino);
  return std::min(options_.entry_timeout, store_->CacheSecondsOfName(parent, ino));
}

double Filesystem::NegativeTimeout() const {
  return std::min(options_.negative_timeout, store_->CacheSeconds());
}

fuse_entry_param Filesystem::ToEntry(const Attr& a, Ino parent) const {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = a.ino;
  // The kernel takes the root's generation to be 0 (a ".." lookup can
  // answer with the root).
  e.generation = a.ino == engine::kRootIno ? 0 : a.generation;
  e.attr = ToStat(a);
  e.attr_timeout = AttrTimeout(a.ino);
  e.entry_timeout = EntryTimeout(parent, a.ino);
  return e;
}

void Filesystem::ReplyEntry(Request& r, const Attr& a, Ino parent) {
  const fuse_entry_param e = ToEntry(a, parent);
  if (engine::Status st = CountLookup(a); !st.ok()) return r.Fail(st);
  if (!r.Entry(e)) Forget(a.ino, 1);
}

engine::Status Filesystem::CountLookup(const Attr& a) {
  return lookups_.Add(a.ino, !IsControl(a.ino));
}

void Filesystem::Forget(Ino ino, uint64_t n) {
  bool gone = false;
  if (!lookups_.Forget(ino, n, &gone).ok()) op_stats_.CountError();
  if (gone) killpriv_.Forget(ino);  // a cache: a race only costs a check
}

void Filesystem::Accessed(Ino ino, bool directory) {
  if (IsControl(ino) || (directory && options_.nodiratime)) return;
  const std::optional<engine::AtimeRule> rule = AtimeRuleOf(options_.atime);
  if (!rule) return;
  engine::Status st = store_->Accessed(ino, *rule);
  // An inode removed since the read has no access time left to move.
  if (!st.ok() && st.code() != ENOENT) op_stats_.CountError();
}

engine::Status Filesystem::SyncChange(Ino ino, bool directory_change) {
  if (!options_.sync && !(directory_change && options_.dirsync)) return engine::Status::OK();
  return store_->Fsync(ino, /*datasync=*/false);
}

void Filesystem::Destroy(void* userdata) {
  Filesystem* fs = Of(userdata);
  if (engine::Status st = fs->lookups_.ReleaseAll(); !st.ok()) {
    std::fprintf(stderr, "ckptfs: releasing files at unmount: %s\n", st.ToString().c_str());
  }
}

std::string Filesystem::KernelProtocol() const {
  const uint32_t v = kernel_protocol_.load(std::memory_order_relaxed);
  if (v == 0) return "";
  return std::to_string(v >> 16) + "." + std::to_string(v & 0xffff);
}

std::string Filesystem::PassthroughText() const {
  switch (passthrough_.load(std::memory_order_relaxed)) {
    case kActive:
      return "yes";
    case kVerifyReads:
      return "no: verify_reads checks every read in the daemon";
    case kNoKernel:
      return "no: the kernel does not offer it (Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH)";
    case kNoPrivilege:
      return "no: " + PassthroughPrivilege();
    default:
      return "no: not asked for (mount option passthrough)";
  }
}

namespace {

// Asks the kernel for `cap` when `on` and it offers it; else turns it off.
void Want(fuse_conn_info* conn, uint64_t cap, bool on) {
  if (on && (conn->capable_ext & cap)) {
    fuse_set_feature_flag(conn, cap);
  } else {
    fuse_unset_feature_flag(conn, cap);
  }
}

}  // namespace

void Filesystem::WantFeatures(fuse_conn_info* conn, const MountOptions& o) {
  Want(conn, FUSE_CAP_ASYNC_READ, true);
  Want(conn, FUSE_CAP_PARALLEL_DIROPS, true);
  Want(conn, FUSE_CAP_READDIRPLUS, true);
  Want(conn, FUSE_CAP_READDIRPLUS_AUTO, true);
  Want(conn, FUSE_CAP_ASYNC_DIO, true);
  Want(conn, FUSE_CAP_AUTO_INVAL_DATA, true);
  Want(conn, FUSE_CAP_CACHE_SYMLINKS, true);
  // File handles (name_to_handle_at, NFS) that outlive the kernel's caches
  // and remounts: inode numbers are persistent and never reused, and LOOKUP
  // answers "." and ".." (entries.cc).
  Want(conn, FUSE_CAP_EXPORT_SUPPORT, true);
  Want(conn, FUSE_CAP_WRITEBACK_CACHE, o.UsesWritebackCache());
  // Splicing would only move the copy: the engine checksums (and may
  // compress) every byte it stores or returns, so it needs them in memory.
  Want(conn, FUSE_CAP_SPLICE_READ, false);
  Want(conn, FUSE_CAP_SPLICE_WRITE, false);
  Want(conn, FUSE_CAP_SPLICE_MOVE, false);
  // The kernel applies the umask (we also mask with the umask it sends, which
  // is then a no-op).
  Want(conn, FUSE_CAP_DONT_MASK, false);
  // We clear set-ID bits on write, truncate and chown (fs/set_id_bits.h),
  // so the kernel marks the mount SB_NOSEC and stops asking for
  // security.capability before every write. Without it the kernel clears
  // them itself with a SETATTR of the mode.
  Want(conn, FUSE_CAP_HANDLE_KILLPRIV, false);
  Want(conn, FUSE_CAP_HANDLE_KILLPRIV_V2, true);
}

int Filesystem::ChoosePassthrough(fuse_conn_info* conn, const MountOptions& o) {
  // The kernel refuses passthrough along with the write-back cache, which
  // MountOptions::UsesWritebackCache turns off when it is asked for.
  // Registering a backing file needs CAP_SYS_ADMIN.
  if ((o.passthrough || o.passthrough_writes) && o.verify_reads) return kVerifyReads;
  if (!o.AsksPassthrough()) return kNotAsked;
  if (!(conn->capable_ext & FUSE_CAP_PASSTHROUGH)) return kNoKernel;
  if (!PassthroughPrivilege().empty()) return kNoPrivilege;
  Want(conn, FUSE_CAP_PASSTHROUGH, true);
  return kActive;
}

void Filesystem::Init(void* userdata, fuse_conn_info* conn) {
  Filesystem* fs = Of(userdata);
  const MountOptions& o = fs->options_;
  fs->kernel_protocol_.store((conn->proto_major << 16) | (conn->proto_minor & 0xffff),
                             std::memory_order_relaxed);
  WantFeatures(conn, o);
  const int passthrough = ChoosePassthrough(conn, o);
  fs->passthrough_.store(passthrough, std::memory_order_relaxed);
  fs->killpriv_.set_enabled(fuse_get_feature_flag(conn, FUSE_CAP_HANDLE_KILLPRIV_V2));
  // O_TRUNC in the OPEN (data.cc) when every OPEN is answered, so that an
  // open for writing that truncates an existing file finds it empty and can
  // be passed through as a new file's. Without passthrough opens send no
  // request (no_open) and O_TRUNC must come as a SETATTR; without
  // KILLPRIV_V2 the kernel clears set-ID bits with the SETATTR it would
  // drop.
  Want(conn, FUSE_CAP_ATOMIC_O_TRUNC, passthrough == kActive && fs->kills_suidgid());
  fs->atomic_o_trunc_.store(fuse_get_feature_flag(conn, FUSE_CAP_ATOMIC_O_TRUNC),
                            std::memory_order_relaxed);
  conn->max_write = kMaxWrite;
  // conn->max_readahead starts at the kernel's maximum; keep it.
  // Room for the kernel's readahead and async direct I/O to overlap.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
}

namespace {

double PerFile(uint64_t requests, uint64_t files) {
  return files == 0 ? 0.0 : static_cast<double>(requests) / static_cast<double>(files);
}

nlohmann::ordered_json RunJson(const FileRun::Summary& run) {
  return {{"files", run.files},
          {"requests_per_file", run.requests_per_file},
          {"seconds", run.seconds}};
}

}  // namespace

nlohmann::ordered_json Filesystem::MemoryJson() {
  const MountOptions o = control_->EffectiveOptions();
  const DaemonMemory bound = DaemonMemoryBound(o.store, o.threads, lookups_.Size());
  nlohmann::ordered_json b = stats::EngineMemoryJson(bound.engine);
  b["threads"] = bound.threads;
  b["program"] = bound.program;
  b["inodes"] = bound.inodes;
  return {
      {"resident_bytes", ResidentBytes()},
      {"bound_bytes", bound.Total()},
      {"bound", b},
      {"held", stats::EngineMemoryJson(store_->MemoryUse())},
      // Times the mount gave memory back after going idle.
      {"idle_releases", idle_release_.releases()},
  };
}

nlohmann::ordered_json Filesystem::RequestsJson() {
  const OpStats& ops = op_stats_;
  nlohmann::ordered_json op_counts = nlohmann::ordered_json::object();
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    op_counts[kOpNames[i]] = ops.Get(static_cast<Op>(i));
  }
  return {
      {"ops", op_counts},
      {"requests", ops.requests()},
      {"files_created", ops.files_created()},
      {"files_read", ops.files_read()},
      // Requests of every kind since mount per regular file made, and per
      // file read from its start: what a save into a fresh mount, or a
      // restore from one, cost per file.
      {"requests_per_file_created", PerFile(ops.requests(), ops.files_created())},
      {"requests_per_file_read", PerFile(ops.requests(), ops.files_read())},
      // The same for the latest save and restore alone (fs/op_stats.h
      // FileRun): runs of files created, or read, less than 1 s apart.
      {"last_create", RunJson(ops.LastCreate())},
      {"last_restore", RunJson(ops.LastRestore())},
      {"errors", ops.errors()},
      {"read_bytes", ops.read_bytes()},
      {"write_bytes", ops.write_bytes()},
      {"kernel_inodes", lookups_.Size()},
      {"pinned_files", lookups_.pinned()},
      {"open_dirs", open_dirs.load(std::memory_order_relaxed)},
      {"libfuse", LibfuseVersion()},
      {"kernel_protocol", KernelProtocol()},
      {"handle_killpriv_v2", kills_suidgid()},
      {"atomic_o_trunc", atomic_o_trunc()},
      // Read-only opens the kernel passes through to data files, and how
      // the others went (fs/open_files.h).
      {"passthrough",
       {
           {"in_use", PassthroughText()},
           {"passthrough_opens", open_files_.passthrough_opens()},
           {"daemon_opens", open_files_.daemon_opens()},
           {"backing_files", open_files_.backing_files()},
           {"backing_failures", open_files_.backing_failures()},
           {"last_backing_error", open_files_.last_backing_error()},
           {"busy", open_files_.busy()},
           {"writes", passthrough_writes()},
           {"direct_write_errors", open_files_.direct_write_errors()},
       }},
  };
}

}  // namespace ckptfs::fs
