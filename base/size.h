// Sizes as people write them: "4096", "256K", "64M", "2G", "1T", with an
// optional "B" or "iB" after the unit ("1MB", "64MiB"). Units are powers of
// 1024. Used by mount options, the config file and the command line.
#pragma once

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>

#include "base/status.h"

namespace ckptfs {

// EINVAL when malformed (fractions, signs, spaces, unknown units) or when the
// size does not fit in 64 bits.
inline Result<uint64_t> ParseSize(std::string_view text) {
  if (text.ends_with("iB")) {
    text.remove_suffix(2);
    if (text.empty() || std::string_view("KMGTkmgt").find(text.back()) == std::string_view::npos) {
      return Status::Errno(EINVAL, "malformed size");
    }
  } else if (text.ends_with('B') || text.ends_with('b')) {
    text.remove_suffix(1);
  }
  if (text.empty()) return Status::Errno(EINVAL, "empty size");
  int shift = 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift != 0) text.remove_suffix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::Errno(EINVAL, "malformed size");
  }
  if (v > (std::numeric_limits<uint64_t>::max() >> shift)) return Status::Errno(EINVAL, "too large");
  return v << shift;
}

}  // namespace ckptfs
