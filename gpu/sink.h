// Sinks: where the loader's bytes go. The loader fills host staging buffers
// (gpu/pipeline.h) and hands each full one to a Sink, which moves its bytes
// into the destination: HostSink with memcpy, the CUDA device sink
// (gpu/device.h) with cudaMemcpyAsync on its own stream. Both run the same
// pipeline; they differ only in the staging memory (malloc vs cudaHostAlloc)
// and in how a copy is issued and awaited.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace ckptfs::gpu {

using engine::Result;
using engine::Status;

// Bytes [staging_offset, +length) of a staging buffer go to destination bytes
// [dest_offset, +length).
struct CopyOp {
  uint64_t staging_offset = 0;
  uint64_t dest_offset = 0;
  uint64_t length = 0;
  bool operator==(const CopyOp&) const = default;
};

// Destination bytes [dest_offset, +length) become zeros (holes of the file).
struct FillOp {
  uint64_t dest_offset = 0;
  uint64_t length = 0;
  bool operator==(const FillOp&) const = default;
};

// `height` rows of `width` bytes: row i is staging bytes
// [staging_offset + i*staging_pitch, +width) -> destination
// [dest_offset + i*dest_pitch, +width). height == 1 is a plain copy. Records
// of one read lie at a fixed pitch (48-byte header + payload), so a run of
// them is one 2-D copy (cudaMemcpy2DAsync) instead of one call per record.
struct CopyRun {
  uint64_t staging_offset = 0;
  uint64_t dest_offset = 0;
  uint64_t width = 0;
  uint64_t height = 1;
  uint64_t staging_pitch = 0;
  uint64_t dest_pitch = 0;
  bool operator==(const CopyRun&) const = default;
};

// Merges `copies` (any order) into runs: copies contiguous in both staging
// and destination become one, and equal-width copies at a constant pitch in
// both become one 2-D run. Pure; the result moves exactly the same bytes.
std::vector<CopyRun> MergeCopies(std::vector<CopyOp> copies);

// Thread safety: a Sink is used by one pipeline at a time, from one thread
// (the one that runs Load); it is not thread-safe.
class Sink {
 public:
  virtual ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  // "host" or "cuda:N".
  virtual std::string name() const = 0;

  // Where the next loads write: [dest, dest + capacity). A device sink takes
  // a device pointer. "*dest" must stay valid until the load returns.
  void SetDestination(void* dest, uint64_t capacity) {
    dest_ = static_cast<char*>(dest);
    capacity_ = capacity;
  }
  char* dest() const { return dest_; }
  uint64_t capacity() const { return capacity_; }

  // `count` staging buffers of at least `bytes` each. Kept and reused by
  // later loads with the same or a smaller geometry; freed when the sink is
  // destroyed. The pointers stay valid until the next Staging() call.
  Result<std::vector<char*>> Staging(int count, uint64_t bytes);

  // Starts moving a full staging buffer into the destination: `runs` from
  // `staging`, then `zeros`. May return before the bytes have moved; the
  // staging buffer must not be touched until Done(slot) says so.
  // REQUIRES: 0 <= slot < count of the last Staging(); the slot's previous
  // work is done; every byte stays within capacity().
  virtual Status Submit(int slot, const char* staging, const std::vector<CopyRun>& runs,
                        const std::vector<FillOp>& zeros) = 0;
  // Whether the slot's submitted work is complete. With `wait`, blocks until
  // it is (and then returns true or an error).
  virtual Result<bool> Done(int slot, bool wait) = 0;
  // Waits for everything submitted. An error of the copies shows here.
  virtual Status Finish() = 0;

 protected:
  Sink() = default;
  // Host memory for staging; the device sink pins it.
  virtual Result<char*> AllocateStaging(uint64_t bytes) = 0;
  virtual void FreeStaging(char* p) = 0;
  // Subclasses call this in their destructor, while FreeStaging still works.
  void ReleaseStaging();

 private:
  char* dest_ = nullptr;
  uint64_t capacity_ = 0;
  std::vector<char*> staging_;
  uint64_t staging_bytes_ = 0;
};

// Copies with memcpy on the calling thread; Done() is always true. Staging
// comes from aligned_alloc (4 KiB aligned).
class HostSink final : public Sink {
 public:
  HostSink() = default;
  HostSink(void* dest, uint64_t capacity) { SetDestination(dest, capacity); }
  ~HostSink() override;
  std::string name() const override { return "host"; }
  Status Submit(int slot, const char* staging, const std::vector<CopyRun>& runs,
                const std::vector<FillOp>& zeros) override;
  Result<bool> Done(int slot, bool wait) override { return true; }
  Status Finish() override { return Status::OK(); }

 protected:
  Result<char*> AllocateStaging(uint64_t bytes) override;
  void FreeStaging(char* p) override;
};

}  // namespace ckptfs::gpu
