#include "peer/wire.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace ckptfs::peer {
namespace {

std::string Hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(d[p[i] >> 4]);
    s.push_back(d[p[i] & 15]);
  }
  return s;
}
std::string Hex(std::string_view b) {
  return Hex(reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

Nonce Counting(uint8_t from) {
  Nonce n;
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(from + i);
  return n;
}

// The bytes of docs/SHARED.md's protocol table.
TEST(PeerWireTest, MessagesHaveTheirDocumentedBytes) {
  Hello h;
  h.server_nonce = Counting(0);
  EXPECT_EQ(Hex(EncodeHello(h)),
            "434b505450454552"  // "CKPTPEER"
            "01000000"          // version 1
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  Request r{"segments/00000007.seg", 0x0102030405060708ull, 65536};
  EXPECT_EQ(Hex(EncodeRequest(r)),
            "1500"  // 21 bytes of name
            "7365676d656e74732f30303030303030372e736567"
            "0807060504030201"  // offset
            "00000100");        // length 65,536
  EXPECT_EQ(Hex(EncodeReplyHeader({ENOENT, 0})), "0200000000000000");
  Verdict v;
  v.status = EACCES;
  EXPECT_EQ(Hex(EncodeVerdict(v)), "0d000000" + std::string(64, '0'));
}

TEST(PeerWireTest, MessagesRoundTrip) {
  Hello h;
  h.server_nonce = Counting(9);
  Hello h2;
  ASSERT_TRUE(DecodeHello(EncodeHello(h), &h2).ok());
  EXPECT_EQ(h2.server_nonce, h.server_nonce);

  Proof p;
  p.client_nonce = Counting(1);
  p.client_mac = ClientMac("a secret of the store", Counting(2), Counting(1));
  Proof p2;
  ASSERT_TRUE(DecodeProof(EncodeProof(p), &p2).ok());
  EXPECT_EQ(p2.client_nonce, p.client_nonce);
  EXPECT_EQ(p2.client_mac, p.client_mac);

  Request r{"data/00000042.dat", 12345, 777};
  std::string b = EncodeRequest(r);
  ASSERT_EQ(RequestNameBytes(b.substr(0, 2)), r.name.size());
  Request r2;
  ASSERT_TRUE(DecodeRequest(std::string_view(b).substr(2), &r2).ok());
  EXPECT_EQ(r2.name, r.name);
  EXPECT_EQ(r2.offset, r.offset);
  EXPECT_EQ(r2.length, r.length);

  ReplyHeader rh;
  ASSERT_TRUE(DecodeReplyHeader(EncodeReplyHeader({0, 4096}), &rh).ok());
  EXPECT_EQ(rh.status, 0u);
  EXPECT_EQ(rh.length, 4096u);
}

TEST(PeerWireTest, DecodersSayWhatIsWrong) {
  Hello h;
  std::string b = EncodeHello(h);
  Status st = DecodeHello(b.substr(0, 10), &h);
  EXPECT_EQ(st.code(), EIO) << st.ToString();
  EXPECT_NE(st.message().find("expected 44"), std::string::npos) << st.message();
  std::string bad = b;
  bad[0] = 'X';
  st = DecodeHello(bad, &h);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();
  std::string v2 = b;
  v2[8] = 2;
  EXPECT_EQ(DecodeHello(v2, &h).code(), ENOTSUP);
  Proof p;
  EXPECT_FALSE(DecodeProof("short", &p).ok());
  Verdict v;
  EXPECT_FALSE(DecodeVerdict(std::string(kVerdictBytes + 1, '\0'), &v).ok());
  Request r;
  EXPECT_FALSE(DecodeRequest("abc", &r).ok());
  EXPECT_FALSE(DecodeRequest(std::string(kMaxNameBytes + 1 + kRequestTailBytes, 'a'), &r).ok());
  ReplyHeader rh;
  EXPECT_FALSE(DecodeReplyHeader("1234567", &rh).ok());
}

// HMAC-SHA256 as Python's hmac module computes it for the same inputs.
TEST(PeerWireTest, ProofsAreHmacSha256OfTheNonces) {
  const std::string secret = "0123456789abcdef-store-secret";
  const Nonce server = Counting(0), client = Counting(100);
  Mac c = ClientMac(secret, server, client);
  Mac s = ServerMac(secret, client, server);
  EXPECT_EQ(Hex(c.data(), c.size()),
            "e7b80ac65fd2fb034731304365d9facd4c5a189a90170d4208c01fa8f4a44145");
  EXPECT_EQ(Hex(s.data(), s.size()),
            "b58752b74dc250b8caddfc7597dc770ce4bc95633eac2be3c1767b988f42a6bc");
  EXPECT_TRUE(SameMac(c, ClientMac(secret, server, client)));
  EXPECT_FALSE(SameMac(c, s));
  EXPECT_FALSE(SameMac(c, ClientMac(secret + "x", server, client)));
  EXPECT_FALSE(SameMac(c, ClientMac(secret, client, server)));
  EXPECT_FALSE(SameMac(Mac{}, Mac{})) << "an all-zero mac (a failed HMAC) proves nothing";
}

TEST(PeerWireTest, RandomBytesDiffer) {
  Nonce a{}, b{};
  ASSERT_TRUE(RandomBytes(a.data(), a.size()).ok());
  ASSERT_TRUE(RandomBytes(b.data(), b.size()).ok());
  EXPECT_NE(a, b);
}

TEST(PeerWireTest, OnlySegmentAndDataFilesAreServed) {
  EXPECT_TRUE(IsServedName("segments/00000001.seg"));
  EXPECT_TRUE(IsServedName("segments/1099511627777.seg"));
  EXPECT_TRUE(IsServedName("data/00000042.dat"));
  for (const char* name :
       {"", "segments", "segments/", "00000001.seg", "/segments/00000001.seg",
        "segments/../index/CURRENT", "segments/00000001.seg/", "segments//00000001.seg",
        "segments/00000001.dat", "data/00000042.seg", "segments/0000001.seg",
        "segments/000000001.seg", "segments/00000001.seg.tmp", "index/CURRENT", "SHARED",
        "FORMAT", "data/00000042.dat\n", "./segments/00000001.seg", "segments/./00000001.seg"}) {
    EXPECT_FALSE(IsServedName(name)) << "'" << name << "'";
  }
}

}  // namespace
}  // namespace ckptfs::peer
