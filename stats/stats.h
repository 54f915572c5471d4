// What a store and its engine report, rendered for people and programs: the
// JSON objects of a mount's stats file (MOUNT/.ckptfs/stats) that come from
// the store alone, the summary that `ckptfs stat STORE` prints for a store
// that is not mounted, the Prometheus text of the metrics file, and the
// config file's lines about the last compaction. A room above the engine:
// fs/ adds what only a mount knows (requests, the kernel's caches, options).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/store.h"

namespace ckptfs::stats {

// The engine's counters (EngineStats) as the stats file's "engine" object.
nlohmann::ordered_json EngineStatsJson(const engine::EngineStats& s);
// The engine's memory by owner, as the stats file's memory.bound and
// memory.held objects show it.
nlohmann::ordered_json EngineMemoryJson(const engine::EngineMemory& m);
// A compaction's report: segments rewritten, bytes, and the segments it
// kept with their reason (a stable name) and the line that explains it.
nlohmann::ordered_json LastCompactionJson(const engine::CompactionRecord& c);

// What the store holds and what it takes on disk:
// {"namespace": {files, directories, symlinks, other, logical_bytes},
//  "storage": {segments, segment_file_bytes, live_bytes, dead_bytes,
//              reclaimable_bytes, compression_ratio, index_bytes,
//              data_files, data_file_bytes},
//  "last_compaction": {...}}  (only after a compaction in this process)
// where compression_ratio = (live_bytes + dead_bytes) / segment_file_bytes:
// the logical bytes the segment files hold over the bytes they take (record
// headers count as taken, so an uncompressed store shows a little under 1;
// 1 when the segments hold nothing), and reclaimable_bytes are the dead
// bytes of the segments that a compaction at CompactOptions' default dead
// ratio would rewrite (engine::CompactionTakes). The stats file of a mount
// embeds these objects; `ckptfs stat STORE` prints them for a store that is
// not mounted. Scans the index's inodes (Store::CountNamespace). Fails with
// the error of CountNamespace or ListSegments, never showing zeros for what
// is unknown.
engine::Result<nlohmann::ordered_json> StoreSummary(engine::Store& store);
// The same as JSON text, indented by 2, with a final newline.
engine::Result<std::string> StoreSummaryJson(engine::Store& store);

// The numbers of stats object `j` (the stats file's) in the Prometheus text
// exposition format (version 0.0.4): ckptfs_info{version, libfuse}, one
// family per metric of the stats file present in `j`, and the requests by
// kind as ckptfs_requests_by_kind_total{kind="..."}.
std::string PrometheusText(const nlohmann::ordered_json& j, std::string_view version);

// The last_compaction.* lines of a mount's config file.
std::string LastCompactionLines(const engine::CompactionRecord& c);

}  // namespace ckptfs::stats
