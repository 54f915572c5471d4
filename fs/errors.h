// The one mapping from engine results to FUSE error replies.
#pragma once

#include <cerrno>

#include "base/status.h"

namespace ckptfs::fs {

// The errno to answer a request with. Status::code() already is the errno the
// engine wants the application to see (ENOENT, ESTALE, ENOSPC, EIO for
// corruption, ...); anything outside the errno range becomes EIO so that a
// failure never reaches the kernel as success or as a bogus code.
inline int ErrnoOf(const engine::Status& status) {
  const int code = status.code();
  if (code > 0 && code < 4096) return code;
  return status.ok() ? 0 : EIO;
}

}  // namespace ckptfs::fs
