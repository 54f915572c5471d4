// safetensors files into one host or device allocation.
//
// File layout (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header, then the data
// section. The header maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets relative to the data section) and
// may hold "__metadata__": {string: string}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gpu/loader.h"

namespace ckptfs::gpu {

// Headers larger than this are refused (as the safetensors library does).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

struct TensorInfo {
  std::string name;
  std::string dtype;           // "F32", "BF16", ...
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0;          // data_offsets, relative to the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;        // N
  uint64_t data_offset = 0;         // 8 + N: where the data section starts in the file
  uint64_t data_bytes = 0;          // the largest end offset: bytes the tensors span
  std::vector<TensorInfo> tensors;  // in data order (by begin, then name)
  std::map<std::string, std::string> metadata;
};

// Bits per element of a known dtype, 0 for an unknown one (whose size is
// then not checked against its shape).
int DtypeBits(std::string_view dtype);

// Parses the JSON header (N = json.size()) and checks it against a data
// section of `data_section_bytes`: shapes, offsets within the section,
// begin <= end, and for known dtypes that end - begin equals the element
// count times the element size. EINVAL with what is wrong otherwise.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json,
                                                 uint64_t data_section_bytes);

// Tensors loaded into one allocation. Frees it when destroyed.
class LoadedSafetensors {
 public:
  ~LoadedSafetensors();
  LoadedSafetensors(const LoadedSafetensors&) = delete;
  LoadedSafetensors& operator=(const LoadedSafetensors&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  // -1 for host memory, else the CUDA device.
  int device() const { return device_; }
  // The allocation (data_bytes long; nullptr when 0) and tensor i in it.
  void* base() const { return base_; }
  uint64_t bytes() const { return header_.data_bytes; }
  void* data(size_t i) const { return static_cast<char*>(base_) + header_.tensors[i].begin; }
  const LoadStats& stats() const { return stats_; }
  // Hands the allocation to the caller, who frees it (host: free(); device:
  // cudaFree), and returns it.
  void* Release();

 private:
  friend Result<std::unique_ptr<LoadedSafetensors>> LoadSafetensors(const std::string&, int,
                                                                    const LoadOptions&, Sink*);
  LoadedSafetensors() = default;
  SafetensorsHeader header_;
  int device_ = -1;
  void* base_ = nullptr;
  LoadStats stats_;
};

// Reads the header of `path` (through the loader, so a direct read verifies
// it too), allocates data_bytes once (device >= 0: cudaMalloc on that
// device; -1: host malloc) and loads the data section into it. `sink` is
// optional: a sink of the same kind to reuse (its staging buffers), else one
// is made for this call.
Result<std::unique_ptr<LoadedSafetensors>> LoadSafetensors(const std::string& path, int device,
                                                           const LoadOptions& options = {},
                                                           Sink* sink = nullptr);

}  // namespace ckptfs::gpu
