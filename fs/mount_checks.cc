// The checks of paths and mounts made before mounting, and what this
// process and kernel offer.
#include "fs/mount_checks.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace ckptfs::fs {

using engine::Result;
using engine::Status;

std::string LibfuseVersion() { return fuse_pkgversion(); }

std::string PassthroughPrivilege() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) == 0 &&
      (data[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32))) != 0) {
    return "";
  }
  return "needs CAP_SYS_ADMIN (mount as root)";
}

std::string PassthroughSupport() {
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) {
    return "no: the kernel's release is unknown";
  }
  if (major < 6 || (major == 6 && minor < 9)) {
    return std::string("no: needs Linux 6.9+, this is ") + u.release;
  }
  if (std::string why = PassthroughPrivilege(); !why.empty()) return "no: " + why;
  return "yes, with -o passthrough (Linux " + std::string(u.release) +
         ", CAP_SYS_ADMIN; the mount's stats file says what the kernel granted)";
}

Result<std::string> ResolvePath(const std::string& path, const std::string& what) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  if (ec) return Status::Errno(EINVAL, "bad " + what + " " + path + ": " + ec.message());
  // Resolve symlinks where the path exists, as /proc/mounts will show it; a
  // stale mount (ENOTCONN) is normalized as written.
  auto resolved = std::filesystem::weakly_canonical(abs, ec);
  std::string out = (ec ? abs.lexically_normal() : resolved).string();
  // "a/b/" normalizes to "a/b/"; drop the trailing slash.
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

Status ResolvePaths(MountOptions* o) {
  if (o->store_dir.empty()) return Status::Errno(EINVAL, "no store directory given");
  if (o->mountpoint.empty()) return Status::Errno(EINVAL, "no mountpoint given");
  CKPTFS_ASSIGN_OR_RETURN(o->store_dir, ResolvePath(o->store_dir, "store path"));
  CKPTFS_ASSIGN_OR_RETURN(o->mountpoint, ResolvePath(o->mountpoint, "mountpoint"));
  return Status::OK();
}

Status CheckFuseDevice() {
  struct stat st;
  if (stat("/dev/fuse", &st) != 0) {
    return Status::Errno(ENODEV,
                         "/dev/fuse does not exist: load the fuse module (modprobe fuse) or, in a "
                         "container, pass the device in (--device /dev/fuse)");
  }
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status::Errno(err, std::string("cannot open /dev/fuse: ") + std::strerror(err));
  }
  close(fd);
  return Status::OK();
}

namespace {

// 0 = empty, 1 = has entries, -errno on failure.
int DirState(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return -errno;
  int state = 0;
  errno = 0;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      state = 1;
      break;
    }
  }
  if (state == 0 && errno != 0) state = -errno;
  closedir(d);
  return state;
}

// Undoes the octal escapes of /proc/mounts (\040 for a space, ...).
std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct MountEntry {
  std::string type;
  std::string source;
};

// What /proc/self/mounts lists on `mnt`, bottom first.
std::vector<MountEntry> MountsOn(const std::string& mnt) {
  std::vector<MountEntry> found;
  std::ifstream mounts("/proc/self/mounts");
  std::string source, point, type, rest;
  while (mounts >> source >> point >> type && std::getline(mounts, rest)) {
    if (UnescapeMountField(point) == mnt) found.push_back({type, UnescapeMountField(source)});
  }
  return found;
}

}  // namespace

std::string CkptfsMountedOn(const std::string& mnt) {
  std::string store;
  for (const MountEntry& m : MountsOn(mnt)) {
    if (m.type == kMountType) store = m.source;
  }
  return store;
}

Status CheckUnmountable(const std::string& mnt) {
  const std::vector<MountEntry> mounts = MountsOn(mnt);
  if (mounts.empty()) {
    struct stat st;
    if (stat(mnt.c_str(), &st) != 0 && errno == ENOENT) {
      return Status::Errno(ENOENT, mnt + " does not exist");
    }
    return Status::Errno(EINVAL, mnt + " is not mounted");
  }
  if (mounts.back().type != kMountType) {
    return Status::Errno(EINVAL, mnt + " is a " + mounts.back().type + " mount (" +
                                     mounts.back().source + "), not a ckptfs one; not unmounted");
  }
  return Status::OK();
}

Status CheckMountpoint(const std::string& mnt) {
  if (std::string store = CkptfsMountedOn(mnt); !store.empty()) {
    return Status::Errno(EBUSY, "mountpoint " + mnt + " already has a ckptfs mount (of " + store +
                                    "); run 'ckptfs umount " + mnt + "' first");
  }
  struct stat st;
  if (stat(mnt.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::Errno(ENOENT, "mountpoint " + mnt + " does not exist");
    if (err == ENOTCONN) {
      return Status::Errno(err, "mountpoint " + mnt +
                                    " is a stale mount (transport endpoint is not connected); "
                                    "run 'ckptfs umount " +
                                    mnt + "' first");
    }
    return Status::Errno(err, "mountpoint " + mnt + ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::Errno(ENOTDIR, "mountpoint " + mnt + " is not a directory");
  }
  const int state = DirState(mnt);
  if (state < 0) return Status::Errno(-state, "mountpoint " + mnt + ": " + std::strerror(-state));
  if (state == 1) return Status::Errno(ENOTEMPTY, "mountpoint " + mnt + " is not empty");
  return Status::OK();
}

Status CheckStoreDir(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::OK();  // created by Store::Open
    return Status::Errno(err, "store " + dir + ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) return Status::Errno(ENOTDIR, "store " + dir + " is not a directory");
  if (engine::Store::IsStore(dir)) return Status::OK();
  const int state = DirState(dir);
  if (state < 0) return Status::Errno(-state, "store " + dir + ": " + std::strerror(-state));
  if (state == 1) {
    return Status::Errno(EINVAL, dir +
                                     " is not a ckptfs store: it is not empty and has no "
                                     "FORMAT file");
  }
  return Status::OK();
}

}  // namespace ckptfs::fs
