// Which host serves a file to the others: rendezvous (highest random
// weight) hashing. Every host scores RendezvousScore(host, file) and the
// highest score wins, so hosts that know the same set of hosts agree
// without talking; when a host goes, only its files move (each to the host
// that scored second), and a host that comes takes about 1/N of each
// other host's files.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ckptfs::peer {

// A 64-bit score of `host` for `file` (XXH3 of both); the same on every
// machine.
uint64_t RendezvousScore(std::string_view host, std::string_view file);

// The index in `hosts` of the host that serves `file`; -1 when `hosts` is
// empty. Ties (equal scores) go to the smaller host name.
int RendezvousOwner(std::span<const std::string> hosts, std::string_view file);

}  // namespace ckptfs::peer
