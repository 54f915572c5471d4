// `ckptfs stat STORE|MOUNTPOINT`: statistics for people (or JSON). On a
// mountpoint it reads MOUNT/.ckptfs/stats; on a store that is not mounted it
// opens the store read-only and reads the same "namespace" and "storage"
// objects (stats::StoreSummaryJson). By default it prints a summary of at most
// kMaxSummaryLines lines (tools/stat_summary.h); `--all` every field, one
// line each; `--json` the JSON as read. `--watch` on a mountpoint redraws
// the rates between two reads of the stats file every interval.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/store.h"
#include "options/mount_options.h"
#include "stats/stats.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/stat_summary.h"

namespace ckptfs::tools {
namespace {

// "83.2 MiB (87263142)": the shared human form plus the exact count.
std::string HumanBytesExact(uint64_t n) {
  std::string h = tools::HumanBytes(n);
  if (n >= 1024) h += " (" + std::to_string(n) + ")";
  return h;
}

bool IsSizeKey(const std::string& key) {
  auto ends_with = [&](const char* s) {
    const size_t n = std::strlen(s);
    return key.size() >= n && key.compare(key.size() - n, n, s) == 0;
  };
  return ends_with("bytes") || options::IsSizeOption(key);
}

std::string Format(const std::string& key, const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_unsigned() && IsSizeKey(key)) return HumanBytesExact(v.get<uint64_t>());
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// Flattens nested objects into "a.b.c" keys, in the file's order.
void Flatten(const nlohmann::ordered_json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      Flatten(*it, key, out);
    } else {
      out->emplace_back(key, Format(it.key(), *it));
    }
  }
}

}  // namespace

namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The stats of a mount: its stats file. False (after saying why) on failure.
bool ReadMountStats(const std::string& mountpoint, std::string* text) {
  const std::string path = mountpoint + "/.ckptfs/stats";
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "ckptfs: cannot read %s: %s (is %s a ckptfs mount?)\n", path.c_str(),
                 strerror(errno), mountpoint.c_str());
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  *text = buf.str();
  return true;
}

// The stats of a store that is not mounted, opened read-only.
bool ReadStoreStats(const std::string& dir, std::string* text) {
  engine::StoreOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  o.holder = "ckptfs stat (pid " + std::to_string(::getpid()) + ")";
  engine::Result<std::unique_ptr<engine::Store>> store = engine::Store::Open(dir, o);
  if (!store.ok()) {
    if (store.status().code() == EBUSY) {
      std::fprintf(stderr, "ckptfs: store %s is mounted by %s; run ckptfs stat on the mountpoint\n",
                   dir.c_str(), HolderName(store.status()).c_str());
    } else {
      std::fprintf(stderr, "ckptfs: cannot open store %s: %s\n", dir.c_str(),
                   store.status().ToString().c_str());
    }
    return false;
  }
  engine::Result<std::string> summary = stats::StoreSummaryJson(**store);
  const engine::Status closed = (*store)->Close();
  if (!summary.ok() || !closed.ok()) {
    std::fprintf(stderr, "ckptfs: stat %s: %s\n", dir.c_str(),
                 (summary.ok() ? closed : summary.status()).ToString().c_str());
    return false;
  }
  nlohmann::ordered_json j = {{"store", dir}, {"mounted", false}};
  nlohmann::ordered_json rest = nlohmann::ordered_json::parse(*summary);
  for (auto it = rest.begin(); it != rest.end(); ++it) j[it.key()] = it.value();
  *text = j.dump(2) + "\n";
  return true;
}

double Num(const nlohmann::ordered_json& j, const char* pointer) {
  const nlohmann::ordered_json::json_pointer ptr(pointer);
  return j.contains(ptr) && j[ptr].is_number() ? j[ptr].get<double>() : 0.0;
}

bool ParseStats(const std::string& text, nlohmann::ordered_json* j) {
  *j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !j->is_discarded() && j->is_object();
}

std::string Rate(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB/s", bytes_per_s / 1e6);
  return buf;
}

// The rates between two stats snapshots `dt` seconds apart, as lines.
std::vector<std::string> WatchLines(const nlohmann::ordered_json& a,
                                    const nlohmann::ordered_json& b, double dt) {
  auto per_s = [&](const char* p) { return (Num(b, p) - Num(a, p)) / dt; };
  char line[256];
  std::vector<std::string> out;
  std::snprintf(line, sizeof(line), "requests   %8.0f/s", per_s("/fs/requests"));
  std::string kinds = line;
  // The kinds that moved, busiest first.
  std::vector<std::pair<double, std::string>> moved;
  const nlohmann::ordered_json::json_pointer ops("/fs/ops");
  if (b.contains(ops)) {
    for (auto it = b[ops].begin(); it != b[ops].end(); ++it) {
      const double r = per_s(("/fs/ops/" + it.key()).c_str());
      if (r > 0) moved.emplace_back(r, it.key());
    }
  }
  std::sort(moved.rbegin(), moved.rend());
  for (const auto& [r, name] : moved) {
    std::snprintf(line, sizeof(line), "  %s %.0f", name.c_str(), r);
    kinds += line;
  }
  out.push_back(kinds);
  out.push_back("read       " + Rate(per_s("/engine/read_bytes")) + "   written " +
                Rate(per_s("/engine/write_bytes")));
  std::snprintf(line, sizeof(line), "backing    %.0f reads/s, %s, %.0f coalesced/s",
                per_s("/engine/backing_reads"), Rate(per_s("/engine/backing_read_bytes")).c_str(),
                per_s("/engine/coalesced_reads"));
  out.push_back(line);
  const double hits = per_s("/engine/cache_hits"), misses = per_s("/engine/cache_misses");
  if (hits + misses > 0) {
    std::snprintf(line, sizeof(line), "cache      %.0f%% hits (%.0f hits/s, %.0f misses/s)",
                  100.0 * hits / (hits + misses), hits, misses);
  } else {
    std::snprintf(line, sizeof(line), "cache      no lookups");
  }
  out.push_back(line);
  const double live = Num(b, "/storage/live_bytes"), dead = Num(b, "/storage/dead_bytes");
  std::snprintf(line, sizeof(line), "dead       %s of %s in %.0f segments (%.0f%%)",
                HumanBytes(static_cast<uint64_t>(dead)).c_str(),
                HumanBytes(static_cast<uint64_t>(live + dead)).c_str(),
                Num(b, "/storage/segments"), live + dead > 0 ? 100.0 * dead / (live + dead) : 0.0);
  out.push_back(line);
  return out;
}

volatile sig_atomic_t g_interrupted = 0;

}  // namespace

int RunStatWatch(const std::string& path, double interval_s) {
  if (!Exists(path + "/.ckptfs/stats")) {
    std::fprintf(stderr, "ckptfs: %s is not a ckptfs mount (--watch needs a mountpoint)\n",
                 path.c_str());
    return 1;
  }
  if (!(interval_s >= 0.1)) {
    std::fprintf(stderr, "ckptfs: --interval must be at least 0.1 seconds\n");
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = [](int) { g_interrupted = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = ::isatty(1) == 1;
  std::string text;
  nlohmann::ordered_json prev, cur;
  if (!ReadMountStats(path, &text) || !ParseStats(text, &prev)) return 1;
  auto prev_t = std::chrono::steady_clock::now();
  while (!g_interrupted) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    if (g_interrupted) break;
    if (!ReadMountStats(path, &text)) return 1;
    if (!ParseStats(text, &cur)) {
      std::fprintf(stderr, "ckptfs: the statistics of %s are not valid JSON\n", path.c_str());
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - prev_t).count();
    const std::vector<std::string> lines = WatchLines(prev, cur, dt);
    if (tty) {
      // Home, clear, then the screen: redrawn in place.
      std::printf("\x1b[H\x1b[2J%s every %.1f s (Ctrl-C stops)\n", path.c_str(), interval_s);
      for (const std::string& l : lines) std::printf("%s\n", l.c_str());
    } else {
      for (const std::string& l : lines) std::printf("%s%s", l.c_str(), &l == &lines.back() ? "\n" : " | ");
    }
    std::fflush(stdout);
    prev = std::move(cur);
    prev_t = now;
  }
  return 0;
}

int RunStat(const std::string& path, bool json, bool all) {
  std::string text;
  if (Exists(path + "/.ckptfs/stats")) {
    if (!ReadMountStats(path, &text)) return 1;
  } else if (engine::Store::IsStore(path)) {
    if (!ReadStoreStats(path, &text)) return 1;
  } else {
    std::fprintf(stderr, "ckptfs: %s is neither a ckptfs store nor a ckptfs mount\n", path.c_str());
    return 1;
  }
  if (json) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  // Keep the key order (nlohmann::ordered_json) so related counters stay together.
  nlohmann::ordered_json j;
  if (!ParseStats(text, &j)) {
    std::fprintf(stderr, "ckptfs: the statistics of %s are not valid JSON\n", path.c_str());
    return 1;
  }
  if (!all) {
    const nlohmann::ordered_json defaults = nlohmann::ordered_json::parse(
        options::DefaultOptionsJson(), nullptr, /*allow_exceptions=*/false);
    for (const std::string& line : SummaryLines(j, defaults)) std::printf("%s\n", line.c_str());
    return 0;
  }
  std::vector<std::pair<std::string, std::string>> rows;
  Flatten(j, "", &rows);
  size_t width = 0;
  for (const auto& [k, v] : rows) width = std::max(width, k.size() + 1);
  for (const auto& [k, v] : rows) {
    std::printf("%-*s %s\n", static_cast<int>(width), (k + ":").c_str(), v.c_str());
  }
  return 0;
}

}  // namespace ckptfs::tools
