#include "peer/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ckptfs::peer {
namespace {

Status Errno(const std::string& what) {
  const int err = errno;
  return Status(err, what + ": " + std::strerror(err));
}

// Waits until `fd` is ready for `events`, or `wake` is readable.
Status WaitFor(int fd, short events, int timeout_ms, int wake, const char* what) {
  pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
  for (;;) {
    int r = ::poll(p, wake >= 0 ? 2 : 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno(std::string("poll while ") + what);
    if (r == 0) return Status(ETIMEDOUT, std::string("peer: timed out ") + what);
    if (wake >= 0 && (p[1].revents & POLLIN)) return Status(ECANCELED, "peer: stopping");
    return Status::OK();
  }
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(std::string_view address, bool passive) {
  std::string host, port;
  CKPTFS_RETURN_IF_ERROR(SplitAddress(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = (passive ? AI_PASSIVE : 0) | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status(EHOSTUNREACH, "peer address " + std::string(address) + ": " + gai_strerror(rc));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(res);
}

std::string Describe(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  if (sa->sa_family == AF_INET6) return "[" + std::string(host) + "]:" + port;
  return std::string(host) + ":" + port;
}

}  // namespace

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SplitAddress(std::string_view address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return Status(EINVAL, "peer address '" + std::string(address) + "' is not HOST:PORT");
  }
  std::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find_first_of(":[]") != std::string_view::npos) {
    // An IPv6 address goes in brackets.
    return Status(EINVAL, "peer address '" + std::string(address) + "' is not HOST:PORT");
  }
  std::string_view p = address.substr(colon + 1);
  for (char c : p) {
    if (c < '0' || c > '9') {
      return Status(EINVAL, "peer address '" + std::string(address) + "': port is not a number");
    }
  }
  *host = std::string(h);
  *port = std::string(p);
  return Status::OK();
}

Result<Fd> Listen(std::string_view address, std::string* bound) {
  CKPTFS_ASSIGN_OR_RETURN(auto ai, Resolve(address, true));
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) return Errno("socket for " + std::string(address));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    return Errno("peer: bind " + std::string(address));
  }
  if (::listen(fd.get(), 128) != 0) return Errno("peer: listen on " + std::string(address));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Errno("getsockname");
  }
  *bound = Describe(reinterpret_cast<sockaddr*>(&ss), len);
  return fd;
}

Result<Fd> Connect(std::string_view address, int timeout_ms) {
  CKPTFS_ASSIGN_OR_RETURN(auto ai, Resolve(address, false));
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd.valid()) return Errno("socket for " + std::string(address));
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return Errno("peer: connect to " + std::string(address));
    CKPTFS_RETURN_IF_ERROR(
        WaitFor(fd.get(), POLLOUT, timeout_ms, -1, ("connecting to " + std::string(address)).c_str()));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return Status(err, "peer: connect to " + std::string(address) + ": " + std::strerror(err));
    }
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

Status ReadFull(int fd, char* buf, size_t n, int timeout_ms, int wake) {
  size_t done = 0;
  while (done < n) {
    CKPTFS_RETURN_IF_ERROR(WaitFor(fd, POLLIN, timeout_ms, wake, "waiting for a peer's bytes"));
    ssize_t r = ::recv(fd, buf + done, n - done, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return Errno("peer: recv");
    if (r == 0) return Status(ECONNRESET, "peer: the connection closed mid-message");
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

Status WriteFull(int fd, std::string_view data, int timeout_ms) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t r = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      CKPTFS_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, timeout_ms, -1, "sending to a peer"));
      continue;
    }
    if (r < 0) return Errno("peer: send");
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace ckptfs::peer
