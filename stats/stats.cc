#include "stats/stats.h"

#include <cstdio>
#include <optional>

namespace ckptfs::stats {

using engine::Result;

namespace {

// The segments a compaction left, each with its reason (a stable name) and
// the line that explains it.
nlohmann::ordered_json KeptJson(const std::vector<engine::KeptSegment>& kept, double ratio) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const engine::KeptSegment& k : kept) {
    a.push_back({{"segment", k.id},
                 {"reason", engine::KeptReasonName(k.reason)},
                 {"live_bytes", k.live_bytes},
                 {"dead_bytes", k.dead_bytes},
                 {"why", engine::DescribeKept(k, ratio)}});
  }
  return a;
}

// The numbers of the stats file that the metrics file shows, by JSON
// pointer. Counters get the suffix _total.
struct MetricSpec {
  const char* pointer;
  const char* name;
  bool counter;
  const char* help;
};

constexpr MetricSpec kMetrics[] = {
    {"/uptime_s", "uptime_seconds", false, "Seconds since the store was mounted."},
    {"/memory/resident_bytes", "memory_resident_bytes", false,
     "The daemon's resident memory (VmRSS)."},
    {"/memory/bound_bytes", "memory_bound_bytes", false,
     "The most memory the daemon holds with the options in effect (docs/DESIGN.md, Memory)."},
    {"/memory/held/record_cache", "memory_record_cache_bytes", false,
     "Memory the record cache holds."},
    {"/memory/held/index_memtables", "memory_index_memtable_bytes", false,
     "Memory the index's memtables hold."},
    {"/memory/held/index_block_cache", "memory_index_block_cache_bytes", false,
     "Memory the index's block cache holds."},
    {"/memory/held/sealed_snapshots", "memory_sealed_snapshots_bytes", false,
     "Memory the sealed trees' snapshots this mount reads hold (shared stores)."},
    {"/engine/reads", "reads", true, "File reads served by the engine."},
    {"/engine/read_bytes", "read_bytes", true, "Bytes of file data read."},
    {"/engine/writes", "writes", true, "File writes served by the engine."},
    {"/engine/write_bytes", "write_bytes", true, "Bytes of file data written."},
    {"/engine/backing_reads", "backing_reads", true, "Reads of segment files."},
    {"/engine/backing_read_bytes", "backing_read_bytes", true, "Bytes read from segment files."},
    {"/engine/coalesced_reads", "coalesced_reads", true,
     "Segment file reads that served more than one record."},
    {"/engine/cache_hits", "cache_hits", true, "Reads served by the record cache."},
    {"/engine/cache_misses", "cache_misses", true, "Reads the record cache could not serve."},
    {"/engine/inline_writes", "inline_writes", true, "Writes kept in the index."},
    {"/engine/records_written", "records_written", true, "Records appended to segments."},
    {"/engine/stored_bytes", "stored_bytes", true,
     "Payload bytes appended to segments, after compression."},
    {"/engine/fsyncs", "fsyncs", true, "fsync and fdatasync calls served."},
    {"/engine/device_syncs", "device_syncs", true, "Syncs of the backing files (group commit)."},
    {"/engine/checksum_errors", "checksum_errors", true,
     "Reads that found damaged bytes: a checksum that did not match, or a file that ended early."},
    {"/engine/file_refreshes", "file_refreshes", true,
     "Times a read opened another host's files again to find bytes its client had not shown yet."},
    {"/engine/owned_given_up", "owned_given_up", true,
     "Inodes this mount made and gave up to another host that changed them (shared stores)."},
    {"/engine/owned_asked", "owned_asked", true,
     "Inodes this mount asked their owner to give up before changing them (shared stores)."},
    {"/engine/owned_taken_over", "owned_taken_over", true,
     "Inodes this mount took from an owner that was gone or did not answer in time (shared stores)."},
    {"/engine/owned_requests_heard", "owned_requests_heard", true,
     "Reads of the requests for this mount's inodes that a notification from the index began "
     "(shared stores)."},
    {"/engine/read_grants", "read_grants", true,
     "Directories nobody owns that this mount was given a read grant of (shared stores)."},
    {"/engine/read_grants_given_up", "read_grants_given_up", true,
     "Read grants this mount gave up to another host that changed the directory (shared stores)."},
    {"/engine/read_grants_asked", "read_grants_asked", true,
     "Read grants this mount asked another host to give up before a change (shared stores)."},
    {"/engine/direct_writes", "direct_writes", true,
     "Files whose data file the kernel wrote directly (passthrough_writes)."},
    {"/engine/direct_adoptions", "direct_adoptions", true,
     "Times the daemon took such a data file's bytes into the index."},
    {"/engine/direct_adopted_bytes", "direct_adopted_bytes", true,
     "Bytes those adoptions checksummed."},
    {"/engine/direct_rereads", "direct_rereads", true,
     "Adoptions that read a data file again: a write landed while it was read."},
    {"/engine/index_round_trips", "index_round_trips", true,
     "Round trips to the PostgreSQL server of a shared store's index."},
    {"/engine/index_wait_ns", "index_wait_nanoseconds", true,
     "Time calls spent waiting for those round trips."},
    {"/engine/sealed_trees_held", "sealed_trees_held", false,
     "Sealed trees whose snapshots this mount reads instead of the index (shared stores)."},
    {"/engine/sealed_inodes_held", "sealed_inodes_held", false, "The inodes of those trees."},
    {"/engine/snapshot_reads", "snapshot_reads", true,
     "Index reads that a sealed tree's snapshot answered (shared stores)."},
    {"/engine/peer_connections", "peer_connections", true,
     "Connections from other hosts this mount's peer server admitted (shared stores)."},
    {"/engine/peer_refused", "peer_refused", true,
     "Connections it closed: a wrong proof of the store's secret, a bad hello, too many."},
    {"/engine/peer_requests", "peer_requests", true, "Byte ranges other hosts asked it for."},
    {"/engine/peer_bad_requests", "peer_bad_requests", true,
     "Of those, the ones it refused (a name it does not serve, too long)."},
    {"/engine/peer_bytes_served", "peer_bytes_served", true,
     "Bytes of the store's files it sent to other hosts."},
    {"/engine/peer_cache_file_bytes", "peer_cache_file_bytes", false,
     "What the blocks this mount serves other hosts hold in peer_cache_dir's file."},
    {"/engine/peer_reads", "peer_reads", true,
     "Ranges of sealed files this mount read from other hosts instead of the storage."},
    {"/engine/peer_read_bytes", "peer_read_bytes", true, "Their bytes."},
    {"/engine/peer_failures", "peer_failures", true,
     "Reads from other hosts that failed (refused, timed out); read from the storage instead."},
    {"/engine/peer_rejected", "peer_rejected", true,
     "Ranges from other hosts that failed their checksum; read from the storage instead."},
    {"/memory/held/peer_ranges", "memory_peer_ranges_bytes", false,
     "Memory the blocks this mount serves other hosts hold (shared stores)."},
    {"/engine/data_file_writes", "data_file_writes", true, "The daemon's writes of data files."},
    {"/engine/data_file_write_bytes", "data_file_write_bytes", true,
     "Bytes the daemon wrote to data files."},
    {"/engine/data_file_reads", "data_file_reads", true,
     "Blocks the daemon read from data files."},
    {"/engine/data_file_read_bytes", "data_file_read_bytes", true,
     "Bytes the daemon read from data files (whole blocks, to check their checksums)."},
    {"/engine/object_reads", "object_reads", true,
     "Reads sent to the object store that holds the store's data (docs/OBJECT_STORAGE.md)."},
    {"/engine/object_writes", "object_writes", true, "Writes sent to the object store."},
    {"/engine/object_other", "object_other_requests", true,
     "Other requests sent to it: stats, creates, removes, truncates, listings."},
    {"/engine/object_read_bytes", "object_read_bytes", true, "Bytes read from the object store."},
    {"/engine/object_write_bytes", "object_write_bytes", true,
     "Bytes written to the object store."},
    {"/fs/requests", "requests", true, "FUSE requests served, of every kind."},
    {"/fs/errors", "request_errors", true,
     "FUSE requests answered with an error other than ENOENT or ENODATA."},
    {"/fs/read_bytes", "fuse_read_bytes", true, "Bytes returned by READ requests."},
    {"/fs/write_bytes", "fuse_write_bytes", true, "Bytes received by WRITE requests."},
    {"/fs/files_created", "files_created", true, "Regular files created."},
    {"/fs/files_read", "files_read", true, "Regular files read from their start."},
    {"/fs/last_create/requests_per_file", "last_create_requests_per_file", false,
     "FUSE requests per file of the latest run of files created (a save)."},
    {"/fs/last_restore/requests_per_file", "last_restore_requests_per_file", false,
     "FUSE requests per file of the latest run of files read from their start (a restore)."},
    {"/fs/kernel_inodes", "kernel_inodes", false, "Inodes the kernel holds references to."},
    {"/fs/pinned_files", "pinned_files", false, "Files whose data the kernel's references keep."},
    {"/fs/open_dirs", "open_dirs", false, "Open directory handles."},
    {"/namespace/files", "files", false, "Regular files in the store."},
    {"/namespace/directories", "directories", false, "Directories in the store, the root included."},
    {"/namespace/symlinks", "symlinks", false, "Symbolic links in the store."},
    {"/namespace/logical_bytes", "logical_bytes", false,
     "Sum of the regular files' sizes, holes included."},
    {"/storage/segments", "segments", false, "Segment files."},
    {"/storage/segment_file_bytes", "segment_file_bytes", false, "Bytes of the segment files."},
    {"/storage/live_bytes", "live_bytes", false, "Logical bytes of the records files still use."},
    {"/storage/dead_bytes", "dead_bytes", false,
     "Logical bytes of records no file uses; compaction reclaims them."},
    {"/storage/reclaimable_bytes", "reclaimable_bytes", false,
     "Dead bytes of the segments a compaction at the default dead ratio would rewrite."},
    {"/background_compaction/threshold_dead_bytes", "background_compaction_threshold_dead_bytes",
     false, "Dead bytes at which background compaction starts; 0 when it is off."},
    {"/storage/compression_ratio", "compression_ratio", false,
     "Logical record bytes per segment file byte."},
    {"/storage/index_bytes", "index_bytes", false, "Bytes of the index on disk."},
    {"/storage/data_files", "data_files", false, "Large files kept in data files of their own."},
    {"/storage/data_file_bytes", "data_file_bytes", false, "Bytes the data files hold."},
    {"/last_compaction/bytes_reclaimed", "last_compaction_reclaimed_bytes", false,
     "Bytes the last compaction reclaimed."},
    {"/last_compaction/segments_rewritten", "last_compaction_segments_rewritten", false,
     "Segments the last compaction rewrote."},
};

void AppendHeader(std::string* out, const std::string& name, bool counter, const char* help) {
  *out += "# HELP " + name + " " + help + "\n";
  *out += "# TYPE " + name + (counter ? " counter\n" : " gauge\n");
}

std::string Number(const nlohmann::ordered_json& v) {
  return v.is_number_float() ? nlohmann::json(v.get<double>()).dump() : v.dump();
}

}  // namespace

nlohmann::ordered_json EngineStatsJson(const engine::EngineStats& s) {
  return {
      {"reads", s.reads},
      {"read_bytes", s.read_bytes},
      {"writes", s.writes},
      {"write_bytes", s.write_bytes},
      {"backing_reads", s.backing_reads},
      {"backing_read_bytes", s.backing_read_bytes},
      {"coalesced_reads", s.coalesced_reads},
      {"cache_hits", s.cache_hits},
      {"cache_misses", s.cache_misses},
      {"inline_writes", s.inline_writes},
      {"records_written", s.records_written},
      {"stored_bytes", s.stored_bytes},
      {"fsyncs", s.fsyncs},
      {"device_syncs", s.device_syncs},
      {"checksum_errors", s.checksum_errors},
      {"segments", s.segments},
      {"live_bytes", s.live_bytes},
      {"dead_bytes", s.dead_bytes},
      {"direct_writes", s.direct_writes},
      {"direct_adoptions", s.direct_adoptions},
      {"direct_adopted_bytes", s.direct_adopted_bytes},
      {"direct_rereads", s.direct_rereads},
      {"file_refreshes", s.file_refreshes},
      {"owned_given_up", s.owned_given_up},
      {"owned_asked", s.owned_asked},
      {"owned_taken_over", s.owned_taken_over},
      {"owned_requests_heard", s.owned_requests_heard},
      {"read_grants", s.read_grants},
      {"read_grants_given_up", s.read_grants_given_up},
      {"read_grants_asked", s.read_grants_asked},
      {"index_round_trips", s.index_round_trips},
      {"index_wait_ns", s.index_wait_ns},
      {"sealed_trees_held", s.sealed_trees_held},
      {"sealed_inodes_held", s.sealed_inodes_held},
      {"snapshot_reads", s.snapshot_reads},
      {"data_file_writes", s.data_file_writes},
      {"data_file_write_bytes", s.data_file_write_bytes},
      {"data_file_reads", s.data_file_reads},
      {"data_file_read_bytes", s.data_file_read_bytes},
      {"peer_connections", s.peer_connections},
      {"peer_refused", s.peer_refused},
      {"peer_requests", s.peer_requests},
      {"peer_bad_requests", s.peer_bad_requests},
      {"peer_bytes_served", s.peer_bytes_served},
      {"peer_cache_file_bytes", s.peer_cache_file_bytes},
      {"peer_reads", s.peer_reads},
      {"peer_read_bytes", s.peer_read_bytes},
      {"peer_failures", s.peer_failures},
      {"peer_rejected", s.peer_rejected},
      {"object_reads", s.object_reads},
      {"object_writes", s.object_writes},
      {"object_other", s.object_other},
      {"object_read_bytes", s.object_read_bytes},
      {"object_write_bytes", s.object_write_bytes},
  };
}

nlohmann::ordered_json EngineMemoryJson(const engine::EngineMemory& m) {
  return {
      {"record_cache", m.record_cache},
      {"index_memtables", m.index_memtables},
      {"index_block_cache", m.index_block_cache},
      {"extent_maps", m.extent_maps},
      {"verified_blocks", m.verified_blocks},
      {"sealed_snapshots", m.sealed_snapshots},
      {"peer_ranges", m.peer_ranges},
  };
}

nlohmann::ordered_json LastCompactionJson(const engine::CompactionRecord& c) {
  const engine::CompactReport& r = c.report;
  return {
      {"dry_run", c.dry_run},
      {"segments_rewritten", r.segments_rewritten},
      {"bytes_reclaimed", r.bytes_reclaimed},
      {"bytes_copied", r.bytes_copied},
      {"seconds", r.seconds},
      {"segments", r.segments},
      {"errors", r.errors.size()},
      {"kept", KeptJson(r.kept, c.dead_ratio)},
  };
}

Result<nlohmann::ordered_json> StoreSummary(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(engine::NamespaceCounts n, store.CountNamespace());
  CKPTFS_ASSIGN_OR_RETURN(std::vector<engine::SealedTree> sealed, store.SealedTrees());
  uint64_t sealed_inodes = 0;
  for (const engine::SealedTree& t : sealed) sealed_inodes += t.seal.inodes;
  CKPTFS_ASSIGN_OR_RETURN(std::vector<engine::SegmentInfo> list, store.ListSegments());
  uint64_t segments = 0, file_bytes = 0, live = 0, dead = 0, reclaimable = 0;
  const double default_ratio = engine::CompactOptions().dead_ratio;
  for (const engine::SegmentInfo& seg : list) {  // counters ListSegments checked
    const auto seg_live = static_cast<uint64_t>(seg.live_bytes);
    const auto seg_dead = static_cast<uint64_t>(seg.dead_bytes);
    segments++;
    file_bytes += seg.file_bytes;
    live += seg_live;
    dead += seg_dead;
    if (seg_dead > 0 && engine::CompactionTakes(seg_live, seg_dead, default_ratio)) {
      reclaimable += seg_dead;
    }
  }
  const double ratio = live + dead == 0 || file_bytes == 0
                           ? 1.0
                           : static_cast<double>(live + dead) / static_cast<double>(file_bytes);
  nlohmann::ordered_json j = {
      {"namespace",
       {
           {"files", n.files},
           {"directories", n.directories},
           {"symlinks", n.symlinks},
           {"other", n.other},
           {"logical_bytes", n.logical_bytes},
           {"sealed_trees", sealed.size()},
           {"sealed_inodes", sealed_inodes},
       }},
      {"storage",
       {
           {"segments", segments},
           {"segment_file_bytes", file_bytes},
           {"live_bytes", live},
           {"dead_bytes", dead},
           {"reclaimable_bytes", reclaimable},
           {"compression_ratio", ratio},
           {"index_bytes", n.index_bytes},
           {"data_files", n.data_files},
           {"data_file_bytes", n.data_file_bytes},
       }},
  };
  if (const std::string data = store.DataStorage(); !data.empty()) j["storage"]["data"] = data;
  if (store.Shared()) {
    CKPTFS_ASSIGN_OR_RETURN(std::vector<engine::HostInfo> hosts, store.Hosts());
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const engine::HostInfo& h : hosts) {
      list.push_back({{"name", h.name},
                      {"id", h.id},
                      {"mounted", h.mounted},
                      {"holder", h.holder},
                      {"pid", h.pid},
                      {"machine", h.machine},
                      {"lease_until_ms", h.lease_until_ms},
                      {"peer", h.peer}});
    }
    j["hosts"] = std::move(list);
  }
  if (std::optional<engine::CompactionRecord> last = store.LastCompaction()) {
    j["last_compaction"] = LastCompactionJson(*last);
  }
  return j;
}

Result<std::string> StoreSummaryJson(engine::Store& store) {
  CKPTFS_ASSIGN_OR_RETURN(nlohmann::ordered_json j, StoreSummary(store));
  return j.dump(2) + "\n";
}

std::string PrometheusText(const nlohmann::ordered_json& j, std::string_view version) {
  std::string out;
  AppendHeader(&out, "ckptfs_info", false, "The daemon's versions; the value is always 1.");
  out += "ckptfs_info{version=" + nlohmann::json(std::string(version)).dump() + ",libfuse=" +
         nlohmann::json(j["fs"]["libfuse"].get<std::string>()).dump() + "} 1\n";
  for (const MetricSpec& m : kMetrics) {
    const nlohmann::ordered_json::json_pointer ptr(m.pointer);
    if (!j.contains(ptr) || !j[ptr].is_number()) continue;
    const std::string name = std::string("ckptfs_") + m.name + (m.counter ? "_total" : "");
    AppendHeader(&out, name, m.counter, m.help);
    out += name + " " + Number(j[ptr]) + "\n";
  }
  const std::string by_kind = "ckptfs_requests_by_kind_total";
  AppendHeader(&out, by_kind, true, "FUSE requests served, by kind (the stats file's fs.ops).");
  for (auto it = j["fs"]["ops"].begin(); it != j["fs"]["ops"].end(); ++it) {
    out += by_kind + "{kind=\"" + it.key() + "\"} " + Number(it.value()) + "\n";
  }
  return out;
}

std::string LastCompactionLines(const engine::CompactionRecord& c) {
  const engine::CompactReport& r = c.report;
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.3f", r.seconds);
  std::string ids;
  for (size_t i = 0; i < r.segments.size(); ++i) {
    ids += (i ? "," : "") + std::to_string(r.segments[i]);
  }
  // Why segments stayed: the first few (the stats file lists them all).
  constexpr size_t kKeptLines = 20;
  std::string kept;
  for (size_t i = 0; i < r.kept.size() && i < kKeptLines; ++i) {
    kept += "last_compaction.kept." + std::to_string(r.kept[i].id) + "=" +
            engine::DescribeKept(r.kept[i], c.dead_ratio) + "\n";
  }
  return "last_compaction.dry_run=" + std::string(c.dry_run ? "1" : "0") + "\n" +
         "last_compaction.segments_rewritten=" + std::to_string(r.segments_rewritten) + "\n" +
         "last_compaction.bytes_reclaimed=" + std::to_string(r.bytes_reclaimed) + "\n" +
         "last_compaction.bytes_copied=" + std::to_string(r.bytes_copied) + "\n" +
         "last_compaction.seconds=" + secs + "\n" + "last_compaction.segments=" + ids + "\n" +
         "last_compaction.errors=" + std::to_string(r.errors.size()) + "\n" + kept;
}

}  // namespace ckptfs::stats
