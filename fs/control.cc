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

#include "fs/filesystem.h"
#include "fs/memory.h"
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
      {"direct_writes", s.direct_writes},
      {"direct_adoptions", s.direct_adoptions},
      {"direct_adopted_bytes", s.direct_adopted_bytes},
      {"direct_rereads", s.direct_rereads},
      {"data_file_writes", s.data_file_writes},
      {"data_file_write_bytes", s.data_file_write_bytes},
      {"data_file_reads", s.data_file_reads},
      {"data_file_read_bytes", s.data_file_read_bytes},
  };
}

// The settings in effect: the mount's, with the engine's current values.
MountOptions EffectiveOptions(const Filesystem& fs) {
  MountOptions o = fs.options();
  o.store = fs.store().GetOptions();
  return o;
}

nlohmann::ordered_json EngineMemoryJson(const engine::EngineMemory& m) {
  return {
      {"record_cache", m.record_cache},
      {"index_memtables", m.index_memtables},
      {"index_block_cache", m.index_block_cache},
      {"extent_maps", m.extent_maps},
      {"verified_blocks", m.verified_blocks},
  };
}

// The daemon's resident memory, the bound for the options in effect
// (fs/memory.h) by owner, and what the engine's owners hold now.
nlohmann::ordered_json MemoryJson(Filesystem& fs) {
  const MountOptions o = EffectiveOptions(fs);
  const DaemonMemory bound = DaemonMemoryBound(o.store, o.threads, fs.lookups().Size());
  nlohmann::ordered_json b = EngineMemoryJson(bound.engine);
  b["threads"] = bound.threads;
  b["program"] = bound.program;
  b["inodes"] = bound.inodes;
  return {
      {"resident_bytes", ResidentBytes()},
      {"bound_bytes", bound.Total()},
      {"bound", b},
      {"held", EngineMemoryJson(fs.store().MemoryUse())},
      // Times the mount gave memory back after going idle.
      {"idle_releases", fs.idle_release().releases()},
  };
}

// Whether background compaction runs (never on a read-only mount) and the
// dead bytes, over all segments, at which it starts a pass while the
// segments hold `live` bytes (engine::BackgroundCompactThreshold; 0 when off).
nlohmann::ordered_json BackgroundCompactionJson(const Filesystem& fs, uint64_t live) {
  const uint64_t threshold =
      fs.options().read_only ? 0
                             : engine::BackgroundCompactThreshold(fs.store().GetOptions(), live);
  return {{"enabled", threshold != 0}, {"threshold_dead_bytes", threshold}};
}

nlohmann::ordered_json OptionsJson(const MountOptions& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const OptionSpec& spec : OptionTable()) {
    std::visit([&](auto v) { j[std::string(spec.name)] = v; }, spec.field.get(o));
  }
  return j;
}

// The segments a compaction left, each with its reason (a stable name) and
// the line that explains it.
nlohmann::ordered_json KeptJson(const std::vector<engine::KeptSegment>& kept, double ratio) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const engine::KeptSegment& k : kept) {
    a.push_back({{"segment", k.id},
                 {"reason", engine::KeptReasonName(k.reason)},
                 {"live_bytes", k.live_bytes},
                 {"dead_bytes", k.dead_bytes},
                 {"why", engine::DescribeKept(k, ratio)}});
  }
  return a;
}

nlohmann::ordered_json LastCompactionJson(const engine::CompactionRecord& c) {
  const engine::CompactReport& r = c.report;
  return {
      {"dry_run", c.dry_run},
      {"segments_rewritten", r.segments_rewritten},
      {"bytes_reclaimed", r.bytes_reclaimed},
      {"bytes_copied", r.bytes_copied},
      {"seconds", r.seconds},
      {"segments", r.segments},
      {"errors", r.errors.size()},
      {"kept", KeptJson(r.kept, c.dead_ratio)},
  };
}

double PerFile(uint64_t requests, uint64_t files) {
  return files == 0 ? 0.0 : static_cast<double>(requests) / static_cast<double>(files);
}

nlohmann::ordered_json RunJson(const FileRun::Summary& run) {
  return {{"files", run.files},
          {"requests_per_file", run.requests_per_file},
          {"seconds", run.seconds}};
}

Result<nlohmann::ordered_json> SummaryJson(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(engine::NamespaceCounts n, store.CountNamespace());
  CKPTFS_ASSIGN_OR_RETURN(std::vector<engine::SegmentInfo> list, store.ListSegments());
  uint64_t segments = 0, file_bytes = 0, live = 0, dead = 0, reclaimable = 0;
  const double default_ratio = engine::CompactOptions().dead_ratio;
  for (const engine::SegmentInfo& seg : list) {  // counters ListSegments checked
    const auto seg_live = static_cast<uint64_t>(seg.live_bytes);
    const auto seg_dead = static_cast<uint64_t>(seg.dead_bytes);
    segments++;
    file_bytes += seg.file_bytes;
    live += seg_live;
    dead += seg_dead;
    if (seg_dead > 0 && engine::CompactionTakes(seg_live, seg_dead, default_ratio)) {
      reclaimable += seg_dead;
    }
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
           {"reclaimable_bytes", reclaimable},
           {"compression_ratio", ratio},
           {"index_bytes", n.index_bytes},
           {"data_files", n.data_files},
           {"data_file_bytes", n.data_file_bytes},
       }},
  };
  if (std::optional<engine::CompactionRecord> last = store.LastCompaction()) {
    j["last_compaction"] = LastCompactionJson(*last);
  }
  return j;
}


// The numbers of the stats file that the metrics file shows, by JSON
// pointer. Counters get the suffix _total.
struct MetricSpec {
  const char* pointer;
  const char* name;
  bool counter;
  const char* help;
};

constexpr MetricSpec kMetrics[] = {
    {"/uptime_s", "uptime_seconds", false, "Seconds since the store was mounted."},
    {"/memory/resident_bytes", "memory_resident_bytes", false,
     "The daemon's resident memory (VmRSS)."},
    {"/memory/bound_bytes", "memory_bound_bytes", false,
     "The most memory the daemon holds with the options in effect (docs/DESIGN.md, Memory)."},
    {"/memory/held/record_cache", "memory_record_cache_bytes", false,
     "Memory the record cache holds."},
    {"/memory/held/index_memtables", "memory_index_memtable_bytes", false,
     "Memory the index's memtables hold."},
    {"/memory/held/index_block_cache", "memory_index_block_cache_bytes", false,
     "Memory the index's block cache holds."},
    {"/engine/reads", "reads", true, "File reads served by the engine."},
    {"/engine/read_bytes", "read_bytes", true, "Bytes of file data read."},
    {"/engine/writes", "writes", true, "File writes served by the engine."},
    {"/engine/write_bytes", "write_bytes", true, "Bytes of file data written."},
    {"/engine/backing_reads", "backing_reads", true, "Reads of segment files."},
    {"/engine/backing_read_bytes", "backing_read_bytes", true, "Bytes read from segment files."},
    {"/engine/coalesced_reads", "coalesced_reads", true,
     "Segment file reads that served more than one record."},
    {"/engine/cache_hits", "cache_hits", true, "Reads served by the record cache."},
    {"/engine/cache_misses", "cache_misses", true, "Reads the record cache could not serve."},
    {"/engine/inline_writes", "inline_writes", true, "Writes kept in the index."},
    {"/engine/records_written", "records_written", true, "Records appended to segments."},
    {"/engine/stored_bytes", "stored_bytes", true,
     "Payload bytes appended to segments, after compression."},
    {"/engine/fsyncs", "fsyncs", true, "fsync and fdatasync calls served."},
    {"/engine/device_syncs", "device_syncs", true, "Syncs of the backing files (group commit)."},
    {"/engine/checksum_errors", "checksum_errors", true, "Records whose checksum did not match."},
    {"/engine/direct_writes", "direct_writes", true,
     "Files whose data file the kernel wrote directly (passthrough_writes)."},
    {"/engine/direct_adoptions", "direct_adoptions", true,
     "Times the daemon took such a data file's bytes into the index."},
    {"/engine/direct_adopted_bytes", "direct_adopted_bytes", true,
     "Bytes those adoptions checksummed."},
    {"/engine/direct_rereads", "direct_rereads", true,
     "Adoptions that read a data file again: a write landed while it was read."},
    {"/engine/data_file_writes", "data_file_writes", true, "The daemon's writes of data files."},
    {"/engine/data_file_write_bytes", "data_file_write_bytes", true,
     "Bytes the daemon wrote to data files."},
    {"/engine/data_file_reads", "data_file_reads", true,
     "Blocks the daemon read from data files."},
    {"/engine/data_file_read_bytes", "data_file_read_bytes", true,
     "Bytes the daemon read from data files (whole blocks, to check their checksums)."},
    {"/fs/requests", "requests", true, "FUSE requests served, of every kind."},
    {"/fs/errors", "request_errors", true,
     "FUSE requests answered with an error other than ENOENT or ENODATA."},
    {"/fs/read_bytes", "fuse_read_bytes", true, "Bytes returned by READ requests."},
    {"/fs/write_bytes", "fuse_write_bytes", true, "Bytes received by WRITE requests."},
    {"/fs/files_created", "files_created", true, "Regular files created."},
    {"/fs/files_read", "files_read", true, "Regular files read from their start."},
    {"/fs/last_create/requests_per_file", "last_create_requests_per_file", false,
     "FUSE requests per file of the latest run of files created (a save)."},
    {"/fs/last_restore/requests_per_file", "last_restore_requests_per_file", false,
     "FUSE requests per file of the latest run of files read from their start (a restore)."},
    {"/fs/kernel_inodes", "kernel_inodes", false, "Inodes the kernel holds references to."},
    {"/fs/pinned_files", "pinned_files", false, "Files whose data the kernel's references keep."},
    {"/fs/open_dirs", "open_dirs", false, "Open directory handles."},
    {"/namespace/files", "files", false, "Regular files in the store."},
    {"/namespace/directories", "directories", false, "Directories in the store, the root included."},
    {"/namespace/symlinks", "symlinks", false, "Symbolic links in the store."},
    {"/namespace/logical_bytes", "logical_bytes", false,
     "Sum of the regular files' sizes, holes included."},
    {"/storage/segments", "segments", false, "Segment files."},
    {"/storage/segment_file_bytes", "segment_file_bytes", false, "Bytes of the segment files."},
    {"/storage/live_bytes", "live_bytes", false, "Logical bytes of the records files still use."},
    {"/storage/dead_bytes", "dead_bytes", false,
     "Logical bytes of records no file uses; compaction reclaims them."},
    {"/storage/reclaimable_bytes", "reclaimable_bytes", false,
     "Dead bytes of the segments a compaction at the default dead ratio would rewrite."},
    {"/background_compaction/threshold_dead_bytes", "background_compaction_threshold_dead_bytes",
     false, "Dead bytes at which background compaction starts; 0 when it is off."},
    {"/storage/compression_ratio", "compression_ratio", false,
     "Logical record bytes per segment file byte."},
    {"/storage/index_bytes", "index_bytes", false, "Bytes of the index on disk."},
    {"/storage/data_files", "data_files", false, "Large files kept in data files of their own."},
    {"/storage/data_file_bytes", "data_file_bytes", false, "Bytes the data files hold."},
    {"/last_compaction/bytes_reclaimed", "last_compaction_reclaimed_bytes", false,
     "Bytes the last compaction reclaimed."},
    {"/last_compaction/segments_rewritten", "last_compaction_segments_rewritten", false,
     "Segments the last compaction rewrote."},
};

void AppendHeader(std::string* out, const std::string& name, bool counter, const char* help) {
  *out += "# HELP " + name + " " + help + "\n";
  *out += "# TYPE " + name + (counter ? " counter\n" : " gauge\n");
}

std::string Number(const nlohmann::ordered_json& v) {
  return v.is_number_float() ? nlohmann::json(v.get<double>()).dump() : v.dump();
}

// The numbers of stats object `j` in the Prometheus text exposition format
// (version 0.0.4): one family per kMetrics entry present in `j`, and the
// requests by kind as ckptfs_requests_by_kind_total{kind="..."}.
std::string PrometheusText(const nlohmann::ordered_json& j) {
  std::string out;
  AppendHeader(&out, "ckptfs_info", false, "The daemon's versions; the value is always 1.");
  out += "ckptfs_info{version=\"" CKPTFS_VERSION "\",libfuse=" +
         nlohmann::json(j["fs"]["libfuse"].get<std::string>()).dump() + "} 1\n";
  for (const MetricSpec& m : kMetrics) {
    const nlohmann::ordered_json::json_pointer ptr(m.pointer);
    if (!j.contains(ptr) || !j[ptr].is_number()) continue;
    const std::string name = std::string("ckptfs_") + m.name + (m.counter ? "_total" : "");
    AppendHeader(&out, name, m.counter, m.help);
    out += name + " " + Number(j[ptr]) + "\n";
  }
  const std::string by_kind = "ckptfs_requests_by_kind_total";
  AppendHeader(&out, by_kind, true, "FUSE requests served, by kind (the stats file's fs.ops).");
  for (auto it = j["fs"]["ops"].begin(); it != j["fs"]["ops"].end(); ++it) {
    out += by_kind + "{kind=\"" + it.key() + "\"} " + Number(it.value()) + "\n";
  }
  return out;
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
    a.mode = S_IFREG | (ControlKind(ino) == kConfigIno && !fs_->options().read_only ? 0644 : 0444);
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
  if (fs_->options().read_only) return Status::Errno(EROFS);
  if (uid != fs_->owner_uid() && uid != 0) {
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
    CKPTFS_ASSIGN_OR_RETURN(const engine::CompactOptions o, ParseCompactRequest(value));
    return fs_->store().Compact(o).status();
  }
  return ApplyRuntimeOption(fs_->store(), key, value);
}

std::string Control::ConfigText() const {
  std::string text = OptionLines(EffectiveOptions(*fs_));
  if (std::optional<engine::CompactionRecord> last = fs_->store().LastCompaction()) {
    text += LastCompactionLines(*last);
  }
  MutexLock l(&mu_);
  if (!last_refusal_.empty()) text += "# last refused: " + last_refusal_ + "\n";
  return text;
}

Result<nlohmann::ordered_json> Control::StatsObject() const {
  Filesystem& fs = *fs_;
  CKPTFS_ASSIGN_OR_RETURN(const engine::EngineStats engine_stats, fs.store().GetStats());
  CKPTFS_ASSIGN_OR_RETURN(nlohmann::ordered_json summary, SummaryJson(fs.store()));
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
      {"options", OptionsJson(EffectiveOptions(fs))},
      {"memory", MemoryJson(fs)},
      {"engine", EngineJson(engine_stats)},
      {"fs",
       {
           {"ops", op_counts},
           {"requests", ops.requests()},
           {"files_created", ops.files_created()},
           {"files_read", ops.files_read()},
           // Requests of every kind since mount per regular file made, and
           // per file read from its start: what a save into a fresh mount,
           // or a restore from one, cost per file.
           {"requests_per_file_created", PerFile(ops.requests(), ops.files_created())},
           {"requests_per_file_read", PerFile(ops.requests(), ops.files_read())},
           // The same for the latest save and restore alone (fs/op_stats.h
           // FileRun): runs of files created, or read, less than 1 s apart.
           {"last_create", RunJson(ops.LastCreate())},
           {"last_restore", RunJson(ops.LastRestore())},
           {"errors", ops.errors()},
           {"read_bytes", ops.read_bytes()},
           {"write_bytes", ops.write_bytes()},
           {"kernel_inodes", fs.lookups().Size()},
           {"pinned_files", fs.lookups().pinned()},
           {"open_dirs", fs.open_dirs.load(std::memory_order_relaxed)},
           {"libfuse", LibfuseVersion()},
           {"kernel_protocol", fs.KernelProtocol()},
           {"handle_killpriv_v2", fs.kills_suidgid()},
           {"atomic_o_trunc", fs.atomic_o_trunc()},
           // Read-only opens the kernel passes through to data files, and
           // how the others went (fs/open_files.h).
           {"passthrough",
            {
                {"in_use", fs.PassthroughText()},
                {"passthrough_opens", fs.open_files().passthrough_opens()},
                {"daemon_opens", fs.open_files().daemon_opens()},
                {"backing_files", fs.open_files().backing_files()},
                {"backing_failures", fs.open_files().backing_failures()},
                {"last_backing_error", fs.open_files().last_backing_error()},
                {"busy", fs.open_files().busy()},
                {"writes", fs.passthrough_writes()},
                {"direct_write_errors", fs.open_files().direct_write_errors()},
            }},
       }},
  };
  for (auto it = summary.begin(); it != summary.end(); ++it) j[it.key()] = it.value();
  j["background_compaction"] =
      BackgroundCompactionJson(fs, j["storage"]["live_bytes"].get<uint64_t>());
  return j;
}

Result<std::string> Control::StatsJson() const {
  CKPTFS_ASSIGN_OR_RETURN(const nlohmann::ordered_json j, StatsObject());
  return j.dump(2) + "\n";
}

Result<std::string> Control::MetricsText() const {
  CKPTFS_ASSIGN_OR_RETURN(const nlohmann::ordered_json j, StatsObject());
  return PrometheusText(j);
}

Result<engine::CompactOptions> ParseCompactRequest(std::string_view value) {
  engine::CompactOptions o;
  const std::string_view ratio = value.substr(0, value.find(' '));
  const std::string ratio_text(ratio);
  char* end = nullptr;
  o.dead_ratio = std::strtod(ratio_text.c_str(), &end);
  if (ratio.empty() || end != ratio_text.c_str() + ratio_text.size() ||
      !(o.dead_ratio >= 0 && o.dead_ratio <= 1)) {
    return Status::Errno(EINVAL, "compact takes a dead ratio between 0 and 1, e.g. compact=0.3");
  }
  std::string_view rest = value.substr(ratio.size());
  while (!(rest = Trim(rest)).empty()) {
    const std::string_view flag = rest.substr(0, rest.find_first_of(" \t"));
    rest.remove_prefix(flag.size());
    if (flag == "dry_run" || flag == "dry_run=1") {
      o.dry_run = true;
    } else if (flag != "dry_run=0") {
      return Status::Errno(EINVAL,
                           "compact: unknown flag '" + std::string(flag) + "' (only dry_run)");
    }
  }
  return o;
}

std::string LastCompactionLines(const engine::CompactionRecord& c) {
  const engine::CompactReport& r = c.report;
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.3f", r.seconds);
  std::string ids;
  for (size_t i = 0; i < r.segments.size(); ++i) {
    ids += (i ? "," : "") + std::to_string(r.segments[i]);
  }
  // Why segments stayed: the first few (the stats file lists them all).
  constexpr size_t kKeptLines = 20;
  std::string kept;
  for (size_t i = 0; i < r.kept.size() && i < kKeptLines; ++i) {
    kept += "last_compaction.kept." + std::to_string(r.kept[i].id) + "=" +
            engine::DescribeKept(r.kept[i], c.dead_ratio) + "\n";
  }
  return "last_compaction.dry_run=" + std::string(c.dry_run ? "1" : "0") + "\n" +
         "last_compaction.segments_rewritten=" + std::to_string(r.segments_rewritten) + "\n" +
         "last_compaction.bytes_reclaimed=" + std::to_string(r.bytes_reclaimed) + "\n" +
         "last_compaction.bytes_copied=" + std::to_string(r.bytes_copied) + "\n" +
         "last_compaction.seconds=" + secs + "\n" + "last_compaction.segments=" + ids + "\n" +
         "last_compaction.errors=" + std::to_string(r.errors.size()) + "\n" + kept;
}

std::string DefaultOptionsJson() { return OptionsJson(MountOptions()).dump(); }

Result<std::string> StoreSummaryJson(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(nlohmann::ordered_json j, SummaryJson(store));
  return j.dump(2) + "\n";
}

}  // namespace ckptfs::fs
