#include "gpu/pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <new>
#include <optional>
#include <thread>

#include "base/mutex.h"
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

// One load: reader threads fill staging buffers chunk by chunk (any chunk
// into any free buffer); the calling thread submits each filled buffer to
// the sink and gives it back to the readers once the sink's copy out of it
// ended.
class Pipeline {
 public:
  Pipeline(const LoadPlan& plan, const PlanSources& src, Sink* sink, std::vector<char*> staging)
      : plan_(plan),
        src_(src),
        sink_(sink),
        staging_(std::move(staging)),
        runs_(plan.chunks.size()) {
    for (int i = 0; i < static_cast<int>(staging_.size()); ++i) free_slots_.push_back(i);
  }

  // Loads with `threads` readers. Whatever happens, no copy still reads a
  // staging buffer and no reader still runs when it returns.
  Status Run(int threads) EXCLUDES(mu_) {
    std::vector<std::thread> readers;
    readers.reserve(threads);
    for (int i = 0; i < threads; ++i) readers.emplace_back([this] { Read(); });
    Submit();
    for (int slot : inflight_) {
      Result<bool> done = sink_->Done(slot, /*wait=*/true);
      if (!done.ok()) Fail(done.status());
    }
    Status fin = sink_->Finish();
    if (!fin.ok()) Fail(fin);
    {
      MutexLock l(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    for (std::thread& t : readers) t.join();
    MutexLock l(&mu_);
    return error_;
  }

 private:
  // Records the first error and stops every thread.
  void Fail(const Status& st) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (error_.ok()) error_ = st;
    stop_ = true;
    cv_.SignalAll();
  }

  // A reader thread: takes the next chunk and a free buffer, fills it.
  void Read() EXCLUDES(mu_) {
    ReaderBuffers rb;
    try {
      for (;;) {
        const size_t ci = next_.fetch_add(1);
        if (ci >= plan_.chunks.size()) return;
        int slot;
        {
          MutexLock l(&mu_);
          while (!stop_ && free_slots_.empty()) cv_.Wait(&mu_);
          if (stop_) return;
          slot = free_slots_.front();
          free_slots_.pop_front();
        }
        Status st = FillChunk(plan_.chunks[ci], plan_.ino, staging_[slot], src_, &rb);
        if (!st.ok()) return Fail(st);
        runs_[ci] = MergeCopies(plan_.chunks[ci].copies);
        MutexLock l(&mu_);
        filled_.emplace_back(slot, ci);
        cv_.SignalAll();
      }
    } catch (const std::bad_alloc&) {
      Fail(Status(ENOMEM, "out of memory while loading"));
    } catch (const std::exception& e) {
      Fail(Status(EIO, std::string("loader: ") + e.what()));
    }
  }

  // The calling thread: submits every chunk as it is filled, until all are
  // submitted or something failed.
  void Submit() EXCLUDES(mu_) {
    size_t submitted = 0;
    while (submitted < plan_.chunks.size()) {
      std::optional<std::pair<int, size_t>> item;  // slot, chunk
      {
        MutexLock l(&mu_);
        if (stop_) return;
        // Nothing to submit yet while copies run: wait for the oldest copy
        // meanwhile (below), so its buffer goes back to the readers as soon
        // as possible.
        if (!filled_.empty() || inflight_.empty()) {
          while (!stop_ && filled_.empty()) cv_.Wait(&mu_);
          if (stop_) return;
          item = filled_.front();
          filled_.pop_front();
        }
      }
      Status st;
      if (!item) {
        st = Retire(/*wait=*/true);
      } else {
        const auto [slot, ci] = *item;
        st = sink_->Submit(slot, staging_[slot], runs_[ci], plan_.chunks[ci].zeros);
        if (!st.ok()) {
          Fail(st);
          Release(slot);
          return;
        }
        inflight_.push_back(slot);
        ++submitted;
        st = Retire(/*wait=*/false);
      }
      if (!st.ok()) return Fail(st);
    }
  }

  void Release(int slot) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    free_slots_.push_back(slot);
    cv_.SignalAll();
  }

  // Gives back every in-flight buffer whose copies ended; with `wait`, the
  // oldest one at least.
  Status Retire(bool wait) EXCLUDES(mu_) {
    while (!inflight_.empty()) {
      Result<bool> done = sink_->Done(inflight_.front(), wait);
      if (!done.ok()) return done.status();
      if (!*done) break;
      Release(inflight_.front());
      inflight_.pop_front();
      wait = false;
    }
    return Status::OK();
  }

  const LoadPlan& plan_;
  const PlanSources& src_;
  Sink* const sink_;
  const std::vector<char*> staging_;
  std::atomic<size_t> next_{0};  // the next chunk a reader takes
  // Per chunk: its copies, written by its reader before it is in filled_.
  std::vector<std::vector<CopyRun>> runs_;
  std::deque<int> inflight_;  // the calling thread's: submitted slots, oldest first

  Mutex mu_;
  CondVar cv_;
  std::deque<int> free_slots_ GUARDED_BY(mu_);
  std::deque<std::pair<int, size_t>> filled_ GUARDED_BY(mu_);  // slot, chunk
  Status error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
};

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
  Pipeline pipeline(plan, src, sink, std::move(staging));
  return pipeline.Run(static_cast<int>(std::clamp<size_t>(options.reader_threads, 1, n)));
}

}  // namespace ckptfs::gpu
