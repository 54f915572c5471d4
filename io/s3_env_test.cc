// S3Env against a real gateway (radosgw): run beside the bed by
// tests/mount/ceph_bed.py --s3 (ctest ceph.s3_env_test), which sets
// CKPTFS_TEST_S3_ENDPOINT, CKPTFS_TEST_S3_BUCKET and the keys. Without them
// every test fails: this suite is only ever run beside the bed.
#include "io/s3_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "io/staging_log.h"

namespace ckptfs::io {
namespace {

constexpr size_t kBuffer = 64 << 10;  // small parts: files of many parts cheaply

std::string Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

Status Write(File& f, uint64_t off, std::string_view data) {
  return f.WriteAt(off, std::span<const std::string_view>(&data, 1));
}

class S3EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* endpoint = std::getenv("CKPTFS_TEST_S3_ENDPOINT");
    const char* bucket = std::getenv("CKPTFS_TEST_S3_BUCKET");
    ASSERT_TRUE(endpoint != nullptr && bucket != nullptr)
        << "run beside the bed: tests/mount/ceph_bed.py --s3 COMMAND";
    endpoint_ = endpoint;
    bucket_ = bucket;
    root_ = std::filesystem::temp_directory_path() /
            ("ckptfs-s3-env-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_ + "/segments");
    std::filesystem::create_directories(root_ + "/other");
    prefix_ = "t" + std::to_string(std::random_device()()) + "/";
    env_ = Connect();
    ASSERT_NE(env_, nullptr);
    Result<S3Credentials> keys = FindS3Credentials();
    ASSERT_TRUE(keys.ok());
    raw_ = std::make_unique<S3Client>(endpoint_, bucket_, *keys, 20);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::shared_ptr<S3Env> Connect(const std::string& staging = "", const std::string& bucket = "") {
    S3Options o;
    o.where = S3Location{bucket.empty() ? bucket_ : bucket, "env-test/"};
    o.endpoint = endpoint_;
    o.staging = staging;
    o.root = root_;
    o.dirs = {"segments"};
    o.prefix = prefix_;
    o.local = Env::Posix();
    o.write_buffer = kBuffer;
    o.op_timeout_s = 20;
    Result<std::shared_ptr<S3Env>> env = S3Env::Connect(o);
    EXPECT_TRUE(env.ok()) << env.status().ToString();
    return env.ok() ? *env : nullptr;
  }
  std::string Seg(const std::string& name) { return root_ + "/segments/" + name; }
  std::string Key(const std::string& name) { return "env-test/" + prefix_ + "segments/" + name; }
  std::string ReadAll(const File& f, uint64_t size) {
    std::string out(size + 100, '\0');
    Result<size_t> n = f.ReadAt(0, size + 100, out.data());
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    out.resize(n.ok() ? *n : 0);
    return out;
  }
  // The keys of the store's objects under `name`, as the bucket lists them.
  std::vector<std::string> RawKeys(const std::string& name) {
    Result<S3Listing> l = raw_->List(Key(name) + "/");
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    std::vector<std::string> keys;
    if (l.ok()) {
      for (const S3Object& o : l->objects) keys.push_back(o.key.substr(Key(name).size() + 1));
    }
    return keys;
  }

  std::string endpoint_, bucket_, root_, prefix_;
  std::shared_ptr<S3Env> env_;
  std::unique_ptr<S3Client> raw_;
};

TEST_F(S3EnvTest, WritesGatherIntoPartsAndReadBack) {
  Result<std::unique_ptr<File>> f = env_->Create(Seg("00000001.seg"), "header");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  // Appends of 1..8 KiB past several parts: few PUTs, and a read of bytes
  // still waiting sees them.
  std::string want = "header";
  const ObjectCounters before = env_->counters();
  std::mt19937_64 rng(7);
  while (want.size() < 5 * kBuffer + 5000) {
    const std::string piece = Pattern(rng(), 1024 + rng() % 7168);
    const std::string_view pieces[] = {piece.substr(0, 10), std::string_view(piece).substr(10)};
    ASSERT_TRUE((*f)->WriteAt(want.size(), pieces).ok());
    want += piece;
  }
  const uint64_t appends = want.size() / 4500;
  EXPECT_LT(env_->counters().writes - before.writes, appends / 10);
  ASSERT_EQ(*(*f)->Size(), want.size());
  EXPECT_EQ(ReadAll(**f, want.size()), want);  // sends what waits first
  ASSERT_TRUE((*f)->Sync().ok());
  // Another client (another host) sees every synced byte, each part a GET.
  std::shared_ptr<S3Env> other = Connect();
  Result<std::unique_ptr<File>> g = other->Open(Seg("00000001.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*(*g)->Size(), want.size());
  EXPECT_EQ(ReadAll(**g, want.size()), want);
  std::string mid(300, '\0');
  ASSERT_EQ(*(*g)->ReadAt(kBuffer - 100, 300, mid.data()), 300u);  // across two parts
  EXPECT_EQ(mid, want.substr(kBuffer - 100, 300));
  ASSERT_EQ(*(*g)->ReadAt(want.size() - 10, 300, mid.data()), 10u);
  ASSERT_EQ(*(*g)->ReadAt(want.size() + 10, 300, mid.data()), 0u);
  // More from the writer: the reader sees it after Refresh().
  const std::string more = Pattern(9, 2 * kBuffer);
  ASSERT_TRUE(Write(**f, want.size(), more).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  want += more;
  ASSERT_TRUE((*g)->Refresh().ok());
  EXPECT_EQ(*(*g)->Size(), want.size());
  EXPECT_EQ(ReadAll(**g, want.size()), want);
}

// Overwrites, holes and truncates: the parts, applied in order, are the
// file, for this process and for another one.
TEST_F(S3EnvTest, OverwritesHolesAndTruncatesApplyInOrder) {
  Result<std::unique_ptr<File>> f = env_->CreateUnsynced(Seg("00000002.seg"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string model;
  auto write = [&](uint64_t off, const std::string& data) {
    ASSERT_TRUE(Write(**f, off, data).ok());
    if (model.size() < off + data.size()) model.resize(off + data.size(), '\0');
    model.replace(off, data.size(), data);
  };
  auto truncate = [&](uint64_t size) {
    ASSERT_TRUE((*f)->Truncate(size).ok());
    model.resize(size, '\0');
  };
  auto check = [&](const char* when) {
    ASSERT_TRUE((*f)->Sync().ok());
    EXPECT_EQ(*(*f)->Size(), model.size()) << when;
    EXPECT_TRUE(ReadAll(**f, model.size()) == model) << when;
    Result<std::unique_ptr<File>> g = Connect()->Open(Seg("00000002.seg"), OpenMode::kRead);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(*(*g)->Size(), model.size()) << when;
    EXPECT_TRUE(ReadAll(**g, model.size()) == model) << when;
  };
  write(3 * kBuffer + 500, Pattern(1, 1000));  // a hole before it
  check("hole");
  write(100, Pattern(2, 2 * kBuffer));
  ASSERT_TRUE((*f)->Sync().ok());
  write(kBuffer, Pattern(3, 50));  // over the middle of a part
  check("overwrite");
  truncate(kBuffer + 20);  // into the overwrite
  check("cut");
  truncate(2 * kBuffer + 7);  // zeros to the new end
  check("extend");
  write(2 * kBuffer, "tail");
  truncate(0);
  write(10, "again");
  check("cut to zero and written again");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; ++i) {
    const uint64_t off = rng() % (3 * kBuffer);
    if (rng() % 8 == 0) {
      truncate(off);
    } else {
      write(off, Pattern(rng(), 1 + rng() % (kBuffer / 2)));
    }
    if (i % 10 == 9) check("random");
  }
}

// A create is exclusive and whole (its other parts first, part 1 last); a
// remove deletes every part; a listing names files whose part 1 exists.
TEST_F(S3EnvTest, CreateIsExclusiveAndWholeAndRemoveTakesEveryPart) {
  const std::string big = Pattern(11, 3 * kBuffer + 1);
  ASSERT_TRUE(env_->Create(Seg("00000003.seg"), big).ok());
  EXPECT_EQ(env_->Create(Seg("00000003.seg"), "x").status().code(), EEXIST);
  EXPECT_EQ(env_->CreateUnsynced(Seg("00000003.seg")).status().code(), EEXIST);
  EXPECT_EQ(RawKeys("00000003.seg"),
            (std::vector<std::string>{S3PartName(1, 'd', 0), S3PartName(2, 'd', kBuffer),
                                      S3PartName(3, 'd', 2 * kBuffer),
                                      S3PartName(4, 'd', 3 * kBuffer)}));
  Result<std::unique_ptr<File>> g = Connect()->Open(Seg("00000003.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(ReadAll(**g, big.size()), big);
  // What an interrupted create leaves (parts without part 1) is no file,
  // and a create of that name does not take it in.
  const std::string_view stale("stale");
  ASSERT_TRUE(raw_->Put(Key("00000005.seg") + "/" + S3PartName(2, 'd', 100),
                        std::span<const std::string_view>(&stale, 1))
                  .ok());
  EXPECT_EQ(env_->Open(Seg("00000005.seg"), OpenMode::kRead).status().code(), ENOENT);
  ASSERT_TRUE(env_->Create(Seg("00000004.seg"), "small").ok());
  Result<std::vector<std::string>> names = env_->List(root_ + "/segments");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"00000003.seg", "00000004.seg"}));
  ASSERT_TRUE(env_->Create(Seg("00000005.seg"), "fresh").ok());
  Result<std::unique_ptr<File>> h = env_->Open(Seg("00000005.seg"), OpenMode::kRead);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(ReadAll(**h, 5), "fresh");
  EXPECT_EQ(RawKeys("00000005.seg"), std::vector<std::string>{S3PartName(1, 'd', 0)});
  // Other paths stay local, and the local directories stay empty.
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/segments"));
  ASSERT_TRUE(env_->Create(root_ + "/other/local", "here").ok());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/other/local"));
  EXPECT_EQ(env_->KeyOf(root_ + "/other/local"), "");
  EXPECT_EQ(env_->KeyOf(Seg("00000003.seg")), Key("00000003.seg"));
  // Remove takes every part; a second remove is OK.
  ASSERT_TRUE(env_->Remove(Seg("00000003.seg")).ok());
  ASSERT_TRUE(env_->Remove(Seg("00000003.seg")).ok());
  EXPECT_EQ(env_->Open(Seg("00000003.seg"), OpenMode::kRead).status().code(), ENOENT);
  EXPECT_TRUE(RawKeys("00000003.seg").empty());
}

// Writes the gateway has not answered are staged while the file is open;
// what a killed process left, Connect() sends on.
TEST_F(S3EnvTest, StagedWritesOfAKilledProcessAreSentOn) {
  const std::string staging = root_ + "/staging";
  {
    std::shared_ptr<S3Env> env = Connect(staging);
    ASSERT_NE(env, nullptr);
    Result<std::unique_ptr<File>> f = env->Create(Seg("00000006.seg"), "head");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(Write(**f, 4, Pattern(1, 5000)).ok());
    const std::string log = staging + "/" + StagingName(Key("00000006.seg"));
    ASSERT_TRUE(std::filesystem::exists(log)) << log;
    EXPECT_EQ(std::filesystem::file_size(log), kStagedHeaderBytes + 5000);
    ASSERT_TRUE((*f)->Sync().ok());
    EXPECT_EQ(std::filesystem::file_size(log), 0u);
    f->reset();
    EXPECT_FALSE(std::filesystem::exists(log));
  }
  ASSERT_TRUE(env_->Create(Seg("00000007.seg"), std::string(100, 'h')).ok());
  const std::string b = Pattern(2, 3 * kBuffer);
  {
    std::string log = StagedRecord(100, b) + StagedRecord(50, "overwritten");
    const std::string torn = StagedRecord(0, std::string(64, 'x'));
    log += torn.substr(0, torn.size() - 10);
    std::FILE* out = std::fopen((staging + "/" + StagingName(Key("00000007.seg"))).c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(std::fwrite(log.data(), 1, log.size(), out), log.size());
    std::fclose(out);
  }
  std::shared_ptr<S3Env> env = Connect(staging);
  ASSERT_NE(env, nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(staging));
  const std::string want = std::string(50, 'h') + "overwritten" + std::string(39, 'h') + b;
  Result<std::unique_ptr<File>> f = env_->Open(Seg("00000007.seg"), OpenMode::kRead);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*(*f)->Size(), want.size());
  EXPECT_TRUE(ReadAll(**f, want.size()) == want);
}

// A bucket at its quota (the bed's, 1 MiB): the sync that needed the part
// fails with ENOSPC, naming a full bucket, and what was synced before stays
// whole for every reader.
TEST_F(S3EnvTest, AFullBucketIsEnospcAtTheSyncAndKeepsWhatWasSynced) {
  const char* full = std::getenv("CKPTFS_TEST_S3_FULL_BUCKET");
  ASSERT_TRUE(full != nullptr) << "run beside the bed: tests/mount/ceph_bed.py --s3 COMMAND";
  std::shared_ptr<S3Env> env = Connect("", full);
  ASSERT_NE(env, nullptr);
  Result<std::unique_ptr<File>> f = env->Create(Seg("00000001.seg"), "");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string kept = Pattern(11, 300 << 10);
  ASSERT_TRUE(Write(**f, 0, kept).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  // Past the quota: the write or, at the latest, the sync fails.
  const std::string more = Pattern(12, 2 << 20);
  Status s = Write(**f, kept.size(), more);
  if (s.ok()) s = (*f)->Sync();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ENOSPC) << s.ToString();
  EXPECT_NE(s.message().find("the bucket is full"), std::string::npos) << s.ToString();
  EXPECT_FALSE((*f)->Sync().ok());  // the file stays failed
  std::shared_ptr<S3Env> other = Connect("", full);
  ASSERT_NE(other, nullptr);
  Result<std::unique_ptr<File>> g = other->Open(Seg("00000001.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_GE(*(*g)->Size(), kept.size());
  std::string head(kept.size(), '\0');
  ASSERT_EQ(*(*g)->ReadAt(0, kept.size(), head.data()), kept.size());
  EXPECT_TRUE(head == kept);
  // Removing the file gives the bucket its room back.
  f->reset();
  g->reset();
  ASSERT_TRUE(other->Remove(Seg("00000001.seg")).ok());
}

TEST_F(S3EnvTest, AMissingBucketAndWrongKeysAreNamed) {
  S3Options o;
  o.where = S3Location{"no-such-bucket", ""};
  o.endpoint = endpoint_;
  o.root = root_;
  o.local = Env::Posix();
  o.op_timeout_s = 10;
  Result<std::shared_ptr<S3Env>> env = S3Env::Connect(o);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), ENOENT);
  EXPECT_NE(env.status().message().find("no-such-bucket"), std::string::npos);
  S3Credentials wrong;
  wrong.access_key = "NOSUCHKEY";
  wrong.secret_key = "nosuchsecret";
  S3Client bad(endpoint_, bucket_, wrong, 10);
  EXPECT_EQ(bad.HeadBucket().code(), EACCES);
  // Nothing answering there: EIO once the timeout has passed.
  S3Client nobody("http://127.0.0.1:9", bucket_, wrong, 1);
  EXPECT_EQ(nobody.HeadBucket().code(), EIO);
}

}  // namespace
}  // namespace ckptfs::io
