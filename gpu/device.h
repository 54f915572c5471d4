// CUDA devices: the device sink and device memory. Implemented by
// device_cuda.cu when the build found CUDA (CKPTFS_CUDA), and by
// device_none.cc otherwise, where every call but CudaBuilt() fails with
// ENOTSUP ("built without CUDA"). Nothing else in gpu/ includes CUDA headers.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "gpu/sink.h"

namespace ckptfs::gpu {

// True when this build has the CUDA device sink.
bool CudaBuilt();

// Number of CUDA devices; 0 when the driver finds none (or no driver).
Result<int> CudaDeviceCount();

// A sink that copies staging buffers (pinned with cudaHostAlloc) to device
// memory of `device` with cudaMemcpyAsync / cudaMemcpy2DAsync on its own
// non-blocking stream, one event per staging buffer; holes are
// cudaMemsetAsync. Its destination is a device pointer of `device`.
Result<std::unique_ptr<Sink>> MakeDeviceSink(int device);

// cudaMalloc / cudaFree on `device`. DeviceAlloc(…, 0) returns nullptr.
Result<void*> DeviceAlloc(int device, uint64_t bytes);
void DeviceFree(int device, void* p);

// Synchronous copies, for tests and benchmarks.
Status CopyToHost(int device, void* host_dst, const void* device_src, uint64_t bytes);

}  // namespace ckptfs::gpu
