// RadosEnv against a real cluster: run beside one by tests/mount/ceph_bed.py
// (ctest ceph.rados_env_test), which sets CEPH_CONF and
// CKPTFS_TEST_RADOS_POOL. Without them every test fails: this suite is
// only ever run beside the bed.
#include "io/rados_env.h"
#include "io/staging_log.h"

#include <gtest/gtest.h>
#include <rados/librados.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace ckptfs::io {
namespace {

constexpr uint64_t kStripe = 64 << 10;  // small stripes: files of many objects cheaply

std::string Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class RadosEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* pool = std::getenv("CKPTFS_TEST_RADOS_POOL");
    ASSERT_NE(pool, nullptr) << "run beside the bed: tests/mount/ceph_bed.py " << "COMMAND";
    pool_ = pool;
    root_ = std::filesystem::temp_directory_path() /
            ("ckptfs-rados-env-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_ + "/segments");
    std::filesystem::create_directories(root_ + "/other");
    prefix_ = "t" + std::to_string(std::random_device()()) + "/";
    env_ = Connect();
    ASSERT_NE(env_, nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::shared_ptr<RadosEnv> Connect(size_t write_buffer = 256 << 10,
                                    const std::string& staging = "") {
    RadosOptions o;
    o.staging = staging;
    o.where = RadosLocation{pool_, "env-test"};
    o.root = root_;
    o.dirs = {"segments"};
    o.prefix = prefix_;
    o.local = Env::Posix();
    o.stripe_bytes = kStripe;
    o.write_buffer = write_buffer;
    o.op_timeout_s = 20;
    Result<std::shared_ptr<RadosEnv>> env = RadosEnv::Connect(o);
    EXPECT_TRUE(env.ok()) << env.status().ToString();
    return env.ok() ? *env : nullptr;
  }
  // The size of object `oid` of the test's namespace, or -errno.
  int64_t RawObjectSize(const std::string& oid) {
    rados_t cluster = nullptr;
    rados_ioctx_t io = nullptr;
    int64_t out = -EIO;
    if (rados_create(&cluster, nullptr) == 0 && rados_conf_read_file(cluster, nullptr) == 0 &&
        rados_connect(cluster) == 0 && rados_ioctx_create(cluster, pool_.c_str(), &io) == 0) {
      rados_ioctx_set_namespace(io, "env-test");
      uint64_t size = 0;
      time_t mtime = 0;
      const int rc = rados_stat(io, oid.c_str(), &size, &mtime);
      out = rc < 0 ? rc : static_cast<int64_t>(size);
      rados_ioctx_destroy(io);
    }
    if (cluster != nullptr) rados_shutdown(cluster);
    return out;
  }
  std::string Seg(const std::string& name) { return root_ + "/segments/" + name; }
  std::string ReadAll(const File& f, uint64_t size) {
    std::string out(size, '\0');
    Result<size_t> n = f.ReadAt(0, size + 100, out.data());
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  std::string pool_, root_, prefix_;
  std::shared_ptr<RadosEnv> env_;
};

// Writes the cluster has not acknowledged are in the file's staging log
// while it is open, and gone from it once synced; the file closed, the log
// goes too.
TEST_F(RadosEnvTest, UnsentWritesAreStagedUntilTheClusterHasThem) {
  const std::string staging = root_ + "/staging";
  std::shared_ptr<RadosEnv> env = Connect(1 << 20, staging);
  ASSERT_NE(env, nullptr);
  ASSERT_TRUE(std::filesystem::is_directory(staging));
  Result<std::unique_ptr<File>> f = env->Create(Seg("00000009.seg"), "head");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string a = Pattern(1, 5000);
  const std::string_view piece(a);
  ASSERT_TRUE((*f)->WriteAt(4, std::span<const std::string_view>(&piece, 1)).ok());
  std::string name = prefix_ + "segments/00000009.seg";
  std::replace(name.begin(), name.end(), '/', '#');
  const std::string fixed = staging + "/" + name;
  ASSERT_TRUE(std::filesystem::exists(fixed)) << fixed;
  EXPECT_EQ(std::filesystem::file_size(fixed), kStagedHeaderBytes + a.size());
  ASSERT_TRUE((*f)->Sync().ok());
  EXPECT_EQ(std::filesystem::file_size(fixed), 0u);
  f->reset();
  EXPECT_FALSE(std::filesystem::exists(fixed));
}

// What a killed process left in its staging logs, Connect() sends on: the
// records in order (a later one over an earlier one), up to a torn one;
// the log of a file removed since is dropped.
TEST_F(RadosEnvTest, ConnectSendsOnWhatAKilledProcessStaged) {
  const std::string staging = root_ + "/staging";
  std::filesystem::create_directories(staging);
  ASSERT_TRUE(env_->Create(Seg("00000003.seg"), std::string(100, 'h')).ok());
  const std::string b = Pattern(2, 3 * kStripe);  // past two object boundaries
  std::string name = prefix_ + "segments/00000003.seg";
  std::replace(name.begin(), name.end(), '/', '#');
  {
    std::string log = StagedRecord(100, b) + StagedRecord(50, "overwritten") +
                      StagedRecord(100 + b.size(), "tail");
    // A torn record: its data cut short.
    const std::string torn = StagedRecord(0, std::string(64, 'x'));
    log += torn.substr(0, torn.size() - 10);
    std::FILE* out = std::fopen((staging + "/" + name).c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(std::fwrite(log.data(), 1, log.size(), out), log.size());
    std::fclose(out);
  }
  std::string gone = prefix_ + "segments/00000004.seg";
  std::replace(gone.begin(), gone.end(), '/', '#');
  {
    const std::string log = StagedRecord(0, "never");
    std::FILE* out = std::fopen((staging + "/" + gone).c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(std::fwrite(log.data(), 1, log.size(), out), log.size());
    std::fclose(out);
  }
  std::shared_ptr<RadosEnv> env = Connect(256 << 10, staging);
  ASSERT_NE(env, nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(staging));
  std::string want = std::string(50, 'h') + "overwritten" + std::string(39, 'h') + b + "tail";
  Result<std::unique_ptr<File>> f = env_->Open(Seg("00000003.seg"), OpenMode::kRead);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Size().ok());
  EXPECT_EQ(*(*f)->Size(), want.size());
  EXPECT_TRUE(ReadAll(**f, want.size()) == want);
  EXPECT_FALSE(env_->Open(Seg("00000004.seg"), OpenMode::kRead).ok());
}

TEST_F(RadosEnvTest, WritesGatherAndReadBackAcrossObjects) {
  Result<std::unique_ptr<File>> f = env_->Create(Seg("00000001.seg"), "header");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  // Appends of 1..8 KiB, past three stripes: the buffer sends them in
  // few operations, and a read of bytes still waiting sees them.
  std::string want = "header";
  const ObjectCounters before = env_->counters();
  std::mt19937_64 rng(7);
  while (want.size() < 3 * kStripe + 5000) {
    const std::string piece = Pattern(rng(), 1024 + rng() % 7168);
    const std::string_view pieces[] = {piece.substr(0, 10), std::string_view(piece).substr(10)};
    ASSERT_TRUE((*f)->WriteAt(want.size(), pieces).ok());
    want += piece;
  }
  const uint64_t appends = want.size() / 4500;
  EXPECT_LT(env_->counters().writes - before.writes, appends / 20);
  ASSERT_EQ(*(*f)->Size(), want.size());
  EXPECT_EQ(ReadAll(**f, want.size()), want);  // sends what waits first
  ASSERT_TRUE((*f)->Sync().ok());
  // Another client (another host) sees every synced byte.
  std::shared_ptr<RadosEnv> other = Connect();
  Result<std::unique_ptr<File>> g = other->Open(Seg("00000001.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*(*g)->Size(), want.size());
  EXPECT_EQ(ReadAll(**g, want.size()), want);
  // A read across an object boundary, and one past the end.
  std::string mid(300, '\0');
  ASSERT_EQ(*(*g)->ReadAt(kStripe - 100, 300, mid.data()), 300u);
  EXPECT_EQ(mid, want.substr(kStripe - 100, 300));
  ASSERT_EQ(*(*g)->ReadAt(want.size() - 10, 300, mid.data()), 10u);
  ASSERT_EQ(*(*g)->ReadAt(want.size() + 10, 300, mid.data()), 0u);
  // More bytes from the writer: the reader's Size() asks afresh.
  const std::string more = Pattern(9, 2 * kStripe);
  ASSERT_TRUE((*f)->WriteAt(want.size(), std::span<const std::string_view>(
                                             std::array<std::string_view, 1>{more}))
                  .ok());
  ASSERT_TRUE((*f)->Sync().ok());
  want += more;
  EXPECT_EQ(*(*g)->Size(), want.size());
  EXPECT_EQ(ReadAll(**g, want.size()), want);
}

TEST_F(RadosEnvTest, HolesReadAsZerosAndTruncateCutsAndExtends) {
  Result<std::unique_ptr<File>> f = env_->CreateUnsynced(Seg("00000002.seg"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::string tail = Pattern(3, 1000);
  const uint64_t far = 2 * kStripe + 500;  // objects 0 and 1 never written
  ASSERT_TRUE((*f)->WriteAt(far, std::span<const std::string_view>(
                                     std::array<std::string_view, 1>{tail}))
                  .ok());
  ASSERT_TRUE((*f)->Sync().ok());
  std::string want(far, '\0');
  want += tail;
  Result<std::unique_ptr<File>> g = Connect()->Open(Seg("00000002.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*(*g)->Size(), want.size());
  EXPECT_EQ(ReadAll(**g, want.size()), want);
  // Cut into the first object: the others go, the size follows.
  ASSERT_TRUE((*f)->Truncate(100).ok());
  EXPECT_EQ(*(*g)->Size(), 100u);
  EXPECT_EQ(ReadAll(**g, 100), want.substr(0, 100));
  // Extend past two objects: zeros to the new end.
  ASSERT_TRUE((*f)->Truncate(kStripe + 7).ok());
  EXPECT_EQ(*(*g)->Size(), kStripe + 7);
  EXPECT_EQ(ReadAll(**g, kStripe + 7), std::string(kStripe + 7, '\0'));
  // Cut to zero and write again from the start.
  ASSERT_TRUE((*f)->Truncate(0).ok());
  EXPECT_EQ(*(*g)->Size(), 0u);
}

TEST_F(RadosEnvTest, CreateIsExclusiveAndWholeAndRemoveTakesEveryObject) {
  const std::string big = Pattern(11, 3 * kStripe + 1);
  ASSERT_TRUE(env_->Create(Seg("00000003.seg"), big).ok());
  Result<std::unique_ptr<File>> again = env_->Create(Seg("00000003.seg"), "x");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), EEXIST);
  EXPECT_EQ(env_->CreateUnsynced(Seg("00000003.seg")).status().code(), EEXIST);
  Result<std::unique_ptr<File>> g = Connect()->Open(Seg("00000003.seg"), OpenMode::kRead);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(ReadAll(**g, big.size()), big);
  // Four objects: the first, which counts them, and three more.
  EXPECT_EQ(RawObjectSize(prefix_ + "segments/00000003.seg"), static_cast<int64_t>(kStripe));
  EXPECT_EQ(RawObjectSize(prefix_ + "segments/00000003.seg@3"), 1);
  ASSERT_TRUE(env_->Create(Seg("00000004.seg"), "small").ok());
  // The listing names files, not their objects; other paths stay local.
  Result<std::vector<std::string>> names = env_->List(root_ + "/segments");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"00000003.seg", "00000004.seg"}));
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/segments"));
  ASSERT_TRUE(env_->Create(root_ + "/other/local", "here").ok());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/other/local"));
  EXPECT_EQ(env_->ObjectOf(root_ + "/other/local"), "");
  EXPECT_EQ(env_->ObjectOf(Seg("00000003.seg")), prefix_ + "segments/00000003.seg");
  // Remove takes all four objects; a second remove is OK.
  ASSERT_TRUE(env_->Remove(Seg("00000003.seg")).ok());
  ASSERT_TRUE(env_->Remove(Seg("00000003.seg")).ok());
  EXPECT_EQ(env_->Open(Seg("00000003.seg"), OpenMode::kRead).status().code(), ENOENT);
  for (int k = 1; k < 4; ++k) {
    EXPECT_EQ(RawObjectSize(prefix_ + "segments/00000003.seg@" + std::to_string(k)), -ENOENT) << k;
  }
  names = env_->List(root_ + "/segments");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"00000004.seg"}));
}

TEST_F(RadosEnvTest, AMissingPoolIsNamed) {
  RadosOptions o;
  o.where = RadosLocation{"no-such-pool", ""};
  o.root = root_;
  o.local = Env::Posix();
  o.op_timeout_s = 10;
  Result<std::shared_ptr<RadosEnv>> env = RadosEnv::Connect(o);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), ENOENT);
  EXPECT_NE(env.status().message().find("no-such-pool"), std::string::npos)
      << env.status().message();
}

TEST(RadosUrlTest, PoolAndNamespace) {
  Result<RadosLocation> a = ParseRadosUrl("rados://ckpt");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->pool, "ckpt");
  EXPECT_EQ(a->ns, "");
  Result<RadosLocation> b = ParseRadosUrl("rados://ckpt/team");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->pool, "ckpt");
  EXPECT_EQ(b->ns, "team");
  for (const char* bad : {"rados://", "rados:///ns", "rados://p/", "rados://p/a/b", "s3://b", "p"}) {
    EXPECT_EQ(ParseRadosUrl(bad).status().code(), EINVAL) << bad;
  }
}

}  // namespace
}  // namespace ckptfs::io
