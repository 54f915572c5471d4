// Deterministic file contents for the engine tests. No GoogleTest here, so
// that the child program (store_child.cc) can use it too.
#pragma once

#include <cstdint>
#include <string>

namespace ckptfs::engine::test {

// A stateless 64-bit mixer (splitmix64's finalizer).
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Bytes [offset, offset+len) of an endless pseudo-random stream named `seed`:
// any range can be regenerated without the rest, so writes at arbitrary
// offsets can be checked against the stream.
inline std::string PatternData(uint64_t seed, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  uint64_t word_index = offset / 8;
  uint64_t word = Mix64(seed * 0x100000001b3ull ^ Mix64(word_index));
  for (size_t i = 0; i < len; ++i) {
    uint64_t pos = offset + i;
    if (pos / 8 != word_index) {
      word_index = pos / 8;
      word = Mix64(seed * 0x100000001b3ull ^ Mix64(word_index));
    }
    out[i] = static_cast<char>((word >> ((pos % 8) * 8)) & 0xff);
  }
  return out;
}

}  // namespace ckptfs::engine::test
