// `ckptfs fsck [--repair [--from-backup]] [--quick] [--json] STORE`: checks a store that is
// not mounted. Exit status as fsck(8): 0 clean, 1 errors corrected, 4 errors
// left uncorrected, 8 operational error.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/fsck/fsck.h"
#include "engine/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace ckptfs::tools {

namespace {

constexpr int kExitClean = 0;
constexpr int kExitCorrected = 1;
constexpr int kExitUncorrected = 4;
constexpr int kExitOperational = 8;

std::string Describe(const engine::FsckFinding& f) {
  std::string s = f.kind;
  if (!f.path.empty()) s += "  " + f.path;
  // Data findings name a byte range of the file; segment findings say it all
  // in their detail.
  if (f.ino != 0 && !f.path.empty() && f.length > 0) {
    s += "  bytes [" + std::to_string(f.offset) + ", " + std::to_string(f.offset + f.length) + ")";
  }
  if (f.segment_id != 0 && f.detail.find("segment") == std::string::npos) {
    s += "  segment " + std::to_string(f.segment_id);
  }
  if (!f.detail.empty()) s += ": " + f.detail;
  if (f.repaired) s += "  [repaired]";
  return s;
}

nlohmann::ordered_json ToJson(const engine::FsckFinding& f) {
  return {{"kind", f.kind},       {"path", f.path},           {"ino", f.ino},
          {"segment", f.segment_id}, {"offset", f.offset},    {"length", f.length},
          {"detail", f.detail},   {"repaired", f.repaired},   {"informational", f.informational}};
}

}  // namespace

int RunFsck(const std::string& store, bool repair, bool quick, bool json, bool from_backup) {
  ProgressBar bar(repair ? "fsck --repair" : (quick ? "fsck --quick" : "fsck"));
  engine::FsckOptions o;
  o.repair = repair;
  o.quick = quick;
  o.from_backup = from_backup;
  if (bar.enabled()) {
    o.progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
  }
  const auto start = std::chrono::steady_clock::now();
  engine::Result<engine::FsckReport> r = engine::Fsck(store, o);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.Finish();
  if (!r.ok()) {
    if (r.status().code() == EBUSY) {
      std::fprintf(stderr, "ckptfs: refusing: store is in use by %s\n",
                   HolderName(r.status()).c_str());
      return kExitOperational;
    }
    std::fprintf(stderr, "ckptfs: fsck %s: %s\n", store.c_str(), r.status().ToString().c_str());
    // A damaged index is damage fsck cannot fix; anything else kept it from running.
    return r.status().IsCorruption() ? kExitUncorrected : kExitOperational;
  }
  const engine::FsckReport& rep = *r;
  const int code = rep.errors() == 0        ? kExitClean
                   : rep.errors_left() == 0 ? kExitCorrected
                                            : kExitUncorrected;
  if (json) {
    nlohmann::ordered_json j;
    j["store"] = store;
    j["repair"] = repair;
    j["quick"] = quick;
    j["clean"] = rep.clean();
    j["exit_code"] = code;
    j["errors"] = rep.errors();
    j["errors_left"] = rep.errors_left();
    j["files_checked"] = rep.files_checked;
    j["dirs_checked"] = rep.dirs_checked;
    j["records_checked"] = rep.records_checked;
    j["bytes_checked"] = rep.bytes_checked;
    j["seconds"] = secs;
    j["counts"] = rep.counts;
    j["lost_files"] = rep.lost_files;
    j["findings"] = nlohmann::ordered_json::array();
    for (const auto& f : rep.findings) j["findings"].push_back(ToJson(f));
    std::printf("%s\n", j.dump(2).c_str());
    return code;
  }
  for (const auto& f : rep.findings) {
    if (!f.informational) std::printf("error  %s\n", Describe(f).c_str());
  }
  for (const auto& f : rep.findings) {
    if (f.informational) std::printf("info   %s\n", Describe(f).c_str());
  }
  std::printf("\n%s: %" PRIu64 " files, %" PRIu64 " directories, %" PRIu64 " records, %s checked in %.2f s (%s/s)%s\n",
              store.c_str(), rep.files_checked, rep.dirs_checked, rep.records_checked,
              HumanBytes(rep.bytes_checked).c_str(), secs,
              HumanBytes(static_cast<uint64_t>(secs > 0 ? double(rep.bytes_checked) / secs : 0)).c_str(),
              quick ? " (quick: payload checksums skipped)" : "");
  if (!rep.counts.empty()) {
    std::printf("findings:");
    for (const auto& [kind, n] : rep.counts) std::printf(" %s=%" PRIu64, kind.c_str(), n);
    std::printf("\n");
  }
  if (!rep.lost_files.empty()) {
    std::printf("files that lost data (the lost ranges read as zeros%s):\n",
                repair ? "" : " after --repair");
    for (const auto& p : rep.lost_files) std::printf("  %s\n", p.c_str());
  }
  if (code == kExitClean) {
    std::printf("clean\n");
  } else if (code == kExitCorrected) {
    std::printf("%" PRIu64 " errors corrected\n", rep.errors());
  } else {
    std::printf("%" PRIu64 " errors left uncorrected%s\n", rep.errors_left(),
                repair ? "" : " (run with --repair to fix them)");
  }
  return code;
}

}  // namespace ckptfs::tools
