// `ckptfs warmup [--threads N] [--json] PATH...`: reads a subtree of a
// mount ahead of a restore, so that the restore runs from memory.
//
// It walks each PATH (lstat fills the kernel's entry and attribute caches),
// asks the mount where each file's first bytes lie (the "user.ckptfs.extents"
// attribute, format/extents_attr.h), and reads the files through the mount in
// store order: segment by segment, by record offset. Neighbouring files are
// then neighbouring records, so the daemon's coalesced backing reads bring
// each segment byte in once, and the bytes stay in the kernel's page cache
// (and the daemon's record cache) for the restore that follows. The sorted
// list is cut into one contiguous run per thread, so every thread reads its
// own part of the store sequentially. Each file is stat'ed after it is read,
// so that its attributes are fresh in the kernel's cache too.
//
// Exit status: 0 when every file was read; 1 when a file could not be read
// (each named on stderr, the rest are still read) or PATH is not on a mount.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "format/extents_attr.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace ckptfs::tools {

namespace {

struct WarmFile {
  std::string path;
  uint64_t size = 0;
  // Where its first stored bytes lie: (segment id, record offset); (0, 0)
  // for files held in the index (inline) or holes only.
  uint64_t segment = 0;
  uint64_t offset = 0;
};

// The mount that holds `path`: the nearest ancestor (or `path` itself) with
// a ".ckptfs/stats" control file; "" when there is none.
std::string MountOf(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return "";
  for (;;) {
    struct stat st;
    if (::stat((p / ".ckptfs" / "stats").c_str(), &st) == 0) return p.string();
    if (p == p.root_path() || !p.has_parent_path()) return "";
    p = p.parent_path();
  }
}

// Fills `f->segment` and `f->offset` from the first page of the file's
// extents attribute; leaves them 0 when it names no record.
void Locate(WarmFile* f) {
  std::string value(format::kExtentsPageBytes, '\0');
  const ssize_t n = ::getxattr(f->path.c_str(), std::string(format::kExtentsXattr).c_str(),
                               value.data(), value.size());
  if (n <= 0) return;
  value.resize(static_cast<size_t>(n));
  format::FileLayout layout;
  std::optional<uint64_t> next;
  if (!format::ParseExtentsPage(value, 0, /*first=*/true, &layout, &next).ok()) return;
  for (const format::LayoutExtent& e : layout.extents) {
    if (e.kind != format::LayoutExtent::Kind::kRecord) continue;
    f->segment = e.value.segment_id;
    f->offset = e.value.record_offset;
    return;
  }
}

// Appends the regular files under `root` (or `root` itself) to `out`.
// Returns false, with a message on stderr, when `root` cannot be walked.
bool Collect(const std::string& root, std::vector<WarmFile>* out) {
  namespace sfs = std::filesystem;
  std::error_code ec;
  const sfs::file_status top = sfs::symlink_status(root, ec);
  if (ec) {
    std::fprintf(stderr, "ckptfs: warmup: %s: %s\n", root.c_str(), ec.message().c_str());
    return false;
  }
  auto add = [out](const sfs::path& p, uint64_t size) {
    WarmFile f;
    f.path = p.string();
    f.size = size;
    out->push_back(std::move(f));
  };
  if (sfs::is_regular_file(top)) {
    add(root, sfs::file_size(root, ec));
    return !ec;
  }
  if (!sfs::is_directory(top)) return true;  // symlinks and specials: nothing to read
  sfs::recursive_directory_iterator it(root, sfs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const sfs::directory_entry& e = *it;
    if (e.path().filename() == ".ckptfs") {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code fec;
    if (e.is_regular_file(fec)) add(e.path(), e.file_size(fec));
  }
  if (ec) {
    std::fprintf(stderr, "ckptfs: warmup: %s: %s\n", root.c_str(), ec.message().c_str());
    return false;
  }
  return true;
}

// Reads `f` to its end into the page cache. Returns the bytes read, or -errno.
int64_t ReadAll(const WarmFile& f, std::vector<char>* buf) {
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -errno;
  int64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf->data(), buf->size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return -err;
    }
    if (n == 0) break;
    total += n;
  }
  ::close(fd);
  // The kernel marks the access time it cached stale after a read (and,
  // with the write-back cache, the block count at every close), so the
  // restore's first fstat(2) of the file would ask the daemon again: ask
  // now, after the close.
  struct stat st;
  if (::lstat(f.path.c_str(), &st) != 0) return -errno;
  return total;
}

}  // namespace

int RunWarmup(const std::vector<std::string>& paths, int threads, bool json) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<WarmFile> files;
  int failures = 0;
  for (const std::string& p : paths) {
    if (MountOf(p).empty()) {
      std::fprintf(stderr, "ckptfs: warmup: %s is not on a ckptfs mount\n", p.c_str());
      return 1;
    }
    if (!Collect(p, &files)) ++failures;
  }
  for (WarmFile& f : files) {
    if (f.size > 0) Locate(&f);
  }
  std::sort(files.begin(), files.end(), [](const WarmFile& a, const WarmFile& b) {
    return std::tie(a.segment, a.offset, a.path) < std::tie(b.segment, b.offset, b.path);
  });
  uint64_t total = 0;
  for (const WarmFile& f : files) total += f.size;

  // One contiguous run of the sorted list per thread, of about equal bytes.
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(files.size(), 1))));
  std::vector<size_t> cuts{0};
  uint64_t acc = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    acc += files[i].size;
    if (cuts.size() < static_cast<size_t>(threads) &&
        acc * static_cast<uint64_t>(threads) >= total * cuts.size() && i + 1 < files.size()) {
      cuts.push_back(i + 1);
    }
  }
  cuts.push_back(files.size());

  ProgressBar bar("warmup");
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> read_files{0};
  std::atomic<int> read_failures{0};
  std::vector<std::thread> workers;
  for (size_t t = 0; t + 1 < cuts.size(); ++t) {
    workers.emplace_back([&, begin = cuts[t], end = cuts[t + 1]] {
      std::vector<char> buf(size_t{4} << 20);
      for (size_t i = begin; i < end; ++i) {
        const int64_t n = ReadAll(files[i], &buf);
        if (n < 0) {
          std::fprintf(stderr, "ckptfs: warmup: %s: %s\n", files[i].path.c_str(),
                       std::strerror(static_cast<int>(-n)));
          read_failures.fetch_add(1);
          continue;
        }
        read_files.fetch_add(1);
        bar.Update(done.fetch_add(static_cast<uint64_t>(n)) + static_cast<uint64_t>(n), total);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  bar.Finish();
  failures += read_failures.load();

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t bytes = done.load();
  const double gbps = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  if (json) {
    const nlohmann::json j = {{"files", read_files.load()}, {"bytes", bytes},
                              {"seconds", seconds},         {"gb_per_s", gbps},
                              {"threads", cuts.size() - 1}, {"errors", failures}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("warmed %" PRIu64 " files, %s in %.2f s (%.2f GB/s)%s\n", read_files.load(),
                HumanBytes(bytes).c_str(), seconds, gbps,
                failures ? ", some could not be read" : "");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace ckptfs::tools
