#include "fs/extents_xattr.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <vector>

namespace ckptfs::fs {
namespace {

using engine::Attr;
using engine::ExtentInfo;
using engine::Result;
using engine::Status;

int64_t Nanos(const engine::Timespec& t) { return t.sec * 1000000000 + t.nsec; }

}  // namespace

Result<std::string> ExtentsXattrValue(engine::Store& store, engine::Ino ino, uint64_t from) {
  // Bytes the kernel wrote to the data file since the last adoption would be
  // checked against the checksums of the bytes they replaced. Every page
  // adopts (an fstat when nothing changed): a write between two pages shows
  // as a new mtime in the next page's header, which the reader detects.
  CKPTFS_RETURN_IF_ERROR(store.AdoptDirectWrites(ino));
  CKPTFS_ASSIGN_OR_RETURN(Attr a, store.GetAttr(ino));
  if (!S_ISREG(a.mode)) return Status::Errno(ENODATA);
  CKPTFS_ASSIGN_OR_RETURN(std::vector<ExtentInfo> extents, store.GetExtents(ino));
  format::ExtentsPageHeader h;
  h.ino = a.ino;
  h.size = a.size;
  h.mtime_ns = Nanos(a.mtime);
  h.ctime_ns = Nanos(a.ctime);
  // SegmentPath(id) is STORE/segments/NNNNNNNN.seg, and the store's path is
  // absolute (MountOptions); its directory is the same for every id.
  const std::filesystem::path segments_dir =
      std::filesystem::path(store.SegmentPath(1)).parent_path();
  h.segments_dir = segments_dir.string();
  // DataFileName(ino) is "data/NNNNNNNN.dat" relative to the store, as
  // SegmentFileName(id) is "segments/NNNNNNNN.seg".
  h.data_dir = (segments_dir.parent_path() / format::DataFileName(a.ino)).parent_path().string();
  const engine::StoreOptions options = store.GetOptions();
  h.coalesce_gap = options.coalesce_gap;
  h.coalesce_max = options.coalesce_max;
  return format::EncodeExtentsPage(h, extents, from);
}

}  // namespace ckptfs::fs
