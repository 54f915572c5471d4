// gpu_load_bench: GB/s of loading one large safetensors file of a ckptfs
// mount into GPU memory, four ways:
//
//   direct           the loader reads the segment files itself (verified,
//                    pinned staging, async copies) -> device
//   through mount    the same pipeline, reading the file through FUSE
//   read+cudaMemcpy  the naive baseline: read() the data into pageable host
//                    memory, then one synchronous cudaMemcpy
//   pinned H2D       the copy ceiling: cudaMemcpyAsync from pinned memory
//
// plus "direct to host" (the loader into host memory: disk + verification,
// no PCIe), to tell where the time goes.
//
//   gpu_load_bench MOUNT [--size 4G] [--device 0] [--reps 3] [--file NAME]
//                  [--drop-caches] [--buffers N] [--buffer-size SIZE]
//
// MOUNT/NAME (default bench.safetensors) is written once (random BF16
// tensors of 64 MiB, incompressible) unless it already has the size. The
// page cache is warm after that; --drop-caches (root) drops it before every
// run, for cold-read figures. Benchmarks report, they do not assert.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/size.h"
#include "gpu/device.h"
#include "gpu/loader.h"
#include "gpu/safetensors.h"
#include "gpu/test_util.h"

namespace {

using ckptfs::engine::Result;
using ckptfs::engine::Status;
namespace g = ckptfs::gpu;

struct Args {
  std::string mount;
  std::string file = "bench.safetensors";
  uint64_t size = 4ull << 30;
  int device = 0;
  int reps = 3;
  bool drop_caches = false;
  int buffers = 0;
  uint64_t buffer_bytes = 0;
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "gpu_load_bench: %s\n", msg.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

uint64_t SizeArg(const std::string& s) {
  Result<uint64_t> v = ckptfs::ParseSize(s);
  if (!v.ok()) Die("bad size " + s);
  return *v;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(s + " needs a value");
      return argv[++i];
    };
    if (s == "--size")
      a.size = SizeArg(next());
    else if (s == "--device")
      a.device = std::atoi(next().c_str());
    else if (s == "--reps")
      a.reps = std::max(1, std::atoi(next().c_str()));
    else if (s == "--file")
      a.file = next();
    else if (s == "--drop-caches")
      a.drop_caches = true;
    else if (s == "--buffers")
      a.buffers = std::atoi(next().c_str());
    else if (s == "--buffer-size")
      a.buffer_bytes = SizeArg(next());
    else if (s == "-h" || s == "--help") {
      std::printf(
          "usage: gpu_load_bench MOUNT [--size 4G] [--device 0] [--reps 3] [--file NAME] "
          "[--drop-caches] [--buffers N] [--buffer-size SIZE]\n");
      std::exit(0);
    } else if (a.mount.empty() && s[0] != '-')
      a.mount = s;
    else
      Die("unknown argument " + s);
  }
  if (a.mount.empty()) Die("give the mountpoint of a ckptfs mount (ckptfs mount STORE MOUNT)");
  return a;
}

// Writes a safetensors file of about `size` bytes: BF16 tensors of 64 MiB.
void WriteBenchFile(const std::string& path, uint64_t size) {
  constexpr uint64_t kTensor = 64ull << 20;
  const uint64_t count = std::max<uint64_t>(1, size / kTensor);
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  for (uint64_t i = 0; i < count; ++i) {
    h["layer." + std::to_string(i) + ".weight"] = {
        {"dtype", "BF16"},
        {"shape", {kTensor / 2 / 4096, 4096}},
        {"data_offsets", {i * kTensor, (i + 1) * kTensor}}};
  }
  std::string header = h.dump();
  while (header.size() % 8) header.push_back(' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  head += header;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("create " + path + ": " + std::strerror(errno));
  if (write(fd, head.data(), head.size()) != static_cast<ssize_t>(head.size())) Die("write header");
  std::string block = g::testing::RandomBytes(kTensor, 1);
  std::printf("writing %s: %llu tensors of 64 MiB ...\n", path.c_str(),
              static_cast<unsigned long long>(count));
  std::fflush(stdout);
  for (uint64_t i = 0; i < count; ++i) {
    reinterpret_cast<uint64_t*>(block.data())[i % (kTensor / 8)] ^= i + 1;  // unique tensors
    for (uint64_t off = 0; off < kTensor; off += 16 << 20) {
      if (write(fd, block.data() + off, 16 << 20) != (16 << 20))
        Die("write: " + std::string(std::strerror(errno)));
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) Die("fsync/close " + path);
}

void DropCaches(const Args& a) {
  if (!a.drop_caches) return;
  sync();
  const int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0 || write(fd, "3", 1) != 1) Die("--drop-caches needs root (/proc/sys/vm/drop_caches)");
  close(fd);
}

struct Result1 {
  std::string name;
  std::vector<double> gbps;
  std::string note;
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The naive baseline: read() the file into pageable memory, then one
// cudaMemcpy. Returns the bytes and the seconds.
std::pair<uint64_t, double> ReadThenCopy(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  const uint64_t size = std::filesystem::file_size(path);
  char* host = static_cast<char*>(std::malloc(size));
  if (host == nullptr) Die("malloc");
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, host + done, std::min<uint64_t>(size - done, 16 << 20));
    if (n <= 0) Die("read " + path);
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  void* dev = nullptr;
  Check(cudaMalloc(&dev, size), "cudaMalloc");
  Check(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice), "cudaMemcpy");
  const double secs = Seconds(t0);
  Check(cudaFree(dev), "cudaFree");
  std::free(host);
  return {size, secs};
}

// The copy ceiling: pinned host -> device, 256 MiB at a time, `data_bytes`
// (at least one chunk) in all.
std::pair<uint64_t, double> PinnedCopy(uint64_t data_bytes) {
  constexpr uint64_t kChunk = 256ull << 20;
  const uint64_t size = std::max<uint64_t>(data_bytes, kChunk);
  void* pinned = nullptr;
  void* dev = nullptr;
  Check(cudaHostAlloc(&pinned, kChunk, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(pinned, 1, kChunk);
  Check(cudaMalloc(&dev, size), "cudaMalloc");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < size; off += kChunk) {
    Check(cudaMemcpyAsync(static_cast<char*>(dev) + off, pinned, std::min(kChunk, size - off),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
  }
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const double secs = Seconds(t0);
  cudaStreamDestroy(stream);
  cudaFree(dev);
  cudaFreeHost(pinned);
  return {size, secs};
}

void PrintResults(const Args& a, const std::string& path, uint64_t data_bytes,
                  const char* device_name, const std::vector<Result1>& results) {
  std::printf("\n%s: %.2f GiB of tensor data, GPU %d (%s), %d runs each, page cache %s\n",
              path.c_str(), static_cast<double>(data_bytes) / (1ull << 30), a.device, device_name,
              a.reps, a.drop_caches ? "dropped before each run" : "warm");
  std::printf("%-22s %10s %10s   %s\n", "path", "best GB/s", "median", "");
  for (const Result1& r : results) {
    std::vector<double> v = r.gbps;
    std::sort(v.begin(), v.end());
    std::printf("%-22s %10.2f %10.2f   %s\n", r.name.c_str(), v.back(), v[v.size() / 2],
                r.note.c_str());
  }
}

// MOUNT/NAME, written unless it has the size already, and readable directly.
std::string PrepareFile(const Args& a) {
  const std::string path = a.mount + "/" + a.file;
  std::error_code ec;
  const uint64_t have = std::filesystem::file_size(path, ec);
  const uint64_t want_data = std::max<uint64_t>(1, a.size / (64ull << 20)) * (64ull << 20);
  if (ec || have < want_data || have > want_data + (1 << 20)) WriteBenchFile(path, a.size);
  auto f = g::SourceFile::Open(path);
  if (!f.ok()) Die(f.status().ToString());
  if (!(*f)->direct()) Die(path + " cannot be read directly: " + (*f)->fallback_reason());
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  Result<int> devices = g::CudaDeviceCount();
  if (!devices.ok() || *devices <= a.device) Die("no CUDA device " + std::to_string(a.device));
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, a.device), "cudaGetDeviceProperties");
  Check(cudaSetDevice(a.device), "cudaSetDevice");

  const std::string path = PrepareFile(a);

  g::LoadOptions direct;
  if (a.buffers > 0) direct.buffers = a.buffers;
  if (a.buffer_bytes > 0) direct.buffer_bytes = a.buffer_bytes;
  g::LoadOptions through = direct;
  through.direct = false;

  auto sink_or = g::MakeDeviceSink(a.device);
  if (!sink_or.ok()) Die(sink_or.status().ToString());
  std::unique_ptr<g::Sink> sink = std::move(*sink_or);
  g::HostSink host_sink;

  uint64_t data_bytes = 0;
  std::vector<Result1> results;
  auto measure = [&](const std::string& name,
                     const std::function<std::pair<uint64_t, double>()>& run,
                     const std::string& note) {
    Result1 r{name, {}, note};
    for (int i = 0; i < a.reps; ++i) {
      DropCaches(a);
      const auto [bytes, secs] = run();
      r.gbps.push_back(static_cast<double>(bytes) / secs / 1e9);
    }
    results.push_back(r);
  };
  auto load_st = [&](const g::LoadOptions& o, g::Sink* s, int device, bool want_direct) {
    return [&, o, s, device, want_direct]() -> std::pair<uint64_t, double> {
      const auto t0 = std::chrono::steady_clock::now();
      auto l = g::LoadSafetensors(path, device, o, s);
      const double secs = Seconds(t0);
      if (!l.ok()) Die(l.status().ToString());
      if ((*l)->stats().direct != want_direct) {
        Die(std::string("expected the ") + (want_direct ? "direct" : "fallback") +
            " path: " + (*l)->stats().fallback_reason);
      }
      data_bytes = (*l)->bytes();
      return {(*l)->bytes(), secs};
    };
  };

  measure("direct -> GPU", load_st(direct, sink.get(), a.device, true), "segment files, verified");
  measure("through mount -> GPU", load_st(through, sink.get(), a.device, false), "FUSE reads");
  measure("direct -> host", load_st(direct, &host_sink, -1, true), "no PCIe: disk + checksums");

  measure(
      "read + cudaMemcpy", [&] { return ReadThenCopy(path); }, "pageable, no overlap, no checks");
  measure(
      "pinned H2D copy", [&] { return PinnedCopy(data_bytes); }, "PCIe/NVLink ceiling");
  PrintResults(a, path, data_bytes, prop.name, results);
  return 0;
}
