// Sizes as people write them: "4096", "256K", "64M", "2G", "1T", with an
// optional "B" or "iB" after the unit ("1MB", "64MiB"). Units are powers of
// 1024. Used by mount options, the config file and the command line.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace ckptfs::engine {

// EINVAL when malformed (fractions, signs, spaces, unknown units) or when the
// size does not fit in 64 bits.
Result<uint64_t> ParseSize(std::string_view text);

}  // namespace ckptfs::engine
