// The CUDA device sink (built only with CUDA). Every test skips itself when
// the machine has no GPU (cudaGetDeviceCount fails or finds none); otherwise
// it loads into device memory and compares the bytes copied back.
#include "gpu/device.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpu/ckptfs_loader.h"
#include "gpu/loader.h"
#include "gpu/safetensors.h"
#include "gpu/test_mount.h"
#include "gpu/test_util.h"

namespace ckptfs::gpu {
namespace {

using testing::CompressibleBytes;
using testing::RandomBytes;
using testing::TempDir;

// Device memory freed on scope exit.
struct DeviceBuffer {
  DeviceBuffer(int device, uint64_t bytes) : device(device), bytes(bytes) {
    Result<void*> p = DeviceAlloc(device, bytes);
    if (p.ok()) ptr = *p;
  }
  ~DeviceBuffer() { DeviceFree(device, ptr); }
  std::string ToHost() const {
    std::string out(bytes, '\0');
    EXPECT_TRUE(CopyToHost(device, out.data(), ptr, bytes).ok());
    return out;
  }
  int device;
  uint64_t bytes;
  void* ptr = nullptr;
};

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<int> n = CudaDeviceCount();
    if (!n.ok()) GTEST_SKIP() << "no usable CUDA driver: " << n.status().ToString();
    if (*n == 0) GTEST_SKIP() << "no GPU on this machine";
    Result<std::unique_ptr<Sink>> s = MakeDeviceSink(0);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sink_ = std::move(*s);
  }

  // Loads ranges of `path` into a device buffer of `size` and returns it as
  // host bytes. The buffer first holds `background` (or 0x5a bytes), so
  // zeros written for holes are seen.
  std::string LoadToDevice(const std::string& path, const LoadOptions& o, std::vector<Range> ranges,
                           uint64_t size, bool* direct = nullptr) {
    DeviceBuffer buf(0, size);
    EXPECT_NE(buf.ptr, nullptr);
    const std::string fill(size, '\x5a');
    // Fill it through the sink itself, from a plain file.
    const std::string fill_path = tmp_.path() + "/fill";
    EXPECT_TRUE(testing::WriteFile(fill_path, fill));
    sink_->SetDestination(buf.ptr, size);
    EXPECT_TRUE(LoadFile(fill_path, sink_.get()).ok());
    auto f = SourceFile::Open(path, o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return "";
    if (ranges.empty()) ranges = {Range{0, (*f)->size(), 0}};
    Result<LoadStats> s = (*f)->Load(ranges, sink_.get());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (direct) *direct = s.ok() && s->direct;
    sink_->SetDestination(nullptr, 0);
    return buf.ToHost();
  }

  TempDir tmp_;
  std::unique_ptr<Sink> sink_;
};

TEST_F(DeviceTest, PlainFileThroughThePipeline) {
  const std::string data = RandomBytes((37 << 20) + 11, 1);
  const std::string path = tmp_.path() + "/plain";
  ASSERT_TRUE(testing::WriteFile(path, data));
  LoadOptions small;
  small.buffer_bytes = 1 << 20;
  small.buffers = 3;
  for (const LoadOptions& o : {LoadOptions(), small}) {
    bool direct = true;
    EXPECT_TRUE(LoadToDevice(path, o, {}, data.size(), &direct) == data);
    EXPECT_FALSE(direct);
  }
  // Ranges, packed.
  std::string want = data.substr(3, 1000) + data.substr(20 << 20, 5 << 20);
  std::string got = LoadToDevice(path, LoadOptions(),
                                 {Range{3, 1000, 0}, Range{20 << 20, 5 << 20, 1000}}, want.size());
  EXPECT_TRUE(got == want);
}

TEST_F(DeviceTest, CAbiIntoDeviceMemory) {
  const std::string data = RandomBytes(3 << 20, 2);
  const std::string path = tmp_.path() + "/c";
  ASSERT_TRUE(testing::WriteFile(path, data));
  void* p = ckptfs_alloc(0, data.size());
  ASSERT_NE(p, nullptr) << ckptfs_last_error();
  ckptfs_load_stats st;
  ASSERT_EQ(ckptfs_load_file(path.c_str(), 0, p, data.size(), 0, &st), 0) << ckptfs_last_error();
  std::string back(data.size(), '\0');
  ASSERT_TRUE(CopyToHost(0, back.data(), p, data.size()).ok());
  EXPECT_TRUE(back == data);
  ckptfs_free(0, p);
  EXPECT_EQ(ckptfs_load_file(path.c_str(), 99, p, data.size(), 0, nullptr), -ENODEV);
}

// The direct path into device memory, on a real mount (skipped without FUSE).
TEST_F(DeviceTest, DirectFromAMount) {
  const std::string why = testing::MountUnavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  std::string error;
  auto mount = testing::TestMount::Mount(tmp_.path() + "/store", tmp_.path() + "/mnt",
                                         "compression=3", &error);
  ASSERT_TRUE(mount != nullptr) << error;
  const std::string mnt = mount->path();

  std::string mixed;
  for (int i = 0; i < 20; ++i)
    mixed += i % 3 ? RandomBytes(1 << 20, i) : CompressibleBytes(1 << 20, i);
  ASSERT_TRUE(testing::WriteFile(mnt + "/mixed", mixed));
  std::string sparse(24 << 20, '\0');
  {
    const std::string a = RandomBytes(5000, 3);
    sparse.replace(17 << 20, a.size(), a);
    int fd = open((mnt + "/sparse").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, a.data(), a.size(), 17 << 20), ssize_t(a.size()));
    ASSERT_EQ(ftruncate(fd, 24 << 20), 0);
    close(fd);
  }
  LoadOptions no_direct;
  no_direct.direct = false;
  for (const LoadOptions& o : {LoadOptions(), no_direct}) {
    bool direct = false;
    EXPECT_TRUE(LoadToDevice(mnt + "/mixed", o, {}, mixed.size(), &direct) == mixed);
    EXPECT_EQ(direct, o.direct);
    EXPECT_TRUE(LoadToDevice(mnt + "/sparse", o, {}, sparse.size(), &direct) == sparse);
    EXPECT_EQ(direct, o.direct);
  }

  using testing::TestTensor;
  const std::vector<TestTensor> tensors = {
      TestTensor{"w", "BF16", {4096, 2500}, RandomBytes(4096 * 2500 * 2, 4)},
      TestTensor{"z", "F32", {100000}, std::string(400000, '\0')},
      TestTensor{"b", "F32", {7}, RandomBytes(28, 5)}};
  ASSERT_TRUE(testing::WriteFile(mnt + "/m.safetensors", testing::BuildSafetensors(tensors)));
  auto l = LoadSafetensors(mnt + "/m.safetensors", 0);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  std::unique_ptr<LoadedSafetensors> loaded = std::move(*l);
  EXPECT_TRUE(loaded->stats().direct);
  EXPECT_EQ(loaded->device(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string back(tensors[i].data.size(), '\0');
    ASSERT_TRUE(CopyToHost(0, back.data(), loaded->data(i), back.size()).ok());
    EXPECT_TRUE(back == tensors[i].data) << tensors[i].name;
  }
  loaded.reset();  // cudaFree
  EXPECT_TRUE(mount->Unmount());
}

}  // namespace
}  // namespace ckptfs::gpu
