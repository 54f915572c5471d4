#include "engine/store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "format/format.h"

namespace ckptfs::engine {

Result<std::unique_ptr<StoreLock>> StoreLock::Acquire(const std::string& dir,
                                                      const std::string& holder) {
  std::string path = dir + "/" + format::kLockFileName;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(errno, "open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char buf[512];
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::IOError(err, "flock " + path);
    std::string who = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    return Status(EBUSY, "store " + dir + " is in use by " + who);
  }
  std::string line = holder + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    int err = errno;
    ::close(fd);
    return Status::IOError(err, "write " + path);
  }
  return std::unique_ptr<StoreLock>(new StoreLock(fd));
}

StoreLock::~StoreLock() {
  if (::ftruncate(fd_, 0) != 0) {
    // The stale holder line is harmless: the flock is what counts.
  }
  ::close(fd_);  // releases the flock
}

}  // namespace ckptfs::engine
