// A child process for the engine tests, started with fork + exec so that it
// begins with a clean process (no RocksDB threads inherited from a parent that
// already used the engine). It never closes the store: it either exits with
// _exit() or is killed, which is the point.
//
//   ckptfs_store_child writer DIR ROUND ROUND_SEED FD
//       Opens the store, writes "ready\n" to FD, then writes the files of
//       CrashSpecFor(ROUND_SEED, ROUND, 0, 1, ...) forever. After each Write
//       of a file's final bytes returns it writes "w PATH OFFSET LENGTH\n",
//       after each file's Fsync returns "PATH\n". Meant to be killed.
//   ckptfs_store_child orphan DIR
//       Opens the store, creates /orphan, writes 1 MiB, opens it, unlinks it,
//       prints "INO\n" to stdout and _exits without Close.
//   ckptfs_store_child hold DIR HOLDER FD
//       Opens the store with StoreOptions::holder = HOLDER, writes "ready\n"
//       to FD and sleeps until killed.
//
// Exit status: 0 on success, 2 on a usage error, 3 on an engine error (with
// the message on stderr).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "engine/store.h"
#include "tests/engine/child_spec.h"
#include "tests/engine/pattern.h"

namespace ckptfs::engine::test {
namespace {

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "store_child: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::fflush(stderr);
  _exit(3);
}

void WriteLine(int fd, const std::string& line) {
  std::string s = line + "\n";
  // Lines are far below PIPE_BUF, so each write is atomic.
  if (::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) _exit(4);
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir, const std::string& holder) {
  StoreOptions o;
  o.min_free = 0;
  o.holder = holder;
  auto store = Store::Open(dir, o);
  if (!store.ok()) Die("Open " + dir, store.status());
  return std::move(store).value();
}

Ino DirOrDie(Store* store, const std::string& name) {
  auto a = store->Lookup(kRootIno, name);
  if (a.ok()) return a->ino;
  auto m = store->Mkdir(kRootIno, name, 0755, 0, 0);
  if (!m.ok()) Die("Mkdir " + name, m.status());
  return m->ino;
}

int Writer(const std::string& dir, int round, uint64_t round_seed, int fd) {
  std::unique_ptr<Store> store = OpenOrDie(dir, "crash_test writer");
  WriteLine(fd, "ready");
  Ino scratch = DirOrDie(store.get(), "scratch");
  std::mt19937_64 rng(round_seed);
  for (uint64_t i = 0;; ++i) {
    CrashFileSpec spec = CrashSpecFor(round_seed, round, i);
    Ino parent = DirOrDie(store.get(), spec.dir);
    auto a = store->Create(parent, spec.name, S_IFREG | 0644, 0, 0);
    if (!a.ok()) Die("Create " + spec.path(), a.status());
    Ino ino = a->ino;
    uint64_t off = 0;
    while (off < spec.size) {
      uint64_t piece = std::min<uint64_t>(spec.size - off, 1 + rng() % (256u << 10));
      if (rng() % 4 == 0) {
        // Write wrong bytes first and overwrite them: the overwrite must win.
        auto w = store->Write(ino, off, PatternData(spec.seed ^ 0xdead, off, piece));
        if (!w.ok()) Die("Write " + spec.path(), w.status());
      }
      auto w = store->Write(ino, off, PatternData(spec.seed, off, piece));
      if (!w.ok()) Die("Write " + spec.path(), w.status());
      if (*w != piece) Die("Write " + spec.path(), Status::Errno(EIO, "short write"));
      WriteLine(fd, "w " + spec.path() + " " + std::to_string(off) + " " + std::to_string(piece));
      off += piece;
    }
    Status st = store->Fsync(ino, rng() % 2 == 0);
    if (!st.ok()) Die("Fsync " + spec.path(), st);
    WriteLine(fd, spec.path());

    // Namespace churn in scratch/: create, write, rename over, unlink.
    std::string tmp = "tmp" + std::to_string(round) + "_" + std::to_string(i);
    auto t = store->Create(scratch, tmp, S_IFREG | 0600, 0, 0);
    if (!t.ok()) Die("Create scratch/" + tmp, t.status());
    auto w = store->Write(t->ino, 0, PatternData(i, 0, 1 + rng() % 20000));
    if (!w.ok()) Die("Write scratch/" + tmp, w.status());
    std::string final_name = "s" + std::to_string(rng() % 5);
    st = store->Rename(scratch, tmp, scratch, final_name, RenameMode::kReplace);
    if (!st.ok()) Die("Rename scratch/" + tmp, st);
    if (rng() % 3 == 0) {
      st = store->Unlink(scratch, final_name);
      if (!st.ok()) Die("Unlink scratch/" + final_name, st);
    }
  }
}

int Orphan(const std::string& dir) {
  std::unique_ptr<Store> store = OpenOrDie(dir, "data_test orphan child");
  auto a = store->Create(kRootIno, "orphan", S_IFREG | 0644, 0, 0);
  if (!a.ok()) Die("Create", a.status());
  auto w = store->Write(a->ino, 0, PatternData(7, 0, 1u << 20));
  if (!w.ok()) Die("Write", w.status());
  Status st = store->OpenFile(a->ino);
  if (!st.ok()) Die("OpenFile", st);
  st = store->Unlink(kRootIno, "orphan");
  if (!st.ok()) Die("Unlink", st);
  std::printf("%llu\n", static_cast<unsigned long long>(a->ino));
  std::fflush(stdout);
  _exit(0);
}

int Hold(const std::string& dir, const std::string& holder, int fd) {
  std::unique_ptr<Store> store = OpenOrDie(dir, holder);
  WriteLine(fd, "ready");
  for (;;) ::pause();
}

}  // namespace
}  // namespace ckptfs::engine::test

int main(int argc, char** argv) {
  using namespace ckptfs::engine::test;
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "writer" && argc == 6) {
    return Writer(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10),
                  std::atoi(argv[5]));
  }
  if (mode == "orphan" && argc == 3) return Orphan(argv[2]);
  if (mode == "hold" && argc == 5) return Hold(argv[2], argv[3], std::atoi(argv[4]));
  std::fprintf(stderr, "usage: %s writer DIR ROUND SEED FD | orphan DIR | hold DIR HOLDER FD\n",
               argv[0]);
  return 2;
}
