// What StoreImpl reports and how it is set: segments, counters, memory,
// space (statfs), the namespace's counts, the settings that change at run
// time, and the index's backups.
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>

#include "engine/store_impl.h"
#include "meta/hosts.h"

namespace ckptfs::engine {

std::string StoreImpl::SegmentPath(uint64_t segment_id) const {
  return dir_ + "/" + format::SegmentFileName(segment_id);
}

Result<std::vector<SegmentInfo>> StoreImpl::ListSegments() {
  if (closed_) return Status(EIO, "store is closed");
  std::vector<SegmentInfo> out;
  for (uint64_t id : segments_->Ids()) {
    SegmentInfo info;
    info.id = id;
    info.path = SegmentPath(id);
    info.file_bytes = segments_->Size(id);
    const std::string what = "accounting of segment " + std::to_string(id);
    CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                            IndexGet(Space::kSegments, format::SegmentKey(id)));
    if (v.has_value()) {  // no value yet: nothing committed counts it
      format::SegmentStat st;
      Status ds = format::DecodeSegmentStat(*v, &st);
      if (ds.ok()) ds = format::CheckSegmentStat(st);
      if (!ds.ok()) return Status(ds.code(), what + ": " + ds.message());
      info.live_bytes = st.live;
      info.dead_bytes = st.dead;
      info.sealed = st.sealed != 0;
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::vector<HostInfo>> StoreImpl::Hosts() {
  std::vector<HostInfo> out;
  if (!mode_->MountsHoldHosts()) return out;
  CKPTFS_ASSIGN_OR_RETURN(auto hosts, meta::ListHosts(kv()));
  CKPTFS_ASSIGN_OR_RETURN(auto peers, PeerAddresses(kv()));
  const int64_t now = meta::WallMs();
  for (auto& [name, v] : hosts) {
    HostInfo h;
    h.mounted = !meta::HostIsFree(kv(), name, v, now);
    if (auto p = peers.find(name); h.mounted && p != peers.end()) h.peer = p->second;
    h.name = std::move(name);
    h.id = v.id;
    h.holder = std::move(v.holder);
    h.pid = v.pid;
    h.machine = std::move(v.machine);
    h.lease_until_ms = v.lease_until_ms;
    out.push_back(std::move(h));
  }
  return out;
}

Result<EngineStats> StoreImpl::GetStats() {
  CKPTFS_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, ListSegments());
  EngineStats s;
  s.reads = counters_.reads;
  s.read_bytes = counters_.read_bytes;
  s.writes = counters_.writes;
  s.write_bytes = counters_.write_bytes;
  s.backing_reads = counters_.backing_reads;
  s.backing_read_bytes = counters_.backing_read_bytes;
  s.coalesced_reads = counters_.coalesced_reads;
  s.cache_hits = counters_.cache_hits;
  s.cache_misses = counters_.cache_misses;
  s.inline_writes = counters_.inline_writes;
  s.records_written = counters_.records_written;
  s.stored_bytes = counters_.stored_bytes;
  s.fsyncs = counters_.fsyncs;
  s.device_syncs = syncer_->flushes();
  s.checksum_errors = counters_.checksum_errors;
  s.data_file_writes = counters_.data_file_writes;
  s.data_file_write_bytes = counters_.data_file_write_bytes;
  s.data_file_reads = counters_.data_file_reads;
  s.data_file_read_bytes = counters_.data_file_read_bytes;
  s.direct_writes = counters_.direct_writes;
  s.direct_adoptions = counters_.direct_adoptions;
  s.direct_adopted_bytes = counters_.direct_adopted_bytes;
  s.direct_rereads = counters_.direct_rereads;
  s.file_refreshes = counters_.file_refreshes;
  s.owned_given_up = host_.ownership().given_up();
  s.owned_asked = host_.ownership().asked();
  s.owned_taken_over = host_.ownership().taken_over();
  s.owned_requests_heard = host_.ownership().heard();
  s.read_grants = host_.ownership().read_grants();
  s.read_grants_given_up = host_.ownership().reads_given_up();
  s.read_grants_asked = host_.ownership().reads_asked();
  if (peers_ != nullptr) {
    const peer::ServerStats served = peers_->stats();
    s.peer_connections = served.connections;
    s.peer_refused = served.refused;
    s.peer_requests = served.requests;
    s.peer_bad_requests = served.bad_requests;
    s.peer_bytes_served = served.bytes_served;
  }
  if (served_ != nullptr) s.peer_cache_file_bytes = served_->stats().file_bytes;
  if (peer_reads_ != nullptr) {
    const PeerReads::Stats read = peer_reads_->stats();
    s.peer_reads = read.reads;
    s.peer_read_bytes = read.read_bytes;
    s.peer_failures = read.failures;
    s.peer_rejected = read.rejected;
  }
  if (objects_ != nullptr) {
    const io::ObjectCounters objects = objects_->counters();
    s.object_reads = objects.reads;
    s.object_writes = objects.writes;
    s.object_other = objects.other;
    s.object_read_bytes = objects.bytes_read;
    s.object_write_bytes = objects.bytes_written;
  }
  const meta::IndexWaits waits = kv()->Waits();
  s.index_round_trips = waits.round_trips;
  s.index_wait_ns = waits.wait_ns;
  const HeldSnapshots::Stats held = snapshots_.stats();
  s.snapshot_reads = held.reads;
  s.sealed_trees_held = held.trees;
  s.sealed_inodes_held = held.inodes;
  for (const SegmentInfo& seg : segments) {  // counters ListSegments checked
    s.segments++;
    s.live_bytes += static_cast<uint64_t>(seg.live_bytes);
    s.dead_bytes += static_cast<uint64_t>(seg.dead_bytes);
  }
  return s;
}

StoreOptions StoreImpl::GetOptions() {
  StoreOptions o = options_;
  o.coalesce_gap = coalesce_gap_.load();
  o.coalesce_max = coalesce_max_.load();
  o.cache_size = cache_->capacity();
  o.compression = compression_level_.load();
  return o;
}

Status StoreImpl::UpdateOptions(const std::function<void(StoreOptions*)>& change) {
  if (closed_) return Status(EIO, "store is closed");
  MutexLock l(&update_mu_);
  const StoreOptions current = GetOptions();
  StoreOptions wanted = current;
  change(&wanted);
  // Everything but the run-time settings must be as it is.
  StoreOptions fixed = wanted;
  fixed.coalesce_gap = current.coalesce_gap;
  fixed.coalesce_max = current.coalesce_max;
  fixed.cache_size = current.cache_size;
  fixed.compression = current.compression;
  if (!(fixed == current)) {
    return Status(EINVAL,
                  "only coalesce_gap, coalesce_max, cache_size and compression change "
                  "while the store is open");
  }
  CKPTFS_RETURN_IF_ERROR(ValidateStoreOptions(wanted));
  coalesce_gap_ = wanted.coalesce_gap;
  coalesce_max_ = wanted.coalesce_max;
  if (wanted.cache_size != current.cache_size) cache_->SetCapacity(wanted.cache_size);
  compression_level_ = wanted.compression;
  return Status::OK();
}

void StoreImpl::DropCache() {
  cache_->Clear();
  if (served_ != nullptr) served_->Clear();
}

EngineMemory StoreImpl::MemoryUse() {
  EngineMemory m;
  m.record_cache = cache_->bytes();
  m.index_memtables = index_ != nullptr ? index_->MemtableBytes() : 0;
  m.index_block_cache = index_ != nullptr ? index_->BlockCacheBytes() : 0;
  m.extent_maps = extent_maps_.bytes();
  m.verified_blocks = verified_blocks_.bytes();
  m.sealed_snapshots = snapshots_.MemoryBytes();
  m.peer_ranges = served_ != nullptr ? served_->stats().held_bytes : 0;
  return m;
}

Status StoreImpl::ReleaseIdleMemory() {
  // Below this a flush would make table files of a few keys for little.
  constexpr uint64_t kWorthFlushing = 4ull << 20;
  if (options_.read_only || closed_ || index_ == nullptr ||
      index_->MemtableBytes() < kWorthFlushing) {
    return Status::OK();
  }
  return index_->Flush();
}

Status StoreImpl::BackupIndex(int64_t max_age_s) {
  if (options_.read_only || index_ == nullptr || !index_->CanBackUp()) return Status::OK();
  MutexLock l(&backup_mu_);
  return index_->Backup(::time(nullptr), max_age_s);
}

EngineMemory EngineMemoryBound(const StoreOptions& options) {
  EngineMemory m;
  m.record_cache = options.cache_size;
  m.index_memtables = kIndexMemtableBytes;
  m.index_block_cache = kIndexBlockCacheBytes;
  m.extent_maps = ExtentMapCache::MaxBytes(ExtentMapCache::kDefaultMaxExtents,
                                           ExtentMapCache::kDefaultMaxInlineBytes);
  m.verified_blocks = std::max<uint64_t>(VerifiedBlocks::kBytes, options.max_record_bytes);
  if (!options.meta.empty()) m.sealed_snapshots = HeldSnapshots::MaxMemory();
  if (!options.meta.empty() && !options.read_only && options.peers != "off") {
    m.peer_ranges = RangeCache::MemoryBound(options.peer_cache, !options.peer_cache_dir.empty()) +
                    uint64_t{kPeerConnections} * kPeerMaxRead;
  }
  return m;
}

Result<FsStats> StoreImpl::StatFs() {
  if (closed_) return Status(EIO, "store is closed");
  struct statvfs vfs;
  if (::statvfs(dir_.c_str(), &vfs) != 0) return Status::IOError(errno, "statvfs " + dir_);
  FsStats st;
  st.block_size = vfs.f_frsize;
  st.total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  st.free_bytes = static_cast<uint64_t>(vfs.f_bfree) * vfs.f_frsize;
  st.avail_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  {
    // Reserved space counts as used, as preallocated blocks do, and
    // min_free is not available. What is left is what one fallocate
    // can reserve (Reserve: record headers included), and so what writes can
    // take (CheckSpace).
    MutexLock l(&space_mu_);
    const uint64_t reserved = reservations_.charge();
    st.free_bytes -= std::min(st.free_bytes, reserved);
    const uint64_t kept = reserved + options_.min_free;
    st.avail_bytes = Reservations::LargestFitting(st.avail_bytes - std::min(st.avail_bytes, kept));
  }
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                          IndexGet(Space::kMeta, format::kMetaInodeCount));
  if (!v.has_value()) return Status(EIO, "read inode_count: not found");
  if (v->size() != 8) return Status::Corruption("inode_count value is not 8 bytes");
  st.inodes = format::GetLE64(v->data());
  return st;
}

Result<NamespaceCounts> StoreImpl::CountNamespace() {
  if (closed_) return Status(EIO, "store is closed");
  NamespaceCounts c;
  Status bad;
  CKPTFS_RETURN_IF_ERROR(IndexScan(Space::kInodes, "", "", [&](std::string_view k,
                                                                std::string_view value) {
    format::InodeValue v;
    Status s = format::DecodeInode(value, &v);
    if (!s.ok()) {
      const std::string ino = k.size() == 8 ? std::to_string(format::GetBE64(k.data())) : "?";
      bad = s.Annotate("inode " + ino);
      return false;
    }
    if (v.nlink == 0) return true;  // unlinked while open
    if (S_ISREG(v.mode)) {
      c.files++;
      c.logical_bytes += v.size;
      if (v.data_file_end != 0) {
        c.data_files++;
        c.data_file_bytes += v.data_file_end;
      }
    } else if (S_ISDIR(v.mode)) {
      c.directories++;
    } else if (S_ISLNK(v.mode)) {
      c.symlinks++;
    } else {
      c.other++;
    }
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(bad);
  CKPTFS_ASSIGN_OR_RETURN(c.index_bytes, index_->Bytes());
  return c;
}

}  // namespace ckptfs::engine
