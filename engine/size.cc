#include "engine/size.h"

#include <cerrno>
#include <charconv>
#include <limits>

namespace ckptfs::engine {

Result<uint64_t> ParseSize(std::string_view text) {
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

}  // namespace ckptfs::engine
