// gpu/device.h with the CUDA runtime: the device sink and device memory.
// Host code only (no kernels): the copies are DMA transfers on a stream.
#include <cuda_runtime.h>

#include <cerrno>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace ckptfs::gpu {
namespace {

Status CudaError(cudaError_t err, const std::string& what) {
  return Status(EIO, what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

#define CKPTFS_CUDA_RETURN(call, what)                 \
  do {                                                 \
    cudaError_t _e = (call);                           \
    if (_e != cudaSuccess) return CudaError(_e, what); \
  } while (0)

Status SetDevice(int device) {
  CKPTFS_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  return Status::OK();
}

// Thread safety: not thread-safe (see Sink); every call sets the device
// first, so the calling thread may change.
class DeviceSink final : public Sink {
 public:
  explicit DeviceSink(int device) : device_(device) {}
  ~DeviceSink() override {
    if (stream_ != nullptr) {
      cudaSetDevice(device_);
      cudaStreamSynchronize(stream_);  // no copy may still read staging
    }
    ReleaseStaging();
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    CKPTFS_RETURN_IF_ERROR(SetDevice(device_));
    CKPTFS_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags");
    return Status::OK();
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

  Status Submit(int slot, const char* staging, const std::vector<CopyRun>& runs,
                const std::vector<FillOp>& zeros) override {
    CKPTFS_RETURN_IF_ERROR(SetDevice(device_));
    while (events_.size() <= static_cast<size_t>(slot)) {
      cudaEvent_t e = nullptr;
      // Blocking sync: a wait sleeps instead of spinning on a core that the
      // reader threads need.
      CKPTFS_CUDA_RETURN(
          cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
          "cudaEventCreateWithFlags");
      events_.push_back(e);
    }
    for (const CopyRun& r : runs) {
      void* dst = dest() + r.dest_offset;
      const void* src = staging + r.staging_offset;
      if (r.height == 1) {
        CKPTFS_CUDA_RETURN(cudaMemcpyAsync(dst, src, r.width, cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpyAsync");
      } else {
        CKPTFS_CUDA_RETURN(cudaMemcpy2DAsync(dst, r.dest_pitch, src, r.staging_pitch, r.width,
                                             r.height, cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpy2DAsync");
      }
    }
    for (const FillOp& z : zeros) {
      CKPTFS_CUDA_RETURN(cudaMemsetAsync(dest() + z.dest_offset, 0, z.length, stream_),
                         "cudaMemsetAsync");
    }
    CKPTFS_CUDA_RETURN(cudaEventRecord(events_[slot], stream_), "cudaEventRecord");
    return Status::OK();
  }

  Result<bool> Done(int slot, bool wait) override {
    if (static_cast<size_t>(slot) >= events_.size()) return true;  // never submitted
    CKPTFS_RETURN_IF_ERROR(SetDevice(device_));
    cudaError_t e = wait ? cudaEventSynchronize(events_[slot]) : cudaEventQuery(events_[slot]);
    if (e == cudaSuccess) return true;
    if (!wait && e == cudaErrorNotReady) return false;
    return CudaError(e, "copy to device");
  }

  Status Finish() override {
    CKPTFS_RETURN_IF_ERROR(SetDevice(device_));
    CKPTFS_CUDA_RETURN(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return Status::OK();
  }

 protected:
  Result<char*> AllocateStaging(uint64_t bytes) override {
    CKPTFS_RETURN_IF_ERROR(SetDevice(device_));
    void* p = nullptr;
    CKPTFS_CUDA_RETURN(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
                       "cudaHostAlloc(" + std::to_string(bytes) + ")");
    return static_cast<char*>(p);
  }
  void FreeStaging(char* p) override { cudaFreeHost(p); }

 private:
  const int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;  // by staging slot
};

}  // namespace

bool CudaBuilt() { return true; }

Result<int> CudaDeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear it, so that later calls do not report it
    return 0;
  }
  CKPTFS_CUDA_RETURN(e, "cudaGetDeviceCount");
  return n;
}

Result<std::unique_ptr<Sink>> MakeDeviceSink(int device) {
  CKPTFS_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return Status(ENODEV, "no CUDA device " + std::to_string(device) + " (" +
                              std::to_string(count) + " present)");
  }
  auto sink = std::make_unique<DeviceSink>(device);
  CKPTFS_RETURN_IF_ERROR(sink->Init());
  return std::unique_ptr<Sink>(std::move(sink));
}

Result<void*> DeviceAlloc(int device, uint64_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  CKPTFS_RETURN_IF_ERROR(SetDevice(device));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return Status(ENOMEM, "cudaMalloc(" + std::to_string(bytes) + ") on device " +
                              std::to_string(device) + ": out of device memory");
  }
  CKPTFS_CUDA_RETURN(e, "cudaMalloc(" + std::to_string(bytes) + ")");
  return p;
}

void DeviceFree(int device, void* p) {
  if (p == nullptr) return;
  cudaSetDevice(device);
  cudaFree(p);
}

Status CopyToHost(int device, void* host_dst, const void* device_src, uint64_t bytes) {
  if (bytes == 0) return Status::OK();
  CKPTFS_RETURN_IF_ERROR(SetDevice(device));
  CKPTFS_CUDA_RETURN(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy to host");
  return Status::OK();
}

}  // namespace ckptfs::gpu
