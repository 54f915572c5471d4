#include "fs/request.h"

namespace ckptfs::fs {
namespace {

OpStats& OpStatsOf(fuse_req_t req) {
  return *static_cast<SessionData*>(fuse_req_userdata(req))->op_stats;
}

}  // namespace

void Request::Err(int err) {
  if (replied_) return;
  replied_ = true;
  // Misses (no such name, no such xattr: the kernel probes
  // security.capability before every write) are answers, not failures.
  // ENOSYS is how requests we do without (open, create, flush) are declined.
  if (err != 0 && err != ENOENT && err != ENODATA && err != ENOSYS) OpStatsOf(req_).CountError();
  fuse_reply_err(req_, err);
}

void CountOp(fuse_req_t req, Op op) { OpStatsOf(req).Count(op); }

}  // namespace ckptfs::fs
