// The FUSE session: open the store, mount, serve, unmount, close.
#include "fs/mount.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "fs/filesystem.h"
#include "fs/ops.h"
#include "fs/set_id_bits.h"

namespace ckptfs::fs {

using engine::Status;

namespace {

// libfuse reports mount failures through its log function. Until the mount is
// up, keep the messages so that the caller can show them in its one error
// line; afterwards pass them to stderr.
class FuseLog {
 public:
  FuseLog() { fuse_set_log_func(&FuseLog::Log); }
  ~FuseLog() { fuse_set_log_func(nullptr); }

  static void StartPassingThrough() {
    MutexLock lock(&mu_);
    capturing_ = false;
  }
  // The captured messages on one line.
  static std::string Text() {
    MutexLock lock(&mu_);
    std::string t = text_;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    for (char& c : t) {
      if (c == '\n') c = ';';
    }
    return t;
  }

 private:
  static void Log(enum fuse_log_level level, const char* fmt, va_list ap) {
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    MutexLock lock(&mu_);
    if (capturing_) {
      if (level <= FUSE_LOG_ERR) text_ += buf;
    } else {
      std::fputs(buf, stderr);
    }
  }

  static inline Mutex mu_;  // a leaf lock
  static inline bool capturing_ GUARDED_BY(mu_) = true;
  static inline std::string text_ GUARDED_BY(mu_);
};

// Escapes ',' and '\' for a fuse -o value.
std::string EscapeOption(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string Explain(const std::string& what, const std::string& detail) {
  return detail.empty() ? what : what + ": " + detail;
}

// Tunes the kernel's writeback of the mount with device `dev` through sysfs,
// when permitted (root). Best effort: a failure leaves the kernel's defaults.
// Must run after the kernel processed our INIT reply, which sets the
// readahead window to at most the kernel's 128 KiB.
// - The readahead window: `readahead` bytes.
// - With the write-back cache, the mount's dirty pages are limited like a
//   disk's (by the system's dirty limits) rather than strictly per mount: the
//   strict limit (a few tens of MiB) starts writeback while a writer is still
//   filling a 1 MiB range, so that a file written sequentially reaches the
//   store in cut and reordered pieces, and reads back slower.
void TuneBdi(dev_t dev, const MountOptions& o) {
  const std::string bdi =
      "/sys/class/bdi/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev)) + "/";
  if (o.readahead != 0) {
    std::ofstream knob(bdi + "read_ahead_kb");
    if (knob) knob << (o.readahead + 1023) / 1024 << "\n";
  }
  if (o.UsesWritebackCache()) {
    std::ofstream knob(bdi + "strict_limit");
    if (knob) knob << "0\n";
  }
}

// The kernel mount flags of `o` as libfuse options (",suid,noatime"); libfuse
// passes them to mount(2), or to fusermount3 for users other than root.
// libfuse knows no "strictatime": SetStrictAtime sets that flag.
std::string KernelFlagOptions(const MountOptions& o) {
  std::string out;
  if (o.suid) out += ",suid";
  if (o.dev) out += ",dev";
  if (!o.exec) out += ",noexec";
  if (o.sync) out += ",sync";
  if (o.dirsync) out += ",dirsync";
  if (o.atime == AtimeMode::kNever) out += ",noatime";
  if (o.nodiratime) out += ",nodiratime";
  return out;
}

// Shows strictatime in the mount's flags, where permitted (root; for other
// users the flags keep the kernel's default, relatime). ckptfs keeps access
// times itself (the kernel leaves them to a FUSE filesystem), so the flag
// only tells people what the mount does; a failure changes nothing else.
void SetStrictAtime(const std::string& mountpoint) {
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_STRICTATIME;
  attr.attr_clr = MOUNT_ATTR__ATIME;
  if (geteuid() == 0 && mount_setattr(AT_FDCWD, mountpoint.c_str(), 0, &attr, sizeof(attr)) != 0) {
    std::fprintf(stderr, "ckptfs: cannot set strictatime on %s: %s\n", mountpoint.c_str(),
                 strerror(errno));
  }
}

// Waits until the mount answers (the kernel has our INIT reply and the root's
// attributes come back), then tunes it and reports it ready. Runs on its own
// thread while the session loop serves; its stat() returns at the latest when
// the session's device is closed.
void ProbeReady(const MountOptions& o, const ReadyCallback& on_ready) {
  struct stat st;
  if (stat(o.mountpoint.c_str(), &st) != 0) {
    const int err = errno;
    on_ready(Status::Errno(
        err, Explain("the mount on " + o.mountpoint + " did not come up: " + strerror(err),
                     FuseLog::Text())));
    return;
  }
  TuneBdi(st.st_dev, o);
  if (o.atime == AtimeMode::kStrict) SetStrictAtime(o.mountpoint);
  FuseLog::StartPassingThrough();
  on_ready(Status::OK());
}

// Mounts and serves `fs` until unmounted or signalled. Calls on_ready once.
int RunSession(Filesystem& fs, const MountOptions& o, const ReadyCallback& on_ready) {
  FuseLog log;
  std::string mount_opts = "default_permissions,subtype=ckptfs,fsname=" + EscapeOption(o.store_dir);
  if (o.allow_other) mount_opts += ",allow_other";
  if (o.read_only) mount_opts += ",ro";
  mount_opts += KernelFlagOptions(o);
  std::vector<std::string> argv_strings = {"ckptfs", "-o", mount_opts};
  if (o.debug) argv_strings.push_back("-d");
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  const fuse_lowlevel_ops ops = MakeLowLevelOps();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), fs.userdata());
  if (se == nullptr) {
    on_ready(Status::Errno(EINVAL, Explain("cannot start a FUSE session", FuseLog::Text())));
    return 1;
  }
  int rc = 1;
  std::thread probe;  // joined last: see ProbeReady
  if (fuse_set_signal_handlers(se) != 0) {
    on_ready(Status::Errno(EIO, Explain("cannot install signal handlers", FuseLog::Text())));
  } else {
    if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
      on_ready(Status::Errno(EIO, Explain("cannot mount on " + o.mountpoint, FuseLog::Text())));
    } else {
      if (InstallKillFlagHook(se) != 0) {
        on_ready(Status::Errno(EIO, Explain("cannot read requests", FuseLog::Text())));
      } else {
        try {
          probe = std::thread(ProbeReady, std::cref(o), std::cref(on_ready));
        } catch (const std::system_error& e) {
          on_ready(Status::Errno(EAGAIN, std::string("cannot start a thread: ") + e.what()));
        }
      }
      // Without the probe nobody would learn that the mount is up: don't serve.
      fuse_loop_config* config = probe.joinable() ? fuse_loop_cfg_create() : nullptr;
      if (config != nullptr) {
        fuse_loop_cfg_set_max_threads(config, o.threads);
        fuse_loop_cfg_set_idle_threads(config, o.threads);
        fuse_loop_cfg_set_clone_fd(config, 0);
        fs.attr_invalidator().Start(se);
        // Inodes given up to another host leave the kernel's caches.
        fs.store().SetGiveUpHook([&fs](engine::Ino ino,
                                       const std::vector<std::pair<uint64_t, std::string>>& names,
                                       bool wait) {
          if (wait) {
            fs.attr_invalidator().GaveUp(ino, names);
          } else {
            fs.attr_invalidator().GaveUpSoon(ino, names);
          }
        });
        fs.idle_release().Start();
        const int loop = fuse_session_loop_mt(se, config);
        fs.idle_release().Stop();
        fs.store().SetGiveUpHook(nullptr);
        fs.attr_invalidator().Stop();
        fuse_loop_cfg_destroy(config);
        // 0, or a signal number after SIGTERM/SIGINT/SIGHUP: both are clean.
        rc = loop < 0 ? 1 : 0;
        if (loop < 0) std::fprintf(stderr, "ckptfs: session loop failed: %s\n", strerror(-loop));
      }
      fuse_session_unmount(se);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  if (probe.joinable()) probe.join();
  return rc;
}

// The holder name a mount writes into the lock of the store it serves.
std::string MountHolder(pid_t pid, const std::string& mountpoint) {
  return "ckptfs mount (pid " + std::to_string(pid) + ") on " + mountpoint;
}

// What a mount of a shared store serves with (docs/SHARED.md, "What one
// host sees of another's work"): the kernel caches names, attributes and
// misses only while this mount is the only mounted host, and for a second
// at most (Store::CacheSeconds bounds the timeouts), so that a call that
// starts after another host's change returned sees it; no write-back
// cache, whose cached sizes the kernel would trust over another host's;
// and no passthrough. Opens are answered (fs/data.cc) without keeping the
// cached pages: close-to-open for file contents.
MountOptions ForSharedStore(MountOptions o) {
  o.writeback_cache = false;
  o.passthrough = o.passthrough_writes = false;
  return o;
}

// What a mount of `store` serves with: `o`, shared stores' settings
// (ForSharedStore), and the defaults the store chooses.
MountOptions ForStore(const MountOptions& o, const engine::Store& store) {
  MountOptions e = store.Shared() ? ForSharedStore(o) : o;
  if (e.readahead == MountOptions::kReadaheadByStore) {
    e.readahead = MountOptions::ReadaheadFor(!store.DataStorage().empty());
  }
  return e;
}

// How long a mount waits for a mount that was unmounted to close the store.
constexpr auto kUnmountedHolderWait = std::chrono::seconds(30);

// The mountpoint of the mount that holds the store, as `busy` (EBUSY from
// Store::Open) names it, when that mount is no longer mounted there: it was
// unmounted and is closing the store. "" otherwise.
std::string UnmountedHolder(const engine::Status& busy) {
  const engine::StoreHolder* h = busy.payload<engine::StoreHolder>();
  if (h == nullptr || h->pid <= 0) return "";
  const std::string prefix = MountHolder(h->pid, "");
  if (h->holder.compare(0, prefix.size(), prefix) != 0) return "";
  const std::string mountpoint = h->holder.substr(prefix.size());
  if (mountpoint.empty() || !CkptfsMountedOn(mountpoint).empty()) return "";
  return mountpoint;
}

// Store::Open. umount(8) returns before the daemon has closed its store, so
// that a mount right after it finds the store held by a mount that is
// closing it: then this waits (up to kUnmountedHolderWait, saying so on
// stderr) for the store to be released.
engine::Result<std::unique_ptr<engine::Store>> OpenForMount(const std::string& dir,
                                                            const engine::StoreOptions& options) {
  engine::Result<std::unique_ptr<engine::Store>> store = engine::Store::Open(dir, options);
  if (store.ok() || store.status().code() != EBUSY) return store;
  const std::string unmounted = UnmountedHolder(store.status());
  if (unmounted.empty()) return store;
  std::fprintf(stderr,
               "ckptfs: the mount on %s was unmounted and is closing store %s; waiting up to "
               "%llds\n",
               unmounted.c_str(), dir.c_str(),
               static_cast<long long>(kUnmountedHolderWait.count()));
  const auto deadline = std::chrono::steady_clock::now() + kUnmountedHolderWait;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store = engine::Store::Open(dir, options);
    if (store.ok() || store.status().code() != EBUSY || UnmountedHolder(store.status()).empty()) {
      return store;
    }
  }
  return engine::Status(EBUSY, store.status().message() + " (unmounted, still closing the store after " +
                                   std::to_string(kUnmountedHolderWait.count()) + "s)");
}

}  // namespace

int ServeMount(const MountOptions& options, const ReadyCallback& on_ready) {
  engine::StoreOptions store_options = options.store;
  store_options.create_if_missing = true;
  store_options.read_only = options.read_only;
  // The kernel caches the pages it reads and writes through the daemon;
  // reads passed through to a data file are served from the data file's.
  store_options.direct_io = options.direct_io && !options.AsksPassthrough();
  store_options.holder = MountHolder(getpid(), options.mountpoint);
  engine::Result<std::unique_ptr<engine::Store>> store =
      OpenForMount(options.store_dir, store_options);
  if (!store.ok()) {
    on_ready(Status::Errno(store.status().code(), "cannot open store " + options.store_dir + ": " +
                                                      store.status().ToString()));
    return 1;
  }
  const MountOptions effective = ForStore(options, **store);
  int rc = 1;
  bool reported = false;
  try {
    Filesystem fs(store->get(), effective);
    rc = RunSession(fs, effective, [&](const Status& st) {
      reported = true;
      on_ready(st);
    });
  } catch (const std::exception& e) {
    // Only allocation can throw here; still close the store below.
    if (!reported) on_ready(Status::Errno(ENOMEM, std::string("mount failed: ") + e.what()));
    std::fprintf(stderr, "ckptfs: %s\n", e.what());
  }
  // Every path closes the store: flushes and marks it clean.
  Status closed = (*store)->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "ckptfs: closing store %s: %s\n", options.store_dir.c_str(),
                 closed.ToString().c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace ckptfs::fs
