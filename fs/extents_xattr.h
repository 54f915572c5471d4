// The virtual extended attribute "user.ckptfs.extents": where the bytes of a
// regular file of the mount lie in the store, so that a reader that may open
// the segment files and data files (the GPU loader, gpu/; ckptfs verify) can
// read them directly and verify them itself. docs/GPU_LOAD.md documents the
// value.
//
// The value is JSON and may be larger than one getxattr(2) can return
// (XATTR_SIZE_MAX, 64 KiB), so it is paged: "user.ckptfs.extents" is the page
// of the extents from file offset 0, and a page whose "next" is N (not null)
// continues in "user.ckptfs.extents.N" (N in decimal): the extents whose
// file_offset >= N. Every page repeats the file's size, mtime and ctime, so a
// reader can tell that the file changed between two pages.
//
// The names are reserved: getxattr answers them for regular files (ENODATA
// for other inodes), listxattr does not list them, and setxattr/removexattr
// fail with EPERM. Nothing here is stored.
//
// Thread safety: pure functions, plus ExtentsXattrValue, which only calls
// thread-safe Store methods.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/store.h"

namespace ckptfs::fs {

inline constexpr std::string_view kExtentsXattr = "user.ckptfs.extents";
inline constexpr uint32_t kExtentsXattrVersion = 1;
// Most bytes of one page: the kernel's XATTR_SIZE_MAX.
inline constexpr size_t kExtentsPageBytes = 65536;

// True when `name` belongs to the reserved family: "user.ckptfs.extents" or
// "user.ckptfs.extents." followed by anything.
bool IsExtentsXattrName(std::string_view name);
// The page's first file offset: 0 for "user.ckptfs.extents", N for
// "user.ckptfs.extents.N". False when the suffix is not a decimal u64.
// REQUIRES: IsExtentsXattrName(name)
bool ParseExtentsXattrName(std::string_view name, uint64_t* from);

// What a page says besides the extents.
struct ExtentsPageHeader {
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  std::string segments_dir;  // absolute: STORE/segments
  std::string data_dir;      // absolute: STORE/data, where format::DataFileName(ino) lies
  uint64_t coalesce_gap = 0;
  uint64_t coalesce_max = 0;
};

// Encodes the page of `extents` (sorted by file_offset, not overlapping) that
// starts at the first extent with file_offset >= `from`, holding as many as
// fit in `budget` bytes, but at least one when any is left. An inline extent
// whose data does not fit is listed with "inline": null (read those bytes
// through the file).
std::string EncodeExtentsPage(const ExtentsPageHeader& header,
                              const std::vector<engine::ExtentInfo>& extents, uint64_t from,
                              size_t budget = kExtentsPageBytes);

// Queries `store` for inode `ino` (a regular file; ENODATA otherwise) and
// encodes the page that starts at `from`.
engine::Result<std::string> ExtentsXattrValue(engine::Store& store, engine::Ino ino, uint64_t from);

// RFC 4648 base64 with padding, as the pages carry inline data.
std::string Base64Encode(std::string_view data);

}  // namespace ckptfs::fs
