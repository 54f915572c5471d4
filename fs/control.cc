// The control directory MOUNT/.ckptfs/ and its files.
#include "fs/control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <variant>

#include "fs/filesystem.h"
#include "fs/mount.h"
#include "fs/option_table.h"

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
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const OptionSpec& spec : OptionTable()) {
    std::visit([&](auto v) { j[std::string(spec.name)] = v; }, spec.field.get(o));
  }
  return j;
}

// The last_compaction.* lines of Store::GetConfig as an object; empty when
// no compaction ran since the store was opened.
nlohmann::ordered_json LastCompactionJson(const std::string& config) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  constexpr std::string_view kPrefix = "last_compaction.";
  size_t pos = 0;
  while (pos < config.size()) {
    size_t nl = config.find('\n', pos);
    if (nl == std::string::npos) nl = config.size();
    const std::string_view line(config.data() + pos, nl - pos);
    pos = nl + 1;
    const size_t eq = line.find('=');
    if (line.substr(0, kPrefix.size()) != kPrefix || eq == std::string_view::npos) continue;
    const std::string key(line.substr(kPrefix.size(), eq - kPrefix.size()));
    const std::string value(line.substr(eq + 1));
    if (key == "dry_run") {
      j[key] = value == "1";
    } else if (key == "seconds") {
      j[key] = std::strtod(value.c_str(), nullptr);
    } else if (key == "segments") {
      nlohmann::ordered_json ids = nlohmann::ordered_json::array();
      size_t b = 0;
      while (b < value.size()) {
        size_t comma = value.find(',', b);
        if (comma == std::string::npos) comma = value.size();
        if (comma > b) ids.push_back(std::strtoull(value.substr(b, comma - b).c_str(), nullptr, 10));
        b = comma + 1;
      }
      j[key] = std::move(ids);
    } else {
      j[key] = std::strtoull(value.c_str(), nullptr, 10);
    }
  }
  return j;
}

Result<nlohmann::ordered_json> SummaryJson(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(engine::NamespaceCounts n, store.CountNamespace());
  uint64_t segments = 0, file_bytes = 0, live = 0, dead = 0;
  for (const engine::SegmentInfo& seg : store.ListSegments()) {
    segments++;
    file_bytes += seg.file_bytes;
    live += static_cast<uint64_t>(std::max<int64_t>(seg.live_bytes, 0));
    dead += static_cast<uint64_t>(std::max<int64_t>(seg.dead_bytes, 0));
  }
  const double ratio = live + dead == 0 || file_bytes == 0
                           ? 1.0
                           : static_cast<double>(live + dead) / static_cast<double>(file_bytes);
  nlohmann::ordered_json j = {
      {"namespace",
       {
           {"files", n.files},
           {"directories", n.directories},
           {"symlinks", n.symlinks},
           {"other", n.other},
           {"logical_bytes", n.logical_bytes},
       }},
      {"storage",
       {
           {"segments", segments},
           {"segment_file_bytes", file_bytes},
           {"live_bytes", live},
           {"dead_bytes", dead},
           {"compression_ratio", ratio},
           {"index_bytes", n.index_bytes},
       }},
  };
  nlohmann::ordered_json last = LastCompactionJson(store.GetConfig());
  if (!last.empty()) j["last_compaction"] = std::move(last);
  return j;
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
  Result<nlohmann::ordered_json> summary = SummaryJson(fs.store());
  if (summary.ok()) {
    for (auto it = summary->begin(); it != summary->end(); ++it) j[it.key()] = it.value();
  } else {
    j["namespace"] = {{"error", summary.status().ToString()}};
  }
  return j.dump(2) + "\n";
}

Result<std::string> StoreSummaryJson(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(nlohmann::ordered_json j, SummaryJson(store));
  return j.dump(2) + "\n";
}

}  // namespace ckptfs::fs
