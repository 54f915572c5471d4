// The peer protocol's messages (docs/SHARED.md, "Peers"): what one host of a
// shared store sends another to read byte ranges of the store's segment and
// data files. Pure encoding and decoding, and the two proofs of the
// handshake; no sockets (peer/server.h, peer/client.h).
//
// A connection, all integers little-endian:
//   server -> client  Hello     "CKPTPEER" version:u32 server_nonce[32]
//   client -> server  Proof     client_nonce[32] client_mac[32]
//   server -> client  Verdict   status:u32 server_mac[32] (mac zero when refused)
//   then, any number of times:
//   client -> server  Request   name_len:u16 name offset:u64 length:u32
//   server -> client  Reply     status:u32 length:u32 bytes[length]
// client_mac = HMAC-SHA256(secret, "ckptfs peer client" 0x00 server_nonce
// client_nonce), server_mac the same with "ckptfs peer server" and the
// nonces swapped: each side proves it knows the store's secret without
// sending it, and a recorded handshake proves nothing on a new connection
// (fresh nonces). A Reply's status is 0 or an errno; its length is the
// request's, or less where the file ends.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ckptfs::peer {

inline constexpr std::string_view kMagic = "CKPTPEER";
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
// The shortest secret a store may have.
inline constexpr size_t kMinSecretBytes = 16;
// The most bytes one Request may ask for.
inline constexpr uint32_t kMaxReadBytes = 16u << 20;
// The longest name a Request may carry.
inline constexpr size_t kMaxNameBytes = 255;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

inline constexpr size_t kHelloBytes = kMagic.size() + 4 + kNonceBytes;
inline constexpr size_t kProofBytes = kNonceBytes + kMacBytes;
inline constexpr size_t kVerdictBytes = 4 + kMacBytes;
// A Request's fixed part after its name; a Reply's header.
inline constexpr size_t kRequestTailBytes = 8 + 4;
inline constexpr size_t kReplyHeaderBytes = 4 + 4;

struct Hello {
  uint32_t version = kVersion;
  Nonce server_nonce{};
};
std::string EncodeHello(const Hello& h);
// Corruption unless `b` is kHelloBytes with the magic; ENOTSUP for another
// version.
Status DecodeHello(std::string_view b, Hello* h);

struct Proof {
  Nonce client_nonce{};
  Mac client_mac{};
};
std::string EncodeProof(const Proof& p);
Status DecodeProof(std::string_view b, Proof* p);

struct Verdict {
  uint32_t status = 0;  // 0: accepted; else an errno (EACCES: a wrong proof)
  Mac server_mac{};
};
std::string EncodeVerdict(const Verdict& v);
Status DecodeVerdict(std::string_view b, Verdict* v);

struct Request {
  std::string name;  // relative to the store: IsServedName()
  uint64_t offset = 0;
  uint32_t length = 0;  // at most kMaxReadBytes
};
std::string EncodeRequest(const Request& r);
// The name's length from a Request's first two bytes.
uint16_t RequestNameBytes(std::string_view first_two);
// `b`: the name and the tail (RequestNameBytes() + kRequestTailBytes).
Status DecodeRequest(std::string_view b, Request* r);

struct ReplyHeader {
  uint32_t status = 0;
  uint32_t length = 0;
};
std::string EncodeReplyHeader(const ReplyHeader& h);
Status DecodeReplyHeader(std::string_view b, ReplyHeader* h);

// The proofs of the handshake. An empty Mac where HMAC fails (never
// equal to a proof).
Mac ClientMac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
Mac ServerMac(std::string_view secret, const Nonce& client_nonce, const Nonce& server_nonce);
// Compares in time independent of where they differ.
bool SameMac(const Mac& a, const Mac& b);
// Random bytes from the system's cryptographic generator.
Status RandomBytes(uint8_t* out, size_t n);

// Whether a peer serves `name`: exactly a segment file's or a data file's
// name relative to the store ("segments/00000001.seg", "data/00000042.dat",
// format::SegmentFileName, format::DataFileName), nothing else of the store.
bool IsServedName(std::string_view name);

}  // namespace ckptfs::peer
