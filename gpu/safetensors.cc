#include "gpu/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>
#include <tuple>

#include "format/format.h"
#include "gpu/device.h"

namespace ckptfs::gpu {
namespace {

using nlohmann::json;

Status Bad(const std::string& what) { return Status(EINVAL, "safetensors header: " + what); }

}  // namespace

int DtypeBits(std::string_view d) {
  static const std::pair<std::string_view, int> kBits[] = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"I64", 64},    {"U64", 64},
      {"F64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
  };
  for (const auto& [name, bits] : kBits) {
    if (name == d) return bits;
  }
  return 0;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view text,
                                                 uint64_t data_section_bytes) {
  SafetensorsHeader h;
  h.header_bytes = text.size();
  h.data_offset = 8 + text.size();
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Bad("not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return Bad("__metadata__ value of \"" + m.key() + "\" is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string at = "tensor \"" + name + "\": ";
    if (!v.is_object()) return Bad(at + "not an object");
    auto dtype = v.find("dtype");
    auto shape = v.find("shape");
    auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string()) return Bad(at + "no dtype");
    if (shape == v.end() || !shape->is_array()) return Bad(at + "no shape");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Bad(at + "data_offsets is not [begin, end]");
    }
    TensorInfo t;
    t.name = name;
    t.dtype = dtype->get<std::string>();
    uint64_t numel = 1;
    for (const json& d : *shape) {
      if (!d.is_number_unsigned()) return Bad(at + "shape has a negative or non-integer size");
      const uint64_t n = d.get<uint64_t>();
      if (n > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel)) {
        return Bad(at + "shape is too large");
      }
      t.shape.push_back(static_cast<int64_t>(n));
    }
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    if (t.begin > t.end) return Bad(at + "data_offsets begin after end");
    if (t.end > data_section_bytes) {
      return Bad(at + "data ends at " + std::to_string(t.end) + ", past the data section (" +
                 std::to_string(data_section_bytes) + " bytes)");
    }
    if (const int bits = DtypeBits(t.dtype); bits > 0) {
      uint64_t total_bits = 0;
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &total_bits)) {
        return Bad(at + "shape is too large");
      }
      const uint64_t want = (total_bits + 7) / 8;
      if (t.nbytes() != want) {
        return Bad(at + std::to_string(t.nbytes()) + " bytes of data, expected " +
                   std::to_string(want) + " for " + t.dtype + " of " + std::to_string(numel) +
                   " elements");
      }
    }
    h.data_bytes = std::max(h.data_bytes, t.end);
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.name) < std::tie(b.begin, b.name);
  });
  return h;
}

LoadedSafetensors::~LoadedSafetensors() {
  if (base_ == nullptr) return;
  if (device_ >= 0) {
    DeviceFree(device_, base_);
  } else {
    std::free(base_);
  }
}

void* LoadedSafetensors::Release() {
  void* p = base_;
  base_ = nullptr;
  return p;
}

Result<std::unique_ptr<LoadedSafetensors>> LoadSafetensors(const std::string& path, int device,
                                                           const LoadOptions& options, Sink* sink) {
  try {
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<SourceFile> f, SourceFile::Open(path, options));
    if (f->size() < 8) return Status(EINVAL, path + ": too short for a safetensors file");

    // The header, through the same loader (verified when direct).
    HostSink header_sink;
    char len_bytes[8];
    header_sink.SetDestination(len_bytes, sizeof(len_bytes));
    CKPTFS_ASSIGN_OR_RETURN(LoadStats stats, f->Load({Range{0, 8, 0}}, &header_sink));
    const uint64_t n = format::GetLE64(len_bytes);
    if (n > kMaxSafetensorsHeader || n > f->size() - 8) {
      return Status(EINVAL, path + ": safetensors header length " + std::to_string(n) +
                                " is larger than the file or the limit");
    }
    std::string text(n, '\0');
    header_sink.SetDestination(text.data(), n);
    CKPTFS_ASSIGN_OR_RETURN(LoadStats hs, f->Load({Range{8, n, 0}}, &header_sink));
    stats.Add(hs);
    Result<SafetensorsHeader> header = ParseSafetensorsHeader(text, f->size() - 8 - n);
    if (!header.ok()) {
      return Status(header.status().code(), path + ": " + header.status().message());
    }

    std::unique_ptr<LoadedSafetensors> out(new LoadedSafetensors());
    out->header_ = std::move(*header);
    out->device_ = device;
    const uint64_t bytes = out->header_.data_bytes;
    std::unique_ptr<Sink> own_sink;
    if (device >= 0) {
      CKPTFS_ASSIGN_OR_RETURN(out->base_, DeviceAlloc(device, bytes));
      if (sink == nullptr) {
        CKPTFS_ASSIGN_OR_RETURN(own_sink, MakeDeviceSink(device));
        sink = own_sink.get();
      }
    } else {
      if (bytes > 0) {
        out->base_ = std::malloc(bytes);
        if (out->base_ == nullptr) {
          return Status(ENOMEM, "cannot allocate " + std::to_string(bytes) + " bytes");
        }
      }
      if (sink == nullptr) {
        own_sink = std::make_unique<HostSink>();
        sink = own_sink.get();
      }
    }
    sink->SetDestination(out->base_, bytes);
    Result<LoadStats> ds = f->Load({Range{out->header_.data_offset, bytes, 0}}, sink);
    sink->SetDestination(nullptr, 0);  // a caller's sink must not keep our pointer
    if (!ds.ok()) return ds.status();
    stats.Add(*ds);
    stats.direct = f->direct();
    out->stats_ = stats;
    return out;
  } catch (const std::bad_alloc&) {
    return Status(ENOMEM, "out of memory loading " + path);
  }
}

}  // namespace ckptfs::gpu
