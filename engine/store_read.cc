// The read path of StoreImpl: extents to records, records fetched with
// coalesced backing reads (and a prefetch of what follows a sequential
// read), verified and cached, and data-file blocks.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "engine/store_impl.h"

namespace ckptfs::engine {

namespace {

// Backing reads at least this large start a background read of the next
// kPrefetchBytes of their segment.
constexpr uint64_t kSequentialReadBytes = 512 << 10;
constexpr uint64_t kPrefetchBytes = 4 << 20;

// ReadRouted's `*from` for bytes this host's RangeCache gave.
constexpr char kFromSelf[] = "self";

std::string KeyName(uint64_t segment_id, uint64_t offset) {
  return "segment " + std::to_string(segment_id) + " offset " + std::to_string(offset);
}

// Buffers of one thread that its pass-through reads reuse: a buffer is free
// again once no record of the last request refers to it.
class ScratchBuffers {
 public:
  std::shared_ptr<char[]> Take(uint64_t len) {
    // Sizes round up, so that records of varied sizes settle on few buffers.
    len = (len + kGrain - 1) / kGrain * kGrain;
    for (Buffer& b : buffers_) {
      if (b.bytes.use_count() == 1 && b.len >= len) return b.bytes;
    }
    for (Buffer& b : buffers_) {
      if (b.bytes.use_count() == 1) {
        b = Buffer{std::shared_ptr<char[]>(new char[len]), len};
        return b.bytes;
      }
    }
    if (buffers_.size() >= kMaxBuffers) return std::shared_ptr<char[]>(new char[len]);
    buffers_.push_back(Buffer{std::shared_ptr<char[]>(new char[len]), len});
    return buffers_.back().bytes;
  }

 private:
  static constexpr size_t kMaxBuffers = 8;
  static constexpr uint64_t kGrain = 256 << 10;
  struct Buffer {
    std::shared_ptr<char[]> bytes;
    uint64_t len = 0;
  };
  std::vector<Buffer> buffers_;
};

ScratchBuffers& ThreadScratch() {
  thread_local ScratchBuffers scratch;
  return scratch;
}

}  // namespace

Status StoreImpl::FetchRecords(const std::vector<RecordRef>& want, RecordUse use,
                               RecordMap* out, bool sealed) {
  std::vector<RecordRef> needed;
  std::set<std::pair<uint64_t, uint64_t>> missing;
  for (const RecordRef& ref : want) {
    auto key = std::make_pair(ref.segment_id, ref.offset);
    if (out->count(key) || !missing.insert(key).second) continue;
    if (RecordData d = cache_->Lookup(ref.segment_id, ref.offset)) {
      counters_.cache_hits++;
      (*out)[key] = std::move(d);
      continue;
    }
    counters_.cache_misses++;
    needed.push_back(ref);
  }
  if (needed.empty()) return Status::OK();

  // Records used whole once are read exactly: neighbours that a stretched
  // read would bring are the rest of the same big file, which the kernel
  // asks for next, in requests of their own.
  CoalesceSettings cs;
  if (use == RecordUse::kMayRepeat) cs = {coalesce_gap_.load(), coalesce_max_.load()};
  for (const BackingRead& br : PlanReads(std::move(needed), cs)) {
    CKPTFS_RETURN_IF_ERROR(ServeBackingRead(br, use, cs, out, sealed));
  }
  return Status::OK();
}

Status StoreImpl::ServeBackingRead(const BackingRead& br, RecordUse use,
                                   const CoalesceSettings& cs, RecordMap* out, bool sealed) {
  // A read that coalescing stretched past the records it needs may overlap
  // another thread's stretched read: wait for that one, whose records are
  // then in the cache (unless evicted since). Reads of exactly what they
  // need (large sequential reads) go ahead at once.
  std::optional<InflightReads::Claim> claim;
  if (br.length > br.required) {
    claim.emplace(&inflight_, br.segment_id, br.offset, br.length);
    bool all_cached = true;
    for (const RecordRef& r : br.records) {
      RecordData d = cache_->Lookup(r.segment_id, r.offset);
      if (d == nullptr) {
        all_cached = false;
        break;
      }
      (*out)[{r.segment_id, r.offset}] = std::move(d);
    }
    if (all_cached) return Status::OK();
  }
  if (br.length >= kSequentialReadBytes && (!sealed || peer_reads_ == nullptr)) {
    // A large read is most likely one of a sequential series: have the
    // kernel fetch what follows while this one is served. (Not where
    // peers may serve it: the host that serves the file reads it.)
    segments_->Prefetch(br.segment_id, br.offset + br.length, kPrefetchBytes);
  }
  // A large request that uses each of its records whole is the kernel
  // reading a big file ahead (records end at aligned file offsets:
  // AppendRecords; the write-back cache may cut them shorter): the
  // kernel's page cache keeps those bytes, so the record cache does not
  // keep them again, and each read of exactly its records goes into a
  // buffer of this thread's that the next such request reuses (no fresh
  // pages to fault in). Records that a request cuts (their rest is wanted
  // next) and stretched reads that bring neighbours are cached.
  ReadBuffer rb(br);
  rb.pass_through = use == RecordUse::kWholeOnce && br.length == br.required;
  rb.max_tail = cs.max;
  if (rb.pass_through) {
    rb.bytes = ThreadScratch().Take(br.length);
  } else {
    rb.bytes.reset(new char[br.length]);
  }
  auto from_storage = [&]() -> Result<size_t> {
    CKPTFS_ASSIGN_OR_RETURN(const size_t n,
                            ReadSegmentBytes(br.segment_id, br.offset, br.length, rb.bytes.get()));
    // The kernel caches what this read returns: the segment file's pages
    // of it need not stay cached too.
    if (rb.pass_through) segments_->Evict(br.segment_id, br.offset, n);
    return n;
  };
  rb.sealed = sealed;
  return ReadIntact(format::SegmentFileName(br.segment_id), br.offset, br.length,
                    rb.bytes.get(), sealed, from_storage, [&](size_t n) {
                      rb.n = n;
                      rb.served = 0;
                      return DecodeBackingRead(&rb, out);
                    });
}

Status StoreImpl::ReadIntact(const std::string& name, uint64_t offset, size_t len, char* dst,
                             bool sealed, const std::function<Result<size_t>()>& storage,
                             const std::function<Status(size_t n)>& intact) {
  if (!sealed || peer_reads_ == nullptr) {
    CKPTFS_ASSIGN_OR_RETURN(const size_t n, storage());
    return intact(n);
  }
  std::string from;
  CKPTFS_ASSIGN_OR_RETURN(const size_t got, ReadRouted(name, offset, len, dst, &from, storage));
  Status s = intact(got);
  if (s.ok() || from.empty()) return s;
  // Never bytes from elsewhere that fail their checksum: the storage's
  // instead. A peer that sent as many bytes as the storage has was wrong;
  // one that sent fewer had an older view of the file.
  CKPTFS_ASSIGN_OR_RETURN(const size_t n, storage());
  if (from != kFromSelf) peer_reads_->Reject(from, /*damaged=*/got >= n);
  return intact(n);
}

Result<size_t> StoreImpl::ReadRouted(const std::string& name, uint64_t offset, size_t len,
                                     char* dst, std::string* from,
                                     const std::function<Result<size_t>()>& storage) {
  from->clear();
  const PeerReads::Route route = peer_reads_->RouteOf(name);
  if (route.kind == PeerReads::Route::kSelf && served_ != nullptr) {
    // Through the blocks this host serves the others: the storage reads
    // each once for all of them.
    Result<size_t> n = served_->Read(name, offset, len, dst);
    if (n.ok()) {
      *from = kFromSelf;
      return n;
    }
  } else if (route.kind == PeerReads::Route::kPeer) {
    Result<size_t> n = peer_reads_->Read(route.address, name, offset, len, dst);
    if (n.ok()) {
      *from = route.address;
      return n;
    }
  }
  return storage();
}

Status StoreImpl::DecodeBackingRead(ReadBuffer* rb_in, RecordMap* out) {
  ReadBuffer& rb = *rb_in;
  const BackingRead& br = rb.br;
  for (size_t i = 0; i < br.records.size(); ++i) {
    const RecordRef& r = br.records[i];
    Status err;
    uint64_t next = 0;
    RecordData d = DecodeRecordAt(&rb, r.offset - br.offset, &err, &next);
    if (d == nullptr) return err;
    (*out)[{r.segment_id, r.offset}] = d;
    // Neighbouring records in the same read go into the cache too.
    const uint64_t stop = i + 1 < br.records.size() ? br.records[i + 1].offset - br.offset : rb.n;
    while (next < stop) {
      Status ignore;
      if (DecodeRecordAt(&rb, next, &ignore, &next) == nullptr) break;
    }
  }
  if (rb.served > 1) counters_.coalesced_reads++;
  return Status::OK();
}

RecordData StoreImpl::DecodeRecordIn(ReadBuffer* rb, const std::shared_ptr<char[]>& bytes,
                                     size_t bytes_held, size_t avail, uint64_t base,
                                     uint64_t pos, Status* err) {
  format::RecordView rec;
  std::string decoded;
  *err = format::DecodeRecord(std::string_view(bytes.get() + pos, avail - pos), &rec, &decoded);
  if (!err->ok()) {
    *err = err->Annotate(KeyName(rb->br.segment_id, base + pos));
    return nullptr;
  }
  auto data = std::make_shared<RecordBytes>();
  data->header = rec.header;
  if (rec.header.codec == format::Codec::kNone) {
    if (!rb->pass_through && 2 * rec.payload.size() < bytes_held) {
      // Cached, and a small part of its buffer: a copy of its own, so
      // that the cache, which counts what its entries hold
      // (RecordBytes::held), keeps records rather than read buffers.
      std::shared_ptr<char[]> own(new char[rec.payload.size()]);
      std::memcpy(own.get(), rec.payload.data(), rec.payload.size());
      data->bytes = std::string_view(own.get(), rec.payload.size());
      data->owner = std::move(own);
    } else {
      data->owner = bytes;
      data->bytes = rec.payload;
      data->held = bytes_held;
    }
  } else {
    auto owned = std::make_shared<std::string>(std::move(decoded));
    data->bytes = *owned;
    data->owner = std::move(owned);
  }
  if (!rb->pass_through) cache_->Insert(rb->br.segment_id, base + pos, data);
  rb->served++;
  return data;
}

RecordData StoreImpl::DecodeRecordAt(ReadBuffer* rb, uint64_t pos, Status* err, uint64_t* next) {
  const BackingRead& br = rb->br;
  const size_t n = rb->n;
  if (pos + format::kRecordHeaderSize > n) {
    *err = Status::Corruption(KeyName(br.segment_id, br.offset + pos) + ": segment ends early");
    return nullptr;
  }
  format::RecordHeader h;
  *err = format::DecodeRecordHeader(std::string_view(rb->bytes.get() + pos, n - pos), &h);
  if (!err->ok()) return nullptr;
  const uint64_t whole = format::kRecordHeaderSize + h.stored_len;
  if (pos + whole <= n) {
    *next = pos + whole;
    return DecodeRecordIn(rb, rb->bytes, br.length, n, br.offset, pos, err);
  }
  const uint64_t missing = pos + whole - n;
  if (n < br.length || missing > rb->max_tail) {  // the segment ends, or not a record we want
    *err = Status::Corruption(KeyName(br.segment_id, br.offset + pos) + ": record truncated");
    return nullptr;
  }
  std::shared_ptr<char[]> rec(new char[whole]);
  std::memcpy(rec.get(), rb->bytes.get() + pos, n - pos);
  char* const tail = rec.get() + (n - pos);
  RecordData d;
  Status s = ReadIntact(
      format::SegmentFileName(br.segment_id), br.offset + n, missing, tail, rb->sealed,
      [&] { return ReadSegmentBytes(br.segment_id, br.offset + n, missing, tail); },
      [&](size_t m) {
        d = DecodeRecordIn(rb, rec, whole, (n - pos) + m, br.offset + pos, 0, err);
        return d != nullptr ? Status::OK() : *err;
      });
  if (!s.ok()) {
    *err = s;
    return nullptr;
  }
  *next = pos + whole;
  return d;
}

Result<size_t> StoreImpl::Read(Ino ino, uint64_t offset, size_t len, char* buf) {
  uint64_t size;
  {
    InodeRef s(&inodes_, ino);
    MutexLock l(&s->mu);
    CKPTFS_RETURN_IF_ERROR(LoadLocked(s.get()));
    if (S_ISDIR(s->attr.mode)) return Status(EISDIR, "is a directory");
    size = s->attr.size;
  }
  counters_.reads++;
  if (offset >= size || len == 0) return size_t{0};
  EpochGate::Guard gate(&io_gate_);  // compaction keeps our extents' segments meanwhile
  len = static_cast<size_t>(std::min<uint64_t>(len, size - offset));
  const uint64_t end = offset + len;

  if (closed_) return Status(EIO, "store is closed");
  std::vector<Extent> ex;
  if (extent_maps_.Collect(ino, offset, end, &ex) != ExtentMapCache::Lookup::kHeld) {
    CKPTFS_ASSIGN_OR_RETURN(const bool covered, ExtentCovering(ino, offset, end, &ex));
    if (!covered) {
      CKPTFS_RETURN_IF_ERROR(CollectIndexExtents(ino, offset, end, &ex));
      CKPTFS_RETURN_IF_ERROR(CheckHoleOfLiveFile(ino, ex, offset, end));
    }
  }
  Status st = ReadExtentsInto(ino, ex, offset, end, buf);
  if (!st.ok() && mode_->OthersWrite() && st.payload<SegmentMissing>() != nullptr) {
    // The host that wrote the records compacted them into another segment
    // and deleted this one since the extents were read: read them again.
    // A held sealed tree's snapshot named them: the tree was removed since
    // (compaction leaves a live snapshot's segments), so the index answers.
    ex.clear();
    extent_maps_.Forget(ino);
    snapshots_.Drop(ino);
    CKPTFS_RETURN_IF_ERROR(CollectIndexExtents(ino, offset, end, &ex));
    CKPTFS_RETURN_IF_ERROR(CheckHoleOfLiveFile(ino, ex, offset, end));
    st = ReadExtentsInto(ino, ex, offset, end, buf);
  }
  CKPTFS_RETURN_IF_ERROR(st);
  counters_.read_bytes += len;
  return len;
}

Status StoreImpl::CheckHoleOfLiveFile(Ino ino, const std::vector<Extent>& ex, uint64_t start,
                                      uint64_t end) {
  if (!mode_->OthersWrite()) return Status::OK();
  uint64_t covered = start;  // the extents come in offset order
  for (const Extent& e : ex) {
    if (e.offset > covered) break;
    covered = std::max(covered, e.offset + e.value.length);
  }
  if (covered >= end) return Status::OK();
  // Inode numbers are never used twice: gone now, it was gone or going
  // when its extents were read.
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                          IndexGet(Space::kInodes, format::InodeKey(ino)));
  if (v.has_value()) return Status::OK();
  return Status(ESTALE, "inode " + std::to_string(ino) + " was removed by another host");
}

Status StoreImpl::ReadExtentsInto(Ino ino, const std::vector<Extent>& ex, uint64_t offset,
                                  uint64_t end, char* buf) {
  Status st = ReadExtentsOnce(ino, ex, offset, end, buf);
  // Another host's segment or data file that seems to end early, or to hold
  // other bytes: this host's client of the shared filesystem may hold an
  // old size of it (or old pages), or the other host's write may still be
  // on its way to the server. Its files are opened again, which makes the
  // client ask the server, and read again, for up to about a quarter of a
  // second. A missing segment is the caller's to handle.
  auto reread = [&](const Status& s) {
    return s.IsCorruption() && mode_->OthersWrite() && s.payload<SegmentMissing>() == nullptr;
  };
  if (reread(st)) {
    std::set<uint64_t> segments;
    bool data_file = false;
    for (const Extent& e : ex) {
      data_file |= e.value.in_data_file;
      if (!e.value.is_inline && !e.value.in_data_file && !segments_->Owns(e.value.segment_id)) {
        segments.insert(e.value.segment_id);
      }
    }
    for (int wait_ms : {0, 10, 40, 160}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      counters_.file_refreshes++;
      // A file that cannot be opened again (gone since) leaves the read's
      // own error standing.
      bool refreshed = true;
      for (uint64_t id : segments) refreshed &= segments_->Refresh(id).ok();
      if (data_file) refreshed &= data_files_->Refresh(ino).ok();
      if (!refreshed) break;
      st = ReadExtentsOnce(ino, ex, offset, end, buf);
      if (!reread(st)) break;
    }
  }
  if (st.IsCorruption() && st.payload<SegmentMissing>() == nullptr) counters_.checksum_errors++;
  return st;
}

Status StoreImpl::ReadExtentsOnce(Ino ino, const std::vector<Extent>& ex, uint64_t offset,
                                  uint64_t end, char* buf) {
  ScratchBuffers& scratch = ThreadScratch();
  const uint64_t len = end - offset;
  std::vector<RecordRef> want;
  // A large request that takes every record whole will not want them again.
  RecordUse use = len >= kSequentialReadBytes ? RecordUse::kWholeOnce : RecordUse::kMayRepeat;
  for (const Extent& e : ex) {
    if (e.value.is_inline || e.value.in_data_file) continue;
    want.push_back(RecordRef{e.value.segment_id, e.value.record_offset,
                             format::kRecordHeaderSize + e.value.stored_len});
    if (e.value.skip != 0 || e.value.length != e.value.raw_len || e.offset < offset ||
        e.offset + e.value.length > end) {
      use = RecordUse::kMayRepeat;
    }
  }
  std::map<std::pair<uint64_t, uint64_t>, RecordData> records;
  const bool sealed = peer_reads_ != nullptr && sealed_.Contains(ino);
  CKPTFS_RETURN_IF_ERROR(FetchRecords(want, use, &records, sealed));
  // Every extent against the record it points at (cached ones too): a record
  // with a valid checksum is still the wrong data if it is not that record.
  for (const Extent& e : ex) {
    if (e.value.is_inline || e.value.in_data_file) continue;
    const RecordData& d = records[{e.value.segment_id, e.value.record_offset}];
    Status s = format::CheckRecordForExtent(d->header, e.value, ino, e.offset);
    if (!s.ok()) return s.Annotate(KeyName(e.value.segment_id, e.value.record_offset));
  }

  uint64_t pos = offset;  // bytes before `pos` are filled
  for (const Extent& e : ex) {
    const uint64_t from = std::max(offset, e.offset);
    const uint64_t to = std::min(end, e.offset + e.value.length);
    if (from >= to) continue;
    if (from > pos) std::memset(buf + (pos - offset), 0, from - pos);  // hole
    if (e.value.in_data_file) {
      // A block read whole lands in place; a window of one comes from the
      // blocks read and not yet taken whole (VerifiedBlocks), so that a
      // reader whose requests do not line up with the blocks reads each
      // from the disk once. Either way its checksum is checked first.
      const format::ExtentValue& v = e.value;
      const bool whole = v.skip == 0 && v.length == v.stored_len && from == e.offset &&
                         to == e.offset + v.length;
      const bool once = len >= kSequentialReadBytes;
      if (whole) {
        CKPTFS_RETURN_IF_ERROR(ReadDataFileBlock(ino, v, once, buf + (from - offset)));
      } else {
        // A window: through the OS's cache, whose pages of the block go
        // once reads have taken all of it (VerifiedBlocks).
        const VerifiedBlocks::Key key{ino, v.record_offset, v.stored_len, v.checksum};
        const uint64_t in_block = v.skip + (from - e.offset);
        CKPTFS_ASSIGN_OR_RETURN(
            VerifiedBlocks::Taken taken,
            verified_blocks_.Get(key, in_block, in_block + (to - from),
                                 [&]() -> Result<std::shared_ptr<const char[]>> {
                                   std::shared_ptr<char[]> read = scratch.Take(v.stored_len);
                                   CKPTFS_RETURN_IF_ERROR(ReadDataFileBlock(ino, v, /*once=*/false, read.get()));
                                   return std::shared_ptr<const char[]>(std::move(read));
                                 }));
        std::memcpy(buf + (from - offset), taken.bytes.get() + in_block, to - from);
        if (taken.whole) data_files_->Evict(ino, taken.evict_offset, taken.evict_length);
      }
    } else {
      const char* src;
      if (e.value.is_inline) {
        src = e.value.inline_data.data() + (from - e.offset);
      } else {
        const RecordData& d = records[{e.value.segment_id, e.value.record_offset}];
        src = d->bytes.data() + e.value.skip + (from - e.offset);
      }
      std::memcpy(buf + (from - offset), src, to - from);
    }
    pos = std::max(pos, to);
  }
  if (pos < end) std::memset(buf + (pos - offset), 0, end - pos);
  return Status::OK();
}

Status StoreImpl::ReadDataFileBlock(Ino ino, const format::ExtentValue& v, bool once, char* dst) {
  auto from_storage = [&] { return ReadDataFileBytes(ino, v.record_offset, v.stored_len, dst, once); };
  return ReadIntact(format::DataFileName(ino), v.record_offset, v.stored_len, dst,
                    peer_reads_ != nullptr && sealed_.Contains(ino), from_storage,
                    [&](size_t n) {
                      Status cs = format::CheckDataFileBlock(v, std::string_view(dst, n));
                      return cs.ok() ? cs : cs.Annotate("inode " + std::to_string(ino));
                    });
}

}  // namespace ckptfs::engine
