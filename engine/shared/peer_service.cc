#include "engine/shared/peer_service.h"

#include <utility>

#include "format/format.h"
#include "peer/socket.h"
#include "peer/wire.h"

namespace ckptfs::engine {

using meta::Space;

Result<std::string> PeerSecret(meta::Kv* kv, bool make) {
  std::string secret;
  // Two hosts making one at once: the commit of the second conflicts (its
  // read found none, which the first's write changed), and its next try
  // reads the first's.
  CKPTFS_RETURN_IF_ERROR(meta::RunTxn(
      kv,
      [&](meta::Txn* t) -> Status {
        CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> got,
                                t->Get(Space::kMeta, format::kMetaPeerSecret));
        if (got.has_value()) {
          if (got->size() != format::kPeerSecretBytes) {
            return Status::Corruption("the store's peer secret has " + std::to_string(got->size()) +
                                      " bytes, not " + std::to_string(format::kPeerSecretBytes));
          }
          secret = std::move(*got);
          return Status::OK();
        }
        if (!make) return Status(ENOENT, "the store has no peer secret: no host has served");
        secret.assign(format::kPeerSecretBytes, '\0');
        CKPTFS_RETURN_IF_ERROR(
            peer::RandomBytes(reinterpret_cast<uint8_t*>(secret.data()), secret.size()));
        t->Put(Space::kMeta, format::kMetaPeerSecret, secret);
        return Status::OK();
      },
      meta::Durability::kSynced));
  return secret;
}

Result<std::map<std::string, std::string>> PeerAddresses(meta::Kv* kv) {
  std::map<std::string, std::string> out;
  const std::string begin(format::kMetaPeerPrefix);
  std::string end = begin;
  end.back()++;
  CKPTFS_RETURN_IF_ERROR(meta::RunReads(kv, [&](meta::ReadTxn* t) -> Status {
    out.clear();
    return t->Scan(Space::kMeta, begin, end, [&](std::string_view k, std::string_view v) {
      out.emplace(std::string(k.substr(begin.size())), std::string(v));
      return true;
    });
  }));
  return out;
}

Result<std::string> PeerListenAddress(std::string_view option, std::string_view local) {
  if (option.empty()) return (local.empty() ? std::string("127.0.0.1") : std::string(local)) + ":0";
  std::string host, port;
  if (peer::SplitAddress(option, &host, &port).ok()) return std::string(option);
  // A host alone: an IPv4 address or name, or a bracketed IPv6 address.
  const std::string with_port = std::string(option) + ":0";
  if (option.find(':') == std::string_view::npos || option.front() == '[') {
    if (peer::SplitAddress(with_port, &host, &port).ok()) return with_port;
  }
  return Status(EINVAL, "peers=" + std::string(option) +
                            ": give HOST or HOST:PORT to serve the other hosts on, or off");
}

Result<std::unique_ptr<PeerService>> PeerService::Start(meta::Kv* kv, std::string host,
                                                        const std::string& listen,
                                                        const std::string& store_dir,
                                                        std::shared_ptr<io::Env> env, ReadFn read) {
  CKPTFS_ASSIGN_OR_RETURN(std::string secret, PeerSecret(kv, /*make=*/true));
  peer::ServerOptions o;
  o.listen = listen;
  o.secret = secret;
  o.store_dir = store_dir;
  o.env = std::move(env);
  o.read = std::move(read);
  o.max_connections = kPeerConnections;
  o.max_read = kPeerMaxRead;
  Result<std::unique_ptr<peer::Server>> server = peer::Server::Start(std::move(o));
  if (!server.ok()) {
    return server.status().Annotate("serving the other hosts on " + listen +
                                    " (the peers option: another address, or off)");
  }
  // Listening on every address of the machine: published as the one by
  // which it reaches the index.
  std::string address = (*server)->address();
  std::string bound_host, port;
  if (peer::SplitAddress(address, &bound_host, &port).ok() &&
      (bound_host == "0.0.0.0" || bound_host == "::")) {
    const std::string local = kv->LocalAddress();
    address = local.empty()                          ? "127.0.0.1:" + port
              : local.find(':') != std::string::npos ? "[" + local + "]:" + port
                                                     : local + ":" + port;
  }
  std::unique_ptr<PeerService> service(new PeerService(kv, std::move(host), std::move(secret),
                                                       std::move(address), std::move(*server)));
  meta::Writes publish;
  publish.Put(Space::kMeta, format::PeerKey(service->host_), service->address());
  CKPTFS_RETURN_IF_ERROR(meta::CommitWrites(kv, &publish, meta::Durability::kSynced));
  return service;
}

PeerService::~PeerService() { server_->Stop(); }

Status PeerService::Stop(bool withdraw) {
  Status s;
  if (withdraw) {
    meta::Writes gone;
    gone.Delete(Space::kMeta, format::PeerKey(host_));
    s = meta::CommitWrites(kv_, &gone, meta::Durability::kSynced);
  }
  server_->Stop();
  return s;
}

}  // namespace ckptfs::engine
