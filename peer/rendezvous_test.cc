#include "peer/rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ckptfs::peer {
namespace {

std::vector<std::string> Hosts(int n) {
  std::vector<std::string> h;
  for (int i = 0; i < n; ++i) h.push_back("host-" + std::to_string(i));
  return h;
}

std::string File(int i) { return "segments/" + std::to_string(100000000 + i) + ".seg"; }

TEST(RendezvousTest, EveryHostAgreesWhateverTheOrderOfTheList) {
  std::vector<std::string> hosts = Hosts(5);
  std::vector<std::string> reversed(hosts.rbegin(), hosts.rend());
  for (int i = 0; i < 1000; ++i) {
    int a = RendezvousOwner(hosts, File(i));
    int b = RendezvousOwner(reversed, File(i));
    ASSERT_GE(a, 0);
    EXPECT_EQ(hosts[a], reversed[b]) << File(i);
  }
  EXPECT_EQ(RendezvousOwner({}, File(0)), -1);
}

TEST(RendezvousTest, FilesSpreadEvenly) {
  std::vector<std::string> hosts = Hosts(8);
  std::map<int, int> count;
  constexpr int kFiles = 16000;
  for (int i = 0; i < kFiles; ++i) count[RendezvousOwner(hosts, File(i))]++;
  ASSERT_EQ(count.size(), hosts.size());
  for (auto [h, n] : count) {
    EXPECT_GT(n, kFiles / 8 * 0.85) << hosts[h];
    EXPECT_LT(n, kFiles / 8 * 1.15) << hosts[h];
  }
}

TEST(RendezvousTest, AHostLeavingMovesOnlyItsFiles) {
  std::vector<std::string> all = Hosts(6);
  std::vector<std::string> fewer = all;
  fewer.erase(fewer.begin() + 2);  // host-2 goes
  int moved = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string& before = all[RendezvousOwner(all, File(i))];
    const std::string& after = fewer[RendezvousOwner(fewer, File(i))];
    if (before != "host-2") {
      EXPECT_EQ(before, after) << File(i);
    } else {
      moved++;
    }
  }
  EXPECT_GT(moved, 6000 / 6 * 0.8);
  EXPECT_LT(moved, 6000 / 6 * 1.2);
}

TEST(RendezvousTest, ScoresAreFixedAcrossMachines) {
  // XXH3 is specified byte for byte (stable since xxHash 0.8.0): these
  // values are every machine's, and hosts of two builds must agree.
  EXPECT_EQ(RendezvousScore("host-1", "segments/00000001.seg"), 15134710151274798366ull);
  EXPECT_EQ(RendezvousScore("h", ""), 1361192953743563475ull);
  EXPECT_NE(RendezvousScore("ab", "c"), RendezvousScore("a", "bc"));
  EXPECT_NE(RendezvousScore("h1", "f"), RendezvousScore("h2", "f"));
}

}  // namespace
}  // namespace ckptfs::peer
