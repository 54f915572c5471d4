#include "engine/index/store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <charconv>

#include "format/format.h"

namespace ckptfs::engine {

namespace {

// The holder as written by Acquire: "HOLDER\nPID\n". A store locked by an
// older version has no pid line.
StoreHolder ParseHolder(std::string text) {
  StoreHolder h;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  const size_t nl = text.rfind('\n');
  if (nl != std::string::npos) {
    const std::string_view pid(text.data() + nl + 1, text.size() - nl - 1);
    auto [end, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), h.pid);
    if (pid.empty() || ec != std::errc() || end != pid.data() + pid.size() || h.pid <= 0) {
      h.pid = 0;
    } else {
      text.resize(nl);
    }
  }
  h.holder = std::move(text);
  return h;
}

}  // namespace

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
    StoreHolder who = ParseHolder(n > 0 ? std::string(buf, static_cast<size_t>(n)) : "");
    const std::string name = who.holder.empty() ? "another process" : who.holder;
    return Status(EBUSY, "store " + dir + " is in use by " + name).WithPayload(std::move(who));
  }
  // Written over the last holder's line, then cut to length: the file is
  // never empty while the lock is held, so a second opener always reads a
  // name (this one's, or the last holder's for an instant).
  std::string line = holder + "\n" + std::to_string(::getpid()) + "\n";
  if (::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()) ||
      ::ftruncate(fd, static_cast<off_t>(line.size())) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IOError(err, "write " + path);
  }
  return std::unique_ptr<StoreLock>(new StoreLock(fd));
}

StoreLock::~StoreLock() {
  // The holder's line stays: only an opener that finds the flock held reads
  // it, and the next holder writes its own over it. Emptying it first would
  // leave an instant in which the lock is held by a nameless process.
  ::close(fd_);  // releases the flock
}

}  // namespace ckptfs::engine
