// FileLayout: where the bytes of one file of a ckptfs mount lie, as the
// mount's virtual xattr "user.ckptfs.extents" tells (fs/extents_xattr.h,
// docs/GPU_LOAD.md). Parsing is pure; FetchLayout does the getxattr calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/format.h"

namespace ckptfs::gpu {

using engine::Result;
using engine::Status;

inline constexpr char kExtentsXattr[] = "user.ckptfs.extents";

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
  // must match (format::CheckRecordForExtent). kDataFile (value.in_data_file):
  // file bytes [file_offset, +value.length) are bytes [skip, skip+length) of
  // the block of stored_len == raw_len bytes at record_offset of the data
  // file, whose checksum is value.checksum (format::CheckDataFileBlock).
  format::ExtentValue value;
};

struct FileLayout {
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  std::string segments_dir;  // absolute: STORE/segments
  std::string data_dir;      // absolute: STORE/data (empty from a mount that has none)
  uint64_t coalesce_gap = 0;
  uint64_t coalesce_max = 0;
  std::vector<LayoutExtent> extents;  // sorted, not overlapping, within size
  int pages = 0;                      // getxattr pages it took
};

// Parses one page. With `first`, fills the header fields of *layout;
// otherwise checks that they equal it (EAGAIN when size, mtime or ctime
// differ: the file changed between pages). Appends the page's extents and
// sets *next to the next page's offset (nullopt on the last page). EINVAL
// for a malformed page, or one that does not start at `from`.
Status ParseExtentsPage(std::string_view json, uint64_t from, bool first, FileLayout* layout,
                        std::optional<uint64_t>* next);

// Checks what the loader relies on: extents sorted and disjoint, inside the
// file, record windows inside their records, codecs known, lengths coherent;
// data-file windows inside their blocks, at their own file offset
// (block_offset + skip == file_offset), and a data_dir when any is listed.
Status ValidateLayout(const FileLayout& layout);

// Reads every page of the open file `fd` with fgetxattr(2). ENOTSUP when the
// file has no such attribute (not on a ckptfs mount, or an older one);
// EAGAIN when the file kept changing between pages; other errors as
// fgetxattr reports them.
Result<FileLayout> FetchLayout(int fd);

// The path of the data file of `layout`: data_dir + "/" + the base name of
// format::DataFileName(ino).
std::string DataFilePath(const FileLayout& layout);

// RFC 4648 base64 (padding required). False on a malformed input.
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace ckptfs::gpu
