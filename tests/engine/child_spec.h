// What the child process of crash_test writes, shared by the child
// (store_child.cc) and the parent that checks the store afterwards. No
// GoogleTest here: the child does not link it.
#pragma once

#include <cstdint>
#include <string>

#include "tests/engine/pattern.h"

namespace ckptfs::engine::test {

// File `index` of crash round `round`: where it goes, its content seed (for
// PatternData) and its final size.
struct CrashFileSpec {
  std::string dir;   // a directory under the root
  std::string name;  // the file's name in `dir`
  uint64_t seed = 0;
  uint64_t size = 0;
  std::string path() const { return dir + "/" + name; }
};

inline CrashFileSpec CrashSpecFor(uint64_t round_seed, int round, uint64_t index) {
  CrashFileSpec s;
  s.seed = Mix64(round_seed * 1000003ull + index);
  s.dir = "d" + std::to_string(s.seed % 4);
  s.name = "r" + std::to_string(round) + "_f" + std::to_string(index);
  uint64_t r = Mix64(s.seed ^ 0x5a5a);
  switch (r % 8) {
    case 0: case 1: s.size = 1 + (r >> 8) % 4096; break;               // inline
    case 2: s.size = 4096 + (r >> 8) % 8; break;                       // around the limit
    case 7: s.size = (1u << 20) + (r >> 8) % (1u << 20); break;       // 1-2 MiB
    default: s.size = 4097 + (r >> 8) % (300u << 10); break;           // one or a few records
  }
  return s;
}

}  // namespace ckptfs::engine::test
