// FetchLayout: where the bytes of one file of a ckptfs mount lie, read from
// the mount's virtual xattr "user.ckptfs.extents" page by page
// (format/extents_attr.h decodes the pages, docs/GPU_LOAD.md documents them).
#pragma once

#include "base/status.h"
#include "format/extents_attr.h"

namespace ckptfs::gpu {

using engine::Result;
using engine::Status;
using format::DataFilePath;
using format::FileLayout;
using format::LayoutExtent;

// Reads every page of the open file `fd` with fgetxattr(2) and validates the
// layout (format::ValidateLayout). ENOTSUP when the file has no such
// attribute (not on a ckptfs mount, or an older one); EAGAIN when the file
// kept changing between pages; other errors as fgetxattr reports them.
Result<FileLayout> FetchLayout(int fd);

}  // namespace ckptfs::gpu
