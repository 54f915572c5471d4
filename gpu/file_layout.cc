#include "gpu/file_layout.h"

#include <sys/xattr.h>

#include <cerrno>
#include <optional>
#include <string>
#include <vector>

namespace ckptfs::gpu {
namespace {

// Restarts from the first page when the file changes in between.
constexpr int kLayoutAttempts = 3;

}  // namespace

Result<FileLayout> FetchLayout(int fd) {
  std::vector<char> buf(format::kExtentsPageBytes);
  Status last;
  for (int attempt = 0; attempt < kLayoutAttempts; ++attempt) {
    FileLayout layout;
    std::optional<uint64_t> from = 0;
    Status st;
    while (from.has_value() && st.ok()) {
      const uint64_t page = *from;
      const std::string name = format::ExtentsXattrName(page);
      ssize_t n = fgetxattr(fd, name.c_str(), buf.data(), buf.size());
      if (n < 0 && errno == ERANGE) {  // cannot happen with pages <= 64 KiB; be safe
        ssize_t want = fgetxattr(fd, name.c_str(), nullptr, 0);
        if (want > 0) {
          buf.resize(static_cast<size_t>(want) + 4096);
          n = fgetxattr(fd, name.c_str(), buf.data(), buf.size());
        }
      }
      if (n < 0) {
        const int err = errno;
        if (err == ENODATA || err == ENOTSUP || err == EOPNOTSUPP) {
          return Status(ENOTSUP, "no " + std::string(format::kExtentsXattr) +
                                     " attribute (not a file of a ckptfs mount)");
        }
        return Status::IOError(err, "getxattr " + name);
      }
      st = format::ParseExtentsPage(std::string_view(buf.data(), static_cast<size_t>(n)), page, page == 0,
                            &layout, &from);
    }
    if (st.ok()) st = format::ValidateLayout(layout);
    if (st.ok()) return layout;
    if (st.code() != EAGAIN) return st;
    last = st;
  }
  return last;
}

}  // namespace ckptfs::gpu
