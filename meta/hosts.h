// The hosts of a shared store (docs/SHARED.md, "Hosts and their files"):
// each mount takes a host by name, and with it the host's id, under a lease
// that it renews while it runs. The records are kept in the index's meta
// space (format::HostKey, format::HostValue), so that every host sees them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/format.h"
#include "meta/kv.h"

namespace ckptfs::meta {

// The wall clock in milliseconds since the epoch: leases are compared
// across machines.
int64_t WallMs();
// This machine's name (gethostname), the default host name.
std::string MachineName();

// Whether a mount may take host `name` of `kv`'s store, whose record is
// `held`: its lease was released or ran out, or it was held by a process of
// this machine that is gone (a mount killed and started again takes its
// host back at once), or by this process, which let go of it (LetGo).
bool HostIsFree(Kv* kv, std::string_view name, const format::HostValue& held, int64_t now_ms);

// The payload of the EBUSY that names the mount holding a host.
struct HostHeld {
  std::string name;
  format::HostValue value;
};

// Takes host `name` for this process (described as `holder` in messages)
// until `lease_ms` from now: its id from before, or a new one. EBUSY, naming
// the holder, with a HostHeld payload, while another mount holds it.
Result<uint32_t> ClaimHost(Kv* kv, std::string_view name, std::string_view holder,
                           int64_t lease_ms);
// Moves this process's lease on `name` to `lease_ms` from now. EBUSY when
// another mount took the host (this one's lease ran out meanwhile).
Status RenewHost(Kv* kv, std::string_view name, int64_t lease_ms);
// Ends this process's lease on `name` (a clean close).
Status ReleaseHost(Kv* kv, std::string_view name);
// This process no longer uses host `name` of `kv`'s store, whether or not
// ReleaseHost could say so to the index (a close with the server down):
// it may claim it again at once, and its tools may check the store.
void LetGo(Kv* kv, std::string_view name);
// Every host the store has had, by name.
Result<std::vector<std::pair<std::string, format::HostValue>>> ListHosts(Kv* kv);
// EBUSY naming a host whose lease is running, or OK when none is: for the
// tools that need a store that no host has mounted.
Status CheckNoLiveHost(Kv* kv);

}  // namespace ckptfs::meta
