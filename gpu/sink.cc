#include "gpu/sink.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <tuple>

namespace ckptfs::gpu {

std::vector<CopyRun> MergeCopies(std::vector<CopyOp> copies) {
  std::sort(copies.begin(), copies.end(), [](const CopyOp& a, const CopyOp& b) {
    return std::tie(a.staging_offset, a.dest_offset) < std::tie(b.staging_offset, b.dest_offset);
  });
  // First pass: glue copies contiguous on both sides.
  std::vector<CopyOp> flat;
  for (const CopyOp& c : copies) {
    if (c.length == 0) continue;
    if (!flat.empty()) {
      CopyOp& l = flat.back();
      if (l.staging_offset + l.length == c.staging_offset &&
          l.dest_offset + l.length == c.dest_offset) {
        l.length += c.length;
        continue;
      }
    }
    flat.push_back(c);
  }
  // Second pass: equal widths at constant pitches (both pitches >= width, so
  // rows never overlap) become one 2-D run.
  std::vector<CopyRun> runs;
  for (const CopyOp& c : flat) {
    if (!runs.empty()) {
      CopyRun& r = runs.back();
      const uint64_t row_s = r.staging_offset + (r.height - 1) * r.staging_pitch;
      const uint64_t row_d = r.dest_offset + (r.height - 1) * r.dest_pitch;
      if (c.length == r.width && c.staging_offset > row_s && c.dest_offset > row_d) {
        const uint64_t ps = c.staging_offset - row_s;
        const uint64_t pd = c.dest_offset - row_d;
        if (ps >= r.width && pd >= r.width &&
            (r.height == 1 || (ps == r.staging_pitch && pd == r.dest_pitch))) {
          r.staging_pitch = ps;
          r.dest_pitch = pd;
          r.height++;
          continue;
        }
      }
    }
    runs.push_back(CopyRun{c.staging_offset, c.dest_offset, c.length, 1, c.length, c.length});
  }
  return runs;
}

Sink::~Sink() = default;

void Sink::ReleaseStaging() {
  for (char* p : staging_) FreeStaging(p);
  staging_.clear();
  staging_bytes_ = 0;
}

Result<std::vector<char*>> Sink::Staging(int count, uint64_t bytes) {
  if (count <= 0 || bytes == 0) return Status(EINVAL, "staging needs at least one nonempty buffer");
  if (static_cast<size_t>(count) <= staging_.size() && bytes <= staging_bytes_) {
    return std::vector<char*>(staging_.begin(), staging_.begin() + count);
  }
  ReleaseStaging();
  for (int i = 0; i < count; ++i) {
    Result<char*> p = AllocateStaging(bytes);
    if (!p.ok()) {
      ReleaseStaging();
      return p.status();
    }
    staging_.push_back(*p);
  }
  staging_bytes_ = bytes;
  return staging_;
}

HostSink::~HostSink() { ReleaseStaging(); }

Result<char*> HostSink::AllocateStaging(uint64_t bytes) {
  constexpr uint64_t kAlign = 4096;
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr)
    return Status(ENOMEM, "cannot allocate " + std::to_string(bytes) + " bytes of staging");
  return static_cast<char*>(p);
}

void HostSink::FreeStaging(char* p) { std::free(p); }

Status HostSink::Submit(int slot, const char* staging, const std::vector<CopyRun>& runs,
                        const std::vector<FillOp>& zeros) {
  for (const CopyRun& r : runs) {
    for (uint64_t i = 0; i < r.height; ++i) {
      std::memcpy(dest() + r.dest_offset + i * r.dest_pitch,
                  staging + r.staging_offset + i * r.staging_pitch, r.width);
    }
  }
  for (const FillOp& z : zeros) std::memset(dest() + z.dest_offset, 0, z.length);
  return Status::OK();
}

}  // namespace ckptfs::gpu
