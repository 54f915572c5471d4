// The default form of `ckptfs stat` (tools/stat_summary.h): a few rows for
// people, made from the stats object alone.
#include "tools/stat_summary.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/store.h"
#include "options/mount_options.h"
#include "tools/progress.h"

namespace ckptfs::tools {
namespace {

using Json = nlohmann::ordered_json;
// (label, value) in the order printed.
using Rows = std::vector<std::pair<std::string, std::string>>;

std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

const Json* At(const Json& j, const char* pointer) {
  const Json::json_pointer ptr(pointer);
  return j.contains(ptr) ? &j[ptr] : nullptr;
}

// The number at JSON pointer `pointer` of `j`; 0 when absent or not a number.
uint64_t Count(const Json& j, const char* pointer) {
  const Json* v = At(j, pointer);
  if (v == nullptr || !v->is_number()) return 0;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  const double d = v->get<double>();
  return d > 0 ? static_cast<uint64_t>(d) : 0;
}

double Real(const Json& j, const char* pointer) {
  const Json* v = At(j, pointer);
  return v != nullptr && v->is_number() ? v->get<double>() : 0.0;
}

// The string at `pointer`; "" when absent or not a string.
std::string Text(const Json& j, const char* pointer) {
  const Json* v = At(j, pointer);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

// The boolean at `pointer`; false when absent or not a boolean.
bool Flag(const Json& j, const char* pointer) {
  const Json* v = At(j, pointer);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

// "1 file", "5 files".
std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string Percent(uint64_t part, uint64_t whole) {
  return Printf("%.0f%%", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / double(whole));
}

// "45 s", "12m05s", "3h02m", "2d03h".
std::string Duration(double seconds) {
  const auto s = static_cast<uint64_t>(std::max(0.0, seconds));
  if (s < 60) return Printf("%" PRIu64 " s", s);
  if (s < 3600) return Printf("%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
  if (s < 86400) return Printf("%" PRIu64 "h%02" PRIu64 "m", s / 3600, s % 3600 / 60);
  return Printf("%" PRIu64 "d%02" PRIu64 "h", s / 86400, s % 86400 / 3600);
}

// The options of `options` whose values differ from `defaults`, as
// `ckptfs mount -o` would take them: "passthrough,compression=3".
std::string ChangedOptions(const Json& options, const Json& defaults) {
  std::string out;
  for (auto it = options.begin(); it != options.end(); ++it) {
    if (defaults.contains(it.key()) && defaults[it.key()] == it.value()) continue;
    std::string o = it.key();
    if (it->is_boolean()) {
      if (!it->get<bool>()) o += "=0";
    } else if (it->is_number_unsigned() && options::IsSizeOption(it.key())) {
      o += "=" + options::HumanSize(it->get<uint64_t>());
    } else {
      o += "=" + it->dump();
    }
    out += (out.empty() ? "" : ",") + o;
  }
  return out.empty() ? "all at their defaults" : out;
}

void MountRows(const Json& j, const Json& defaults, Rows* rows) {
  rows->emplace_back("mount", Printf("%s (pid %" PRIu64 ", up %s)", Text(j, "/mountpoint").c_str(),
                                     Count(j, "/pid"), Duration(Real(j, "/uptime_s")).c_str()));
  if (At(j, "/memory/bound_bytes") != nullptr) {
    rows->emplace_back("memory", HumanBytes(Count(j, "/memory/resident_bytes")) +
                                     " resident; at most " +
                                     HumanBytes(Count(j, "/memory/bound_bytes")) +
                                     " with these options");
  }
  const Json* options = At(j, "/options");
  if (options != nullptr && options->is_object()) {
    rows->emplace_back("options", ChangedOptions(*options, defaults));
  }
}

void StoreRows(const Json& j, Rows* rows) {
  std::string contents = Plural(Count(j, "/namespace/files"), "file", "files") + ", " +
                         Plural(Count(j, "/namespace/directories"), "directory", "directories");
  if (const uint64_t n = Count(j, "/namespace/symlinks")) {
    contents += ", " + Plural(n, "symlink", "symlinks");
  }
  if (const uint64_t n = Count(j, "/namespace/other")) {
    contents += ", " + std::to_string(n) + " other";
  }
  contents += "; " + HumanBytes(Count(j, "/namespace/logical_bytes")) + " logical";
  if (const uint64_t n = Count(j, "/namespace/sealed_trees")) {
    contents += "; " + Plural(n, "sealed tree", "sealed trees") + " (" +
                Plural(Count(j, "/namespace/sealed_inodes"), "inode", "inodes") + ")";
  }
  rows->emplace_back("contents", contents);

  std::string segments = Plural(Count(j, "/storage/segments"), "segment file", "segment files") +
                         ", " + HumanBytes(Count(j, "/storage/segment_file_bytes"));
  if (const double ratio = Real(j, "/storage/compression_ratio"); ratio >= 1.05) {
    segments += Printf(" (compressed %.2f:1)", ratio);
  }
  rows->emplace_back("segments", segments);
  const uint64_t live = Count(j, "/storage/live_bytes");
  const uint64_t dead = Count(j, "/storage/dead_bytes");
  rows->emplace_back("live / dead", HumanBytes(live) + " live, " + HumanBytes(dead) + " dead (" +
                                        Percent(dead, live + dead) + " dead)");
  if (const uint64_t n = Count(j, "/storage/data_files")) {
    rows->emplace_back("data files", Plural(n, "file", "files") + ", " +
                                         HumanBytes(Count(j, "/storage/data_file_bytes")));
  }
  rows->emplace_back("index", HumanBytes(Count(j, "/storage/index_bytes")));
  // A store whose data is in an object store: "rados://ckpt/run7; 40
  // requests: 12 reads, 20 writes, 8 other (0.02 a file created)".
  if (const std::string data = Text(j, "/storage/data"); !data.empty()) {
    std::string text = data;
    if (At(j, "/engine/object_reads") != nullptr) {
      const uint64_t reads = Count(j, "/engine/object_reads");
      const uint64_t writes = Count(j, "/engine/object_writes");
      const uint64_t other = Count(j, "/engine/object_other");
      text += "; " + Plural(reads + writes + other, "request", "requests") +
              Printf(": %" PRIu64 " reads, %" PRIu64 " writes, %" PRIu64 " other", reads, writes,
                     other);
      const uint64_t created = Count(j, "/fs/files_created");
      const uint64_t read = Count(j, "/fs/files_read");
      if (created > 0) {
        text += Printf(" (%.2f writes a file created", static_cast<double>(writes) /
                                                          static_cast<double>(created));
        text += read > 0 ? Printf(", %.2f reads a file read)", static_cast<double>(reads) /
                                                                   static_cast<double>(read))
                         : ")";
      } else if (read > 0) {
        text += Printf(" (%.2f reads a file read)",
                       static_cast<double>(reads) / static_cast<double>(read));
      }
    }
    rows->emplace_back("data", text);
  }
  // A shared store's hosts: "3 (mounted: a, b)".
  if (const Json* hosts = At(j, "/hosts"); hosts != nullptr && hosts->is_array()) {
    std::string mounted;
    for (const Json& h : *hosts) {
      if (h.value("mounted", false)) mounted += (mounted.empty() ? "" : ", ") + h.value("name", "");
    }
    rows->emplace_back("hosts", std::to_string(hosts->size()) + " (mounted: " +
                                    (mounted.empty() ? "none" : mounted) + ")");
  }
  // A mount of a shared store serving the other hosts: "on 10.0.0.7:41234;
  // 3 connections, 120 ranges, 1.2 GiB sent".
  if (const std::string peer = Text(j, "/peer_address"); !peer.empty()) {
    std::string text = "on " + peer + "; " +
                       Plural(Count(j, "/engine/peer_connections"), "connection", "connections") +
                       ", " + Plural(Count(j, "/engine/peer_requests"), "range", "ranges") +
                       ", " + HumanBytes(Count(j, "/engine/peer_bytes_served")) + " sent";
    if (const uint64_t n = Count(j, "/engine/peer_refused")) {
      text += ", " + Plural(n, "connection refused", "connections refused");
    }
    if (const uint64_t n = Count(j, "/engine/peer_cache_file_bytes")) {
      text += "; " + HumanBytes(n) + " kept on disk";
    }
    rows->emplace_back("peers", text);
  }
}

// What background compaction (a mount's) and `ckptfs compact` would do, and
// what the last compaction did.
void CompactionRows(const Json& j, Rows* rows) {
  const uint64_t dead = Count(j, "/storage/dead_bytes");
  const uint64_t reclaimable = Count(j, "/storage/reclaimable_bytes");
  const std::string ratio = Printf("%.0f%%", engine::CompactOptions().dead_ratio * 100);
  if (At(j, "/background_compaction") != nullptr) {
    const uint64_t threshold = Count(j, "/background_compaction/threshold_dead_bytes");
    const bool read_only = Flag(j, "/options/ro");
    std::string text;
    if (read_only) {
      text = "off: a read-only mount";
    } else if (!Flag(j, "/background_compaction/enabled")) {
      text = "off";
    } else if (dead < threshold) {
      text = "starts at " + HumanBytes(threshold) + " dead (now " + HumanBytes(dead) + ")";
    } else if (reclaimable > 0) {
      text = "due: " + HumanBytes(dead) + " dead, past " + HumanBytes(threshold);
    } else {
      text = "waits: " + HumanBytes(dead) + " dead, past " + HumanBytes(threshold) +
             ", but no segment is " + ratio + " dead";
    }
    if (!read_only && Flag(j, "/options/free_empty")) {
      text += "; segments with nothing live are freed";
    }
    rows->emplace_back("background", text);
  }
  rows->emplace_back("compaction", "ckptfs compact would reclaim " + HumanBytes(reclaimable) +
                                       ": the dead bytes of segments at least " + ratio + " dead");
  if (At(j, "/last_compaction") == nullptr) return;
  const uint64_t rewritten = Count(j, "/last_compaction/segments_rewritten");
  const uint64_t reclaimed = Count(j, "/last_compaction/bytes_reclaimed");
  const std::string segments = Plural(rewritten, "segment", "segments");
  std::string last =
      Flag(j, "/last_compaction/dry_run")
          ? "dry run: would rewrite " + segments + ", reclaim " + HumanBytes(reclaimed)
          : "rewrote " + segments + ", reclaimed " + HumanBytes(reclaimed) +
                Printf(" in %.1f s", Real(j, "/last_compaction/seconds"));
  if (const uint64_t errors = Count(j, "/last_compaction/errors")) {
    last += ", " + Plural(errors, "error", "errors");
  }
  rows->emplace_back("last compaction", last);
}

// The latest run of files created or read, from the stats file's
// fs.last_create or fs.last_restore (fs/op_stats.h FileRun): `what` are the
// files of a run, events less than FileRun::kGap (1 s) apart, whose requests
// per file are the FUSE requests of every kind counted from its first file
// to its last, per file after the first.
std::string RunText(const Json& j, const char* pointer, const char* what) {
  const std::string p = pointer;
  const uint64_t files = Count(j, (p + "/files").c_str());
  if (files == 0) return std::string("none yet: no files ") + what;
  const std::string run = Plural(files, "file", "files") + " " + what + " <1 s apart";
  if (files == 1) return run + ": needs 2 files for a figure";
  return Printf("%.1f requests/file", Real(j, (p + "/requests_per_file").c_str())) + " (" + run +
         Printf(", over %.1f s)", Real(j, (p + "/seconds").c_str()));
}

// Rates since the mount, requests, and the latest save and restore. Reads
// the kernel passes through to data files never reach the daemon: with
// passthrough in use, the rows that count reads say so.
void ActivityRows(const Json& j, Rows* rows) {
  const double uptime = Real(j, "/uptime_s");
  const std::string unseen =
      Text(j, "/fs/passthrough/in_use") == "yes" ? "; passthrough reads are not seen" : "";
  auto rate = [&](const char* pointer, const std::string& how) {
    const uint64_t bytes = Count(j, pointer);
    const double per_s = uptime > 0 ? static_cast<double>(bytes) / uptime : 0.0;
    return Printf("%.1f MB/s average since mount (", per_s / 1e6) + HumanBytes(bytes) + " " + how +
           ")";
  };
  rows->emplace_back("read", rate("/fs/read_bytes", "in READ requests" + unseen));
  rows->emplace_back("written", rate("/fs/write_bytes", "in WRITE requests"));
  rows->emplace_back("requests", Printf("%" PRIu64 " FUSE requests, %" PRIu64 " errors; %" PRIu64
                                        " files created, %" PRIu64 " read from offset 0",
                                        Count(j, "/fs/requests"), Count(j, "/fs/errors"),
                                        Count(j, "/fs/files_created"), Count(j, "/fs/files_read")));
  rows->emplace_back("last save", RunText(j, "/fs/last_create", "created"));
  rows->emplace_back("last restore", RunText(j, "/fs/last_restore", "read from offset 0") + unseen);
}

void PassthroughRow(const Json& j, Rows* rows) {
  const std::string in_use = Text(j, "/fs/passthrough/in_use");
  if (in_use.empty()) return;
  std::string text = in_use;
  if (in_use == "yes") {
    text += ": " + Plural(Count(j, "/fs/passthrough/passthrough_opens"), "open", "opens") +
            " passed through, " + std::to_string(Count(j, "/fs/passthrough/daemon_opens")) +
            " served by the daemon";
    if (const uint64_t failed = Count(j, "/fs/passthrough/backing_failures")) {
      text += Printf(", %" PRIu64 " failed (", failed) +
              Text(j, "/fs/passthrough/last_backing_error") + ")";
    }
  }
  rows->emplace_back("passthrough", text);
}

}  // namespace

std::vector<std::string> SummaryLines(const Json& stats, const Json& defaults) {
  const bool mounted = stats.contains("mountpoint");
  Rows rows;
  rows.emplace_back("store", Text(stats, "/store"));
  if (mounted) MountRows(stats, defaults, &rows);
  StoreRows(stats, &rows);
  CompactionRows(stats, &rows);
  if (mounted) {
    ActivityRows(stats, &rows);
    PassthroughRow(stats, &rows);
  }
  size_t width = 0;
  for (const auto& [label, value] : rows) width = std::max(width, label.size() + 1);
  std::vector<std::string> lines;
  for (const auto& [label, value] : rows) {
    std::string line = label + ":";
    line.resize(width + 1, ' ');
    lines.push_back(line + value);
  }
  // There are fewer rows than that; the bound is the promise made to callers.
  if (lines.size() > kMaxSummaryLines) lines.resize(kMaxSummaryLines);
  return lines;
}

}  // namespace ckptfs::tools
