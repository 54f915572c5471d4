// The staging pipeline that executes a LoadPlan.
//
//   reader threads:  take the next chunk, wait for a free staging buffer,
//                    pread + verify (+ decompress, copy inline bytes) into it,
//                    queue it as filled
//   calling thread:  take a filled buffer, Sink::Submit it (device: async
//                    copies on a stream + an event), and give buffers back
//                    to the readers once Sink::Done says their copies ended
//
// So disk reads, CPU decoding and host-to-device copies overlap, with at
// most `buffers` staging buffers in use. Chunks are independent (each carries
// its destination offsets), so they may finish in any order.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gpu/load_plan.h"
#include "gpu/sink.h"
#include "io/env.h"

namespace ckptfs::gpu {

// The files a plan reads, borrowed: they must stay open while it runs.
struct PlanSources {
  std::vector<const io::File*> segments;  // by LoadPlan::segment_ids index
  const io::File* data_file = nullptr;    // kDataFile reads (LoadPlan::reads_data_file)
  const io::File* file = nullptr;         // kThroughFile reads
};

struct PipelineOptions {
  // Staging buffers in flight. Default: 4.
  int buffers = 4;
  // Threads that read, verify and decode chunks. Default: 2.
  int reader_threads = 2;
};

// Runs `plan` into `sink`'s destination and returns once every byte is
// there (or the first error: a read, a checksum or record mismatch, a
// data-file block that does not check (corruption, EIO), or a copy). The
// sink's staging buffers are sized plan.buffer_bytes.
Status RunPipeline(const LoadPlan& plan, const PlanSources& sources, Sink* sink,
                   const PipelineOptions& options);

}  // namespace ckptfs::gpu
