// The POSIX Env: pread, pwritev, fdatasync on local files; O_DIRECT for
// WriteUncachedAt.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "base/page_aligned_buffer.h"
#include "io/env.h"

namespace ckptfs::io {
namespace {

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(errno, "open " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  return rc == 0 ? Status::OK() : Status::IOError(err, "fsync " + dir);
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

uint64_t PageSize() { return PageAlignedBuffer::PageSize(); }

// Asks the filesystem for the size of open file `fd` afresh, past any
// attributes its client holds (a network filesystem's client keeps them for
// seconds): reads through `fd` then go as far as the server's file does.
Status AskSize(int fd, const std::string& path) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_SIZE | STATX_MTIME, &stx) != 0) {
    return Status::IOError(errno, "stat " + path);
  }
  return Status::OK();
}

// Direct writes from unaligned memory go through a buffer of each thread,
// in pieces of at most this size.
constexpr size_t kDirectBufferBytes = 1 << 20;

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd) : File(std::move(path)), fd_(fd) {}
  ~PosixFile() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd_, buf + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::IOError(errno, "read " + path());
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    std::vector<iovec> iov;
    iov.reserve(pieces.size());
    for (std::string_view p : pieces) {
      if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
    }
    // One call for all pieces; a short write goes on from where it stopped.
    size_t first = 0;
    while (first < iov.size()) {
      ssize_t w = ::pwritev(fd_, iov.data() + first, static_cast<int>(iov.size() - first),
                            static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::IOError(errno, "write " + path());
      }
      offset += static_cast<uint64_t>(w);
      size_t left = static_cast<size_t>(w);
      while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (first < iov.size()) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return Status::OK();
  }

  Status WriteUncachedAt(uint64_t offset, std::string_view data) override {
    const uint64_t align = DirectAlignment();
    const uint64_t end = offset + data.size();
    // The blocks wholly inside [offset, end) go direct; the ends share a
    // page with bytes outside and go through the cache.
    const uint64_t first = align == 0 ? end : (offset + align - 1) / align * align;
    const uint64_t last = align == 0 ? end : std::max(first, end / align * align);
    if (first >= last) return WriteAt(offset, std::span<const std::string_view>(&data, 1));
    auto piece = [&](uint64_t from, uint64_t to) { return data.substr(from - offset, to - from); };
    const std::string_view head = piece(offset, first);
    if (!head.empty()) CKPTFS_RETURN_IF_ERROR(WriteAt(offset, std::span(&head, 1)));
    uint64_t at = first;
    while (at < last) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(last - at, kDirectBufferBytes));
      const char* src = data.data() + (at - offset);
      if (reinterpret_cast<uintptr_t>(src) % PageSize() != 0) {
        thread_local PageAlignedBuffer buffer;
        char* aligned = buffer.Reserve(kDirectBufferBytes);
        std::memcpy(aligned, src, n);
        src = aligned;
      }
      const ssize_t w = ::pwrite(direct_fd_, src, n, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno != EINVAL) return Status::IOError(errno, "write " + path());
      // EINVAL: the filesystem refused this direct write after all; the
      // rest goes through the cache.
      if (w < 0) direct_align_.store(0, std::memory_order_relaxed);
      if (w <= 0) break;
      at += static_cast<uint64_t>(w);
      if (at % align != 0) break;  // a short write: the rest through the cache
    }
    const std::string_view rest = piece(at, end);
    return rest.empty() ? Status::OK() : WriteAt(at, std::span(&rest, 1));
  }

  Status Refresh() const override {
    const int access = ::fcntl(fd_, F_GETFL) & O_ACCMODE;
    const int fresh = ::open(path().c_str(), access | O_CLOEXEC);
    if (fresh < 0) return Status::IOError(errno, "open " + path());
    Status s = AskSize(fresh, path());
    if (s.ok() && ::dup3(fresh, fd_, O_CLOEXEC) < 0) {
      // fd_ keeps its number: reads in progress finish on the open they began on.
      s = Status::IOError(errno, "reopen " + path());
    }
    ::close(fresh);
    return s;
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Status::IOError(errno, "fdatasync " + path());
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IOError(errno, "stat " + path());
    return static_cast<uint64_t>(st.st_size);
  }

  Result<int64_t> ModifiedNs() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::IOError(errno, "stat " + path());
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return Status::IOError(errno, "truncate " + path());
    }
    return Status::OK();
  }

  void Prefetch(uint64_t offset, uint64_t len) const override {
    (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(len),
                          POSIX_FADV_WILLNEED);
  }

  void NoReadahead() const override { (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM); }

  void Evict(uint64_t offset, uint64_t len) const override {
    // Clean pages go at once; dirty ones stay until written back.
    (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(len),
                          POSIX_FADV_DONTNEED);
  }

 private:
  // The alignment of direct writes' offsets and lengths,
  // opening the O_DIRECT descriptor (with fd_'s access mode) on the first
  // call: the filesystem's (statx STATX_DIOALIGN), at least a page, so that
  // a direct write never shares a cached page with a write through the
  // cache. 0 where the filesystem offers no direct I/O, asks more than a
  // page of memory alignment, or refused a direct write (EINVAL).
  uint64_t DirectAlignment() const {
    std::call_once(direct_once_, [this] {
      struct statx stx {};
      if (::statx(fd_, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0) return;
      if (!(stx.stx_mask & STATX_DIOALIGN) || stx.stx_dio_offset_align == 0) return;
      if (stx.stx_dio_mem_align > PageSize()) return;
      // The same file as fd_ whatever became of its name.
      const std::string self = "/proc/self/fd/" + std::to_string(fd_);
      const int access = ::fcntl(fd_, F_GETFL) & O_ACCMODE;
      direct_fd_ = ::open(self.c_str(), access | O_DIRECT | O_CLOEXEC);
      if (direct_fd_ < 0) return;
      direct_align_.store(std::max<uint64_t>(stx.stx_dio_offset_align, PageSize()),
                          std::memory_order_relaxed);
    });
    return direct_align_.load(std::memory_order_relaxed);
  }

  const int fd_;
  // Opened on first use.
  mutable std::once_flag direct_once_;
  mutable int direct_fd_ = -1;  // set once, under direct_once_
  mutable std::atomic<uint64_t> direct_align_{0};
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override {
    const int fd = ::open(path.c_str(), (mode == OpenMode::kRead ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) return Status::IOError(errno, "open " + path);
    auto file = std::make_unique<PosixFile>(path, fd);
    CKPTFS_RETURN_IF_ERROR(AskSize(fd, path));
    return std::unique_ptr<File>(std::move(file));
  }

  Result<std::unique_ptr<File>> Create(const std::string& path, std::string_view contents) override {
    const std::string tmp = path + std::string(kTmpSuffix);
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IOError(errno, "create " + tmp);
    auto file = std::make_unique<PosixFile>(path, fd);
    const std::string_view pieces[] = {contents};
    Status s = file->WriteAt(0, pieces);
    if (s.ok()) s = file->Sync();
    // link() refuses an existing name, so a file is never replaced.
    if (s.ok() && ::link(tmp.c_str(), path.c_str()) != 0) s = Status::IOError(errno, "create " + path);
    ::unlink(tmp.c_str());
    if (s.ok()) s = SyncDirectory(Parent(path));
    // From now on through its name: a client that knows files by their
    // paths (sshfs) keeps a name's size current only for writes made
    // through that name.
    if (s.ok()) s = file->Refresh();
    if (!s.ok()) return s;
    return std::unique_ptr<File>(std::move(file));
  }

  Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IOError(errno, "create " + path);
    return std::unique_ptr<File>(new PosixFile(path, fd));
  }

  Status SyncDir(const std::string& dir) override { return SyncDirectory(dir); }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::IOError(errno, "delete " + path);
    return Status::OK();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Status::IOError(errno, "open " + dir);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      const std::string_view name(e->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

Status File::ReadExactly(uint64_t offset, size_t len, char* buf) const {
  CKPTFS_ASSIGN_OR_RETURN(size_t n, ReadAt(offset, len, buf));
  if (n < len) {
    return Status::Corruption(path() + " ends at " + std::to_string(offset + n) +
                              ", expected data up to " + std::to_string(offset + len));
  }
  return Status::OK();
}

void File::EvictPagesOf(uint64_t offset, uint64_t len) const {
  // Rounded out to whole pages: an eviction keeps partly covered ones.
  const uint64_t page = PageSize();
  const uint64_t from = offset / page * page;
  Evict(from, (offset + len + page - 1) / page * page - from);
}

Status File::WriteUncachedAt(uint64_t offset, std::string_view data) {
  return WriteAt(offset, std::span<const std::string_view>(&data, 1));
}

Status Env::RemoveLeftovers(const std::string& dir) {
  CKPTFS_ASSIGN_OR_RETURN(std::vector<std::string> names, List(dir));
  for (const std::string& name : names) {
    if (name.size() > kTmpSuffix.size() && name.ends_with(kTmpSuffix)) {
      CKPTFS_RETURN_IF_ERROR(Remove(dir + "/" + name));
    }
  }
  return Status::OK();
}

std::shared_ptr<Env> Env::Posix() {
  static const std::shared_ptr<Env> env = std::make_shared<PosixEnv>();
  return env;
}

}  // namespace ckptfs::io
