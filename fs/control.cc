// The control directory MOUNT/.ckptfs/ and its files.
#include "fs/control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <variant>

#include "options/option_table.h"
#include "stats/stats.h"

namespace ckptfs::fs {

using engine::Attr;
using engine::Ino;
using engine::Result;
using engine::Status;

namespace {

constexpr std::string_view kStatsName = "stats";
constexpr std::string_view kConfigName = "config";
constexpr std::string_view kMetricsName = "metrics";
// The config key that runs a compaction instead of changing a setting.
constexpr std::string_view kCompactKey = "compact";

std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\r\n";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

engine::Timespec Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);  // as engine::Now
  return {static_cast<int64_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec)};
}

// Wall-clock time the control files were first needed: their times never change.
engine::Timespec MountTime() {
  static const engine::Timespec t = Now();
  return t;
}


// Whether background compaction runs (never on a read-only mount) and the
// dead bytes, over all segments, at which it starts a pass while the
// segments hold `live` bytes (engine::BackgroundCompactThreshold; 0 when off).
nlohmann::ordered_json BackgroundCompactionJson(const MountOptions& o, uint64_t live) {
  const uint64_t threshold = o.read_only ? 0 : engine::BackgroundCompactThreshold(o.store, live);
  return {{"enabled", threshold != 0}, {"threshold_dead_bytes", threshold}};
}

}  // namespace

MountOptions Control::EffectiveOptions() const {
  MountOptions o = *options_;
  o.store = store_->GetOptions();
  return o;
}

Attr Control::MakeAttr(Ino ino) const {
  Attr a;
  a.ino = ino;
  a.uid = mount_->owner_uid();
  a.gid = mount_->owner_gid();
  a.atime = a.mtime = a.ctime = MountTime();
  a.parent = engine::kRootIno;
  if (ino == kControlDirIno) {
    a.mode = S_IFDIR | 0555;
    a.nlink = 2;
  } else {
    a.mode = S_IFREG | (ControlKind(ino) == kConfigIno && !options_->read_only ? 0644 : 0444);
    a.nlink = 1;
  }
  return a;
}

Attr Control::MakeAttr(Ino ino, const Snapshot& s) const {
  Attr a = MakeAttr(ino);
  a.size = s.content.size();
  a.mtime = a.ctime = s.mtime;
  return a;
}

Result<Control::Made> Control::Refresh(Ino kind) {
  auto s = std::make_shared<Snapshot>();
  if (kind == kStatsIno) {
    CKPTFS_ASSIGN_OR_RETURN(s->content, StatsJson());
  } else if (kind == kMetricsIno) {
    CKPTFS_ASSIGN_OR_RETURN(s->content, MetricsText());
  } else {
    s->content = ConfigText();
  }
  MutexLock lock(&mu_);
  // Every snapshot gets an mtime of its own, later than the last one.
  engine::Timespec t = Now();
  if (t.sec < last_mtime_.sec || (t.sec == last_mtime_.sec && t.nsec <= last_mtime_.nsec)) {
    t = last_mtime_;
    if (++t.nsec == 1000000000) t = {t.sec + 1, 0};
  }
  s->mtime = last_mtime_ = t;
  const Ino ino = kind | (++serial_ << 8);
  newest_[kind] = s;
  KeepLocked(ino, s);
  return Made{ino, std::move(s)};
}

Result<std::shared_ptr<const Control::Snapshot>> Control::SnapshotOf(Ino ino) {
  const Ino kind = ControlKind(ino);
  if (kind != kStatsIno && kind != kConfigIno && kind != kMetricsIno) {
    return Status::Errno(ESTALE, "no such control inode");
  }
  {
    MutexLock lock(&mu_);
    auto it = snapshots_.find(ino);
    if (it != snapshots_.end()) return it->second;
    auto newest = newest_.find(kind);
    if (newest != newest_.end()) return newest->second;
  }
  CKPTFS_ASSIGN_OR_RETURN(Made made, Refresh(kind));
  return std::move(made.snapshot);
}

Result<Attr> Control::Lookup(Ino parent, std::string_view name) {
  if (IsControlName(parent, name)) return MakeAttr(kControlDirIno);
  if (parent == kControlDirIno) {
    Ino kind = 0;
    if (name == kStatsName) kind = kStatsIno;
    if (name == kConfigName) kind = kConfigIno;
    if (name == kMetricsName) kind = kMetricsIno;
    if (kind != 0) {
      CKPTFS_ASSIGN_OR_RETURN(const Made made, Refresh(kind));
      return MakeAttr(made.ino, *made.snapshot);
    }
  }
  return Status::Errno(ENOENT);
}

Result<Attr> Control::GetAttr(Ino ino) {
  if (ino == kControlDirIno) return MakeAttr(ino);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> s, SnapshotOf(ino));
  return MakeAttr(ino, *s);
}

void Control::List(std::string_view after,
                   const std::function<bool(const engine::DirEntry&)>& fn) const {
  // In name order.
  const engine::DirEntry entries[] = {
      {std::string(kConfigName), kConfigIno, S_IFREG},
      {std::string(kMetricsName), kMetricsIno, S_IFREG},
      {std::string(kStatsName), kStatsIno, S_IFREG},
  };
  for (const engine::DirEntry& e : entries) {
    if (!after.empty() && e.name <= after) continue;
    if (!fn(e)) return;
  }
}

Result<std::string> Control::Read(Ino ino, uint64_t offset, size_t size) {
  if (ino == kControlDirIno) return Status::Errno(EISDIR);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> s, SnapshotOf(ino));
  if (offset >= s->content.size()) return std::string();
  return s->content.substr(offset, size);
}

namespace {

// The whole lines of `data`, written at `offset` over `held`, that hold a
// byte it changes; all of `data` when it lies past `held`.
std::string_view ChangedLines(std::string_view held, uint64_t offset, std::string_view data) {
  if (offset >= held.size()) return data;
  held.remove_prefix(offset);
  size_t first = 0;
  while (first < data.size() && first < held.size() && data[first] == held[first]) ++first;
  if (first == data.size()) return {};
  size_t end = data.size();
  while (end > first && end <= held.size() && data[end - 1] == held[end - 1]) --end;
  const size_t nl_before = first == 0 ? std::string_view::npos : data.rfind('\n', first - 1);
  const size_t start = nl_before == std::string_view::npos ? 0 : nl_before + 1;
  const size_t nl_after = data.find('\n', end - 1);
  const size_t stop = nl_after == std::string_view::npos ? data.size() : nl_after + 1;
  return data.substr(start, stop - start);
}

}  // namespace

Status Control::Write(Ino ino, uint64_t offset, std::string_view data, uid_t uid) {
  const Ino kind = ControlKind(ino);
  if (kind == kControlDirIno) return Status::Errno(EISDIR);
  if (kind == kStatsIno || kind == kMetricsIno) {
    return Status::Errno(EACCES, "stats and metrics are read-only");
  }
  if (kind != kConfigIno) return Status::Errno(ESTALE);
  if (options_->read_only) return Status::Errno(EROFS);
  if (uid != mount_->owner_uid() && uid != 0) {
    return Status::Errno(EACCES, "only the mount's owner may change the config");
  }
  MutexLock lock(&write_mu_);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> s, SnapshotOf(ino));
  const std::string_view fresh = ChangedLines(s->content, offset, data);
  // Lines apply up to the first that fails; what was written becomes part
  // of the snapshot either way, as it is part of the kernel's pages.
  Status st = Status::OK();
  for (std::string_view rest = fresh; !rest.empty() && st.ok();) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    st = Apply(line);
    if (!st.ok()) {
      MutexLock l(&mu_);
      last_refusal_ = "'" + std::string(Trim(line)) + "': " + st.ToString();
    }
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  auto next = std::make_shared<Snapshot>(*s);
  if (next->content.size() < offset) next->content.resize(offset, '\n');
  next->content.replace(offset, data.size(), data);
  Keep(ino, std::move(next));
  return st;
}

Result<Attr> Control::Truncate(Ino ino, uint64_t size) {
  MutexLock lock(&write_mu_);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> s, SnapshotOf(ino));
  if (size >= s->content.size()) return MakeAttr(ino, *s);
  auto next = std::make_shared<Snapshot>(*s);
  next->content.resize(size);
  const Attr a = MakeAttr(ino, *next);
  Keep(ino, std::move(next));
  return a;
}

void Control::Keep(Ino ino, std::shared_ptr<const Snapshot> s) {
  MutexLock lock(&mu_);
  KeepLocked(ino, std::move(s));
}

void Control::KeepLocked(Ino ino, std::shared_ptr<const Snapshot> s) {
  snapshots_[ino] = std::move(s);
  while (snapshots_.size() > kMaxSnapshots) snapshots_.erase(snapshots_.begin());
}

Status Control::Apply(std::string_view line) {
  line = Trim(line);
  if (line.empty() || line.front() == '#') return Status::OK();
  const size_t eq = line.find('=');
  if (eq == std::string_view::npos) {
    return Status::Errno(EINVAL, "expected key=value, got '" + std::string(line) + "'");
  }
  const std::string_view key = Trim(line.substr(0, eq));
  const std::string_view value = Trim(line.substr(eq + 1));
  if (key == kCompactKey) {
    CKPTFS_ASSIGN_OR_RETURN(const engine::CompactOptions o, options::ParseCompactRequest(value));
    return store_->Compact(o).status();
  }
  return options::ApplyRuntimeOption(*store_, key, value);
}

std::string Control::ConfigText() const {
  std::string text = options::OptionLines(EffectiveOptions());
  if (std::optional<engine::CompactionRecord> last = store_->LastCompaction()) {
    text += stats::LastCompactionLines(*last);
  }
  MutexLock l(&mu_);
  if (!last_refusal_.empty()) text += "# last refused: " + last_refusal_ + "\n";
  return text;
}

Result<nlohmann::ordered_json> Control::StatsObject() const {
  CKPTFS_ASSIGN_OR_RETURN(const engine::EngineStats engine_stats, store_->GetStats());
  CKPTFS_ASSIGN_OR_RETURN(nlohmann::ordered_json summary, stats::StoreSummary(*store_));
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const MountOptions effective = EffectiveOptions();
  nlohmann::ordered_json j = {
      {"pid", static_cast<int64_t>(getpid())},
      {"store", options_->store_dir},
      {"mountpoint", options_->mountpoint},
      {"uptime_s", uptime},
      {"options", options::OptionsJson(effective)},
      {"memory", mount_->MemoryJson()},
      {"engine", stats::EngineStatsJson(engine_stats)},
      {"fs", mount_->RequestsJson()},
  };
  for (auto it = summary.begin(); it != summary.end(); ++it) j[it.key()] = it.value();
  if (std::string peer = store_->PeerAddress(); !peer.empty()) j["peer_address"] = peer;
  j["background_compaction"] =
      BackgroundCompactionJson(effective, j["storage"]["live_bytes"].get<uint64_t>());
  return j;
}

Result<std::string> Control::StatsJson() const {
  CKPTFS_ASSIGN_OR_RETURN(const nlohmann::ordered_json j, StatsObject());
  return j.dump(2) + "\n";
}

Result<std::string> Control::MetricsText() const {
  CKPTFS_ASSIGN_OR_RETURN(const nlohmann::ordered_json j, StatsObject());
  return stats::PrometheusText(j, CKPTFS_VERSION);
}

}  // namespace ckptfs::fs
