// A host's peer server: serves byte ranges of its store's segment and data
// files to the other hosts of the store, over TCP, to clients that prove
// they know the store's secret (peer/wire.h has the protocol). It serves
// nothing else: no name outside segments/ and data/, no writes.
//
// Thread safety: every method may be called from any thread. Each
// connection has a thread of its own; Stop() (and the destructor) closes
// them all and waits for them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "io/env.h"
#include "peer/socket.h"
#include "peer/wire.h"

namespace ckptfs::peer {

struct ServerOptions {
  // Where to listen: "HOST:PORT"; port 0 lets the kernel pick one.
  // Default: "127.0.0.1:0".
  std::string listen = "127.0.0.1:0";
  // The store's secret: at least kMinSecretBytes. Required.
  std::string secret;
  // The store's directory; names in requests are relative to it. Required.
  std::string store_dir;
  // Opens the files. Default: io::Env::Posix().
  std::shared_ptr<io::Env> env;
  // Reads up to `len` bytes of file `name` (a name served) at `offset`
  // into `dst`: how many there were. Default: none; the server opens the
  // files in store_dir through env.
  std::function<Result<size_t>(const std::string& name, uint64_t offset, size_t len, char* dst)>
      read;
  // Connections served at once; one more is closed at accept. Default: 64.
  int max_connections = 64;
  // The most bytes one request may ask for (a longer one is refused,
  // EINVAL): each connection holds one reply at a time. Default and most:
  // kMaxReadBytes.
  uint32_t max_read = kMaxReadBytes;
  // Milliseconds a client may take to finish a message it began, or to
  // take the bytes of a reply. Default: 10,000.
  int io_timeout_ms = 10000;
};

// What a server did since it started.
struct ServerStats {
  uint64_t connections = 0;   // accepted and proven
  uint64_t refused = 0;       // closed: a wrong proof, a bad hello, too many
  uint64_t requests = 0;      // ranges asked for
  uint64_t bad_requests = 0;  // of those, refused (a name not served, too long)
  uint64_t bytes_served = 0;  // in replies sent or being sent
};

class Server {
 public:
  // Listens on options.listen and serves until Stop(). EINVAL for options
  // that cannot serve (a short secret, no store directory).
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The address it listens on, "HOST:PORT" with the port it got.
  const std::string& address() const { return address_; }
  ServerStats stats() const;
  // Closes the listening socket and every connection, and waits for their
  // threads. Idempotent.
  void Stop();

 private:
  explicit Server(ServerOptions options);
  void AcceptLoop();
  void Serve(uint64_t id, int fd);
  // Handshake: false (and the connection counted refused) when the client
  // did not prove the secret.
  bool Admit(int fd);
  // One request; false when the connection should close.
  bool Answer(int fd, std::map<std::string, std::unique_ptr<io::File>>* open);
  void ReapFinished() EXCLUDES(mu_);

  const ServerOptions options_;
  std::string address_;
  Fd listen_fd_;
  Fd wake_read_, wake_write_;  // a byte written: every thread stops waiting
  std::thread acceptor_;
  std::atomic<bool> stopped_{false};

  mutable Mutex mu_;
  struct Connection {
    int fd = -1;
    std::thread thread;
  };
  std::map<uint64_t, Connection> live_ GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> connections_{0}, refused_{0}, requests_{0}, bad_requests_{0},
      bytes_served_{0};
};

}  // namespace ckptfs::peer
