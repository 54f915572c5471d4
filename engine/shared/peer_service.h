// PeerService: one writable mount's server for the other hosts of a shared
// store (docs/SHARED.md, "Peers"). It serves byte ranges of the store's
// segment and data files (peer/server.h) to clients that prove the store's
// secret, which the index keeps (format::kMetaPeerSecret) and the first
// host that serves makes, and publishes the address it serves on under
// its host's name (format::PeerKey) while it runs.
//
// Thread safety: every method may be called from any thread, except Stop,
// which the store's close calls once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/env.h"
#include "meta/kv.h"
#include "peer/server.h"

namespace ckptfs::engine {

// The store's peer secret; when it has none, one made now
// (format::kPeerSecretBytes random bytes) where `make`, else ENOENT.
Result<std::string> PeerSecret(meta::Kv* kv, bool make);

// The addresses the hosts published, by host name. A host's address is in
// use only while its lease runs (meta::HostIsFree says otherwise).
Result<std::map<std::string, std::string>> PeerAddresses(meta::Kv* kv);

// Where a mount with StoreOptions::peers `option` listens: "HOST:PORT"
// (port 0: any), the host `local` (the address by which this machine
// reaches the index, meta::Kv::LocalAddress) when the option names none,
// 127.0.0.1 when that is empty too. EINVAL for an option of another shape.
Result<std::string> PeerListenAddress(std::string_view option, std::string_view local);

// What a mount's server does per connection: at most this many served at
// once, each asking for at most kPeerMaxRead bytes a request.
inline constexpr int kPeerConnections = 16;
inline constexpr uint32_t kPeerMaxRead = 4u << 20;

class PeerService {
 public:
  // Reads a range of a file served (peer::ServerOptions::read).
  using ReadFn = std::function<Result<size_t>(const std::string& name, uint64_t offset, size_t len,
                                              char* dst)>;
  // Serves the files of the store at `store_dir` (read with `read`, or
  // opened through `env` when it is empty) on `listen`
  // (PeerListenAddress) and publishes that address as host `host`'s.
  // Errors: the listen's (EADDRINUSE, EADDRNOTAVAIL for an address not of
  // this machine), the index's.
  static Result<std::unique_ptr<PeerService>> Start(meta::Kv* kv, std::string host,
                                                    const std::string& listen,
                                                    const std::string& store_dir,
                                                    std::shared_ptr<io::Env> env,
                                                    ReadFn read = nullptr);
  ~PeerService();
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  // Stops serving; at a clean close (`withdraw`) deletes the published
  // address first. The index's error, if the delete failed (the address
  // is then unused once the host's lease runs out).
  Status Stop(bool withdraw);

  // The address it serves on, as published.
  const std::string& address() const { return address_; }
  const std::string& secret() const { return secret_; }
  peer::ServerStats stats() const { return server_->stats(); }

 private:
  PeerService(meta::Kv* kv, std::string host, std::string secret, std::string address,
              std::unique_ptr<peer::Server> server)
      : kv_(kv),
        host_(std::move(host)),
        secret_(std::move(secret)),
        address_(std::move(address)),
        server_(std::move(server)) {}

  meta::Kv* const kv_;
  const std::string host_;
  const std::string secret_;
  const std::string address_;
  std::unique_ptr<peer::Server> server_;
};

}  // namespace ckptfs::engine
