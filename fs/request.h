// The boundary between libfuse and our C++: every handler runs inside
// Serve(), which guarantees that each request is answered exactly once and that
// no exception crosses into C.
#pragma once

#include <fuse_lowlevel.h>

#include <cerrno>
#include <cstddef>
#include <new>

#include "base/status.h"
#include "fs/errors.h"
#include "fs/op_stats.h"

namespace ckptfs::fs {

// Largest WRITE request (conn->max_write); the kernel's largest READ is as
// large (its max_pages, 256 pages).
inline constexpr unsigned kMaxWrite = 1u << 20;
inline constexpr unsigned kMaxRead = 1u << 20;

class Filesystem;

// The session's userdata (fuse_session_new): the mount that the handlers
// serve, and its request counters, which Serve counts each request into
// and Request::Err each failure. Both outlive the session.
struct SessionData {
  Filesystem* fs;
  OpStats* op_stats;
};

// One request being served. Every Reply* call answers the request; after the
// first one the fuse_req_t is gone, so further calls are ignored (and would be
// a bug). Not thread-safe: a request belongs to the thread serving it.
class Request {
 public:
  explicit Request(fuse_req_t req) : req_(req) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  fuse_req_t req() const { return req_; }
  Filesystem& fs() const { return *static_cast<SessionData*>(fuse_req_userdata(req_))->fs; }
  const fuse_ctx& ctx() const { return *fuse_req_ctx(req_); }
  bool replied() const { return replied_; }

  // Answers with -err (0 = success without data).
  void Err(int err);
  void Fail(const engine::Status& status) { Err(ErrnoOf(status)); }
  void Ok() { Err(0); }
  // These return false when the kernel did not take the reply (the request was
  // interrupted): whatever the reply handed over (a lookup count, an open
  // handle) must then be taken back by the caller.
  bool Entry(const fuse_entry_param& e) { return Done(fuse_reply_entry(req_, &e)); }
  bool Create(const fuse_entry_param& e, const fuse_file_info* fi) {
    return Done(fuse_reply_create(req_, &e, fi));
  }
  bool Open(const fuse_file_info* fi) { return Done(fuse_reply_open(req_, fi)); }
  bool Buf(const char* data, size_t size) { return Done(fuse_reply_buf(req_, data, size)); }
  void Attr(const struct stat& st, double timeout) { Done(fuse_reply_attr(req_, &st, timeout)); }
  void Write(size_t count) { Done(fuse_reply_write(req_, count)); }
  void Xattr(size_t size) { Done(fuse_reply_xattr(req_, size)); }
  void Readlink(const char* target) { Done(fuse_reply_readlink(req_, target)); }
  void Statfs(const struct statvfs& st) { Done(fuse_reply_statfs(req_, &st)); }
  void Lseek(off_t off) { Done(fuse_reply_lseek(req_, off)); }
  // For forget: the kernel expects no answer.
  void None() {
    if (replied_) return;
    replied_ = true;
    fuse_reply_none(req_);
  }

 private:
  bool Done(int rc) {
    replied_ = true;
    return rc == 0;
  }

  fuse_req_t req_;
  bool replied_ = false;
};

// Counts one request of kind `op` into the session's OpStats.
void CountOp(fuse_req_t req, Op op);

// Runs body(Request&) for one request. std::bad_alloc is answered ENOMEM, any
// other exception EIO, and a body that returns without answering gets EIO.
template <typename Body>
void Serve(fuse_req_t req, Op op, Body&& body) noexcept {
  Request r(req);
  try {
    CountOp(req, op);
    body(r);
  } catch (const std::bad_alloc&) {
    if (!r.replied()) r.Err(ENOMEM);
  } catch (...) {
    if (!r.replied()) r.Err(EIO);
  }
  if (!r.replied()) r.Err(EIO);
}

// The same for forget and forget_multi, which are answered with no reply.
template <typename Body>
void ServeNoReply(fuse_req_t req, Op op, Body&& body) noexcept {
  Request r(req);
  try {
    CountOp(req, op);
    body(r);
  } catch (...) {
  }
  r.None();
}

}  // namespace ckptfs::fs
