// `ckptfs gpu-load FILE... [--device N | --host] [--no-direct] [--safetensors]`:
// loads whole files (or safetensors tensors) into CUDA device memory or host
// memory with the gpu/ loader, and reports bytes, time, GB/s and whether the
// segment files were read directly or through the mount (and why not).
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gpu/device.h"
#include "gpu/loader.h"
#include "gpu/safetensors.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace ckptfs::tools {
namespace {

using engine::Result;
using engine::Status;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ckptfs: %s\n", msg.c_str());
  return 1;
}

double GBps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

std::string PathNote(const gpu::LoadStats& s) {
  if (s.direct) {
    std::string note = "direct: " + std::to_string(s.records) + " records verified (" +
                       std::to_string(s.compressed_records) + " zstd), ";
    if (s.data_file_blocks > 0) {
      note += std::to_string(s.data_file_blocks) + " data-file blocks verified, ";
    }
    return note + std::to_string(s.backing_reads) + " backing reads";
  }
  return "fallback through the file: " + s.fallback_reason;
}

// Loads one file into freshly allocated memory of `device` (-1 = host),
// freed again before returning.
Result<gpu::LoadStats> LoadRaw(const std::string& path, int device, gpu::Sink* sink,
                               const gpu::LoadOptions& options) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<gpu::SourceFile> f, gpu::SourceFile::Open(path, options));
  const uint64_t size = f->size();
  void* dst = nullptr;
  if (device >= 0) {
    CKPTFS_ASSIGN_OR_RETURN(dst, gpu::DeviceAlloc(device, size));
  } else if (size > 0) {
    dst = std::malloc(size);
    if (dst == nullptr) return Status(ENOMEM, "cannot allocate " + std::to_string(size) + " bytes");
  }
  sink->SetDestination(dst, size);
  Result<gpu::LoadStats> s = f->LoadAll(sink);
  sink->SetDestination(nullptr, 0);
  if (device >= 0) {
    gpu::DeviceFree(device, dst);
  } else {
    std::free(dst);
  }
  return s;
}

// The CUDA device to load into, or -1 for host memory; "" or why none can be.
int ChooseDevice(const GpuLoadArgs& args, std::string* error) {
  if (args.host && args.device_given) {
    *error = "--host and --device exclude each other";
    return -1;
  }
  if (!gpu::CudaBuilt()) {
    if (args.device_given) {
      *error =
          "--device: this ckptfs was built without CUDA; use --host to load into host "
          "memory (or rebuild with the CUDA toolkit and -DCKPTFS_CUDA=ON)";
    }
    return -1;
  }
  if (args.host) return -1;
  Result<int> count = gpu::CudaDeviceCount();
  if (!count.ok()) {
    *error = "CUDA: " + count.status().ToString() + " (use --host)";
  } else if (args.device >= *count) {
    *error = "no CUDA device " + std::to_string(args.device) + " (" + std::to_string(*count) +
             " present; use --host to load into host memory)";
  }
  return args.device;
}

// Loads `path` whole (as safetensors: counting its `tensors`).
Result<gpu::LoadStats> LoadFile(const std::string& path, const GpuLoadArgs& args, int device,
                                const gpu::LoadOptions& options, gpu::Sink* sink, size_t* tensors) {
  if (!args.safetensors) return LoadRaw(path, device, sink, options);
  auto loaded = gpu::LoadSafetensors(path, device, options, sink);
  if (!loaded.ok()) return loaded.status();
  *tensors = (*loaded)->tensors().size();
  return (*loaded)->stats();
}

}  // namespace

int RunGpuLoad(const GpuLoadArgs& args) {
  std::string error;
  const int device = ChooseDevice(args, &error);
  if (!error.empty()) return Fail(error);

  gpu::LoadOptions options;
  options.direct = !args.no_direct;
  if (args.buffers > 0) options.buffers = args.buffers;
  if (args.buffer_bytes > 0) options.buffer_bytes = args.buffer_bytes;
  if (args.threads > 0) options.reader_threads = args.threads;

  std::unique_ptr<gpu::Sink> sink;
  if (device >= 0) {
    Result<std::unique_ptr<gpu::Sink>> s = gpu::MakeDeviceSink(device);
    if (!s.ok()) return Fail(s.status().ToString());
    sink = std::move(*s);
  } else {
    sink = std::make_unique<gpu::HostSink>();
  }
  const std::string target = sink->name();

  nlohmann::ordered_json report = nlohmann::ordered_json::array();
  gpu::LoadStats total;
  total.direct = true;
  int failures = 0;
  for (const std::string& path : args.files) {
    size_t tensors = 0;
    Result<gpu::LoadStats> s = LoadFile(path, args, device, options, sink.get(), &tensors);
    if (!s.ok()) {
      std::fprintf(stderr, "ckptfs: %s: %s\n", path.c_str(), s.status().ToString().c_str());
      if (args.json) report.push_back({{"file", path}, {"error", s.status().ToString()}});
      ++failures;
      continue;
    }
    total.Add(*s);
    if (args.json) {
      report.push_back({{"file", path},
                        {"target", target},
                        {"bytes", s->bytes},
                        {"seconds", s->seconds},
                        {"gb_per_s", GBps(s->bytes, s->seconds)},
                        {"direct", s->direct},
                        {"fallback_reason", s->fallback_reason},
                        {"records", s->records},
                        {"compressed_records", s->compressed_records},
                        {"data_file_blocks", s->data_file_blocks},
                        {"backing_reads", s->backing_reads},
                        {"backing_bytes", s->backing_bytes},
                        {"tensors", tensors}});
      continue;
    }
    const std::string tensor_note =
        args.safetensors ? ", " + std::to_string(tensors) + " tensors" : std::string();
    std::printf("%s: %s (%" PRIu64 " bytes%s) to %s in %.3f s = %.2f GB/s, %s\n", path.c_str(),
                HumanBytes(s->bytes).c_str(), s->bytes, tensor_note.c_str(), target.c_str(),
                s->seconds, GBps(s->bytes, s->seconds), PathNote(*s).c_str());
  }
  if (args.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else if (args.files.size() > 1 && failures < static_cast<int>(args.files.size())) {
    std::printf("total: %s in %.3f s = %.2f GB/s\n", HumanBytes(total.bytes).c_str(), total.seconds,
                GBps(total.bytes, total.seconds));
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace ckptfs::tools
