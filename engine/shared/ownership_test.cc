// Ownership over an index of its own in memory (meta::MemKv): two mounts of
// one store, each with a host of its own, standing for two hosts.
#include "engine/shared/ownership.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "meta/hosts.h"
#include "meta/mem_kv.h"

namespace ckptfs::engine {
namespace {

using Clock = std::chrono::steady_clock;

class OwnershipTest : public ::testing::Test {
 protected:
  // Claims host `name` and starts `own` for it; records what it gives up.
  void Start(Ownership* own, const std::string& name, std::vector<uint64_t>* given = nullptr) {
    Result<uint32_t> id = meta::ClaimHost(&kv_, name, "test", 30'000);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    own->Start(&kv_, format::OwnerValue{*id, static_cast<uint32_t>(::getpid()), meta::MachineName()},
               [given](uint64_t ino, const std::vector<Ownership::Name>&, bool) {
                 if (given != nullptr) given->push_back(ino);
               });
    ASSERT_TRUE(own->PollOnce().ok());
  }
  // Makes `ino` owned by `own`, its owner key committed.
  void Make(Ownership* own, uint64_t ino, bool dir) {
    ASSERT_TRUE(own->Made(ino, dir));
    meta::Writes w;
    w.Put(meta::Space::kMeta, format::OwnerKey(ino), own->owner_value());
    ASSERT_TRUE(meta::CommitWrites(&kv_, &w, meta::Durability::kLogged).ok());
  }
  bool HasOwnerKey(uint64_t ino) {
    std::optional<std::string> v;
    EXPECT_TRUE(meta::RunReads(&kv_, [&](meta::ReadTxn* t) -> Status {
                  CKPTFS_ASSIGN_OR_RETURN(v, t->Get(meta::Space::kMeta, format::OwnerKey(ino)));
                  return Status::OK();
                }).ok());
    return v.has_value();
  }

  meta::MemKv kv_;
};

TEST_F(OwnershipTest, AnOwnerKnowsTheNamesOfADirectoryItMade) {
  Ownership a;
  Start(&a, "a");
  EXPECT_NE(a.Epoch(), 0u);
  EXPECT_NE(a.Epoch() & Ownership::kEpochBit, 0u);  // never a solo epoch
  Make(&a, 10, /*dir=*/true);
  EXPECT_TRUE(a.Owns(10));
  EXPECT_EQ(a.FindName(10, "x"), std::optional<uint64_t>(0));  // known absent
  a.SetName(10, "x", 11);
  EXPECT_EQ(a.FindName(10, "x"), std::optional<uint64_t>(11));
  EXPECT_TRUE(a.OwnsName(10, 11));
  a.SetName(10, "x", 0);
  EXPECT_EQ(a.FindName(10, "x"), std::optional<uint64_t>(0));
  EXPECT_EQ(a.FindName(12, "x"), std::nullopt);  // not owned: not known
  EXPECT_TRUE(a.MayChange(10).ok());             // its own: no question
  // A clean close leaves no owner key behind.
  EXPECT_TRUE(HasOwnerKey(10));
  a.End();
  ASSERT_TRUE(a.DropAll().ok());
  EXPECT_FALSE(HasOwnerKey(10));
  EXPECT_FALSE(a.Owns(10));
}

TEST_F(OwnershipTest, AnotherHostsChangeWaitsForTheOwnerToGiveItUp) {
  Ownership a, b;
  std::vector<uint64_t> given;
  Start(&a, "a", &given);
  Start(&b, "b");
  Make(&a, 10, /*dir=*/true);
  Make(&a, 11, /*dir=*/false);
  a.SetName(10, "x", 11);
  std::thread poller([&] {
    for (int i = 0; i < 40 && a.given_up() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(Ownership::kPollMs));
      ASSERT_TRUE(a.PollOnce().ok());
    }
  });
  const auto began = Clock::now();
  ASSERT_TRUE(b.MayChange(10).ok());
  poller.join();
  EXPECT_LT(Clock::now() - began, std::chrono::milliseconds(Ownership::kTakeOverMs));
  EXPECT_EQ(given, std::vector<uint64_t>{10});
  EXPECT_FALSE(a.Owns(10));
  EXPECT_EQ(a.FindName(10, "x"), std::nullopt);  // its names are not known any more
  EXPECT_TRUE(a.Owns(11));                       // the file in it stays a's
  EXPECT_FALSE(HasOwnerKey(10));
  EXPECT_TRUE(HasOwnerKey(11));
  EXPECT_EQ(a.given_up(), 1u);
  EXPECT_EQ(b.asked(), 1u);
  EXPECT_EQ(b.taken_over(), 0u);
  // Nobody owns it from now on: b changes it again without a question, and
  // so does a.
  EXPECT_TRUE(b.MayChange(10).ok());
  EXPECT_TRUE(a.MayChange(10).ok());
  EXPECT_EQ(b.asked(), 1u);
  Result<bool> elsewhere = b.OwnedElsewhere(11);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_TRUE(*elsewhere);
}

TEST_F(OwnershipTest, AnOwnerThatDoesNotAnswerLosesItsGrantAndIsTakenOver) {
  Ownership a, b;
  Start(&a, "a");
  Start(&b, "b");
  Make(&a, 10, /*dir=*/true);
  // a polls no more (a process stopped, or cut off from the index).
  const auto began = Clock::now();
  ASSERT_TRUE(b.MayChange(10).ok());
  const auto waited = Clock::now() - began;
  EXPECT_GE(waited, std::chrono::milliseconds(Ownership::kTakeOverMs));
  EXPECT_EQ(b.taken_over(), 1u);
  EXPECT_FALSE(HasOwnerKey(10));
  // By then a's grant ran out: it trusts nothing it owned.
  EXPECT_EQ(a.Epoch(), 0u);
  EXPECT_FALSE(a.Owns(10));
  // Its next grant is a new epoch that owns nothing from before.
  ASSERT_TRUE(a.PollOnce().ok());
  EXPECT_NE(a.Epoch(), 0u);
  EXPECT_FALSE(a.Owns(10));
}

TEST_F(OwnershipTest, TheInodesOfAHostThatIsGoneAreTakenAtOnce) {
  Ownership a, b;
  Start(&a, "a");
  Start(&b, "b");
  Make(&a, 10, /*dir=*/false);
  ASSERT_TRUE(meta::ReleaseHost(&kv_, "a").ok());  // a closed: its lease ended
  meta::LetGo(&kv_, "a");
  const auto began = Clock::now();
  ASSERT_TRUE(b.MayChange(10).ok());
  EXPECT_LT(Clock::now() - began, std::chrono::milliseconds(Ownership::kGrantMs));
  EXPECT_EQ(b.asked(), 0u);
  EXPECT_EQ(b.taken_over(), 1u);
  EXPECT_FALSE(HasOwnerKey(10));
}

// Many inodes at once (a seal's tree): those another host owns are asked
// for in one commit and given up in its next polls; those it does not own
// (made before, or never owned) are free at once; one owner gone is taken.
TEST_F(OwnershipTest, ManyInodesAreAskedForAtOnce) {
  Ownership a, b, c;
  std::vector<uint64_t> given;
  Start(&a, "a", &given);
  Start(&b, "b");
  Start(&c, "c");
  std::vector<uint64_t> tree;
  for (uint64_t ino = 100; ino < 140; ++ino) {
    if (ino % 4 == 0) {
      Make(&c, ino, /*dir=*/false);  // c's, and c goes
    } else if (ino % 4 != 3) {
      Make(&a, ino, /*dir=*/ino % 4 == 1);
    }  // ino % 4 == 3: owned by nobody
    tree.push_back(ino);
  }
  ASSERT_TRUE(meta::ReleaseHost(&kv_, "c").ok());
  meta::LetGo(&kv_, "c");
  std::thread poller([&] {
    for (int i = 0; i < 40 && a.given_up() < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(Ownership::kPollMs));
      ASSERT_TRUE(a.PollOnce().ok());
    }
  });
  const auto began = Clock::now();
  ASSERT_TRUE(b.MayChangeAll(tree).ok());
  poller.join();
  EXPECT_LT(Clock::now() - began, std::chrono::milliseconds(Ownership::kTakeOverMs));
  EXPECT_EQ(given.size(), 20u);
  EXPECT_EQ(a.given_up(), 20u);
  EXPECT_EQ(b.asked(), 20u);
  EXPECT_EQ(b.taken_over(), 10u);  // c's
  for (uint64_t ino : tree) {
    EXPECT_FALSE(HasOwnerKey(ino)) << ino;
    EXPECT_FALSE(a.Owns(ino)) << ino;
  }
  // All free now: no question asked again.
  ASSERT_TRUE(b.MayChangeAll(tree).ok());
  EXPECT_EQ(b.asked(), 20u);
}

// A read grant ends at another host's request: a reader that answers
// gives it up (and may ask again, then is asked again); one that does not
// read the request loses its key only past kTakeOverMs. A host's own key
// is never in the ranges it waits on.
TEST_F(OwnershipTest, AReadGrantIsAskedForAndTakenOnlyFromAReaderThatDoesNotAnswer) {
  Ownership a, b;
  std::vector<uint64_t> given;
  Start(&a, "a");
  Start(&b, "b", &given);
  format::InodeValue dir;
  dir.mode = S_IFDIR | 0755;
  dir.nlink = 2;
  meta::Writes w;
  w.Put(meta::Space::kInodes, format::InodeKey(7), format::EncodeInode(dir));
  w.Put(meta::Space::kMeta, format::OwnerKey(8), a.owner_value());  // 8 is a's
  w.Put(meta::Space::kInodes, format::InodeKey(8), format::EncodeInode(dir));
  ASSERT_TRUE(meta::CommitWrites(&kv_, &w, meta::Durability::kLogged).ok());
  auto has_key = [&](uint64_t ino) {
    format::OwnerValue v;
    EXPECT_TRUE(format::DecodeOwner(b.owner_value(), &v).ok());
    std::optional<std::string> got;
    EXPECT_TRUE(meta::RunReads(&kv_, [&](meta::ReadTxn* t) -> Status {
                  CKPTFS_ASSIGN_OR_RETURN(got, t->Get(meta::Space::kMeta, format::ReaderKey(ino, v.id)));
                  return Status::OK();
                }).ok());
    return got.has_value();
  };
  Result<Ownership::ReadGrant> owned = b.AskRead(8);
  ASSERT_TRUE(owned.ok());
  EXPECT_EQ(owned->token, 0u) << "another host owns it";
  EXPECT_FALSE(has_key(8));

  Result<Ownership::ReadGrant> g = b.AskRead(7);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_NE(g->token, 0u);
  EXPECT_EQ(b.ReadToken(7), g->token);
  EXPECT_TRUE(has_key(7));
  b.ReadName(7, b.StampOf(7), "x", 9);
  EXPECT_EQ(b.FindName(7, "x"), std::optional<uint64_t>(9));
  EXPECT_TRUE(b.ReadsName(7, 9));
  // A name read before a change of this host's own is not kept.
  const Ownership::ReadStamp before = b.StampOf(7);
  b.SetName(7, "y", 10);
  b.ReadName(7, before, "y", 0);
  EXPECT_EQ(b.FindName(7, "y"), std::optional<uint64_t>(10));
  // b's own ranges leave its key out.
  Ownership::Dropped dropped;
  ASSERT_TRUE(b.Unread(b.ReaderRanges({7}), &dropped).ok());
  EXPECT_TRUE(has_key(7));

  // A reader that answered (its request gone) and holds a grant again (its
  // key back) is asked again, never taken from; then it gives it up.
  format::OwnerValue bv;
  ASSERT_TRUE(format::DecodeOwner(b.owner_value(), &bv).ok());
  auto has = [&](const std::string& key) {
    std::optional<std::string> v;
    EXPECT_TRUE(meta::RunReads(&kv_, [&](meta::ReadTxn* t) -> Status {
                  CKPTFS_ASSIGN_OR_RETURN(v, t->Get(meta::Space::kMeta, key));
                  return Status::OK();
                }).ok());
    return v.has_value();
  };
  auto wait_for = [&](const std::string& key) {
    for (int i = 0; i < 200 && !has(key); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return has(key);
  };
  const std::string request = format::GiveUpKey(bv.id, 7);
  Status unread;
  std::thread asker([&] { unread = a.Unread(a.ReaderRanges({7}), &dropped); });
  ASSERT_TRUE(wait_for(request));
  {
    meta::Writes answered;
    answered.Delete(meta::Space::kMeta, request);
    answered.Put(meta::Space::kMeta, format::ReaderKey(7, bv.id), b.owner_value());
    ASSERT_TRUE(meta::CommitWrites(&kv_, &answered, meta::Durability::kLogged).ok());
  }
  EXPECT_TRUE(wait_for(request)) << "asked again";
  ASSERT_TRUE(b.PollOnce().ok());
  asker.join();
  ASSERT_TRUE(unread.ok()) << unread.ToString();
  EXPECT_EQ(a.reads_asked(), 2u);
  EXPECT_EQ(a.taken_over(), 0u);
  EXPECT_EQ(b.reads_given_up(), 1u);
  EXPECT_EQ(b.ReadToken(7), 0u);
  EXPECT_EQ(b.FindName(7, "x"), std::nullopt);
  EXPECT_FALSE(has_key(7));
  EXPECT_FALSE(has(request));
  EXPECT_EQ(given, (std::vector<uint64_t>{7}));
  EXPECT_TRUE(dropped.empty());

  // One that does not read the request loses its key.
  ASSERT_NE(b.AskRead(7)->token, 0u);
  ASSERT_TRUE(a.Unread(a.ReaderRanges({7}), &dropped).ok());
  EXPECT_EQ(a.taken_over(), 1u);
  EXPECT_EQ(a.reads_asked(), 3u);
  EXPECT_FALSE(has_key(7));

  // Beyond kOneByOne directories one range over all: a's own key there is
  // deleted and its grant ends, b's is asked for.
  ASSERT_TRUE(b.PollOnce().ok());  // reads a's request, left from above
  ASSERT_TRUE(a.PollOnce().ok());
  ASSERT_NE(a.AskRead(7)->token, 0u);
  std::vector<uint64_t> many;
  for (uint64_t d = 1; d <= Ownership::kOneByOne + 1; ++d) many.push_back(d);
  ASSERT_TRUE(a.Unread(a.ReaderRanges(many), &dropped).ok());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].first, 7u);
  EXPECT_EQ(a.ReadToken(7), 0u);
}

}  // namespace
}  // namespace ckptfs::engine
