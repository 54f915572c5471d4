// SegmentSet: the segment files of a store and the appends to them.
//
// Appends reserve their byte range under a short lock and then pwrite outside
// it, so appends of different writers proceed in parallel. A crash can leave
// zero-filled gaps between records; no extent ever points into one, because
// the index entry is written only after the pwrite returned.
//
// Every file operation goes through an io::Env.
//
// Thread safety: all methods are thread-safe. A segment's file stays open
// while the set or any operation holds the segment: Remove() drops it from
// the set, and a read that is still in progress keeps it (and its file) alive
// until it finishes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "io/env.h"

namespace ckptfs::engine {

struct AppendResult {
  uint64_t segment_id = 0;
  uint64_t offset = 0;       // of the record in the segment file
  uint64_t sealed_id = 0;    // nonzero: this append sealed that segment ...
  uint64_t sealed_size = 0;  // ... at this size
};

// The segment ids that this set appends to: [first, end). A shared
// store's host owns the ids with its host id in the high bits
// (format::kHostIdShift); the other segments in the directory are other
// hosts', which the set only reads, and opens when first read, since
// their hosts create new ones all the time.
struct OwnedSegmentIds {
  uint64_t first = 1;
  uint64_t end = UINT64_MAX;
  bool Has(uint64_t id) const { return id >= first && id < end; }
  bool shared() const { return first != 1 || end != UINT64_MAX; }
};

// The payload of the corruption that a read of a segment the set does not
// have returns. On a shared store it may mean that the extents read were
// another host's before its compaction moved them.
struct SegmentMissing {
  uint64_t id = 0;
};

class SegmentSet {
 public:
  // Opens every segment file in `segments_dir`. `sealed` lists segments the
  // index records as sealed; the highest unsealed one of `owned` takes
  // further appends. Every segment's header is checked. `env` must outlive
  // the set.
  static Result<std::unique_ptr<SegmentSet>> Open(std::shared_ptr<io::Env> env,
                                                  const std::string& segments_dir,
                                                  uint64_t target_bytes, bool read_only,
                                                  const std::vector<uint64_t>& sealed,
                                                  OwnedSegmentIds owned = {});
  ~SegmentSet();

  // Appends one record: `header` then `payload`, contiguous. Starts a new
  // segment when the active one would grow past the target size. With
  // `cached_elsewhere` (bytes that another cache holds) the record's pages
  // start their way to the disk at once and leave the OS's cache once the
  // next SyncDirty has synced them.
  Result<AppendResult> Append(std::string_view header, std::string_view payload,
                              bool cached_elsewhere = false);
  // Reads exactly `len` bytes; a short read is reported as corruption.
  Status Read(uint64_t segment_id, uint64_t offset, size_t len, char* buf) const;
  // Reads up to `len` bytes, fewer only at the end of the file.
  Result<size_t> ReadUpTo(uint64_t segment_id, uint64_t offset, size_t len, char* buf) const;
  // Asks the kernel to start reading [offset, offset+len) in the background.
  void Prefetch(uint64_t segment_id, uint64_t offset, uint64_t len) const;
  // Lets the OS drop its cached pages of that range (io::File::Evict).
  void Evict(uint64_t segment_id, uint64_t offset, uint64_t len) const;
  // io::File::Refresh of another host's segment where the set has it
  // open: its host appended to it since.
  Status Refresh(uint64_t segment_id) const;
  // Syncs every segment appended to since the previous call, and then drops
  // the cached pages of the records appended `cached_elsewhere` before it.
  // Once a sync has failed, its segment's unsynced bytes may be lost
  // whatever a later sync says, so every later call fails too (EIO) until
  // the store is reopened.
  Status SyncDirty();

  // Bytes in the segment file including reserved space (0 if unknown).
  uint64_t Size(uint64_t segment_id) const;
  std::vector<uint64_t> Ids() const;
  std::string Path(uint64_t segment_id) const;
  uint64_t active_id() const;
  // Highest id of the set's own segments (0 when none).
  uint64_t max_id() const;
  // Whether segment `id` is one this set appends to (OwnedSegmentIds).
  bool Owns(uint64_t id) const { return owned_.Has(id); }
  // Makes segment `id` one that compaction may take when it is the active
  // segment or the newest file: seals it (no append reserves space in it
  // after this returns) and starts the next segment, whose file exists on
  // disk before this returns, so that segment ids stay above every id ever
  // used once `id` is deleted. Returns the size at which `id` was sealed
  // (reserved bytes, header included) when it was the active segment, else
  // 0 (already sealed; nothing done unless it was the newest file). Writers that reserved space
  // in it before still write and commit: the caller waits them out.
  Result<uint64_t> SealForCompaction(uint64_t id);
  // Drops the other hosts' segments that are not in `indexed` (the ids the
  // index accounts for): their hosts' compactions deleted them, and the
  // files' space comes back once the set lets go of them. Reads that hold
  // one finish normally.
  void DropOthersNotIn(const std::set<uint64_t>& indexed);
  // Drops a sealed segment from the set and deletes its file (compaction).
  // Reads that already hold it finish normally; later reads of it fail as
  // for a missing segment. EBUSY for the active segment; OK when absent.
  Status Remove(uint64_t segment_id);

 private:
  struct Segment {
    uint64_t id = 0;
    std::unique_ptr<io::File> file;
    std::atomic<uint64_t> end{0};  // reserved bytes, header included
    std::atomic<bool> dirty{false};
    // The bytes of records appended cached_elsewhere since the last sync
    // took them (lo >= hi: none).
    Mutex evict_mu;  // a leaf lock
    uint64_t evict_lo GUARDED_BY(evict_mu) = UINT64_MAX;
    uint64_t evict_hi GUARDED_BY(evict_mu) = 0;
  };
  SegmentSet(std::shared_ptr<io::Env> env, std::string dir, uint64_t target_bytes, bool read_only,
             OwnedSegmentIds owned)
      : env_(std::move(env)),
        dir_(std::move(dir)),
        target_bytes_(target_bytes),
        read_only_(read_only),
        owned_(owned) {}
  Status StartSegmentLocked(uint64_t id) REQUIRES(mu_);
  // Opens segment `id`'s file and checks its header; appends go to it only
  // when `writable`.
  Result<std::shared_ptr<Segment>> OpenSegment(uint64_t id, bool writable) const;
  uint64_t MaxOwnedLocked() const REQUIRES(mu_);
  // The segment, or nullptr. Another host's segment that the set does not
  // hold yet is opened from its file when there is one.
  std::shared_ptr<Segment> Find(uint64_t id) const;

  const std::shared_ptr<io::Env> env_;
  const std::string dir_;
  const uint64_t target_bytes_;
  const bool read_only_;
  const OwnedSegmentIds owned_;
  // Held through SyncDirty, so that no caller returns while another's sync
  // of a segment it found dirty is in progress. Lock order: before mu_.
  Mutex sync_mu_ ACQUIRED_BEFORE(mu_);
  // Held briefly to reserve space or look up a segment; never across a read
  // or write of segment data. Lock order: after InodeState::mu and
  // CompactionState::mu; before the Env's own locks (StartSegmentLocked
  // creates a file under it).
  mutable Mutex mu_;
  // Other hosts' segments opened when first read are added under mu_ by
  // the const Find.
  mutable std::map<uint64_t, std::shared_ptr<Segment>> segments_ GUARDED_BY(mu_);
  std::shared_ptr<Segment> active_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  // The first failed sync, sticky (see SyncDirty).
  Status sync_error_ GUARDED_BY(mu_);
};

}  // namespace ckptfs::engine
