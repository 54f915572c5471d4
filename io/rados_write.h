// RadosWrite: one write operation on one RADOS object whose bytes go out
// from where the caller keeps them. The C API's write operations copy
// every byte into a buffer of their own; this one is built on librados's
// C++ API, in a translation unit of its own (io/rados_write.cc), so that
// no other file sees librados.hpp.
#ifndef CKPTFS_IO_RADOS_WRITE_H_
#define CKPTFS_IO_RADOS_WRITE_H_

#include <rados/librados.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ckptfs::io {

// A pool as the C++ API sees it: made from the C API's handle, which must
// outlive it.
class RadosWriter {
 public:
  explicit RadosWriter(rados_ioctx_t io);
  ~RadosWriter();
  RadosWriter(const RadosWriter&) = delete;
  RadosWriter& operator=(const RadosWriter&) = delete;

 private:
  friend class RadosWrite;
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

// Writes at offsets of one object, sent at once and waited for once. The
// bytes given to Add stay alive, unchanged, until Wait has returned (or,
// where Send failed, until the RadosWrite is gone).
class RadosWrite {
 public:
  RadosWrite();
  ~RadosWrite();
  RadosWrite(RadosWrite&&) noexcept;
  RadosWrite& operator=(RadosWrite&&) noexcept;

  void Add(std::string_view bytes, uint64_t offset);
  // Sends the writes to `oid` with the C API's operation `flags`
  // (LIBRADOS_OPERATION_*). A negative errno where it could not.
  int Send(RadosWriter& w, const std::string& oid, int flags);
  // Waits for the sent writes: 0 or a negative errno.
  int Wait();

 private:
  struct Op;
  std::unique_ptr<Op> op_;
};

}  // namespace ckptfs::io

#endif  // CKPTFS_IO_RADOS_WRITE_H_
