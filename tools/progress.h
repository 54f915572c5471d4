// A one-line progress bar on stderr, drawn only when stderr is a terminal,
// and a byte formatter for the fsck and compact commands.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>

namespace ckptfs::tools {

inline std::string HumanBytes(uint64_t n) {
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
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

// Thread-safe: Update may be called from several threads.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), enabled_(::isatty(2) == 1) {}
  bool enabled() const { return enabled_; }

  void Update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    const int width = 30;
    const double frac = total == 0 ? 1.0 : std::min(1.0, double(done) / double(total));
    const int fill = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r%s [%s] %3d%%  %s / %s ", label_.c_str(), bar.c_str(),
                 static_cast<int>(frac * 100), HumanBytes(done).c_str(), HumanBytes(total).c_str());
    std::fflush(stderr);
  }

  // Clears the line.
  void Finish() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }

 private:
  const std::string label_;
  const bool enabled_;
  std::mutex mu_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace ckptfs::tools
