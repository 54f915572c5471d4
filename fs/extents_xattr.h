// The virtual extended attribute "user.ckptfs.extents" (format/extents_attr.h
// holds its names and its value's codec): getxattr of a regular file answers
// the page the name asks for.
//
// The names are reserved: getxattr answers them for regular files (ENODATA
// for other inodes), listxattr does not list them, and setxattr/removexattr
// fail with EPERM. Nothing here is stored.
//
// Thread safety: ExtentsXattrValue only calls thread-safe Store methods.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/store.h"
#include "format/extents_attr.h"

namespace ckptfs::fs {

// Queries `store` for inode `ino` (a regular file; ENODATA otherwise) and
// encodes the page that starts at `from`.
engine::Result<std::string> ExtentsXattrValue(engine::Store& store, engine::Ino ino, uint64_t from);

}  // namespace ckptfs::fs
