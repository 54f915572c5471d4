// `ckptfs compact [--dead-ratio R] [--dry-run] STORE|MOUNTPOINT`: reclaims
// the dead space of a store. On a store that is not mounted it opens the
// store itself; on a mountpoint it asks the running mount, by writing
// "compact=R" to MOUNT/.ckptfs/config, and then reads the result back from
// the "last_compaction" object of MOUNT/.ckptfs/stats. Exits 1 when the
// compaction failed (e.g. accounting it could not read: nothing is deleted
// then) or kept segments because of unreadable data.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace ckptfs::tools {

namespace {

// Prints what the compaction did and, one line each, why it left the
// segments it left (`kept`: at most kKeptShown of them).
constexpr size_t kKeptShown = 20;
void PrintSummary(const engine::CompactReport& r, bool dry_run, const std::vector<std::string>& kept,
                  uint64_t errors, bool json) {
  if (json) {
    nlohmann::ordered_json j = {{"dry_run", dry_run},
                                {"segments_rewritten", r.segments_rewritten},
                                {"bytes_reclaimed", r.bytes_reclaimed},
                                {"bytes_copied", r.bytes_copied},
                                {"seconds", r.seconds},
                                {"segments", r.segments},
                                {"kept", kept},
                                {"errors", errors}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  auto print_kept = [&] {
    for (size_t i = 0; i < kept.size() && i < kKeptShown; ++i) {
      std::printf("%s: %s\n", dry_run ? "would keep" : "kept", kept[i].c_str());
    }
    if (kept.size() > kKeptShown) std::printf("... and %zu more kept\n", kept.size() - kKeptShown);
  };
  std::string ids;
  for (size_t i = 0; i < r.segments.size() && i < 20; ++i) ids += (i ? "," : "") + std::to_string(r.segments[i]);
  if (r.segments.size() > 20) ids += ",...";
  if (dry_run) {
    std::printf("would rewrite %" PRIu64 " segments%s%s%s: copy about %s, reclaim about %s\n",
                r.segments_rewritten, ids.empty() ? "" : " (", ids.c_str(), ids.empty() ? "" : ")",
                HumanBytes(r.bytes_copied).c_str(), HumanBytes(r.bytes_reclaimed).c_str());
    print_kept();
    return;
  }
  const double mbps = r.seconds > 0 ? double(r.bytes_copied) / r.seconds / 1e6 : 0;
  std::printf("rewrote %" PRIu64 " segments%s%s%s, reclaimed %s, copied %s in %.2f s (%.0f MB/s)\n",
              r.segments_rewritten, ids.empty() ? "" : " (", ids.c_str(), ids.empty() ? "" : ")",
              HumanBytes(r.bytes_reclaimed).c_str(), HumanBytes(r.bytes_copied).c_str(), r.seconds,
              mbps);
  for (const std::string& e : r.errors) std::printf("kept: %s\n", e.c_str());
  print_kept();
}

// Says that `errors` segments were kept; the exit status of a compaction.
int ExitStatus(uint64_t errors) {
  if (errors == 0) return 0;
  std::fprintf(stderr, "ckptfs: %" PRIu64 " segments were kept because of unreadable data; run ckptfs fsck\n",
               errors);
  return 1;
}

// The "last_compaction" object of the mount's stats file; false when there
// is none. `*errors` is the number of segments kept for unreadable data.
bool ReadLastCompaction(const std::string& mount, engine::CompactReport* r, uint64_t* errors,
                        std::vector<std::string>* kept) {
  std::ifstream in(mount + "/.ckptfs/stats");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("last_compaction") || !j["last_compaction"].is_object()) {
    return false;
  }
  const nlohmann::json& c = j["last_compaction"];
  r->segments_rewritten = c.value("segments_rewritten", uint64_t{0});
  r->bytes_reclaimed = c.value("bytes_reclaimed", uint64_t{0});
  r->bytes_copied = c.value("bytes_copied", uint64_t{0});
  r->seconds = c.value("seconds", 0.0);
  if (c.contains("segments") && c["segments"].is_array()) {
    for (const nlohmann::json& id : c["segments"]) {
      if (id.is_number_unsigned()) r->segments.push_back(id.get<uint64_t>());
    }
  }
  *errors = c.value("errors", uint64_t{0});
  if (c.contains("kept") && c["kept"].is_array()) {
    for (const nlohmann::json& k : c["kept"]) {
      if (k.is_object()) kept->push_back(k.value("why", std::string()));
    }
  }
  return true;
}

int Online(const std::string& mount, double ratio, bool dry_run, bool json) {
  const std::string config = mount + "/.ckptfs/config";
  int fd = ::open(config.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "ckptfs: open %s: %s\n", config.c_str(), std::strerror(errno));
    return 1;
  }
  char line[96];
  std::snprintf(line, sizeof(line), "compact=%.6g%s\n", ratio, dry_run ? " dry_run" : "");
  if (::isatty(2) == 1) std::fprintf(stderr, "compacting through the mount at %s ...\n", mount.c_str());
  const size_t len = std::strlen(line);
  const bool wrote = ::write(fd, line, len) == static_cast<ssize_t>(len);
  const int werr = errno;
  const bool closed = ::close(fd) == 0;
  if (!wrote || !closed) {
    std::fprintf(stderr, "ckptfs: compaction through %s failed: %s\n", mount.c_str(),
                 std::strerror(wrote ? errno : werr));
    return 1;
  }
  engine::CompactReport r;
  uint64_t errors = 0;
  std::vector<std::string> kept;
  if (!ReadLastCompaction(mount, &r, &errors, &kept)) {
    std::fprintf(stderr, "ckptfs: %s did not report a compaction result\n", mount.c_str());
    return 1;
  }
  PrintSummary(r, dry_run, kept, errors, json);
  return ExitStatus(errors);
}

}  // namespace

int RunCompact(const std::string& path, double dead_ratio, bool dry_run, bool json) {
  if (!(dead_ratio >= 0 && dead_ratio <= 1)) {
    std::fprintf(stderr, "ckptfs: --dead-ratio must be between 0 and 1\n");
    return 1;
  }
  struct stat st;
  if (::stat((path + "/.ckptfs/config").c_str(), &st) == 0) return Online(path, dead_ratio, dry_run, json);
  if (!engine::Store::IsStore(path)) {
    std::fprintf(stderr, "ckptfs: %s is neither a ckptfs store nor a ckptfs mount\n", path.c_str());
    return 1;
  }
  ProgressBar bar(dry_run ? "compact --dry-run" : "compact");
  engine::CompactOptions o;
  o.dead_ratio = dead_ratio;
  o.dry_run = dry_run;
  if (bar.enabled()) o.progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
  engine::Result<engine::CompactReport> r = engine::Store::CompactOffline(path, o);
  bar.Finish();
  if (!r.ok()) {
    if (r.status().code() == EBUSY) {
      std::fprintf(stderr, "ckptfs: refusing: store is in use by %s (compact through its mountpoint)\n",
                   HolderName(r.status()).c_str());
      return 1;
    }
    std::fprintf(stderr, "ckptfs: compact %s: %s\n", path.c_str(), r.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> kept;
  for (const engine::KeptSegment& k : r->kept) kept.push_back(engine::DescribeKept(k, dead_ratio));
  PrintSummary(*r, dry_run, kept, r->errors.size(), json);
  return ExitStatus(r->errors.size());
}

}  // namespace ckptfs::tools
