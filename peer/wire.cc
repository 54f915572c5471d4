#include "peer/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstring>

#include "format/format.h"

namespace ckptfs::peer {
namespace {

void PutBytes(std::string* dst, const uint8_t* p, size_t n) {
  dst->append(reinterpret_cast<const char*>(p), n);
}

template <size_t N>
void GetBytes(const char* p, std::array<uint8_t, N>* out) {
  std::memcpy(out->data(), p, N);
}

Status WrongSize(const char* what, size_t got, size_t want) {
  return Status::Corruption(std::string("peer ") + what + ": " + std::to_string(got) +
                            " bytes, expected " + std::to_string(want));
}

Mac HmacOf(std::string_view secret, std::string_view label, const Nonce& a, const Nonce& b) {
  std::string msg(label);
  msg.push_back('\0');
  PutBytes(&msg, a.data(), a.size());
  PutBytes(&msg, b.data(), b.size());
  Mac out{};
  size_t got = 0;
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(),
                out.size(), &got) == nullptr ||
      got != out.size()) {
    return Mac{};
  }
  return out;
}

}  // namespace

std::string EncodeHello(const Hello& h) {
  std::string b(kMagic);
  format::PutLE32(&b, h.version);
  PutBytes(&b, h.server_nonce.data(), h.server_nonce.size());
  return b;
}

Status DecodeHello(std::string_view b, Hello* h) {
  if (b.size() != kHelloBytes) return WrongSize("hello", b.size(), kHelloBytes);
  if (b.substr(0, kMagic.size()) != kMagic) {
    return Status::Corruption("peer hello: no CKPTPEER magic (not a ckptfs peer)");
  }
  h->version = format::GetLE32(b.data() + kMagic.size());
  if (h->version != kVersion) {
    return Status(ENOTSUP, "peer hello: protocol version " + std::to_string(h->version) +
                               ", this host speaks " + std::to_string(kVersion));
  }
  GetBytes(b.data() + kMagic.size() + 4, &h->server_nonce);
  return Status::OK();
}

std::string EncodeProof(const Proof& p) {
  std::string b;
  PutBytes(&b, p.client_nonce.data(), p.client_nonce.size());
  PutBytes(&b, p.client_mac.data(), p.client_mac.size());
  return b;
}

Status DecodeProof(std::string_view b, Proof* p) {
  if (b.size() != kProofBytes) return WrongSize("proof", b.size(), kProofBytes);
  GetBytes(b.data(), &p->client_nonce);
  GetBytes(b.data() + kNonceBytes, &p->client_mac);
  return Status::OK();
}

std::string EncodeVerdict(const Verdict& v) {
  std::string b;
  format::PutLE32(&b, v.status);
  PutBytes(&b, v.server_mac.data(), v.server_mac.size());
  return b;
}

Status DecodeVerdict(std::string_view b, Verdict* v) {
  if (b.size() != kVerdictBytes) return WrongSize("verdict", b.size(), kVerdictBytes);
  v->status = format::GetLE32(b.data());
  GetBytes(b.data() + 4, &v->server_mac);
  return Status::OK();
}

std::string EncodeRequest(const Request& r) {
  std::string b;
  format::PutLE16(&b, static_cast<uint16_t>(r.name.size()));
  b += r.name;
  format::PutLE64(&b, r.offset);
  format::PutLE32(&b, r.length);
  return b;
}

uint16_t RequestNameBytes(std::string_view first_two) { return format::GetLE16(first_two.data()); }

Status DecodeRequest(std::string_view b, Request* r) {
  if (b.size() < kRequestTailBytes) return WrongSize("request", b.size(), kRequestTailBytes);
  const size_t name_bytes = b.size() - kRequestTailBytes;
  if (name_bytes > kMaxNameBytes) {
    return Status::Corruption("peer request: a name of " + std::to_string(name_bytes) +
                              " bytes, at most " + std::to_string(kMaxNameBytes));
  }
  r->name.assign(b.data(), name_bytes);
  r->offset = format::GetLE64(b.data() + name_bytes);
  r->length = format::GetLE32(b.data() + name_bytes + 8);
  return Status::OK();
}

std::string EncodeReplyHeader(const ReplyHeader& h) {
  std::string b;
  format::PutLE32(&b, h.status);
  format::PutLE32(&b, h.length);
  return b;
}

Status DecodeReplyHeader(std::string_view b, ReplyHeader* h) {
  if (b.size() != kReplyHeaderBytes) return WrongSize("reply", b.size(), kReplyHeaderBytes);
  h->status = format::GetLE32(b.data());
  h->length = format::GetLE32(b.data() + 4);
  return Status::OK();
}

Mac ClientMac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return HmacOf(secret, "ckptfs peer client", server_nonce, client_nonce);
}

Mac ServerMac(std::string_view secret, const Nonce& client_nonce, const Nonce& server_nonce) {
  return HmacOf(secret, "ckptfs peer server", client_nonce, server_nonce);
}

bool SameMac(const Mac& a, const Mac& b) {
  static const Mac kNone{};
  // An all-zero Mac is what a failed HMAC gives: it proves nothing.
  if (CRYPTO_memcmp(a.data(), kNone.data(), a.size()) == 0) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Status RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    return Status(EIO, "the system's random generator failed (OpenSSL RAND_bytes)");
  }
  return Status::OK();
}

bool IsServedName(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view dir = name.substr(0, slash);
  const std::string_view base = name.substr(slash + 1);
  uint64_t id = 0;
  if (dir == format::kSegmentsDirName) {
    return format::ParseSegmentFileName(base, &id) && format::SegmentFileName(id) == name;
  }
  if (dir == format::kDataDirName) {
    return format::ParseDataFileName(base, &id) && format::DataFileName(id) == name;
  }
  return false;
}

}  // namespace ckptfs::peer
