// The clock that the store stamps files with, and the stamping of an
// inode's times.
#pragma once

#include <cstdint>

#include "engine/store.h"
#include "format/format.h"

namespace ckptfs::engine {

// The time that the store stamps files with, so that times never run
// backwards across files: the kernel stamps some changes itself (with the
// write-back cache: writes, truncates, link, chmod; sent in SETATTR as
// ctime) with its coarse clock, or with the finer floor that filesystems
// with fine-grained timestamps raise it to. So Now() is the coarse clock
// (CLOCK_REALTIME_COARSE), or the latest ctime the kernel sent when that
// is later.
Timespec Now();
// A ctime that the kernel stamped (never one a user chose: ctime cannot be
// set) has reached the store.
void KernelStamped(Timespec ctime);
// A time given in nanoseconds since the epoch.
Timespec FromNanos(int64_t ns);
// Stamps the change time of `v`; SetMtime the modification time with it;
// SetAtime the access time alone; SetAllTimes all three (a new inode).
inline void SetCtime(format::InodeValue* v, const Timespec& t) {
  v->ctime_sec = t.sec;
  v->ctime_nsec = t.nsec;
}
inline void SetMtime(format::InodeValue* v, const Timespec& t) {
  v->mtime_sec = t.sec;
  v->mtime_nsec = t.nsec;
  SetCtime(v, t);
}
inline void SetAtime(format::InodeValue* v, const Timespec& t) {
  v->atime_sec = t.sec;
  v->atime_nsec = t.nsec;
}
inline void SetAllTimes(format::InodeValue* v, const Timespec& t) {
  SetAtime(v, t);
  SetMtime(v, t);
}

}  // namespace ckptfs::engine
