// Subcommands of the `ckptfs` tool. Each returns the process exit status and
// prints its own one-line errors ("ckptfs: ...") on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/store.h"
#include "fs/mount.h"

namespace ckptfs::tools {

// Who holds a store, for the message about an EBUSY `busy` from opening it:
// the holder's name from its StoreHolder payload ("another process" when the
// lock file names nobody); without a payload, the message.
inline std::string HolderName(const engine::Status& busy) {
  const engine::StoreHolder* h = busy.payload<engine::StoreHolder>();
  if (h == nullptr) return busy.message();
  return h->holder.empty() ? "another process" : h->holder;
}

// `ckptfs mount`: checks, then serves `options` in this process (foreground)
// or in a daemon child; returns 0 once the mount is ready.
int RunMount(fs::MountOptions options, bool foreground);
// `ckptfs umount`: unmounts and waits for the daemon to close the store.
int RunUmount(const std::string& mountpoint);
// `ckptfs stat` (tools/stat_command.cc): prints MOUNT/.ckptfs/stats, or the
// contents and footprint of a store that is not mounted: a summary for
// people (at most 25 lines), every field (`all`) or the JSON (`json`, which
// wins over `all`).
int RunStat(const std::string& path, bool json, bool all);
// Redraws the mount's rates (requests/s by kind, MB/s read and written,
// backing reads, cache hit ratio, dead bytes) every `interval_s` until
// SIGINT or SIGTERM: in place on a terminal, one line each otherwise.
int RunStatWatch(const std::string& mountpoint, double interval_s);
// `ckptfs fsck` (tools/fsck_command.cc): exit status as fsck(8).
int RunFsck(const std::string& store, bool repair, bool quick, bool json, bool from_backup);
// `ckptfs compact` (tools/compact_command.cc): offline on a store, online
// through MOUNT/.ckptfs/config on a mountpoint.
int RunCompact(const std::string& path, double dead_ratio, bool dry_run, bool json);
// `ckptfs warmup` (tools/warmup_command.cc): reads the files under `paths`
// (on a mount) in store order into the kernel's page cache and the mount's
// record cache, with `threads` readers; 1 when a file could not be read.
int RunWarmup(const std::vector<std::string>& paths, int threads, bool json);

// `ckptfs info` (tools/info_command.cc): where each file's bytes lie, or what
// each directory holds, from the mount's extents attribute; 1 when a path
// could not be described.
int RunInfo(const std::vector<std::string>& paths, bool json);

// `ckptfs verify` (tools/verify_command.cc): checks every checksum of the
// data of the files under `paths` (on a mount) in the segment files; exit
// status as fsck(8): 0 clean, 4 damage found, 8 nothing could be checked.
int RunVerify(const std::vector<std::string>& paths, bool json);

// `ckptfs seal` (tools/seal_command.cc): seals the tree under each of
// `paths` (on a mount); 1 when one could not be sealed.
int RunSeal(const std::vector<std::string>& paths);

// `ckptfs gpu-load` (tools/gpu_load_command.cc): loads files into CUDA device
// memory (or host memory) with the gpu/ loader and reports the speed.
struct GpuLoadArgs {
  std::vector<std::string> files;
  int device = 0;             // CUDA device; used unless `host`
  bool device_given = false;  // --device was on the command line
  bool host = false;          // load into host memory
  bool no_direct = false;     // read through the mount, not the segment files
  bool safetensors = false;   // parse as safetensors, one allocation per file
  bool json = false;
  int buffers = 0;  // 0 = the loader's defaults
  uint64_t buffer_bytes = 0;
  int threads = 0;
};
int RunGpuLoad(const GpuLoadArgs& args);

}  // namespace ckptfs::tools
