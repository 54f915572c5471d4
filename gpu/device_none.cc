// gpu/device.h for builds without CUDA.
#include <cerrno>

#include "gpu/device.h"

namespace ckptfs::gpu {
namespace {

Status NoCuda() {
  return Status(ENOTSUP,
                "this ckptfs was built without CUDA (reconfigure with the CUDA toolkit "
                "installed and -DCKPTFS_CUDA=ON); use host memory instead");
}

}  // namespace

bool CudaBuilt() { return false; }
Result<int> CudaDeviceCount() { return NoCuda(); }
Result<std::unique_ptr<Sink>> MakeDeviceSink(int) { return NoCuda(); }
Result<void*> DeviceAlloc(int, uint64_t) { return NoCuda(); }
void DeviceFree(int, void*) {}
Status CopyToHost(int, void*, const void*, uint64_t) { return NoCuda(); }

}  // namespace ckptfs::gpu
