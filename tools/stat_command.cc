// `ckptfs stat STORE|MOUNTPOINT`: statistics for people (or JSON). On a
// mountpoint it prints MOUNT/.ckptfs/stats; on a store that is not mounted it
// opens the store read-only and prints the same "namespace" and "storage"
// objects (fs::StoreSummaryJson).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/store.h"
#include "fs/mount.h"
#include "tools/commands.h"
#include "tools/progress.h"

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
  return ends_with("bytes") || fs::IsSizeOption(key);
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
  engine::Result<std::string> summary = fs::StoreSummaryJson(**store);
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

}  // namespace

int RunStat(const std::string& path, bool json) {
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
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "ckptfs: the statistics of %s are not valid JSON\n", path.c_str());
    return 1;
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
