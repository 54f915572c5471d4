// A peer server and its clients on 127.0.0.1: ranges served byte for byte,
// the handshake refusing whoever does not know the secret (either side),
// names outside segments/ and data/ refused, and the failures a client
// meets (a slow peer, a stopped one, one that is no ckptfs peer).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "peer/client.h"
#include "peer/server.h"
#include "peer/socket.h"
#include "peer/wire.h"

namespace ckptfs::peer {
namespace {

const std::string kSecret = "the store's secret, 32 bytes....";

std::string RandomData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// What a client of the server at `address` is given.
ClientOptions To(const std::string& address, int timeout_ms = 2000) {
  ClientOptions o;
  o.address = address;
  o.secret = kSecret;
  o.timeout_ms = timeout_ms;
  return o;
}

class PeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-peer-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/segments");
    std::filesystem::create_directories(dir_ + "/data");
    std::filesystem::create_directories(dir_ + "/index");
    segment_ = RandomData(3 << 20, 1);
    data_file_ = RandomData(100000, 2);
    Write("segments/00000007.seg", segment_);
    Write("data/00000042.dat", data_file_);
    Write("index/CURRENT", "MANIFEST-000001\n");
    Write("FORMAT", "ckptfs store\n");
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  void StartServer(int max_connections = 64) {
    ServerOptions o;
    o.secret = kSecret;
    o.store_dir = dir_;
    o.max_connections = max_connections;
    auto s = Server::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  Result<std::unique_ptr<Client>> Dial(const std::string& secret = kSecret, int timeout_ms = 2000) {
    ClientOptions o = To(server_->address(), timeout_ms);
    o.secret = secret;
    return Client::Connect(o);
  }

  std::string dir_;
  std::string segment_, data_file_;
  std::unique_ptr<Server> server_;
};

TEST_F(PeerTest, ServesRangesOfSegmentAndDataFiles) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  EXPECT_EQ(server_->address().rfind("127.0.0.1:", 0), 0u) << server_->address();
  auto c = Dial();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  struct Case {
    const char* name;
    const std::string* bytes;
    uint64_t offset;
    uint32_t length;
  } cases[] = {
      {"segments/00000007.seg", &segment_, 0, 4096},
      {"segments/00000007.seg", &segment_, 12345, 1 << 20},
      {"segments/00000007.seg", &segment_, (3 << 20) - 100, 4096},  // ends early
      {"segments/00000007.seg", &segment_, 3 << 20, 10},            // at the end: nothing
      {"data/00000042.dat", &data_file_, 99999, 1},
      {"data/00000042.dat", &data_file_, 0, 100000},
  };
  uint64_t served = 0;
  for (const Case& k : cases) {
    auto got = (*c)->Read(k.name, k.offset, k.length);
    ASSERT_TRUE(got.ok()) << k.name << " " << got.status().ToString();
    const std::string want = k.bytes->substr(std::min<uint64_t>(k.offset, k.bytes->size()), k.length);
    EXPECT_EQ(*got, want) << k.name << " at " << k.offset;
    served += want.size();
  }
  ServerStats st = server_->stats();
  EXPECT_EQ(st.connections, 1u);
  EXPECT_EQ(st.requests, std::size(cases));
  EXPECT_EQ(st.bad_requests, 0u);
  EXPECT_EQ(st.bytes_served, served);
}

TEST_F(PeerTest, NothingElseOfTheStoreIsServed) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto c = Dial();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const char* name : {"index/CURRENT", "FORMAT", "segments/../index/CURRENT",
                           "/etc/passwd", "segments/00000007.seg.tmp", "../segments/00000007.seg"}) {
    auto got = (*c)->Read(name, 0, 100);
    EXPECT_EQ(got.status().code(), EACCES) << name << ": " << got.status().ToString();
  }
  // A served name that is not there, and too long a range.
  EXPECT_EQ((*c)->Read("segments/00000008.seg", 0, 10).status().code(), ENOENT);
  EXPECT_EQ((*c)->Read("segments/00000007.seg", 0, kMaxReadBytes + 1).status().code(), EINVAL);
  // The connection still serves.
  auto got = (*c)->Read("segments/00000007.seg", 10, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, segment_.substr(10, 10));
  EXPECT_EQ(server_->stats().bad_requests, 6u);
}

TEST_F(PeerTest, AClientWithoutTheSecretIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto c = Dial("not the store's secret at all...");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), EACCES) << c.status().ToString();
  EXPECT_EQ(server_->stats().refused, 1u);
  EXPECT_EQ(server_->stats().connections, 0u);
  // Whoever knows it is served.
  auto ok = Dial();
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE((*ok)->Read("data/00000042.dat", 0, 1).ok());
}

TEST_F(PeerTest, AServerThatDoesNotProveTheSecretIsLeft) {
  // A listener that says hello and accepts any proof, with a mac of its own
  // making: it cannot know the server's proof without the secret.
  std::string address;
  auto l = Listen("127.0.0.1:0", &address);
  ASSERT_TRUE(l.ok());
  std::thread impostor([fd = l->get()] {
    Fd conn(::accept(fd, nullptr, nullptr));
    Hello h;
    (void)RandomBytes(h.server_nonce.data(), h.server_nonce.size());
    (void)WriteFull(conn.get(), EncodeHello(h), 2000);
    std::string proof(kProofBytes, '\0');
    (void)ReadFull(conn.get(), proof.data(), proof.size(), 2000);
    Verdict v;  // status 0, and a mac that is no proof
    v.server_mac.fill(7);
    (void)WriteFull(conn.get(), EncodeVerdict(v), 2000);
  });
  auto c = Client::Connect(To(address));
  impostor.join();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), EACCES) << c.status().ToString();
}

TEST_F(PeerTest, ShortSecretsAndMissingDirectoriesDoNotServe) {
  ServerOptions o;
  o.secret = "short";
  o.store_dir = dir_;
  EXPECT_EQ(Server::Start(o).status().code(), EINVAL);
  o.secret = kSecret;
  o.store_dir = "";
  EXPECT_EQ(Server::Start(o).status().code(), EINVAL);
  o.store_dir = dir_;
  o.listen = "no port here";
  EXPECT_EQ(Server::Start(o).status().code(), EINVAL);
}

TEST_F(PeerTest, WhatIsNoCkptfsPeerIsSaidSo) {
  std::string address;
  auto l = Listen("127.0.0.1:0", &address);
  ASSERT_TRUE(l.ok());
  std::thread other([fd = l->get()] {
    Fd conn(::accept(fd, nullptr, nullptr));
    (void)WriteFull(conn.get(), "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n" + std::string(12, ' '), 2000);
  });
  auto c = Client::Connect(To(address));
  other.join();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), EPROTO) << c.status().ToString();
}

TEST_F(PeerTest, ASilentPeerTimesOut) {
  std::string address;
  auto l = Listen("127.0.0.1:0", &address);  // accepts (backlog) and says nothing
  ASSERT_TRUE(l.ok());
  const ClientOptions o = To(address, 300);
  const auto start = std::chrono::steady_clock::now();
  auto c = Client::Connect(o);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ETIMEDOUT) << c.status().ToString();
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST(PeerAddressTest, HostAndPortSplitWithIpv6InBrackets) {
  std::string host, port;
  ASSERT_TRUE(SplitAddress("10.0.0.7:4100", &host, &port).ok());
  EXPECT_EQ(host + " " + port, "10.0.0.7 4100");
  ASSERT_TRUE(SplitAddress("node07:0", &host, &port).ok());
  EXPECT_EQ(host + " " + port, "node07 0");
  ASSERT_TRUE(SplitAddress("[fe80::1]:9", &host, &port).ok());
  EXPECT_EQ(host + " " + port, "fe80::1 9");
  for (const char* bad : {"", ":", "host", "host:", ":9", "fe80::1:9", "[::1", "[::1:9",
                          "a]:9", "10.0.0.7:x"}) {
    EXPECT_EQ(SplitAddress(bad, &host, &port).code(), EINVAL) << bad;
  }
}

TEST_F(PeerTest, ARequestPastTheServersLimitIsRefused) {
  ServerOptions o;
  o.secret = kSecret;
  o.store_dir = dir_;
  o.max_read = 1000;
  // Reads through the caller's function, not the files.
  o.read = [](const std::string& name, uint64_t offset, size_t len, char* dst) -> Result<size_t> {
    if (name != "segments/00000007.seg") return Status(ENOENT, name);
    for (size_t i = 0; i < len; i++) dst[i] = static_cast<char>('a' + (offset + i) % 26);
    return std::min<size_t>(len, 30 > offset ? 30 - offset : 0);
  };
  auto s = Server::Start(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  server_ = std::move(s).value();
  auto dialed = Dial();
  ASSERT_TRUE(dialed.ok()) << dialed.status().ToString();
  auto& c = *dialed;
  Result<std::string> got = c->Read("segments/00000007.seg", 24, 1000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "yzabcd");  // where its function says the file ends
  EXPECT_EQ(c->Read("segments/00000007.seg", 0, 1001).status().code(), EINVAL);
  auto dialed2 = Dial();
  ASSERT_TRUE(dialed2.ok()) << dialed2.status().ToString();
  EXPECT_EQ((*dialed2)->Read("data/00000042.dat", 0, 10).status().code(), ENOENT);
  EXPECT_EQ(server_->stats().bad_requests, 1u);
}

TEST_F(PeerTest, NoServerIsConnectionRefused) {
  std::string address;
  {
    auto l = Listen("127.0.0.1:0", &address);
    ASSERT_TRUE(l.ok());
  }  // closed: nothing listens there now
  EXPECT_EQ(Client::Connect(To(address)).status().code(), ECONNREFUSED);
}

TEST_F(PeerTest, AStoppedServerBreaksItsConnections) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto c = Dial();
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Read("data/00000042.dat", 0, 10).ok());
  server_->Stop();
  Status first = (*c)->Read("data/00000042.dat", 0, 10).status();
  EXPECT_FALSE(first.ok());
  // Broken for good: the same error again, without touching the network.
  EXPECT_EQ((*c)->Read("data/00000042.dat", 0, 10).status().code(), first.code());
}

TEST_F(PeerTest, ConnectionsPastTheLimitAreClosed) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*max_connections=*/2));
  auto a = Dial();
  auto b = Dial();
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = Dial();
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(server_->stats().refused, 1u);
  // A place frees when a client goes.
  a->reset();
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    auto d = Dial();
    served = d.ok() && (*d)->Read("data/00000042.dat", 0, 1).ok();
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
}

TEST_F(PeerTest, ManyClientsAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  constexpr int kClients = 8, kReads = 100;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = Dial();
      if (!c.ok()) {
        failed++;
        return;
      }
      std::mt19937 rng(t);
      for (int i = 0; i < kReads; ++i) {
        const bool seg = rng() % 2;
        const std::string& bytes = seg ? segment_ : data_file_;
        uint64_t off = rng() % bytes.size();
        uint32_t len = 1 + rng() % 65536;
        auto got = (*c)->Read(seg ? "segments/00000007.seg" : "data/00000042.dat", off, len);
        if (!got.ok()) {
          failed++;
        } else if (*got != bytes.substr(off, len)) {
          wrong++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(server_->stats().requests, static_cast<uint64_t>(kClients * kReads));
}

}  // namespace
}  // namespace ckptfs::peer
