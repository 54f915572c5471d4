// ckptfs: mount a checkpoint store, and inspect it.
//
//   ckptfs mount [-f] [-d] [-o opt[,opt...]] STORE MOUNTPOINT
//   ckptfs umount MOUNTPOINT
//   ckptfs stat [--all | --json] STORE|MOUNTPOINT
//   ckptfs stat --watch [--interval S] MOUNTPOINT
//   ckptfs fsck [--repair [--from-backup]] [--quick] [--json] STORE
//   ckptfs compact [--dead-ratio R] [--dry-run] [--json] STORE|MOUNTPOINT
//   ckptfs warmup [--threads N] [--json] PATH...
//   ckptfs info [--json] PATH...
//   ckptfs verify [--json] PATH...
//   ckptfs gpu-load [--device N | --host] [--no-direct] FILE...
//   ckptfs --version
// docs/TOOLS.md describes each, with its exit codes.
#include <sys/stat.h>
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/size.h"
#include "engine/store_options.h"
#include "tools/commands.h"

namespace {

// ckptfs's version, the libfuse it was built with, the kernel's release and
// whether kernel passthrough is possible here (what FUSE features a mount
// negotiated shows in MOUNT/.ckptfs/stats).
std::string VersionText() {
  std::string text = std::string("ckptfs ") + CKPTFS_VERSION + "\nlibfuse " +
                     ckptfs::fs::LibfuseVersion() + " (static, from Debian source " +
                     CKPTFS_LIBFUSE_SOURCE + ")\nkernel ";
  struct utsname u;
  text += uname(&u) == 0 ? u.release : "unknown";
  text += "\npassthrough " + ckptfs::fs::PassthroughSupport();
  return text;
}

int Main(int argc, char** argv) {
  CLI::App app{"ckptfs: a checkpoint filesystem backed by a few large segment files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionText, "Print the versions of ckptfs, libfuse and the kernel");

  ckptfs::fs::MountOptions mount_options;
  bool foreground = false;
  bool debug = false;
  std::vector<std::string> option_lists;
  CLI::App* mount = app.add_subcommand("mount", "Mount STORE (created when missing or empty)");
  mount->footer(ckptfs::fs::MountOptionsHelp());
  mount->add_flag("-f,--foreground", foreground, "Stay in the foreground");
  mount->add_flag("-d,--debug", debug, "Trace FUSE requests on stderr (implies -f)");
  mount->add_option("-o", option_lists, "Mount options, comma-separated")->allow_extra_args(false);
  mount->add_option("STORE", mount_options.store_dir, "Store directory")->required();
  mount->add_option("MOUNTPOINT", mount_options.mountpoint, "Empty directory")->required();

  std::string umount_point;
  CLI::App* umount = app.add_subcommand("umount", "Unmount a ckptfs mount");
  umount->add_option("MOUNTPOINT", umount_point)->required();

  std::string stat_point;
  bool stat_json = false;
  bool stat_all = false;
  CLI::App* stat =
      app.add_subcommand("stat", "Show the statistics of a mount or an unmounted store");
  stat->footer(
      "By default a summary of at most 25 lines: the store and the mount, files and bytes, "
      "segment space (live, dead, data files), what compaction would do, read and write rates "
      "since the mount, FUSE requests per file of the last save and restore, and passthrough.");
  CLI::Option* stat_json_flag = stat->add_flag("--json", stat_json, "Print the statistics as JSON");
  stat->add_flag("--all", stat_all, "Print every counter, one line each")->excludes(stat_json_flag);
  bool stat_watch = false;
  double stat_interval = 1.0;
  stat->add_flag("--watch", stat_watch, "Redraw the mount's live rates until interrupted");
  stat->add_option("--interval", stat_interval, "Seconds between redraws of --watch (default 1)");
  stat->add_option("PATH", stat_point, "Mountpoint or store directory")->required();

  std::string fsck_store;
  bool fsck_repair = false, fsck_quick = false, fsck_json = false, fsck_from_backup = false;
  CLI::App* fsck = app.add_subcommand("fsck", "Check (and --repair) a store that is not mounted");
  fsck->footer("Exit status: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational error");
  CLI::Option* fsck_repair_flag =
      fsck->add_flag("--repair", fsck_repair, "Fix what can be fixed; lost data reads as zeros");
  fsck->add_flag("--from-backup", fsck_from_backup,
                 "With --repair: first restore the index's newest backup (STORE/backup)")
      ->needs(fsck_repair_flag);
  fsck->add_flag("--quick", fsck_quick, "Skip payload checksums");
  fsck->add_flag("--json", fsck_json, "Print the report as JSON");
  fsck->add_option("STORE", fsck_store, "Store directory")->required();

  std::string compact_path;
  double compact_ratio = ckptfs::engine::CompactOptions{}.dead_ratio;
  bool compact_dry_run = false;
  CLI::App* compact = app.add_subcommand("compact", "Reclaim dead space of a store or a mount");
  compact->add_option("--dead-ratio", compact_ratio, "Rewrite segments at least this dead")
      ->capture_default_str();
  compact->add_flag("--dry-run", compact_dry_run, "Only say what would be done");
  bool compact_json = false;
  compact->add_flag("--json", compact_json, "Print the result as JSON");
  compact->add_option("PATH", compact_path, "Store directory or mountpoint")->required();

  std::vector<std::string> warmup_paths;
  int warmup_threads = 4;
  bool warmup_json = false;
  CLI::App* warmup = app.add_subcommand(
      "warmup", "Read files of a mount in store order into memory, ahead of a restore");
  warmup->add_option("--threads", warmup_threads, "Reader threads (default 4)")
      ->check(CLI::Range(1, 256));
  warmup->add_flag("--json", warmup_json, "Print the summary as JSON");
  warmup->add_option("PATH", warmup_paths, "Files or directories on a ckptfs mount")->required();

  std::vector<std::string> info_paths;
  bool info_json = false;
  CLI::App* info = app.add_subcommand(
      "info", "Where a file's bytes lie in the store, or what a directory holds (from the index)");
  info->add_flag("--json", info_json, "Print JSON (an array, one object per PATH)");
  info->add_option("PATH", info_paths, "Files or directories on a ckptfs mount")->required();

  std::vector<std::string> verify_paths;
  bool verify_json = false;
  CLI::App* verify = app.add_subcommand(
      "verify", "Check every checksum of the files' data in the store's segment files");
  verify->add_flag("--json", verify_json, "Print the result as JSON");
  verify->add_option("PATH", verify_paths, "Files or directories on a ckptfs mount")->required();
  verify->footer("Exit status: 0 every checksum matches, 4 damage found, 8 nothing could be checked");

  ckptfs::tools::GpuLoadArgs gpu_load;
  std::string gpu_load_buffer_size;
  CLI::App* gpu_load_cmd =
      app.add_subcommand("gpu-load", "Load files into GPU (or host) memory and report the speed");
  gpu_load_cmd->add_option("FILE", gpu_load.files, "Files to load")->required();
  CLI::Option* gpu_load_device =
      gpu_load_cmd->add_option("--device", gpu_load.device, "CUDA device (default 0)");
  gpu_load_cmd->add_flag("--host", gpu_load.host, "Load into host memory");
  gpu_load_cmd->add_flag("--no-direct", gpu_load.no_direct,
                         "Read through the mount, not the segment files");
  gpu_load_cmd->add_flag("--safetensors", gpu_load.safetensors,
                         "Load as safetensors (one allocation per file)");
  gpu_load_cmd->add_flag("--json", gpu_load.json, "Print the results as JSON");
  gpu_load_cmd->add_option("--buffers", gpu_load.buffers, "Staging buffers in flight (default 4)");
  gpu_load_cmd->add_option("--buffer-size", gpu_load_buffer_size,
                           "Size of each staging buffer (default 16M)");
  gpu_load_cmd->add_option("--threads", gpu_load.threads, "Reader threads (default 2)");

  // mount(8) mounts a filesystem of type fuse.ckptfs (an fstab line, `mount
  // -t fuse.ckptfs`, a systemd .mount unit) through libfuse's mount.fuse3,
  // which runs `ckptfs STORE MOUNTPOINT -o OPTIONS`: a first argument that
  // is no subcommand makes the command line a mount's. So that a mistyped
  // command (`ckptfs stats DIR`) does not create a store of that name and
  // mount it, that argument must name a store: a path with a '/', or one
  // that exists.
  std::vector<char*> args(argv, argv + argc);
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  if (argc >= 3 && argv[1][0] != '-' &&
      std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    const std::string first = argv[1];
    struct stat st;
    if (first.find('/') == std::string::npos && ::stat(first.c_str(), &st) != 0) {
      std::string list;
      for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
      std::fprintf(stderr,
                   "ckptfs: unknown command '%s' (commands: %s; a store to mount without "
                   "'mount' is a path with a '/' or one that exists)\n",
                   first.c_str(), list.c_str());
      return 1;
    }
    static char kMount[] = "mount";
    args.insert(args.begin() + 1, kMount);
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : (*fsck ? 8 : 1);  // fsck(8): 8 = usage error
  }

  if (*mount) {
    for (const std::string& list : option_lists) {
      if (("," + list + ",").find(",remount,") != std::string::npos) {
        std::fprintf(stderr,
                     "ckptfs: remount is not supported: a mount's options are fixed until it is "
                     "unmounted (run-time settings change in MOUNTPOINT/.ckptfs/config)\n");
        return 1;
      }
      ckptfs::engine::Status st = ckptfs::fs::ParseMountOptions(list, &mount_options);
      if (!st.ok()) {
        std::fprintf(stderr, "ckptfs: %s\n", st.ToString().c_str());
        return 1;
      }
    }
    if (debug) {
      mount_options.debug = true;
      foreground = true;
    }
    return ckptfs::tools::RunMount(mount_options, foreground);
  }
  if (*umount) return ckptfs::tools::RunUmount(umount_point);
  if (*stat && stat_watch) {
    if (stat_json || stat_all) {
      std::fprintf(stderr, "ckptfs: stat: --watch goes with neither --json nor --all\n");
      return 1;
    }
    return ckptfs::tools::RunStatWatch(stat_point, stat_interval);
  }
  if (*stat) return ckptfs::tools::RunStat(stat_point, stat_json, stat_all);
  if (*fsck) return ckptfs::tools::RunFsck(fsck_store, fsck_repair, fsck_quick, fsck_json,
                                                 fsck_from_backup);
  if (*compact) return ckptfs::tools::RunCompact(compact_path, compact_ratio, compact_dry_run, compact_json);
  if (*warmup) return ckptfs::tools::RunWarmup(warmup_paths, warmup_threads, warmup_json);
  if (*info) return ckptfs::tools::RunInfo(info_paths, info_json);
  if (*verify) return ckptfs::tools::RunVerify(verify_paths, verify_json);
  if (*gpu_load_cmd) {
    gpu_load.device_given = gpu_load_device->count() > 0;
    if (!gpu_load_buffer_size.empty()) {
      ckptfs::Result<uint64_t> n = ckptfs::ParseSize(gpu_load_buffer_size);
      if (!n.ok() || *n == 0) {
        std::fprintf(stderr, "ckptfs: --buffer-size: bad size \"%s\"\n",
                     gpu_load_buffer_size.c_str());
        return 1;
      }
      gpu_load.buffer_bytes = *n;
    }
    return ckptfs::tools::RunGpuLoad(gpu_load);
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ckptfs: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckptfs: %s\n", e.what());
  }
  return 1;
}
