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

void Checksum(benchmark::State& state) {
  const std::string data = Block(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ckptfs::format::Checksum(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void Xxh3Baseline(benchmark::State& state) {
  const std::string data = Block(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(Checksum)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(Xxh3Baseline)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
