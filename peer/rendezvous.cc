#include "peer/rendezvous.h"

#include <xxhash.h>

namespace ckptfs::peer {

uint64_t RendezvousScore(std::string_view host, std::string_view file) {
  // Seeded with the host's hash, so that no concatenation of two
  // different pairs can collide by construction ("ab"+"c" vs "a"+"bc").
  const uint64_t seed = XXH3_64bits(host.data(), host.size());
  return XXH3_64bits_withSeed(file.data(), file.size(), seed);
}

int RendezvousOwner(std::span<const std::string> hosts, std::string_view file) {
  int best = -1;
  uint64_t best_score = 0;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const uint64_t s = RendezvousScore(hosts[i], file);
    if (best < 0 || s > best_score || (s == best_score && hosts[i] < hosts[best])) {
      best = static_cast<int>(i);
      best_score = s;
    }
  }
  return best;
}

}  // namespace ckptfs::peer
