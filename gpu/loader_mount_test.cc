// The loader against real ckptfs mounts: files written through the mount are
// loaded with the host sink directly from the segment files (asserted), and
// through the path (a plain directory, and direct reads turned off), and
// compared byte for byte. Also: compression, holes, overwritten windows,
// files whose extents take several xattr pages, files in data files, the
// xattr's interface, corruption, safetensors and the `ckptfs gpu-load`
// command.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/format.h"
#include "gpu/device.h"
#include "gpu/file_layout.h"
#include "gpu/loader.h"
#include "gpu/safetensors.h"
#include "gpu/test_mount.h"
#include "gpu/test_util.h"

namespace ckptfs::gpu {
namespace {

using testing::CompressibleBytes;
using testing::RandomBytes;
using testing::TempDir;
using testing::TestMount;

// Loads [ranges] of `path` into a fresh buffer of `dest_size` bytes.
Result<LoadStats> LoadInto(const std::string& path, const LoadOptions& o,
                           const std::vector<Range>& ranges, uint64_t dest_size, std::string* out) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> f, SourceFile::Open(path, o));
  out->assign(dest_size, '?');
  HostSink sink(out->data(), out->size());
  return f->Load(ranges, &sink);
}

Result<LoadStats> LoadWhole(const std::string& path, const LoadOptions& o, std::string* out) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status(ec.value(), "size of " + path);
  return LoadInto(path, o, {Range{0, size, 0}}, size, out);
}

LoadOptions Direct() { return LoadOptions(); }
LoadOptions NoDirect() {
  LoadOptions o;
  o.direct = false;
  return o;
}

class MountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::MountUnavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    store_ = tmp_.path() + "/store";
    mnt_path_ = tmp_.path() + "/mnt";
    plain_ = tmp_.path() + "/plain";
    std::filesystem::create_directories(plain_);
    Remount(MountOptions());
  }
  void TearDown() override {
    if (mount_ && !mount_->Unmount()) tmp_.Keep();  // never delete through a mount
    mount_.reset();
  }
  // Each write(2) reaches the store as it is made, so that the layouts the
  // tests count (records, extents, holes to the byte) follow the writes.
  virtual std::string MountOptions() const { return "no_writeback_cache"; }

  void Remount(const std::string& options) {
    if (mount_) {
      ASSERT_TRUE(mount_->Unmount());
    }
    mount_.reset();
    std::string error;
    mount_ = TestMount::Mount(store_, mnt_path_, options, &error);
    ASSERT_TRUE(mount_ != nullptr) << error;
  }
  void Unmount() {
    ASSERT_TRUE(mount_->Unmount());
    mount_.reset();
  }

  // Writes `data` as MOUNT/name and as a plain copy; remembers it.
  void Put(const std::string& name, const std::string& data) {
    ASSERT_TRUE(testing::WriteFile(mnt(name), data)) << name;
    ASSERT_TRUE(testing::WriteFile(plain_ + "/" + name, data)) << name;
    files_[name] = data;
  }
  std::string mnt(const std::string& name) const { return mnt_path_ + "/" + name; }

  // Every remembered file, loaded whole: directly from the mount (asserted),
  // with direct reads off, and from the plain copy.
  void CheckAllFiles(const LoadOptions& direct_options = Direct()) {
    for (const auto& [name, want] : files_) {
      std::string got;
      Result<LoadStats> s = LoadWhole(mnt(name), direct_options, &got);
      ASSERT_TRUE(s.ok()) << name << ": " << s.status().ToString();
      EXPECT_TRUE(s->direct) << name << ": " << s->fallback_reason;
      EXPECT_EQ(s->bytes, want.size());
      ASSERT_TRUE(got == want) << name << " differs (direct)";

      s = LoadWhole(mnt(name), NoDirect(), &got);
      ASSERT_TRUE(s.ok()) << name << ": " << s.status().ToString();
      EXPECT_FALSE(s->direct);
      EXPECT_EQ(s->fallback_reason, "direct reads turned off");
      ASSERT_TRUE(got == want) << name << " differs (through the mount)";

      s = LoadWhole(plain_ + "/" + name, Direct(), &got);
      ASSERT_TRUE(s.ok()) << name << ": " << s.status().ToString();
      EXPECT_FALSE(s->direct);
      EXPECT_NE(s->fallback_reason.find("not on a ckptfs mount"), std::string::npos);
      ASSERT_TRUE(got == want) << name << " differs (plain file)";
    }
  }

  TempDir tmp_;
  std::string store_, mnt_path_, plain_;
  std::unique_ptr<TestMount> mount_;
  std::map<std::string, std::string> files_;
};

TEST_F(MountTest, DirectAndFallbackLoadsMatchEveryByte) {
  const size_t sizes[] = {
      0, 1, 100, 4096, 4097, 65536, 1 << 20, (1 << 20) + 1, (5 << 20) + 123, (40 << 20) + 7};
  for (size_t n : sizes) Put("f" + std::to_string(n), RandomBytes(n, n));

  // Overwritten in the middle: the old records survive as windows.
  std::string over = RandomBytes(3 << 20, 1);
  Put("over", over);
  const std::string patch = RandomBytes((1 << 20) + 100, 2);
  {
    int fd = open(mnt("over").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, patch.data(), patch.size(), (1 << 20) + 5), ssize_t(patch.size()));
    close(fd);
  }
  over.replace((1 << 20) + 5, patch.size(), patch);
  files_["over"] = over;
  ASSERT_TRUE(testing::WriteFile(plain_ + "/over", over));

  // Sparse: data, a hole, data, and a hole at the end.
  std::string sparse(30 << 20, '\0');
  {
    const std::string a = RandomBytes(1000, 3), b = RandomBytes(5000, 4);
    int fd = open(mnt("sparse").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, a.data(), a.size(), 0), ssize_t(a.size()));
    ASSERT_EQ(pwrite(fd, b.data(), b.size(), 20 << 20), ssize_t(b.size()));
    ASSERT_EQ(ftruncate(fd, 30 << 20), 0);
    close(fd);
    sparse.replace(0, a.size(), a);
    sparse.replace(20 << 20, b.size(), b);
  }
  files_["sparse"] = sparse;
  ASSERT_TRUE(testing::WriteFile(plain_ + "/sparse", sparse));

  CheckAllFiles();

  // What the direct loads did.
  std::string got;
  Result<LoadStats> s = LoadWhole(mnt("f100"), Direct(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->inline_bytes, 100u);
  EXPECT_EQ(s->records, 0u);
  s = LoadWhole(mnt("f" + std::to_string((40 << 20) + 7)), Direct(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->records, 41u);  // records of at most 1 MiB
  EXPECT_EQ(s->compressed_records, 0u);
  EXPECT_EQ(s->hole_bytes, 0u);
  s = LoadWhole(mnt("sparse"), Direct(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->hole_bytes, (30u << 20) - 6000);

  // The same with small staging buffers, more readers, coalescing overridden.
  LoadOptions small;
  small.buffer_bytes = 2 << 20;
  small.buffers = 2;
  small.reader_threads = 3;
  small.coalesce_gap = 1 << 20;
  small.coalesce_max = 8 << 20;
  CheckAllFiles(small);
  LoadOptions no_coalesce;
  no_coalesce.coalesce_gap = 0;
  no_coalesce.buffers = 1;
  no_coalesce.reader_threads = 1;
  CheckAllFiles(no_coalesce);
}

TEST_F(MountTest, RangeListsDirectAndThroughTheMount) {
  std::string big = RandomBytes((9 << 20) + 333, 5);
  Put("big", big);
  Put("small", RandomBytes(1000, 6));
  std::mt19937_64 rng(1);
  for (const std::string name : {"big", "small"}) {
    const std::string& want = files_[name];
    for (int round = 0; round < 20; ++round) {
      std::vector<Range> ranges;
      uint64_t dest = 0;
      for (int i = 0, n = 1 + rng() % 10; i < n; ++i) {
        const uint64_t a = rng() % want.size();
        const uint64_t len =
            std::min<uint64_t>(want.size() - a, rng() % 2 ? rng() % 50 : rng() % (3 << 20));
        ranges.push_back(Range{a, len, dest});
        dest += len;
      }
      std::string expect;
      for (const Range& r : ranges) expect += want.substr(r.file_offset, r.length);
      for (bool direct : {true, false}) {
        std::string got;
        Result<LoadStats> s =
            LoadInto(mnt(name), direct ? Direct() : NoDirect(), ranges, dest, &got);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        EXPECT_EQ(s->direct, direct);
        ASSERT_TRUE(got == expect) << name << " round " << round << " direct " << direct;
      }
    }
  }
  // Past the end: refused.
  std::string got;
  EXPECT_EQ(LoadInto(mnt("small"), Direct(), {Range{900, 101, 0}}, 200, &got).status().code(),
            EINVAL);
}

TEST_F(MountTest, ManyExtentsTakeSeveralXattrPages) {
  // Each write is its own record and extent: 1500 extents, several pages.
  std::string want;
  int fd = open(mnt("many").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 1500; ++i) {
    const std::string piece = RandomBytes(3000 + i % 7, i);
    ASSERT_EQ(write(fd, piece.data(), piece.size()), ssize_t(piece.size()));
    want += piece;
  }
  close(fd);
  files_["many"] = want;
  ASSERT_TRUE(testing::WriteFile(plain_ + "/many", want));
  auto f = SourceFile::Open(mnt("many"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->direct()) << (*f)->fallback_reason();
  EXPECT_GT((*f)->layout().pages, 3);
  EXPECT_GE((*f)->layout().extents.size(), 1500u);  // the kernel may split writes further
  CheckAllFiles();
}

TEST_F(MountTest, ExtentsXattrInterface) {
  Put("data", RandomBytes(3 << 20, 7));
  std::filesystem::create_directories(mnt("dir"));
  const std::string path = mnt("data");
  const std::string name_str(format::kExtentsXattr);
  const char* name = name_str.c_str();

  // Size probe, then the value; a buffer one byte short is ERANGE.
  const ssize_t size = getxattr(path.c_str(), name, nullptr, 0);
  ASSERT_GT(size, 0) << strerror(errno);
  std::string value(size, '\0');
  ASSERT_EQ(getxattr(path.c_str(), name, value.data(), value.size()), size);
  std::string small(size - 1, '\0');
  EXPECT_EQ(getxattr(path.c_str(), name, small.data(), small.size()), -1);
  EXPECT_EQ(errno, ERANGE);

  const nlohmann::json j = nlohmann::json::parse(value);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["size"], 3u << 20);
  EXPECT_EQ(j["segments_dir"], std::filesystem::canonical(store_).string() + "/segments");
  EXPECT_EQ(j["data_dir"], std::filesystem::canonical(store_).string() + "/data");
  EXPECT_EQ(j["coalesce_gap"], 256u << 10);
  EXPECT_EQ(j["coalesce_max"], 1u << 20);
  EXPECT_EQ(j["extents"].size(), 3u);
  EXPECT_TRUE(j["next"].is_null());

  // The mount's run-time setting shows up.
  ASSERT_TRUE(testing::WriteFile(mnt(".ckptfs/config"), "coalesce_gap=12345\n"));
  value.assign(65536, '\0');
  const ssize_t n = getxattr(path.c_str(), name, value.data(), value.size());
  ASSERT_GT(n, 0);
  EXPECT_EQ(nlohmann::json::parse(value.substr(0, n))["coalesce_gap"], 12345);

  // A continuation page by name; junk suffixes are not attributes.
  const std::string page = std::string(name) + "." + std::to_string(1 << 20);
  ASSERT_GT(getxattr(path.c_str(), page.c_str(), value.data(), value.size()), 0);
  EXPECT_EQ(getxattr(path.c_str(), (std::string(name) + ".x").c_str(), value.data(), value.size()),
            -1);
  EXPECT_EQ(errno, ENODATA);

  // Not listed, not settable, not removable; directories have none.
  std::string list(4096, '\0');
  const ssize_t ln = listxattr(path.c_str(), list.data(), list.size());
  ASSERT_GE(ln, 0);
  EXPECT_EQ(std::string(list.data(), ln).find("ckptfs"), std::string::npos);
  EXPECT_EQ(setxattr(path.c_str(), name, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(removexattr(path.c_str(), name), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(getxattr(mnt("dir").c_str(), name, value.data(), value.size()), -1);
  EXPECT_EQ(errno, ENODATA);
  // Other user attributes still work.
  EXPECT_EQ(setxattr(path.c_str(), "user.other", "x", 1, 0), 0);
  EXPECT_EQ(getxattr(path.c_str(), "user.other", value.data(), value.size()), 1);
}

TEST_F(MountTest, CorruptRecordFailsTheDirectLoad) {
  Put("victim", RandomBytes(3 << 20, 8));
  Put("bystander", RandomBytes(2 << 20, 9));
  // Where the second record of the victim lies.
  std::string seg_path;
  uint64_t at = 0;
  {
    auto f = SourceFile::Open(mnt("victim"));
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->direct());
    const LayoutExtent& e = (*f)->layout().extents.at(1);
    ASSERT_EQ(e.kind, LayoutExtent::Kind::kRecord);
    seg_path =
        (*f)->layout().segments_dir + "/" +
        std::filesystem::path(format::SegmentFileName(e.value.segment_id)).filename().string();
    at = e.value.record_offset + format::kRecordHeaderSize + 4321;
  }
  Unmount();
  ASSERT_TRUE(testing::FlipByte(seg_path, at, 0x01));
  Remount("");

  std::string got;
  Result<LoadStats> s = LoadWhole(mnt("victim"), Direct(), &got);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), EIO);
  EXPECT_NE(s.status().message().find("record payload checksum mismatch"), std::string::npos)
      << s.status().ToString();
  // Through the mount the daemon finds it too: EIO, never wrong bytes.
  s = LoadWhole(mnt("victim"), NoDirect(), &got);
  EXPECT_EQ(s.status().code(), EIO);
  // A range away from the bad record, and other files, still load.
  s = LoadInto(mnt("victim"), Direct(), {Range{0, 1000, 0}}, 1000, &got);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(got, files_["victim"].substr(0, 1000));
  s = LoadWhole(mnt("bystander"), Direct(), &got);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(got == files_["bystander"]);
}

// A file written past data_file_min (64 MiB by default) lies in its data
// file; a part overwritten below its end lies in a segment.
TEST_F(MountTest, DataFileBlocksLoadDirectlyAndAreVerified) {
  constexpr uint64_t kMiB = 1 << 20;
  std::string big = RandomBytes(70 * kMiB + 12345, 31);
  Put("big", big);
  const std::string patch = RandomBytes(5000, 32);
  {
    int fd = open(mnt("big").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, patch.data(), patch.size(), 10 * kMiB + 77),
              static_cast<ssize_t>(patch.size()));
    close(fd);
  }
  big.replace(10 * kMiB + 77, patch.size(), patch);
  ASSERT_TRUE(testing::WriteFile(plain_ + "/big", big));
  files_["big"] = big;
  CheckAllFiles();

  std::string data_path;
  LayoutExtent victim;
  {
    auto f = SourceFile::Open(mnt("big"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->direct()) << (*f)->fallback_reason();
    const FileLayout& l = (*f)->layout();
    EXPECT_EQ(l.data_dir, std::filesystem::canonical(store_).string() + "/data");
    data_path = DataFilePath(l);
    uint64_t in_data_file = 0;
    bool found = false;
    for (const LayoutExtent& e : l.extents) {
      if (e.kind != LayoutExtent::Kind::kDataFile) continue;
      in_data_file += e.value.length;
      if (e.file_offset <= 66 * kMiB && 66 * kMiB < e.file_offset + e.value.length) {
        victim = e;
        found = true;
      }
    }
    EXPECT_GT(in_data_file, 64 * kMiB);
    ASSERT_TRUE(found);
    std::string got(big.size(), '?');
    HostSink sink(got.data(), got.size());
    Result<LoadStats> s = (*f)->LoadAll(&sink);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_GT(s->data_file_blocks, 60u);
    EXPECT_GE(s->records, 1u);  // the patch
    ASSERT_TRUE(got == big);
  }
  // Ranges across the patch, the data file's blocks and its end.
  std::string got;
  const std::vector<Range> ranges = {Range{10 * kMiB, 10000, 0}, Range{66 * kMiB - 3, kMiB, 10000},
                                     Range{big.size() - 20, 20, 10000 + kMiB}};
  Result<LoadStats> s = LoadInto(mnt("big"), Direct(), ranges, 10000 + kMiB + 20, &got);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->direct);
  for (const Range& r : ranges) {
    EXPECT_TRUE(got.substr(r.dest_offset, r.length) == big.substr(r.file_offset, r.length));
  }

  // One byte of the block that holds byte 66 MiB, changed on disk.
  Unmount();
  ASSERT_TRUE(testing::FlipByte(data_path, victim.value.record_offset + 4321, 0x01));
  Remount("");
  s = LoadWhole(mnt("big"), Direct(), &got);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), EIO);
  const std::string range =
      "data file bytes [" + std::to_string(victim.value.record_offset) + ", " +
      std::to_string(victim.value.record_offset + victim.value.stored_len) + "): checksum mismatch";
  EXPECT_NE(s.status().message().find(range), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find(data_path), std::string::npos) << s.status().ToString();
  // Through the mount the daemon finds it too: EIO, never wrong bytes.
  s = LoadWhole(mnt("big"), NoDirect(), &got);
  EXPECT_EQ(s.status().code(), EIO);
  // Other blocks still load.
  s = LoadInto(mnt("big"), Direct(), {Range{0, 1000, 0}}, 1000, &got);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(got, big.substr(0, 1000));
}

TEST_F(MountTest, SafetensorsIntoOneAllocation) {
  using testing::TestTensor;
  const std::vector<TestTensor> tensors = {
      TestTensor{"embed", "F32", {4096, 1100}, RandomBytes(4096 * 1100 * 4, 10)},  // > 16 MiB
      TestTensor{"bias", "BF16", {1000}, RandomBytes(2000, 11)},
      TestTensor{"step", "I64", {}, RandomBytes(8, 12)},
      TestTensor{"mask", "BOOL", {0}, ""},
      TestTensor{"zeros", "F16", {300000}, std::string(600000, '\0')},
      TestTensor{"tiny", "U8", {3}, "abc"}};
  Put("model.safetensors", testing::BuildSafetensors(tensors, {{"format", "pt"}}));

  for (const std::string& path : {mnt("model.safetensors"), plain_ + "/model.safetensors"}) {
    for (bool direct : {true, false}) {
      auto l = LoadSafetensors(path, -1, direct ? Direct() : NoDirect());
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      const bool on_mount = path.rfind(mnt_path_, 0) == 0;
      EXPECT_EQ((*l)->stats().direct, direct && on_mount) << (*l)->stats().fallback_reason;
      EXPECT_EQ((*l)->header().metadata.at("format"), "pt");
      ASSERT_EQ((*l)->tensors().size(), tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorInfo& t = (*l)->tensors()[i];
        EXPECT_EQ(t.name, tensors[i].name);  // data order = the order written
        EXPECT_EQ(t.dtype, tensors[i].dtype);
        EXPECT_EQ(t.shape, tensors[i].shape);
        ASSERT_EQ(t.nbytes(), tensors[i].data.size());
        EXPECT_TRUE(std::string(static_cast<char*>((*l)->data(i)), t.nbytes()) == tensors[i].data)
            << t.name;
      }
    }
  }
}

class CompressedMountTest : public MountTest {
 protected:
  std::string MountOptions() const override { return "compression=3"; }
};

TEST_F(CompressedMountTest, ZstdRecordsDecodeOnTheCpu) {
  Put("zeros", std::string(20 << 20, '\0'));
  Put("pattern", CompressibleBytes((7 << 20) + 5, 1));
  std::string mixed;
  for (int i = 0; i < 9; ++i) {
    mixed += i % 2 ? RandomBytes(1 << 20, i) : CompressibleBytes(1 << 20, i);
  }
  mixed += CompressibleBytes(17, 3);
  Put("mixed", mixed);
  Put("small", CompressibleBytes(10000, 2));  // over inline_max: one zstd record
  CheckAllFiles();

  std::string got;
  Result<LoadStats> s = LoadWhole(mnt("mixed"), Direct(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->compressed_records, 5u);
  EXPECT_LT(s->compressed_records, s->records);  // random MiBs stay raw
  EXPECT_LT(s->backing_bytes, mixed.size());
  s = LoadWhole(mnt("zeros"), Direct(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->compressed_records, 20u);
  EXPECT_EQ(s->compressed_records, s->records);
  EXPECT_LT(s->backing_bytes, 1u << 20);

  // Windows of compressed records, through range lists.
  std::vector<Range> ranges = {
      {123, 1000, 0}, {(1 << 20) - 10, 20, 1000}, {(4 << 20) + 7, 3 << 20, 1020}};
  std::string want;
  for (const Range& r : ranges) want += mixed.substr(r.file_offset, r.length);
  s = LoadInto(mnt("mixed"), Direct(), ranges, want.size(), &got);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(got == want);
}

// `ckptfs gpu-load` end to end (host memory; --device per the build).
TEST_F(MountTest, GpuLoadCommand) {
  Put("a.bin", RandomBytes(5 << 20, 1));
  Put("m.safetensors", testing::BuildSafetensors({{"w", "F32", {1000}, RandomBytes(4000, 2)}}));
  std::string out;
  ASSERT_EQ(testing::RunCommand(
                {CKPTFS_BIN, "gpu-load", "--host", mnt("a.bin"), mnt("m.safetensors")}, &out),
            0)
      << out;
  EXPECT_NE(out.find("a.bin: 5.0 MiB (5242880 bytes) to host"), std::string::npos) << out;
  EXPECT_NE(out.find("GB/s, direct: "), std::string::npos) << out;
  EXPECT_NE(out.find("records verified (0 zstd)"), std::string::npos) << out;
  EXPECT_NE(out.find("total:"), std::string::npos) << out;

  ASSERT_EQ(testing::RunCommand(
                {CKPTFS_BIN, "gpu-load", "--host", "--no-direct", "--json", mnt("a.bin")}, &out),
            0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["bytes"], 5u << 20);
  EXPECT_EQ(j[0]["direct"], false);
  EXPECT_EQ(j[0]["fallback_reason"], "direct reads turned off");

  ASSERT_EQ(
      testing::RunCommand(
          {CKPTFS_BIN, "gpu-load", "--host", "--safetensors", plain_ + "/m.safetensors"}, &out),
      0)
      << out;
  EXPECT_NE(out.find("1 tensors"), std::string::npos) << out;
  EXPECT_NE(out.find("fallback through the file: not on a ckptfs mount"), std::string::npos) << out;

  EXPECT_EQ(testing::RunCommand({CKPTFS_BIN, "gpu-load", "--host", mnt("missing")}, &out), 1);
  EXPECT_NE(out.find("No such file"), std::string::npos) << out;

  const int rc = testing::RunCommand({CKPTFS_BIN, "gpu-load", "--device", "0", mnt("a.bin")}, &out);
  if (!CudaBuilt()) {
    EXPECT_EQ(rc, 1);
    EXPECT_NE(out.find("built without CUDA; use --host"), std::string::npos) << out;
  } else {
    Result<int> count = CudaDeviceCount();
    if (!count.ok() || *count == 0) {
      EXPECT_EQ(rc, 1) << out;  // no GPU: a clear error, not a crash
      EXPECT_NE(out.find("--host"), std::string::npos) << out;
    } else {
      EXPECT_EQ(rc, 0) << out;
      EXPECT_NE(out.find("to cuda:0"), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace ckptfs::gpu
