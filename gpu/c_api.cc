// gpu/ckptfs_loader.h over the C++ loader. No exception crosses into C.
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "gpu/ckptfs_loader.h"
#include "gpu/device.h"
#include "gpu/loader.h"
#include "gpu/safetensors.h"

using ckptfs::engine::Result;
using ckptfs::engine::Status;
namespace g = ckptfs::gpu;

struct ckptfs_file {
  std::unique_ptr<g::SourceFile> file;
};

struct ckptfs_safetensors {
  std::unique_ptr<g::LoadedSafetensors> loaded;
};

namespace {

thread_local std::string last_error;

int Fail(const Status& st) {
  last_error = st.ToString();
  return st.code() > 0 ? -st.code() : -EIO;
}

template <typename T>
T* FailNull(const Status& st) {
  Fail(st);
  return nullptr;
}

// Runs `body`, turning exceptions into -ENOMEM / -EIO.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(Status(ENOMEM, "out of memory"));
  } catch (const std::exception& e) {
    return Fail(Status(EIO, e.what()));
  } catch (...) {
    return Fail(Status(EIO, "unknown error"));
  }
}

g::LoadOptions OptionsFor(uint32_t flags) {
  g::LoadOptions o;
  o.direct = (flags & CKPTFS_NO_DIRECT) == 0;
  return o;
}

// Idle sinks by device (-1 = host), so that repeated loads reuse their
// pinned staging buffers and streams. Deliberately never destroyed: CUDA
// resources must not be freed from static destructors.
class SinkCache {
 public:
  static SinkCache& Get() {
    static SinkCache* cache = new SinkCache();
    return *cache;
  }
  Result<std::unique_ptr<g::Sink>> Take(int device) {
    {
      ckptfs::MutexLock l(&mu_);
      std::vector<std::unique_ptr<g::Sink>>& idle = idle_[device];
      if (!idle.empty()) {
        std::unique_ptr<g::Sink> s = std::move(idle.back());
        idle.pop_back();
        return s;
      }
    }
    if (device < 0) return std::unique_ptr<g::Sink>(std::make_unique<g::HostSink>());
    return g::MakeDeviceSink(device);
  }
  void Give(int device, std::unique_ptr<g::Sink> s) {
    s->SetDestination(nullptr, 0);
    ckptfs::MutexLock l(&mu_);
    std::vector<std::unique_ptr<g::Sink>>& idle = idle_[device];
    if (idle.size() < kMaxIdle) idle.push_back(std::move(s));
  }

 private:
  static constexpr size_t kMaxIdle = 2;
  ckptfs::Mutex mu_;  // a leaf lock; never held while a sink is made or used
  std::map<int, std::vector<std::unique_ptr<g::Sink>>> idle_ GUARDED_BY(mu_);
};

void FillStats(const g::LoadStats& s, ckptfs_load_stats* out) {
  if (out == nullptr) return;
  *out = ckptfs_load_stats{};
  out->bytes = s.bytes;
  out->backing_bytes = s.backing_bytes;
  out->records = s.records;
  out->compressed_records = s.compressed_records;
  out->seconds = s.seconds;
  out->direct = s.direct ? 1 : 0;
}

int ReadRanges(g::SourceFile* f, int device, void* dst, uint64_t capacity,
               const std::vector<g::Range>& ranges, ckptfs_load_stats* stats) {
  Result<std::unique_ptr<g::Sink>> sink = SinkCache::Get().Take(device);
  if (!sink.ok()) return Fail(sink.status());
  (*sink)->SetDestination(dst, capacity);
  Result<g::LoadStats> s = f->Load(ranges, sink->get());
  SinkCache::Get().Give(device, std::move(*sink));
  if (!s.ok()) return Fail(s.status());
  FillStats(*s, stats);
  return 0;
}

}  // namespace

extern "C" {

int ckptfs_abi_version(void) { return CKPTFS_LOADER_ABI_VERSION; }

int ckptfs_cuda_built(void) { return g::CudaBuilt() ? 1 : 0; }

int ckptfs_cuda_device_count(void) {
  return Guard([&] {
    Result<int> n = g::CudaDeviceCount();
    return n.ok() ? *n : Fail(n.status());
  });
}

const char* ckptfs_last_error(void) { return last_error.c_str(); }

ckptfs_file* ckptfs_open(const char* path, uint32_t flags) {
  ckptfs_file* out = nullptr;
  Guard([&] {
    if (path == nullptr) return Fail(Status(EINVAL, "path is NULL"));
    Result<std::unique_ptr<g::SourceFile>> f = g::SourceFile::Open(path, OptionsFor(flags));
    if (!f.ok()) return Fail(f.status());
    out = new ckptfs_file{std::move(*f)};
    return 0;
  });
  return out;
}

uint64_t ckptfs_file_size(const ckptfs_file* f) { return f ? f->file->size() : 0; }

int ckptfs_file_direct(const ckptfs_file* f) { return f && f->file->direct() ? 1 : 0; }

const char* ckptfs_file_fallback_reason(const ckptfs_file* f) {
  return f ? f->file->fallback_reason().c_str() : "";
}

int ckptfs_read_ranges(ckptfs_file* f, int device, void* dst, uint64_t capacity,
                       const uint64_t* file_offsets, const uint64_t* lengths,
                       const uint64_t* dest_offsets, size_t n, ckptfs_load_stats* stats) {
  return Guard([&] {
    if (f == nullptr) return Fail(Status(EINVAL, "file is NULL"));
    if (n > 0 && (file_offsets == nullptr || lengths == nullptr)) {
      return Fail(Status(EINVAL, "offsets or lengths are NULL"));
    }
    std::vector<g::Range> ranges(n);
    uint64_t packed = 0;
    for (size_t i = 0; i < n; ++i) {
      ranges[i] = g::Range{file_offsets[i], lengths[i], dest_offsets ? dest_offsets[i] : packed};
      packed += lengths[i];
    }
    return ReadRanges(f->file.get(), device, dst, capacity, ranges, stats);
  });
}

int ckptfs_read(ckptfs_file* f, int device, void* dst, uint64_t capacity, uint64_t file_offset,
                uint64_t length, ckptfs_load_stats* stats) {
  return ckptfs_read_ranges(f, device, dst, capacity, &file_offset, &length, nullptr, 1, stats);
}

void ckptfs_close(ckptfs_file* f) { delete f; }

int ckptfs_load_file(const char* path, int device, void* dst, uint64_t capacity, uint32_t flags,
                     ckptfs_load_stats* stats) {
  return Guard([&] {
    if (path == nullptr) return Fail(Status(EINVAL, "path is NULL"));
    Result<std::unique_ptr<g::SourceFile>> f = g::SourceFile::Open(path, OptionsFor(flags));
    if (!f.ok()) return Fail(f.status());
    return ReadRanges(f->get(), device, dst, capacity, {g::Range{0, (*f)->size(), 0}}, stats);
  });
}

void* ckptfs_alloc(int device, uint64_t bytes) {
  void* out = nullptr;
  Guard([&] {
    if (device < 0) {
      out = std::malloc(bytes > 0 ? bytes : 1);
      return out ? 0 : Fail(Status(ENOMEM, "malloc(" + std::to_string(bytes) + ") failed"));
    }
    Result<void*> p = g::DeviceAlloc(device, bytes);
    if (!p.ok()) return Fail(p.status());
    out = *p;
    return 0;
  });
  return out;
}

void ckptfs_free(int device, void* p) {
  if (device < 0) {
    std::free(p);
  } else {
    g::DeviceFree(device, p);
  }
}

ckptfs_safetensors* ckptfs_safetensors_load(const char* path, int device, uint32_t flags) {
  ckptfs_safetensors* out = nullptr;
  Guard([&] {
    if (path == nullptr) return Fail(Status(EINVAL, "path is NULL"));
    Result<std::unique_ptr<g::Sink>> sink = SinkCache::Get().Take(device);
    if (!sink.ok()) return Fail(sink.status());
    auto loaded = g::LoadSafetensors(path, device, OptionsFor(flags), sink->get());
    SinkCache::Get().Give(device, std::move(*sink));
    if (!loaded.ok()) return Fail(loaded.status());
    out = new ckptfs_safetensors{std::move(*loaded)};
    return 0;
  });
  return out;
}

size_t ckptfs_safetensors_count(const ckptfs_safetensors* s) {
  return s ? s->loaded->tensors().size() : 0;
}

const char* ckptfs_safetensors_name(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size() ? s->loaded->tensors()[i].name.c_str() : nullptr;
}

const char* ckptfs_safetensors_dtype(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size() ? s->loaded->tensors()[i].dtype.c_str() : nullptr;
}

int ckptfs_safetensors_ndim(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size()
             ? static_cast<int>(s->loaded->tensors()[i].shape.size())
             : -1;
}

const int64_t* ckptfs_safetensors_shape(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size() ? s->loaded->tensors()[i].shape.data() : nullptr;
}

void* ckptfs_safetensors_data(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size() ? s->loaded->data(i) : nullptr;
}

uint64_t ckptfs_safetensors_nbytes(const ckptfs_safetensors* s, size_t i) {
  return s && i < s->loaded->tensors().size() ? s->loaded->tensors()[i].nbytes() : 0;
}

void* ckptfs_safetensors_base(const ckptfs_safetensors* s) {
  return s ? s->loaded->base() : nullptr;
}

uint64_t ckptfs_safetensors_bytes(const ckptfs_safetensors* s) {
  return s ? s->loaded->bytes() : 0;
}

const char* ckptfs_safetensors_metadata(const ckptfs_safetensors* s, const char* key) {
  if (s == nullptr || key == nullptr) return nullptr;
  const auto& m = s->loaded->header().metadata;
  auto it = m.find(key);
  return it == m.end() ? nullptr : it->second.c_str();
}

void ckptfs_safetensors_stats(const ckptfs_safetensors* s, ckptfs_load_stats* stats) {
  if (s != nullptr) FillStats(s->loaded->stats(), stats);
}

void ckptfs_safetensors_free(ckptfs_safetensors* s) { delete s; }

}  // extern "C"
