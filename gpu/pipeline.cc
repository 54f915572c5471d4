#include "gpu/pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include "format/format.h"

namespace ckptfs::gpu {
namespace {

namespace format = ::ckptfs::format;

// Reads exactly `n` bytes at `offset` of a store file (`store_file`: "segment"
// or "data file"; a short read is corruption) or of the file itself (nullptr).
Status ReadFull(const io::File& f, char* buf, uint64_t n, uint64_t offset, const char* store_file) {
  CKPTFS_ASSIGN_OR_RETURN(const size_t got, f.ReadAt(offset, n, buf));
  if (got < n) {
    const std::string what =
        std::to_string(offset + got) + " (wanted " + std::to_string(offset + n) + " bytes)";
    if (store_file != nullptr) {
      return Status::Corruption(std::string(store_file) + " " + f.path() + " ends at " + what);
    }
    return Status(EIO, f.path() + " ends at " + what + ": the file shrank while loading");
  }
  return Status::OK();
}

Status AtRecord(const Status& st, const std::string& path, const RecordTask& r) {
  return Status(st.code(), st.message() + " (segment " + path + ", record at offset " +
                               std::to_string(r.extent.record_offset) + ")");
}

// Verifies one record of a read against the index's copy of its header and
// its payload checksum, or one data-file block against its extent; writes
// the windows of scratch reads into staging.
Status CheckRecord(const RecordTask& r, uint64_t ino, const char* record, bool in_place,
                   char* staging, const std::string& path, std::string* decoded) {
  if (r.extent.in_data_file) {  // read in place, never compressed
    Status st = format::CheckDataFileBlock(r.extent, std::string_view(record, r.extent.stored_len));
    if (!st.ok()) return Status(st.code(), st.message() + " (data file " + path + ")");
    return Status::OK();
  }
  format::RecordView rec;
  Status st = format::DecodeRecord(
      std::string_view(record, format::kRecordHeaderSize + r.extent.stored_len), &rec, decoded);
  if (st.ok()) st = format::CheckRecordForExtent(rec.header, r.extent, ino, r.file_offset);
  if (!st.ok()) return AtRecord(st, path, r);
  const char* data = rec.data.data();
  if (!in_place) {
    for (const Window& w : r.windows) {
      std::memcpy(staging + w.staging_offset, data + w.decoded_offset, w.length);
    }
  }
  return Status::OK();
}

// Per reader thread: where scratch reads land and zstd records decode.
struct ReaderBuffers {
  std::vector<char> scratch;
  std::string decoded;
};

Status FillChunk(const Chunk& chunk, uint64_t ino, char* staging, const PlanSources& src,
                 ReaderBuffers* rb) {
  for (const ReadTask& t : chunk.reads) {
    const bool through_file = t.source == kThroughFile;
    const io::File& f = through_file            ? *src.file
                        : t.source == kDataFile ? *src.data_file
                                                : *src.segments[t.source];
    const std::string& path = f.path();
    char* buf;
    if (t.in_place) {
      buf = staging + t.staging_offset;
    } else {
      if (rb->scratch.size() < t.length) rb->scratch.resize(t.length);
      buf = rb->scratch.data();
    }
    const char* store_file = through_file            ? nullptr
                             : t.source == kDataFile ? "data file"
                                                     : "segment";
    CKPTFS_RETURN_IF_ERROR(ReadFull(f, buf, t.length, t.offset, store_file));
    for (const RecordTask& r : t.records) {
      CKPTFS_RETURN_IF_ERROR(
          CheckRecord(r, ino, buf + r.read_offset, t.in_place, staging, path, &rb->decoded));
    }
  }
  for (const InlineTask& in : chunk.inlines) {
    std::memcpy(staging + in.staging_offset, in.data.data(), in.data.size());
  }
  return Status::OK();
}

}  // namespace

Status RunPipeline(const LoadPlan& plan, const PlanSources& src, Sink* sink,
                   const PipelineOptions& options) {
  if (plan.reads_data_file && src.data_file == nullptr) {
    return Status(EINVAL, "the plan reads a data file that is not open");
  }
  const size_t n = plan.chunks.size();
  if (n == 0) return sink->Finish();
  const int buffers = static_cast<int>(std::clamp<size_t>(options.buffers, 1, n));
  CKPTFS_ASSIGN_OR_RETURN(std::vector<char*> staging, sink->Staging(buffers, plan.buffer_bytes));

  std::mutex mu;  // guards everything below but `next`
  std::condition_variable cv;
  std::deque<int> free_slots;
  std::deque<std::pair<int, size_t>> filled;  // slot, chunk
  Status error;
  bool stop = false;
  for (int i = 0; i < buffers; ++i) free_slots.push_back(i);
  std::atomic<size_t> next{0};
  std::vector<std::vector<CopyRun>> runs(n);  // written by the chunk's reader

  auto fail = [&](const Status& st) {
    std::lock_guard<std::mutex> l(mu);
    if (error.ok()) error = st;
    stop = true;
    cv.notify_all();
  };
  auto reader = [&]() {
    ReaderBuffers rb;
    try {
      for (;;) {
        const size_t ci = next.fetch_add(1);
        if (ci >= n) return;
        int slot;
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return stop || !free_slots.empty(); });
          if (stop) return;
          slot = free_slots.front();
          free_slots.pop_front();
        }
        Status st = FillChunk(plan.chunks[ci], plan.ino, staging[slot], src, &rb);
        if (!st.ok()) return fail(st);
        runs[ci] = MergeCopies(plan.chunks[ci].copies);
        std::lock_guard<std::mutex> l(mu);
        filled.emplace_back(slot, ci);
        cv.notify_all();
      }
    } catch (const std::bad_alloc&) {
      fail(Status(ENOMEM, "out of memory while loading"));
    } catch (const std::exception& e) {
      fail(Status(EIO, std::string("loader: ") + e.what()));
    }
  };

  const int threads = static_cast<int>(std::clamp<size_t>(options.reader_threads, 1, n));
  std::vector<std::thread> readers;
  readers.reserve(threads);
  for (int i = 0; i < threads; ++i) readers.emplace_back(reader);

  std::deque<int> inflight;  // submitted slots, oldest first
  auto release = [&](int slot) {
    std::lock_guard<std::mutex> l(mu);
    free_slots.push_back(slot);
    cv.notify_all();
  };
  // Gives back every in-flight buffer whose copies ended; with `wait`, the
  // oldest one at least.
  auto retire = [&](bool wait) -> Status {
    while (!inflight.empty()) {
      Result<bool> done = sink->Done(inflight.front(), wait);
      if (!done.ok()) return done.status();
      if (!*done) break;
      release(inflight.front());
      inflight.pop_front();
      wait = false;
    }
    return Status::OK();
  };

  size_t consumed = 0;
  while (consumed < n) {
    std::pair<int, size_t> item{-1, 0};
    {
      std::unique_lock<std::mutex> l(mu);
      if (stop) break;
      if (filled.empty() && !inflight.empty()) {
        // Nothing to submit yet: wait for the oldest copy meanwhile, so its
        // buffer goes back to the readers as soon as possible.
      } else {
        cv.wait(l, [&] { return stop || !filled.empty(); });
        if (stop) break;
        item = filled.front();
        filled.pop_front();
      }
    }
    if (item.first < 0) {
      Status st = retire(/*wait=*/true);
      if (!st.ok()) {
        fail(st);
        break;
      }
      continue;
    }
    const Chunk& chunk = plan.chunks[item.second];
    Status st = sink->Submit(item.first, staging[item.first], runs[item.second], chunk.zeros);
    if (!st.ok()) {
      fail(st);
      release(item.first);
      break;
    }
    inflight.push_back(item.first);
    ++consumed;
    st = retire(/*wait=*/false);
    if (!st.ok()) {
      fail(st);
      break;
    }
  }
  // Whatever happened: no copy may still read a staging buffer, and no reader
  // may still run, when this returns.
  for (int slot : inflight) {
    Result<bool> done = sink->Done(slot, /*wait=*/true);
    if (!done.ok()) fail(done.status());
  }
  Status fin = sink->Finish();
  if (!fin.ok()) fail(fin);
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    cv.notify_all();
  }
  for (std::thread& t : readers) t.join();
  std::lock_guard<std::mutex> l(mu);
  return error;
}

}  // namespace ckptfs::gpu
