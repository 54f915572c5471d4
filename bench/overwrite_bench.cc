// overwrite_bench: small random unaligned overwrites and reads of one file
// through ckptfs::engine::Store, the access pattern of xfstests' fsx.
//
// Run (after building with -DCKPTFS_BUILD_BENCH=ON):
//
//   build/bench/overwrite_bench [OPS [FILE_KIB [MAX_OP_BYTES]]]
//
// Defaults: 100000 operations on a file of at most 256 KiB, pieces of 1 byte
// to 64 KiB. Half the operations write, half read; every read is compared
// with an in-memory copy of the file. Prints the seconds taken by each 10,000
// operations: a constant figure means each operation costs the same however
// many came before it.
//
// Environment: CKPTFS_BENCH_DIR, where the store goes (default /tmp).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "engine/store.h"

namespace {

int Fail(const char* what, const ckptfs::engine::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckptfs::engine;
  const uint64_t ops = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  const uint64_t file_bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256) << 10;
  const uint64_t max_op = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 64 << 10;
  const char* base = std::getenv("CKPTFS_BENCH_DIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/overwrite_bench-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  int rc = 0;
  {
    auto opened = Store::Open(dir + "/store", StoreOptions());
    if (!opened.ok()) return Fail("open", opened.status());
    std::unique_ptr<Store> store = std::move(opened).value();
    auto created = store->Create(kRootIno, "f", S_IFREG | 0644, 0, 0, 0);
    if (!created.ok()) return Fail("create", created.status());
    const Ino ino = created.value().ino;
    std::string model;
    std::string buf(max_op, '\0');
    std::mt19937_64 rng(42);
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 1; i <= ops && rc == 0; ++i) {
      const uint64_t off = rng() % file_bytes;
      const uint64_t len = 1 + rng() % std::min(max_op, file_bytes - off);
      if (rng() % 2 == 0) {
        for (uint64_t k = 0; k < len; ++k) buf[k] = static_cast<char>(rng());
        auto w = store->Write(ino, off, std::string_view(buf.data(), len));
        if (!w.ok()) return Fail("write", w.status());
        if (model.size() < off + len) model.resize(off + len);
        model.replace(off, len, buf.data(), len);
      } else {
        auto r = store->Read(ino, off, len, buf.data());
        if (!r.ok()) return Fail("read", r.status());
        const uint64_t want = off >= model.size() ? 0 : std::min(len, model.size() - off);
        if (r.value() != want || (want > 0 && model.compare(off, want, buf.data(), want) != 0)) {
          std::fprintf(stderr, "op %llu: read at %llu differs from the model\n",
                       static_cast<unsigned long long>(i), static_cast<unsigned long long>(off));
          rc = 1;
        }
      }
      if (i % 10000 == 0) {
        auto t1 = std::chrono::steady_clock::now();
        std::printf("ops %7llu  last 10k: %.3f s\n", static_cast<unsigned long long>(i),
                    std::chrono::duration<double>(t1 - t0).count());
        std::fflush(stdout);
        t0 = t1;
      }
    }
    Status cs = store->Close();
    if (!cs.ok() && rc == 0) rc = Fail("close", cs);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
