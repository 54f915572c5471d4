// One connection to another host's peer server (peer/server.h): the
// handshake that proves both sides know the store's secret, then reads of
// byte ranges of the store's segment and data files.
//
// Nothing a peer sends is trusted beyond its framing: the caller checks the
// bytes against the index's checksums before it uses them, and reads the
// shared storage itself when they are wrong or do not come.
//
// Thread safety: none; one request at a time (a caller keeps one Client a
// thread, or a pool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "peer/socket.h"

namespace ckptfs::peer {

struct ClientOptions {
  // The peer server's "HOST:PORT". Required.
  std::string address;
  // The store's secret. Required.
  std::string secret;
  // Milliseconds to connect, and for each wait on the peer's bytes: a peer
  // slower than this is given up (ETIMEDOUT). Default: 2,000.
  int timeout_ms = 2000;
};

class Client {
 public:
  // Connects and proves the secret both ways. EACCES when the server
  // refuses the proof or cannot prove its own; ECONNREFUSED, ETIMEDOUT,
  // EHOSTUNREACH as the network says; EPROTO for a server that is no
  // ckptfs peer.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Bytes [offset, offset + length) of the store's file `name`
  // ("segments/...", "data/..."): fewer only where the file ends. The
  // server's errno (EACCES for a name it does not serve, ENOENT), or the
  // connection's; after a connection error every later call fails with it.
  Result<std::string> Read(const std::string& name, uint64_t offset, uint32_t length);

  const std::string& address() const { return options_.address; }

 private:
  Client(ClientOptions options, Fd fd) : options_(std::move(options)), fd_(std::move(fd)) {}
  Status Handshake();

  const ClientOptions options_;
  Fd fd_;
  Status broken_;  // the first connection error; every later call returns it
};

}  // namespace ckptfs::peer
