// RadosWrite (io/rados_write.h) on librados's C++ API. Built as C++17
// (io/CMakeLists.txt): librados.hpp's buffer.h has comparisons that clang
// rejects as ambiguous under C++20's rewritten operators.
#include "io/rados_write.h"

#include <rados/librados.hpp>

#include <utility>

namespace ckptfs::io {

struct RadosWriter::Pool {
  librados::IoCtx io;
};

RadosWriter::RadosWriter(rados_ioctx_t io) : pool_(std::make_unique<Pool>()) {
  librados::IoCtx::from_rados_ioctx_t(io, pool_->io);
}
RadosWriter::~RadosWriter() { pool_->io.close(); }

struct RadosWrite::Op {
  librados::ObjectWriteOperation op;
  librados::AioCompletion* done = nullptr;

  ~Op() {
    if (done != nullptr) {
      done->wait_for_complete();
      done->release();
    }
  }
};

RadosWrite::RadosWrite() : op_(std::make_unique<Op>()) {}
RadosWrite::~RadosWrite() = default;
RadosWrite::RadosWrite(RadosWrite&&) noexcept = default;
RadosWrite& RadosWrite::operator=(RadosWrite&&) noexcept = default;

void RadosWrite::Add(std::string_view bytes, uint64_t offset) {
  ceph::bufferlist bl;
  // A static buffer points at the bytes; nothing is copied or freed.
  bl.push_back(ceph::buffer::create_static(static_cast<unsigned>(bytes.size()),
                                           const_cast<char*>(bytes.data())));
  op_->op.write(offset, bl);
}

int RadosWrite::Send(RadosWriter& w, const std::string& oid, int flags) {
  librados::AioCompletion* c = librados::Rados::aio_create_completion();
  const int rc = w.pool_->io.aio_operate(oid, c, &op_->op, flags);
  if (rc < 0) {
    c->release();
    return rc;
  }
  op_->done = c;
  return 0;
}

int RadosWrite::Wait() {
  librados::AioCompletion* c = std::exchange(op_->done, nullptr);
  if (c == nullptr) return 0;
  c->wait_for_complete();
  const int rc = c->get_return_value();
  c->release();
  return rc;
}

}  // namespace ckptfs::io
