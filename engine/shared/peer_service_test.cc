// PeerService over an index in memory (meta::MemKv) and a store directory
// of its own: the secret made once, the address published and withdrawn,
// and the bytes a client of the store reads from it.
#include "engine/shared/peer_service.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "format/format.h"
#include "meta/mem_kv.h"
#include "peer/client.h"

namespace ckptfs::engine {
namespace {

class PeerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptfs-peer-service-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::mkdir((dir_ + "/segments").c_str(), 0700), 0);
    std::ofstream(dir_ + "/" + format::SegmentFileName(7)) << "the bytes of segment seven";
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }

  Result<std::unique_ptr<PeerService>> Start(const std::string& host) {
    return PeerService::Start(&kv_, host, "127.0.0.1:0", dir_, io::Env::Posix());
  }

  meta::MemKv kv_;
  std::string dir_;
};

TEST_F(PeerServiceTest, TheSecretIsMadeOnceAndKept) {
  Result<std::string> none = PeerSecret(&kv_, /*make=*/false);
  EXPECT_EQ(none.status().code(), ENOENT);
  Result<std::string> made = PeerSecret(&kv_, /*make=*/true);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->size(), format::kPeerSecretBytes);
  Result<std::string> again = PeerSecret(&kv_, /*make=*/true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *made);
  // Random: a second store's differs.
  meta::MemKv other;
  Result<std::string> theirs = PeerSecret(&other, /*make=*/true);
  ASSERT_TRUE(theirs.ok());
  EXPECT_NE(*theirs, *made);
}

TEST_F(PeerServiceTest, HostsMakingTheSecretAtOnceAgreeOnOne) {
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); i++) {
    threads.emplace_back([&, i] {
      Result<std::string> s = PeerSecret(&kv_, /*make=*/true);
      if (s.ok()) got[i] = *s;
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& s : got) EXPECT_EQ(s, got[0]);
  EXPECT_EQ(got[0].size(), format::kPeerSecretBytes);
}

TEST_F(PeerServiceTest, ASecretOfAnotherSizeIsCorruption) {
  meta::Writes w;
  w.Put(meta::Space::kMeta, format::kMetaPeerSecret, "short");
  ASSERT_TRUE(meta::CommitWrites(&kv_, &w, meta::Durability::kSynced).ok());
  Result<std::string> s = PeerSecret(&kv_, /*make=*/true);
  EXPECT_TRUE(s.status().IsCorruption()) << s.status().ToString();
  EXPECT_FALSE(Start("a").ok());
}

TEST_F(PeerServiceTest, ListenAddressesFromTheOption) {
  EXPECT_EQ(*PeerListenAddress("", ""), "127.0.0.1:0");
  EXPECT_EQ(*PeerListenAddress("", "10.1.2.3"), "10.1.2.3:0");
  EXPECT_EQ(*PeerListenAddress("10.1.2.3", "192.168.0.1"), "10.1.2.3:0");
  EXPECT_EQ(*PeerListenAddress("0.0.0.0:7000", ""), "0.0.0.0:7000");
  EXPECT_EQ(*PeerListenAddress("node07", ""), "node07:0");
  EXPECT_EQ(*PeerListenAddress("[::1]", ""), "[::1]:0");
  EXPECT_EQ(*PeerListenAddress("[::1]:9", ""), "[::1]:9");
  for (const char* bad : {":", "a:b:c", "10.0.0.1:port", "[::1"}) {
    Result<std::string> r = PeerListenAddress(bad, "");
    EXPECT_EQ(r.status().code(), EINVAL) << bad;
  }
}

TEST_F(PeerServiceTest, AServiceServesTheStoreAndPublishesItsAddressWhileItRuns) {
  Result<std::unique_ptr<PeerService>> a = Start("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<std::map<std::string, std::string>> published = PeerAddresses(&kv_);
  ASSERT_TRUE(published.ok());
  ASSERT_EQ(published->size(), 1u);
  EXPECT_EQ(published->at("a"), (*a)->address());
  EXPECT_EQ((*a)->address().rfind("127.0.0.1:", 0), 0u) << (*a)->address();
  EXPECT_NE((*a)->address(), "127.0.0.1:0");

  // A second host shares the secret and publishes an address of its own.
  Result<std::unique_ptr<PeerService>> b = Start("b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->secret(), (*a)->secret());
  EXPECT_NE((*b)->address(), (*a)->address());

  // What a host with the secret reads from "a": the store's bytes.
  peer::ClientOptions co;
  co.address = published->at("a");
  co.secret = *PeerSecret(&kv_, /*make=*/false);
  Result<std::unique_ptr<peer::Client>> c = peer::Client::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<std::string> got = (*c)->Read(format::SegmentFileName(7), 4, 5);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "bytes");
  // One without it is refused.
  co.secret = std::string(format::kPeerSecretBytes, 'x');
  EXPECT_EQ(peer::Client::Connect(co).status().code(), EACCES);
  const peer::ServerStats st = (*a)->stats();
  EXPECT_EQ(st.connections, 1u);
  EXPECT_EQ(st.refused, 1u);
  EXPECT_EQ(st.requests, 1u);
  EXPECT_EQ(st.bytes_served, 5u);

  // A clean stop withdraws the address; one that is not leaves it (the
  // lease then says it is unused).
  ASSERT_TRUE((*a)->Stop(/*withdraw=*/true).ok());
  ASSERT_TRUE((*b)->Stop(/*withdraw=*/false).ok());
  published = PeerAddresses(&kv_);
  ASSERT_TRUE(published.ok());
  EXPECT_EQ(published->count("a"), 0u);
  EXPECT_EQ(published->count("b"), 1u);
  co.address = (*a)->address();
  co.secret = (*a)->secret();
  EXPECT_FALSE(peer::Client::Connect(co).ok());
}

TEST_F(PeerServiceTest, AnAddressThatCannotBeServedSaysSo) {
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  Result<std::unique_ptr<PeerService>> s =
      PeerService::Start(&kv_, "a", "192.0.2.1:0", dir_, io::Env::Posix());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), EADDRNOTAVAIL) << s.status().ToString();
  EXPECT_NE(s.status().message().find("peers"), std::string::npos) << s.status().ToString();
  EXPECT_TRUE(PeerAddresses(&kv_)->empty());
}

}  // namespace
}  // namespace ckptfs::engine
