// `ckptfs stat MOUNTPOINT`: the mount's statistics for people.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/commands.h"

namespace ckptfs::tools {
namespace {

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s (%" PRIu64 ")", v, kUnits[u], n);
  }
  return buf;
}

bool IsSizeKey(const std::string& key) {
  auto ends_with = [&](const char* s) {
    const size_t n = std::strlen(s);
    return key.size() >= n && key.compare(key.size() - n, n, s) == 0;
  };
  return ends_with("bytes") || ends_with("_size") || ends_with("coalesce_gap") ||
         ends_with("coalesce_max") || ends_with("inline_max") || ends_with("min_free") ||
         ends_with("readahead");
}

std::string Format(const std::string& key, const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_unsigned() && IsSizeKey(key)) return HumanBytes(v.get<uint64_t>());
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

int RunStat(const std::string& mountpoint, bool json) {
  const std::string path = mountpoint + "/.ckptfs/stats";
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "ckptfs: cannot read %s: %s (is %s a ckptfs mount?)\n", path.c_str(),
                 strerror(errno), mountpoint.c_str());
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  if (json) {
    std::fputs(text.str().c_str(), stdout);
    return 0;
  }
  // Keep the file's key order (nlohmann::ordered_json) so related counters stay together.
  nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "ckptfs: %s is not valid JSON\n", path.c_str());
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
