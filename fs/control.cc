// The control directory MOUNT/.ckptfs/ and its files.
#include "fs/control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "fs/filesystem.h"

namespace ckptfs::fs {

using engine::Attr;
using engine::Ino;
using engine::Result;
using engine::Status;

namespace {

constexpr std::string_view kStatsName = "stats";
constexpr std::string_view kConfigName = "config";

std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\r\n";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

engine::Timespec Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return {static_cast<int64_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec)};
}

// Wall-clock time the control files were first needed: their times never change.
engine::Timespec MountTime() {
  static const engine::Timespec t = Now();
  return t;
}

nlohmann::ordered_json EngineJson(const engine::EngineStats& s) {
  return {
      {"reads", s.reads},
      {"read_bytes", s.read_bytes},
      {"writes", s.writes},
      {"write_bytes", s.write_bytes},
      {"backing_reads", s.backing_reads},
      {"backing_read_bytes", s.backing_read_bytes},
      {"coalesced_reads", s.coalesced_reads},
      {"cache_hits", s.cache_hits},
      {"cache_misses", s.cache_misses},
      {"inline_writes", s.inline_writes},
      {"records_written", s.records_written},
      {"stored_bytes", s.stored_bytes},
      {"fsyncs", s.fsyncs},
      {"device_syncs", s.device_syncs},
      {"checksum_errors", s.checksum_errors},
      {"segments", s.segments},
      {"live_bytes", s.live_bytes},
      {"dead_bytes", s.dead_bytes},
  };
}

nlohmann::ordered_json OptionsJson(const MountOptions& o) {
  return {
      {"coalesce_gap", o.store.coalesce_gap},
      {"coalesce_max", o.store.coalesce_max},
      {"cache_size", o.store.cache_bytes},
      {"compression", o.store.compression_level},
      {"segment_size", o.store.segment_target_bytes},
      {"inline_max", o.store.inline_max_bytes},
      {"min_free", o.store.min_free_bytes},
      {"threads", o.threads},
      {"readahead", o.readahead},
      {"attr_timeout", o.attr_timeout},
      {"entry_timeout", o.entry_timeout},
      {"allow_other", o.allow_other},
      {"ro", o.read_only},
      {"writeback_cache", o.writeback_cache},
  };
}

}  // namespace

Attr Control::MakeAttr(Ino ino) const {
  Attr a;
  a.ino = ino;
  a.uid = fs_->owner_uid();
  a.gid = fs_->owner_gid();
  a.atime = a.mtime = a.ctime = MountTime();
  a.parent = engine::kRootIno;
  if (ino == kControlDirIno) {
    a.mode = S_IFDIR | 0555;
    a.nlink = 2;
  } else {
    a.mode = S_IFREG | (ino == kConfigIno && !fs_->options().read_only ? 0644 : 0444);
    a.nlink = 1;
  }
  return a;
}

Result<Attr> Control::Lookup(Ino parent, std::string_view name) const {
  if (IsControlName(parent, name)) return MakeAttr(kControlDirIno);
  if (parent == kControlDirIno) {
    if (name == kStatsName) return MakeAttr(kStatsIno);
    if (name == kConfigName) return MakeAttr(kConfigIno);
  }
  return Status::Errno(ENOENT);
}

Result<Attr> Control::GetAttr(Ino ino) const {
  if (ino == kControlDirIno || ino == kStatsIno || ino == kConfigIno) return MakeAttr(ino);
  return Status::Errno(ESTALE, "no such control inode");
}

void Control::List(std::string_view after,
                   const std::function<bool(const engine::DirEntry&)>& fn) const {
  // In name order.
  const engine::DirEntry entries[] = {
      {std::string(kConfigName), kConfigIno, S_IFREG},
      {std::string(kStatsName), kStatsIno, S_IFREG},
  };
  for (const engine::DirEntry& e : entries) {
    if (!after.empty() && e.name <= after) continue;
    if (!fn(e)) return;
  }
}

Result<std::unique_ptr<ControlHandle>> Control::Open(Ino ino, int flags, uid_t uid) {
  if (ino == kControlDirIno) return Status::Errno(EISDIR);
  if (ino != kStatsIno && ino != kConfigIno) return Status::Errno(ESTALE);
  const bool writing = (flags & O_ACCMODE) != O_RDONLY;
  if (writing) {
    if (ino == kStatsIno) return Status::Errno(EACCES, "stats is read-only");
    if (fs_->options().read_only) return Status::Errno(EROFS);
    if (uid != fs_->owner_uid() && uid != 0) {
      return Status::Errno(EACCES, "only the mount's owner may change the config");
    }
  }
  auto h = std::make_unique<ControlHandle>();
  h->ino = ino;
  h->content = ino == kStatsIno ? StatsJson() : fs_->store().GetConfig();
  return h;
}

std::string Control::Read(ControlHandle& h, uint64_t offset, size_t size) const {
  std::lock_guard<std::mutex> lock(h.mu);
  if (offset >= h.content.size()) return {};
  return h.content.substr(offset, size);
}

Status Control::Apply(std::string_view line) {
  line = Trim(line);
  if (line.empty() || line.front() == '#') return Status::OK();
  const size_t eq = line.find('=');
  if (eq == std::string_view::npos) {
    return Status::Errno(EINVAL, "expected key=value, got '" + std::string(line) + "'");
  }
  return fs_->store().SetConfig(Trim(line.substr(0, eq)), Trim(line.substr(eq + 1)));
}

Status Control::Write(ControlHandle& h, std::string_view data) {
  std::lock_guard<std::mutex> lock(h.mu);
  h.pending.append(data);
  size_t nl;
  while ((nl = h.pending.find('\n')) != std::string::npos) {
    Status st = Apply(std::string_view(h.pending).substr(0, nl));
    if (!st.ok()) {
      h.pending.clear();
      return st;
    }
    h.pending.erase(0, nl + 1);
  }
  return Status::OK();
}

Status Control::Flush(ControlHandle& h) {
  std::lock_guard<std::mutex> lock(h.mu);
  std::string line;
  line.swap(h.pending);
  return Apply(line);
}

std::string Control::StatsJson() const {
  Filesystem& fs = *fs_;
  const OpStats& ops = fs.op_stats();
  nlohmann::ordered_json op_counts = nlohmann::ordered_json::object();
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    op_counts[kOpNames[i]] = ops.Get(static_cast<Op>(i));
  }
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fs.started()).count();
  nlohmann::ordered_json j = {
      {"pid", static_cast<int64_t>(getpid())},
      {"store", fs.options().store_dir},
      {"mountpoint", fs.options().mountpoint},
      {"uptime_s", uptime},
      {"options", OptionsJson(fs.options())},
      {"engine", EngineJson(fs.store().GetStats())},
      {"fs",
       {
           {"ops", op_counts},
           {"errors", ops.errors()},
           {"read_bytes", ops.read_bytes()},
           {"write_bytes", ops.write_bytes()},
           {"kernel_inodes", fs.lookups().Size()},
           {"open_files", fs.open_files.load(std::memory_order_relaxed)},
           {"open_dirs", fs.open_dirs.load(std::memory_order_relaxed)},
       }},
  };
  return j.dump(2) + "\n";
}

}  // namespace ckptfs::fs
