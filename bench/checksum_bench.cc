// The checksum of every record and data-file block (format::Checksum, XXH3)
// against libxxhash's XXH3_64bits built for the baseline instruction set:
// bytes per second on blocks of 4 KiB to 1 MiB, the sizes the store hashes.
// Usage: build/bench/checksum_bench [--benchmark_repetitions=N]
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "format/format.h"

namespace {

std::string Block(size_t n) {
  std::mt19937_64 rng(n);
  std::string data(n, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  return data;
}

// Bytes per second of `hash` over a block of state.range(0) bytes.
void Hash(benchmark::State& state, uint64_t (*hash)(std::string_view)) {
  const std::string data = Block(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(hash(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

uint64_t Xxh3Baseline(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

BENCHMARK_CAPTURE(Hash, Checksum, &ckptfs::format::Checksum)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK_CAPTURE(Hash, Xxh3Baseline, &Xxh3Baseline)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
