// `ckptfs seal PATH...`: seals the tree under each PATH on a mount (the
// directory and everything below it, or one file; engine/store.h,
// Store::Seal) by setting its "user.ckptfs.seal" attribute, as a training
// script may with os.setxattr. From then on the tree never changes on any
// host but by its removal, and every host's kernel keeps it cached.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fs/mount_checks.h"
#include "tools/commands.h"

namespace ckptfs::tools {
namespace {

// Whether `st` (a path's stat) lies on a ckptfs mount of this machine:
// another filesystem would store the attribute as any other.
bool OnCkptfsMount(const struct stat& st) {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, dir, type;
    if (!(fields >> source >> dir >> type) || type != fs::kMountType) continue;
    struct stat m;
    if (::stat(dir.c_str(), &m) == 0 && m.st_dev == st.st_dev) return true;
  }
  return false;
}

}  // namespace

int RunSeal(const std::vector<std::string>& paths) {
  int rc = 0;
  for (const std::string& p : paths) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      std::fprintf(stderr, "ckptfs: seal %s: %s\n", p.c_str(), std::strerror(errno));
      rc = 1;
      continue;
    }
    if (!OnCkptfsMount(st)) {
      std::fprintf(stderr, "ckptfs: seal %s: not on a ckptfs mount\n", p.c_str());
      rc = 1;
      continue;
    }
    if (::setxattr(p.c_str(), "user.ckptfs.seal", "1", 1, 0) == 0) {
      std::printf("sealed %s\n", p.c_str());
      continue;
    }
    const int e = errno;
    const char* why = std::strerror(e);
    if (e == EBUSY) why = "a file in it is being written; close it first";
    std::fprintf(stderr, "ckptfs: seal %s: %s\n", p.c_str(), why);
    rc = 1;
  }
  return rc;
}

}  // namespace ckptfs::tools
