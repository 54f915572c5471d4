#include "fs/set_id_bits.h"

#include <fuse_kernel.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>


namespace ckptfs::fs {
namespace {

// Set by ReadRequest for the request this thread reads, and so serves, next.
thread_local bool kill_flag = false;

// Reads `field` of the request argument that starts at `arg`, when the
// request is long enough to hold it.
template <typename T>
bool ReadField(const char* arg, size_t arg_len, size_t offset, T* field) {
  if (arg_len < offset + sizeof(T)) return false;
  std::memcpy(field, arg + offset, sizeof(T));
  return true;
}

bool CarriesKillFlag(const char* buf, size_t len) {
  fuse_in_header h;
  if (len < sizeof(h)) return false;
  std::memcpy(&h, buf, sizeof(h));
  const char* arg = buf + sizeof(h);
  const size_t arg_len = len - sizeof(h);
  uint32_t flags = 0;
  switch (h.opcode) {
    case FUSE_WRITE:
      return ReadField(arg, arg_len, offsetof(fuse_write_in, write_flags), &flags) &&
             (flags & FUSE_WRITE_KILL_SUIDGID) != 0;
    case FUSE_OPEN:
      return ReadField(arg, arg_len, offsetof(fuse_open_in, open_flags), &flags) &&
             (flags & FUSE_OPEN_KILL_SUIDGID) != 0;
    case FUSE_CREATE:
      return ReadField(arg, arg_len, offsetof(fuse_create_in, open_flags), &flags) &&
             (flags & FUSE_OPEN_KILL_SUIDGID) != 0;
    default:
      return false;
  }
}

ssize_t ReadRequest(int fd, void* buf, size_t len, void*) {
  const ssize_t n = read(fd, buf, len);
  // errno stays read's for libfuse.
  kill_flag = n > 0 && CarriesKillFlag(static_cast<const char*>(buf), static_cast<size_t>(n));
  return n;
}

ssize_t WriteReply(int fd, iovec* iov, int count, void*) { return writev(fd, iov, count); }

// Whether the caller of `r` is in group `gid` (primary or supplementary).
bool CallerInGroup(Request& r, gid_t gid) {
  if (r.ctx().gid == gid) return true;
  std::vector<gid_t> groups(64);
  int n = fuse_req_getgroups(r.req(), static_cast<int>(groups.size()), groups.data());
  if (n > static_cast<int>(groups.size())) {
    groups.resize(static_cast<size_t>(n));
    n = fuse_req_getgroups(r.req(), n, groups.data());
  }
  if (n <= 0) return false;  // unknown: clear the bit, as for an outsider
  groups.resize(std::min(groups.size(), static_cast<size_t>(n)));
  for (gid_t g : groups) {
    if (g == gid) return true;
  }
  return false;
}

// The inode of the user namespace of process `pid` ("self" or a number), or
// 0 when it cannot be read.
ino_t UserNamespace(const std::string& pid) {
  struct stat st;
  if (stat(("/proc/" + pid + "/ns/user").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

}  // namespace

bool CallerHasFsetid(Request& r) {
  const pid_t pid = r.ctx().pid;
  if (pid <= 0) return false;
  const std::string proc = std::to_string(pid);
  std::ifstream status("/proc/" + proc + "/status");
  std::string line;
  uint64_t effective = 0;
  bool found = false;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      found = std::sscanf(line.c_str() + 7, "%" SCNx64, &effective) == 1;
      break;
    }
  }
  if (!found || (effective & (uint64_t{1} << CAP_FSETID)) == 0) return false;
  // Capabilities count in their own user namespace only.
  const ino_t ns = UserNamespace(proc);
  return ns != 0 && ns == UserNamespace("self");
}

int InstallKillFlagHook(fuse_session* se) {
  fuse_custom_io io;
  std::memset(&io, 0, sizeof(io));
  io.read = ReadRequest;
  io.writev = WriteReply;
  return fuse_session_custom_io(se, &io, sizeof(io), fuse_session_fd(se));
}

bool RequestKillsSuidSgid() { return kill_flag; }

engine::Result<bool> KillPriv::ForWrite(Request& r, engine::Ino ino) {
  if (!enabled()) return false;
  CKPTFS_RETURN_IF_ERROR(KillCapability(ino));
  if (!RequestKillsSuidSgid()) return false;
  return KillSuidSgid(r, ino);
}

engine::Result<bool> KillPriv::ForFallocate(Request& r, engine::Ino ino) {
  if (!enabled()) return false;
  CKPTFS_RETURN_IF_ERROR(KillCapability(ino));
  return KillSuidSgid(r, ino, /*unless_fsetid=*/true);
}

engine::Status KillPriv::KillCapability(engine::Ino ino) {
  if (!enabled() || capability_free_.Contains(ino)) return engine::Status::OK();
  const uint64_t epoch = capability_free_.Epoch();
  engine::Status st = store_->RemoveXattr(ino, kCapabilityXattr);
  if (!st.ok() && st.code() != ENODATA) return st;
  capability_free_.MarkFree(ino, epoch);
  return engine::Status::OK();
}

engine::Result<bool> KillPriv::KillSuidSgid(Request& r, engine::Ino ino, bool unless_fsetid) {
  if (!enabled()) return false;
  CKPTFS_ASSIGN_OR_RETURN(const engine::Attr a, store_->GetAttr(ino));
  if ((a.mode & (S_ISUID | S_ISGID)) == 0 || S_ISDIR(a.mode)) return false;
  if (unless_fsetid && CallerHasFsetid(r)) return false;
  engine::SetAttrRequest kill;
  kill.kill_suidgid = true;  // set-user-ID; set-group-ID with group execute
  kill.kill_sgid = (a.mode & S_ISGID) != 0 && !CallerInGroup(r, a.gid) && !CallerHasFsetid(r);
  CKPTFS_ASSIGN_OR_RETURN(const engine::Attr after, store_->SetAttr(ino, kill));
  return after.mode != a.mode;
}

}  // namespace ckptfs::fs
