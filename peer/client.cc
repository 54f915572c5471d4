#include "peer/client.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "peer/wire.h"

namespace ckptfs::peer {

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  CKPTFS_ASSIGN_OR_RETURN(Fd fd, peer::Connect(options.address, options.timeout_ms));
  std::unique_ptr<Client> c(new Client(options, std::move(fd)));
  CKPTFS_RETURN_IF_ERROR(c->Handshake());
  return c;
}

Status Client::Handshake() {
  const int t = options_.timeout_ms;
  std::string b(kHelloBytes, '\0');
  CKPTFS_RETURN_IF_ERROR(ReadFull(fd_.get(), b.data(), b.size(), t));
  Hello hello;
  Status st = DecodeHello(b, &hello);
  if (!st.ok()) {
    return Status(st.code() == ENOTSUP ? ENOTSUP : EPROTO,
                  options_.address + ": " + st.message());
  }
  Proof proof;
  CKPTFS_RETURN_IF_ERROR(RandomBytes(proof.client_nonce.data(), proof.client_nonce.size()));
  proof.client_mac = ClientMac(options_.secret, hello.server_nonce, proof.client_nonce);
  CKPTFS_RETURN_IF_ERROR(WriteFull(fd_.get(), EncodeProof(proof), t));
  b.assign(kVerdictBytes, '\0');
  st = ReadFull(fd_.get(), b.data(), b.size(), t);
  if (st.code() == ECONNRESET) {
    return Status(EACCES, options_.address + ": the peer closed the connection at the handshake");
  }
  CKPTFS_RETURN_IF_ERROR(st);
  Verdict v;
  CKPTFS_RETURN_IF_ERROR(DecodeVerdict(b, &v));
  if (v.status != 0) {
    return Status(static_cast<int>(v.status),
                  options_.address + ": the peer refused this host (not the store's secret)");
  }
  if (!SameMac(v.server_mac, ServerMac(options_.secret, proof.client_nonce, hello.server_nonce))) {
    return Status(EACCES, options_.address + ": the peer does not know the store's secret");
  }
  return Status::OK();
}

Result<std::string> Client::Read(const std::string& name, uint64_t offset, uint32_t length) {
  if (!broken_.ok()) return broken_;
  if (name.size() > kMaxNameBytes || length > kMaxReadBytes) {
    return Status(EINVAL, "peer read of " + name + ": too long a name or range");
  }
  Request req{name, offset, length};
  const int t = options_.timeout_ms;
  Status st = WriteFull(fd_.get(), EncodeRequest(req), t);
  std::string head(kReplyHeaderBytes, '\0');
  if (st.ok()) st = ReadFull(fd_.get(), head.data(), head.size(), t);
  ReplyHeader h;
  if (st.ok()) st = DecodeReplyHeader(head, &h);
  if (st.ok() && h.status == 0 && h.length > length) {
    st = Status(EPROTO, options_.address + ": a reply longer than the range asked for");
  }
  std::string data;
  if (st.ok() && h.status == 0) {
    data.resize(h.length);
    st = ReadFull(fd_.get(), data.data(), data.size(), t);
  }
  if (!st.ok()) {
    broken_ = Status(st.code(), options_.address + ": " + st.message());
    fd_.Reset();
    return broken_;
  }
  if (h.status != 0) {
    return Status(static_cast<int>(h.status), options_.address + " answered " + name + ": " +
                                                  std::strerror(static_cast<int>(h.status)));
  }
  return data;
}

}  // namespace ckptfs::peer
