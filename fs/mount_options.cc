// Parsing and checking of mount options (no FUSE here).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/size.h"
#include "fs/mount.h"

namespace ckptfs::fs {

using engine::Result;
using engine::Status;

namespace {

Status Malformed(std::string_view key, std::string_view value, const char* expected) {
  return Status::Errno(EINVAL, "bad value '" + std::string(value) + "' for mount option '" +
                                   std::string(key) + "': expected " + expected);
}

Result<uint64_t> ParseUnsigned(std::string_view text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::Errno(EINVAL, "not a number");
  }
  return v;
}

Result<double> ParseSeconds(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) {
    return Status::Errno(EINVAL, "not a duration");
  }
  return v;
}

// Flags accept "key", "key=1|0|true|false|yes|no|on|off".
Result<bool> ParseFlag(std::string_view text, bool has_value) {
  if (!has_value) return true;
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return Status::Errno(EINVAL, "not a flag");
}

}  // namespace

Status ParseMountOption(std::string_view option, MountOptions* o) {
  const size_t eq = option.find('=');
  const bool has_value = eq != std::string_view::npos;
  const std::string_view key = option.substr(0, eq);
  const std::string_view value = has_value ? option.substr(eq + 1) : std::string_view();
  if (key.empty()) return Status::Errno(EINVAL, "empty mount option");

  auto size = [&](uint64_t* out) -> Status {
    auto v = engine::ParseSize(value);
    if (!has_value || !v.ok()) return Malformed(key, value, "a size such as 256K, 64M or 1G");
    *out = *v;
    return Status::OK();
  };
  auto seconds = [&](double* out) -> Status {
    auto v = ParseSeconds(value);
    if (!has_value || !v.ok()) return Malformed(key, value, "seconds such as 1 or 0.5");
    *out = *v;
    return Status::OK();
  };
  auto flag = [&](bool* out) -> Status {
    auto v = ParseFlag(value, has_value);
    if (!v.ok()) return Malformed(key, value, "no value, or 1/0");
    *out = *v;
    return Status::OK();
  };

  if (key == "coalesce_gap") return size(&o->store.coalesce_gap);
  if (key == "coalesce_max") return size(&o->store.coalesce_max);
  if (key == "cache_size") return size(&o->store.cache_bytes);
  if (key == "min_free") return size(&o->store.min_free_bytes);
  if (key == "readahead") return size(&o->readahead);
  if (key == "compact_dead") return size(&o->store.background_compact_dead_bytes);
  if (key == "free_empty") return flag(&o->store.free_empty_segments);
  if (key == "compact_rate") {
    CKPTFS_RETURN_IF_ERROR(size(&o->store.background_compact_bytes_per_sec));
    if (o->store.background_compact_bytes_per_sec == 0) {
      return Malformed(key, value, "a rate above 0 such as 64M");
    }
    return Status::OK();
  }
  if (key == "segment_size") {
    uint64_t v = 0;
    CKPTFS_RETURN_IF_ERROR(size(&v));
    if (v < (1u << 20)) return Malformed(key, value, "a size of at least 1M");
    o->store.segment_target_bytes = v;
    return Status::OK();
  }
  if (key == "inline_max") {
    uint64_t v = 0;
    CKPTFS_RETURN_IF_ERROR(size(&v));
    if (v > (1u << 20)) return Malformed(key, value, "a size of at most 1M");
    o->store.inline_max_bytes = static_cast<uint32_t>(v);
    return Status::OK();
  }
  if (key == "compression") {
    auto v = ParseUnsigned(value);
    if (!has_value || !v.ok() || *v > 22)
      return Malformed(key, value, "a zstd level 0..22 (0 = off)");
    o->store.compression_level = static_cast<int>(*v);
    return Status::OK();
  }
  if (key == "threads") {
    auto v = ParseUnsigned(value);
    if (!has_value || !v.ok() || *v < 1 || *v > 1024) return Malformed(key, value, "1..1024");
    o->threads = static_cast<unsigned>(*v);
    return Status::OK();
  }
  if (key == "attr_timeout") return seconds(&o->attr_timeout);
  if (key == "entry_timeout") return seconds(&o->entry_timeout);
  if (key == "allow_other") return flag(&o->allow_other);
  if (key == "ro") return flag(&o->read_only);
  if (key == "rw") {
    o->read_only = false;
    return has_value ? Malformed(key, value, "no value") : Status::OK();
  }
  if (key == "writeback_cache") return flag(&o->writeback_cache);
  if (key == "debug") return flag(&o->debug);
  return Status::Errno(EINVAL, "unknown mount option '" + std::string(key) + "'");
}

Status ParseMountOptions(std::string_view list, MountOptions* options) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view one = list.substr(0, comma);
    if (!one.empty()) CKPTFS_RETURN_IF_ERROR(ParseMountOption(one, options));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return Status::OK();
}

Status ResolvePaths(MountOptions* o) {
  if (o->store_dir.empty()) return Status::Errno(EINVAL, "no store directory given");
  if (o->mountpoint.empty()) return Status::Errno(EINVAL, "no mountpoint given");
  std::error_code ec;
  auto store = std::filesystem::absolute(o->store_dir, ec);
  if (ec) return Status::Errno(EINVAL, "bad store path " + o->store_dir + ": " + ec.message());
  auto mnt = std::filesystem::absolute(o->mountpoint, ec);
  if (ec) return Status::Errno(EINVAL, "bad mountpoint " + o->mountpoint + ": " + ec.message());
  // Resolve symlinks where the path exists, as /proc/mounts will show it.
  auto canonical = [](const std::filesystem::path& p) {
    std::error_code ec;
    auto c = std::filesystem::weakly_canonical(p, ec);
    return ec ? p.lexically_normal() : c;
  };
  o->store_dir = canonical(store).string();
  o->mountpoint = canonical(mnt).string();
  // "a/b/" normalizes to "a/b/"; drop the trailing slash.
  for (std::string* p : {&o->store_dir, &o->mountpoint}) {
    while (p->size() > 1 && p->back() == '/') p->pop_back();
  }
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

// The source (store) of a ckptfs mount on `mnt`, or "" when there is none.
std::string CkptfsMountedOn(const std::string& mnt) {
  std::ifstream mounts("/proc/self/mounts");
  std::string source, point, type, rest, found;
  while (mounts >> source >> point >> type && std::getline(mounts, rest)) {
    if (type == "fuse.ckptfs" && UnescapeMountField(point) == mnt) {
      found = UnescapeMountField(source);
    }
  }
  return found;
}

}  // namespace

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
