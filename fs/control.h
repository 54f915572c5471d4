// The control files under MOUNT/.ckptfs/:
//   stats   read-only JSON: engine counters, request counts, the settings in
//           effect, the last compaction
//   config  read: the settings in effect as name=value lines, one per option
//           of fs/option_table.h, then the last compaction's result as
//           last_compaction.* lines; write: name=value lines, each changing
//           a run-time setting (Store::UpdateOptions), or compact=R[ dry_run]
//           that runs a compaction (Store::Compact) and returns when it ends
// The directory is not listed in the root but can be looked up there. Control
// inodes have the top bit set; the engine never allocates those numbers.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/mutex.h"
#include "engine/store.h"

namespace ckptfs::fs {

class Filesystem;

inline constexpr engine::Ino kControlBit = 1ull << 63;
inline constexpr engine::Ino kControlDirIno = kControlBit | 1;
inline constexpr engine::Ino kStatsIno = kControlBit | 2;
inline constexpr engine::Ino kConfigIno = kControlBit | 3;
inline constexpr std::string_view kControlDirName = ".ckptfs";

inline bool IsControl(engine::Ino ino) { return (ino & kControlBit) != 0; }
// The root entry under which the control directory appears.
inline bool IsControlName(engine::Ino parent, std::string_view name) {
  return parent == engine::kRootIno && name == kControlDirName;
}

// One open control file. The content is generated at open so that reads at
// any offset see one consistent snapshot. Thread-safe through mu. Lock
// order: mu before every engine lock (Write applies lines with
// Store::UpdateOptions and Store::Compact under it).
struct ControlHandle {
  engine::Ino ino = 0;
  Mutex mu;
  std::string content GUARDED_BY(mu);
  std::string pending GUARDED_BY(mu);  // written config text not yet applied
};

class Control {
 public:
  // "*fs" must outlive this Control.
  explicit Control(Filesystem* fs) : fs_(fs) {}

  // `parent` is the root (name ".ckptfs") or the control directory.
  engine::Result<engine::Attr> Lookup(engine::Ino parent, std::string_view name) const;
  engine::Result<engine::Attr> GetAttr(engine::Ino ino) const;
  // The control directory's entries after `after`, in name order.
  void List(std::string_view after, const std::function<bool(const engine::DirEntry&)>& fn) const;

  // Opens a control file for a caller with uid `uid`. Writing the config is
  // for the mount's owner and root (EACCES otherwise); stats is read-only.
  engine::Result<std::unique_ptr<ControlHandle>> Open(engine::Ino ino, int flags, uid_t uid);
  // Bytes of the open-time snapshot at [offset, offset+size).
  std::string Read(ControlHandle& h, uint64_t offset, size_t size) const;
  // Appends to the handle's pending text and applies each complete line.
  // EINVAL on an unknown key, a setting fixed while mounted or a bad value;
  // the pending text is then dropped.
  engine::Status Write(ControlHandle& h, std::string_view data);
  // Applies a last line written without a newline.
  engine::Status Flush(ControlHandle& h);

  // The files' contents. The stats file's fails (EIO naming what) when the
  // store's accounting or namespace cannot be read, so that opening the
  // stats file fails rather than show zeros for what is unknown.
  std::string ConfigText() const;
  engine::Result<std::string> StatsJson() const;

 private:
  engine::Attr MakeAttr(engine::Ino ino) const;
  engine::Status Apply(std::string_view line);

  Filesystem* const fs_;
};

// The value of the config's compact=VALUE: "R[ dry_run]", R the dead ratio
// between 0 and 1. EINVAL with a one-line message otherwise.
engine::Result<engine::CompactOptions> ParseCompactRequest(std::string_view value);
// The last_compaction.* lines of the config file.
std::string LastCompactionLines(const engine::CompactionRecord& c);

}  // namespace ckptfs::fs
