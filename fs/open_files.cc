#include "fs/open_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ckptfs::fs {

using engine::Ino;
using engine::Result;
using engine::Status;

int OpenFiles::Backing(Ino ino, const OpenBacking& open_backing) {
  Result<std::optional<engine::WholeDataFile>> whole = store_->WholeDataFileOf(ino);
  if (!whole.ok() || !whole->has_value()) return 0;
  const int fd = ::open((*whole)->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  // Bytes past the file's end (a write the index never took, before a
  // crash) would read through; the daemon serves such a file. The size as
  // the filesystem's server has it: a client of a shared filesystem may
  // hold an old one, which would end the kernel's reads early.
  struct statx st {};
  int id = 0;
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_SIZE, &st) == 0 &&
      st.stx_size == (*whole)->size) {
    id = open_backing(fd);
    if (id <= 0) {
      backing_failures_.fetch_add(1, std::memory_order_relaxed);
      last_backing_error_.store(id < 0 ? -id : EIO, std::memory_order_relaxed);
      id = 0;
    }
  }
  ::close(fd);  // the kernel holds the file behind the backing id
  return id;
}

int OpenFiles::WriteBacking(Ino ino, const OpenBacking& open_backing) {
  Result<std::optional<std::string>> path = store_->BeginDirectWrite(ino);
  if (!path.ok()) direct_write_errors_.fetch_add(1, std::memory_order_relaxed);
  if (!path.ok() || !path->has_value()) return 0;
  const int fd = ::open((*path)->c_str(), O_RDWR | O_CLOEXEC);
  int id = fd < 0 ? -errno : open_backing(fd);
  if (fd >= 0) ::close(fd);  // the kernel holds the file behind the backing id
  if (id <= 0) {
    backing_failures_.fetch_add(1, std::memory_order_relaxed);
    last_backing_error_.store(id < 0 ? -id : EIO, std::memory_order_relaxed);
    if (!store_->EndDirectWrite(ino).ok()) direct_write_errors_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  return id;
}

Result<OpenFiles::Opened> OpenFiles::TryOpen(Ino ino, bool read_only, Mode mode,
                                             const OpenBacking& open_backing,
                                             const Truncate& truncate, bool* busy) {
  Opened out;
  Status error;
  *busy = false;
  opens_.Update(ino, [&](State& s, bool existed) {
    if (s.passthrough > 0) {
      if (s.writers == 0 && (!read_only || truncate)) {
        *busy = true;
        return true;
      }
      if (truncate) error = truncate();  // the kernel writes the data file: at once
      if (!error.ok()) return true;
      ++s.passthrough;
      if (read_only) {
        out = Opened{kPassthrough, s.backing_id};
      } else {
        ++s.writers;
        out = Opened{kDirectWrite, s.backing_id};
      }
      return true;
    }
    if (truncate) error = truncate();
    if (!error.ok()) return existed;
    if (mode != Mode::kNone && s.daemon == 0) {
      const bool writes = !read_only && mode == Mode::kReadsAndWrites;
      const int id = read_only ? Backing(ino, open_backing)
                     : writes  ? WriteBacking(ino, open_backing)
                               : 0;
      if (id > 0) {
        s.backing_id = id;
        s.passthrough = 1;
        s.writers = writes ? 1 : 0;
        backing_files_.fetch_add(1, std::memory_order_relaxed);
        out = Opened{writes ? kDirectWrite : kPassthrough, id};
        return true;
      }
    }
    ++s.daemon;
    out = Opened{kDaemon, 0};
    return true;
  });
  if (!error.ok()) return error;
  return out;
}

Result<OpenFiles::Opened> OpenFiles::Open(Ino ino, bool read_only, Mode mode,
                                          const OpenBacking& open_backing,
                                          const Truncate& truncate) {
  const auto deadline = std::chrono::steady_clock::now() + kReleaseWait;
  bool busy = false;
  Result<Opened> out = TryOpen(ino, read_only, mode, open_backing, truncate, &busy);
  while (out.ok() && busy) {
    if (!WaitForReleases(ino, deadline)) {
      return Status::Errno(ETXTBSY, "open for reading through its data file");
    }
    out = TryOpen(ino, read_only, mode, open_backing, truncate, &busy);
  }
  if (!out.ok()) return out;
  (out->handle == kDaemon ? daemon_opens_ : passthrough_opens_)
      .fetch_add(1, std::memory_order_relaxed);
  return out;
}

bool OpenFiles::WaitForReleases(Ino ino, std::chrono::steady_clock::time_point deadline) {
  MutexLock l(&release_mu_);
  while (ReadersOnly(ino)) {
    if (!released_.WaitUntil(&release_mu_, deadline) && ReadersOnly(ino)) {
      CountBusy();
      return false;
    }
  }
  return true;
}

void OpenFiles::Release(Ino ino, uint64_t handle, const CloseBacking& close_backing) {
  int close_id = 0;
  opens_.Update(ino, [&](State& s, bool existed) {
    if (!existed) return false;  // not one of ours (a control file)
    if ((handle == kPassthrough || handle == kDirectWrite) && s.passthrough > 0) {
      if (handle == kDirectWrite && s.writers > 0 && --s.writers == 0) {
        // Under the map's lock: an open that comes meanwhile sees the
        // store's state and ours agree.
        if (!store_->EndDirectWrite(ino).ok()) {
          direct_write_errors_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (--s.passthrough == 0) {
        close_id = s.backing_id;
        s.backing_id = 0;
      }
    } else if (handle == kDaemon && s.daemon > 0) {
      --s.daemon;
    }
    return s.passthrough > 0 || s.daemon > 0;
  });
  if (close_id > 0) {
    close_backing(close_id);
    backing_files_.fetch_sub(1, std::memory_order_relaxed);
    MutexLock l(&release_mu_);
    released_.SignalAll();
  }
}

bool OpenFiles::ReadersOnly(Ino ino) const {
  std::optional<State> s = opens_.Get(ino);
  return s.has_value() && s->passthrough > 0 && s->writers == 0;
}

}  // namespace ckptfs::fs
