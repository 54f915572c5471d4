// The value of the virtual extended attribute "user.ckptfs.extents": where
// the bytes of a regular file of a mount lie in the store, so that a reader
// that may open the segment files and data files (the GPU loader, gpu/;
// `ckptfs info`, `verify` and `warmup`) can read them directly and verify
// them itself. docs/GPU_LOAD.md documents the value. The mount encodes it
// (fs/extents_xattr.h answers getxattr), readers decode it here; fetching
// the pages with getxattr is gpu::FetchLayout's.
//
// The value is JSON and may be larger than one getxattr(2) can return
// (XATTR_SIZE_MAX, 64 KiB), so it is paged: "user.ckptfs.extents" is the page
// of the extents from file offset 0, and a page whose "next" is N (not null)
// continues in "user.ckptfs.extents.N" (N in decimal): the extents whose
// file_offset >= N. Every page repeats the file's size, mtime and ctime, so a
// reader can tell that the file changed between two pages.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/format.h"

namespace ckptfs::format {

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
// The name of the page that starts at `from` (the inverse of the above).
std::string ExtentsXattrName(uint64_t from);

// One extent of a file: its bytes [file_offset, +value.length).
struct FileExtent {
  uint64_t file_offset = 0;
  ExtentValue value;
};

// What a page says besides the extents.
struct ExtentsPageHeader {
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  std::string segments_dir;  // absolute: STORE/segments
  std::string data_dir;      // absolute: STORE/data (empty from a mount that has none)
  uint64_t coalesce_gap = 0;
  uint64_t coalesce_max = 0;
};

// Encodes the page of `extents` (sorted by file_offset, not overlapping) that
// starts at the first extent with file_offset >= `from`, holding as many as
// fit in `budget` bytes, but at least one when any is left. An inline extent
// whose data does not fit is listed with "inline": null (read those bytes
// through the file).
std::string EncodeExtentsPage(const ExtentsPageHeader& header,
                              const std::vector<FileExtent>& extents, uint64_t from,
                              size_t budget = kExtentsPageBytes);

// An extent as a page lists it.
struct LayoutExtent {
  enum class Kind {
    kRecord,         // a window of a segment record
    kInline,         // bytes kept in the index, carried in value.inline_data
    kInlineOmitted,  // kept in the index, too large for a page: read through the file
    kDataFile,       // a window of a block of the file's data file
  };
  uint64_t file_offset = 0;
  Kind kind = Kind::kRecord;
  // The index's extent value, as the page lists it. value.is_inline for
  // both inline kinds; kInline carries exactly value.length bytes in
  // value.inline_data, kInlineOmitted none. kRecord: file bytes
  // [file_offset, +value.length) are decoded bytes [skip, skip+length) of the
  // record whose header is at record_offset of segment segment_id; the other
  // fields are the index's copies of the record header's, which the record
  // must match (CheckRecordForExtent). kDataFile (value.in_data_file): file
  // bytes [file_offset, +value.length) are bytes [skip, skip+length) of the
  // block of stored_len == raw_len bytes at record_offset of the data file,
  // whose checksum is value.checksum (CheckDataFileBlock).
  ExtentValue value;
};

// Every page of one file, decoded.
struct FileLayout : ExtentsPageHeader {
  std::vector<LayoutExtent> extents;  // sorted, not overlapping, within size
  int pages = 0;                      // pages it took
};

// Parses one page. With `first`, fills the header fields of *layout;
// otherwise checks that they equal it (EAGAIN when size, mtime or ctime
// differ: the file changed between pages). Appends the page's extents and
// sets *next to the next page's offset (nullopt on the last page). EINVAL
// for a malformed page, or one that does not start at `from`; ENOTSUP for
// another version.
Status ParseExtentsPage(std::string_view json, uint64_t from, bool first, FileLayout* layout,
                        std::optional<uint64_t>* next);

// Checks what a reader relies on: extents sorted and disjoint, inside the
// file, record windows inside their records, codecs known, lengths coherent;
// data-file windows inside their blocks, at their own file offset
// (block_offset + skip == file_offset), and a data_dir when any is listed.
Status ValidateLayout(const FileLayout& layout);

// The path of the data file of `layout`: data_dir + "/" + the base name of
// DataFileName(ino).
std::string DataFilePath(const FileLayout& layout);

// RFC 4648 base64 with padding, as the pages carry inline data. Decode is
// false on a malformed input.
std::string Base64Encode(std::string_view data);
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace ckptfs::format
