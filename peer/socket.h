// TCP sockets for the peer protocol: listen, connect, and whole messages
// read and written within a deadline. Errors carry the errno and what was
// being done; a peer that closes the connection mid-message is ECONNRESET,
// one that takes too long ETIMEDOUT.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ckptfs::peer {

// Owns a file descriptor; closes it when it goes.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.Release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// "HOST:PORT" (an IPv4 address or a name; "[V6]:PORT" for IPv6) split in
// two; EINVAL when it is not that shape.
Status SplitAddress(std::string_view address, std::string* host, std::string* port);

// A socket listening on `address` ("HOST:PORT"; port 0: the kernel picks
// one), close-on-exec. `*bound` is the address it listens on.
Result<Fd> Listen(std::string_view address, std::string* bound);

// A connected socket to `address`, within `timeout_ms`.
Result<Fd> Connect(std::string_view address, int timeout_ms);

// Reads exactly `n` bytes. `timeout_ms` bounds each wait for more bytes
// (-1: none). `wake`, when not -1, is a descriptor whose readability
// (a stop) ends the wait with ECANCELED.
Status ReadFull(int fd, char* buf, size_t n, int timeout_ms, int wake = -1);
// Writes all of `data`, each wait for room bounded by `timeout_ms`.
Status WriteFull(int fd, std::string_view data, int timeout_ms);

}  // namespace ckptfs::peer
