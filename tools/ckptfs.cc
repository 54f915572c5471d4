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
//   ckptfs seal PATH...
//   ckptfs gpu-load [--device N | --host] [--no-direct] FILE...
//   ckptfs --version
// docs/TOOLS.md describes each, with its exit codes.
#include <sys/stat.h>
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
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

// One subcommand: its parser (set once the command line is parsed) and what
// runs it, with the arguments the parser filled in.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command AddMount(CLI::App& app) {
  struct Args {
    ckptfs::fs::MountOptions options;
    bool foreground = false;
    bool debug = false;
    std::vector<std::string> option_lists;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("mount", "Mount STORE (created when missing or empty)");
  cmd->footer(ckptfs::fs::MountOptionsHelp());
  cmd->add_flag("-f,--foreground", a->foreground, "Stay in the foreground");
  cmd->add_flag("-d,--debug", a->debug, "Trace FUSE requests on stderr (implies -f)");
  cmd->add_option("-o", a->option_lists, "Mount options, comma-separated")->allow_extra_args(false);
  cmd->add_option("STORE", a->options.store_dir, "Store directory")->required();
  cmd->add_option("MOUNTPOINT", a->options.mountpoint, "Empty directory")->required();
  return {cmd, [a] {
            for (const std::string& list : a->option_lists) {
              if (("," + list + ",").find(",remount,") != std::string::npos) {
                std::fprintf(stderr,
                             "ckptfs: remount is not supported: a mount's options are fixed until "
                             "it is unmounted (run-time settings change in "
                             "MOUNTPOINT/.ckptfs/config)\n");
                return 1;
              }
              ckptfs::engine::Status st = ckptfs::fs::ParseMountOptions(list, &a->options);
              if (!st.ok()) {
                std::fprintf(stderr, "ckptfs: %s\n", st.ToString().c_str());
                return 1;
              }
            }
            if (a->debug) {
              a->options.debug = true;
              a->foreground = true;
            }
            return ckptfs::tools::RunMount(a->options, a->foreground);
          }};
}

Command AddUmount(CLI::App& app) {
  auto point = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("umount", "Unmount a ckptfs mount");
  cmd->add_option("MOUNTPOINT", *point)->required();
  return {cmd, [point] { return ckptfs::tools::RunUmount(*point); }};
}

Command AddStat(CLI::App& app) {
  struct Args {
    std::string path;
    bool json = false;
    bool all = false;
    bool watch = false;
    double interval = 1.0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("stat", "Show the statistics of a mount or an unmounted store");
  cmd->footer(
      "By default a summary of at most 25 lines: the store and the mount, files and bytes, "
      "segment space (live, dead, data files), what compaction would do, read and write rates "
      "since the mount, FUSE requests per file of the last save and restore, and passthrough.");
  CLI::Option* json = cmd->add_flag("--json", a->json, "Print the statistics as JSON");
  cmd->add_flag("--all", a->all, "Print every counter, one line each")->excludes(json);
  cmd->add_flag("--watch", a->watch, "Redraw the mount's live rates until interrupted");
  cmd->add_option("--interval", a->interval, "Seconds between redraws of --watch (default 1)");
  cmd->add_option("PATH", a->path, "Mountpoint or store directory")->required();
  return {cmd, [a] {
            if (!a->watch) return ckptfs::tools::RunStat(a->path, a->json, a->all);
            if (a->json || a->all) {
              std::fprintf(stderr, "ckptfs: stat: --watch goes with neither --json nor --all\n");
              return 1;
            }
            return ckptfs::tools::RunStatWatch(a->path, a->interval);
          }};
}

Command AddFsck(CLI::App& app) {
  struct Args {
    std::string store;
    bool repair = false, quick = false, json = false, from_backup = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("fsck", "Check (and --repair) a store that is not mounted");
  cmd->footer(
      "Exit status: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational error");
  CLI::Option* repair =
      cmd->add_flag("--repair", a->repair, "Fix what can be fixed; lost data reads as zeros");
  cmd->add_flag("--from-backup", a->from_backup,
                "With --repair: first restore the index's newest backup (STORE/backup)")
      ->needs(repair);
  cmd->add_flag("--quick", a->quick, "Skip payload checksums");
  cmd->add_flag("--json", a->json, "Print the report as JSON");
  cmd->add_option("STORE", a->store, "Store directory")->required();
  return {cmd, [a] {
            return ckptfs::tools::RunFsck(a->store, a->repair, a->quick, a->json, a->from_backup);
          }};
}

Command AddCompact(CLI::App& app) {
  struct Args {
    std::string path;
    double ratio = ckptfs::engine::CompactOptions{}.dead_ratio;
    bool dry_run = false;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("compact", "Reclaim dead space of a store or a mount");
  cmd->add_option("--dead-ratio", a->ratio, "Rewrite segments at least this dead")
      ->capture_default_str();
  cmd->add_flag("--dry-run", a->dry_run, "Only say what would be done");
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  cmd->add_option("PATH", a->path, "Store directory or mountpoint")->required();
  return {cmd, [a] { return ckptfs::tools::RunCompact(a->path, a->ratio, a->dry_run, a->json); }};
}

// The commands that take files of a mount: warmup, info and verify.
struct PathArgs {
  std::vector<std::string> paths;
  bool json = false;
};

Command AddWarmup(CLI::App& app) {
  auto a = std::make_shared<PathArgs>();
  auto threads = std::make_shared<int>(4);
  CLI::App* cmd = app.add_subcommand(
      "warmup", "Read files of a mount in store order into memory, ahead of a restore");
  cmd->add_option("--threads", *threads, "Reader threads (default 4)")->check(CLI::Range(1, 256));
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->add_option("PATH", a->paths, "Files or directories on a ckptfs mount")->required();
  return {cmd, [a, threads] { return ckptfs::tools::RunWarmup(a->paths, *threads, a->json); }};
}

Command AddInfo(CLI::App& app) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand(
      "info", "Where a file's bytes lie in the store, or what a directory holds (from the index)");
  cmd->add_flag("--json", a->json, "Print JSON (an array, one object per PATH)");
  cmd->add_option("PATH", a->paths, "Files or directories on a ckptfs mount")->required();
  return {cmd, [a] { return ckptfs::tools::RunInfo(a->paths, a->json); }};
}

Command AddVerify(CLI::App& app) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check every checksum of the files' data in the store's segment files");
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  cmd->add_option("PATH", a->paths, "Files or directories on a ckptfs mount")->required();
  cmd->footer("Exit status: 0 every checksum matches, 4 damage found, 8 nothing could be checked");
  return {cmd, [a] { return ckptfs::tools::RunVerify(a->paths, a->json); }};
}

Command AddSeal(CLI::App& app) {
  auto a = std::make_shared<PathArgs>();
  CLI::App* cmd = app.add_subcommand(
      "seal", "Make the trees under PATHs immutable on every host, and cached for ever");
  cmd->add_option("PATH", a->paths, "Directories or files on a ckptfs mount")->required();
  return {cmd, [a] { return ckptfs::tools::RunSeal(a->paths); }};
}

Command AddGpuLoad(CLI::App& app) {
  struct Args {
    ckptfs::tools::GpuLoadArgs load;
    std::string buffer_size;
    CLI::Option* device = nullptr;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("gpu-load", "Load files into GPU (or host) memory and report the speed");
  cmd->add_option("FILE", a->load.files, "Files to load")->required();
  a->device = cmd->add_option("--device", a->load.device, "CUDA device (default 0)");
  cmd->add_flag("--host", a->load.host, "Load into host memory");
  cmd->add_flag("--no-direct", a->load.no_direct, "Read through the mount, not the segment files");
  cmd->add_flag("--safetensors", a->load.safetensors,
                "Load as safetensors (one allocation per file)");
  cmd->add_flag("--json", a->load.json, "Print the results as JSON");
  cmd->add_option("--buffers", a->load.buffers, "Staging buffers in flight (default 4)");
  cmd->add_option("--buffer-size", a->buffer_size, "Size of each staging buffer (default 16M)");
  cmd->add_option("--threads", a->load.threads, "Reader threads (default 2)");
  return {cmd, [a] {
            a->load.device_given = a->device->count() > 0;
            if (!a->buffer_size.empty()) {
              ckptfs::Result<uint64_t> n = ckptfs::ParseSize(a->buffer_size);
              if (!n.ok() || *n == 0) {
                std::fprintf(stderr, "ckptfs: --buffer-size: bad size \"%s\"\n",
                             a->buffer_size.c_str());
                return 1;
              }
              a->load.buffer_bytes = *n;
            }
            return ckptfs::tools::RunGpuLoad(a->load);
          }};
}

// mount(8) mounts a filesystem of type fuse.ckptfs (an fstab line, `mount
// -t fuse.ckptfs`, a systemd .mount unit) through libfuse's mount.fuse3,
// which runs `ckptfs STORE MOUNTPOINT -o OPTIONS`: a first argument that is
// no subcommand makes the command line a mount's, and "mount" is put before
// it in `args`. So that a mistyped command (`ckptfs stats DIR`) does not
// create a store of that name and mount it, that argument must name a
// store: a path with a '/', or one that exists. False (after saying why)
// when it does not.
bool ImplicitMount(const std::vector<Command>& commands, std::vector<char*>* args) {
  std::vector<std::string> names;
  for (const Command& c : commands) names.push_back(c.app->get_name());
  if (args->size() < 3 || (*args)[1][0] == '-' ||
      std::find(names.begin(), names.end(), (*args)[1]) != names.end()) {
    return true;
  }
  const std::string first = (*args)[1];
  struct stat st;
  if (first.find('/') == std::string::npos && ::stat(first.c_str(), &st) != 0) {
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "ckptfs: unknown command '%s' (commands: %s; a store to mount without "
                 "'mount' is a path with a '/' or one that exists)\n",
                 first.c_str(), list.c_str());
    return false;
  }
  static char kMount[] = "mount";
  args->insert(args->begin() + 1, kMount);
  return true;
}

int Main(int argc, char** argv) {
  CLI::App app{"ckptfs: a checkpoint filesystem backed by a few large segment files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionText,
                       "Print the versions of ckptfs, libfuse and the kernel");
  const std::vector<Command> commands = {AddMount(app), AddUmount(app),  AddStat(app),
                                         AddFsck(app),  AddCompact(app), AddWarmup(app),
                                         AddInfo(app),  AddVerify(app),  AddSeal(app),
                                         AddGpuLoad(app)};
  std::vector<char*> args(argv, argv + argc);
  if (!ImplicitMount(commands, &args)) return 1;
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : (app.got_subcommand("fsck") ? 8 : 1);  // fsck(8): 8 = usage error
  }
  for (const Command& c : commands) {
    if (*c.app) return c.run();
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
