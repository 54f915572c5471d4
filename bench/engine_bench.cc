// engine_bench: the ckptfs engine against plain files on the same filesystem.
//
// Run (from the repository root, after building with -DCKPTFS_BUILD_BENCH=ON):
//
//   build/bench/engine_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//   bench/run_engine_bench.sh build 3      # the same, plus a table of ratios
//
// Workloads (each reported twice: NAME/ckptfs through ckptfs::engine::Store,
// NAME/plain with pwrite/pread or open/write/read on ordinary files):
//   large_write      1 GiB in 1 MiB pieces into one new file, then fsync.
//   large_read       that file read back in 1 MiB pieces, caches dropped first.
//   small_create_4k  100,000 files of 4 KiB in 100 directories: create, write,
//   small_create_16k   and at the end one sync of everything (SyncAll/syncfs).
//   small_read_4k    the same files read back whole (lookup/open, read,
//   small_read_16k     release/close), caches dropped first.
//   index_backup     a backup of the index of the small_read_16k store after
//                    1,000 more files (ckptfs only; its space in counters).
// Store creation and removal are not timed. Each measurement is one
// iteration (it moves a gigabyte or 100,000 files); use repetitions and read
// the medians.
//
// Reading the results: bytes_per_second is the throughput of the workload's
// payload. ratio = ckptfs bytes_per_second / plain bytes_per_second: 1.0 means
// the engine runs at the speed of the filesystem under it, 0.5 half as fast,
// above 1 faster (small files usually are: one append-only segment and a
// RocksDB batch instead of an inode, a directory entry and a block each).
// files_per_second is given for the small-file workloads.
//
// Environment:
//   CKPTFS_BENCH_DIR    where the store and the plain files go (default /tmp);
//                       both use the same filesystem, so the comparison is fair.
//   CKPTFS_BENCH_DROP   how caches are dropped before a read workload:
//                       "auto" (default: "proc" when /proc/sys/vm/drop_caches is
//                       writable, i.e. root outside a locked-down container,
//                       else "fadvise"), "proc" (sync; echo 3 >
//                       /proc/sys/vm/drop_caches), "fadvise" (fdatasync +
//                       posix_fadvise(DONTNEED) on the segment, index and
//                       plain files), or "none" (warm reads). The engine's own
//                       record cache is always dropped (Store::DropCache).
//   CKPTFS_BENCH_LARGE_MIB     size of the large file in MiB (default 1024).
//   CKPTFS_BENCH_SMALL_FILES   number of small files (default 100000).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/store.h"

namespace ckptfs::engine::bench {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kSmallDirs = 100;

// ---- Configuration. ----
std::string EnvOr(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return v && *v ? v : dflt;
}
const std::string& BenchParent() {
  static const std::string p = EnvOr("CKPTFS_BENCH_DIR", "/tmp");
  return p;
}
uint64_t LargeBytes() {
  static const uint64_t b = std::stoull(EnvOr("CKPTFS_BENCH_LARGE_MIB", "1024")) * kMiB;
  return b;
}
int SmallFiles() {
  static const int n = std::stoi(EnvOr("CKPTFS_BENCH_SMALL_FILES", "100000"));
  return n;
}
enum class DropMode { kProc, kFadvise, kNone };
DropMode Drop() {
  static const DropMode m = [] {
    std::string s = EnvOr("CKPTFS_BENCH_DROP", "auto");
    if (s == "proc") return DropMode::kProc;
    if (s == "fadvise") return DropMode::kFadvise;
    if (s == "none") return DropMode::kNone;
    return ::access("/proc/sys/vm/drop_caches", W_OK) == 0 ? DropMode::kProc
                                                           : DropMode::kFadvise;
  }();
  return m;
}
const char* DropName() {
  switch (Drop()) {
    case DropMode::kProc: return "proc";
    case DropMode::kFadvise: return "fadvise";
    case DropMode::kNone: return "none";
  }
  return "?";
}

// ---- Helpers. ----

// Removes `root` and everything under it, unlinking files from many threads:
// on a filesystem mounted with "discard" every unlink waits for the device,
// and 100,000 files one after the other take minutes.
void RemoveTree(const std::string& root) {
  std::error_code ec;
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) files.push_back(it->path().string());
  }
  constexpr size_t kThreads = 32;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads && t < files.size(); ++t) {
    threads.emplace_back([&files, t] {
      for (size_t i = t; i < files.size(); i += kThreads) ::unlink(files[i].c_str());
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(root, ec);
}

// A fresh directory under BenchParent(), removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = BenchParent() + "/ckptfs-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "mkdtemp %s: %s\n", tmpl.c_str(), std::strerror(errno));
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() { RemoveTree(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One MiB of pseudo-random bytes; TagBuffer makes every MiB written distinct.
std::string RandomMiB() {
  std::string out(kMiB, '\0');
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < out.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&out[i], &x, 8);
  }
  return out;
}
void TagBuffer(std::string* buf, uint64_t tag) { std::memcpy(buf->data(), &tag, 8); }
uint64_t TagOf(const char* p) {
  uint64_t t;
  std::memcpy(&t, p, 8);
  return t;
}

StoreOptions BenchOptions() {
  StoreOptions o;
  o.holder = "engine_bench";
  return o;
}

std::unique_ptr<Store> OpenStore(const std::string& dir, benchmark::State& state) {
  auto s = Store::Open(dir, BenchOptions());
  if (!s.ok()) {
    state.SkipWithError(("Store::Open: " + s.status().ToString()).c_str());
    return nullptr;
  }
  return std::move(s).value();
}

// Evicts `path` (a file or every file under a directory) from the page cache.
void FadviseDontNeed(const std::string& path) {
  std::error_code ec;
  auto evict = [](const std::string& p) {
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) evict(e.path().string());
    }
  } else {
    evict(path);
  }
}

// Drops the OS page cache for `paths` (or everything, in proc mode) and the
// engine's record cache.
void DropCaches(Store* store, const std::vector<std::string>& paths) {
  if (store) store->DropCache();
  switch (Drop()) {
    case DropMode::kProc: {
      ::sync();
      std::ofstream f("/proc/sys/vm/drop_caches");
      f << "3\n";
      break;
    }
    case DropMode::kFadvise:
      for (const std::string& p : paths) FadviseDontNeed(p);
      break;
    case DropMode::kNone:
      break;
  }
}

bool Check(benchmark::State& state, const Status& st, const char* what) {
  if (st.ok()) return true;
  state.SkipWithError((std::string(what) + ": " + st.ToString()).c_str());
  return false;
}
bool CheckSys(benchmark::State& state, bool ok, const std::string& what) {
  if (ok) return true;
  state.SkipWithError((what + ": " + std::strerror(errno)).c_str());
  return false;
}

void SetLabels(benchmark::State& state, uint64_t bytes, uint64_t files) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  if (files) {
    state.counters["files_per_second"] = benchmark::Counter(
        static_cast<double>(files * state.iterations()), benchmark::Counter::kIsRate);
  }
  state.SetLabel(std::string("drop=") + DropName());
}

// ---- Large file. ----

void LargeWriteCkptfs(benchmark::State& state) {
  std::string buf = RandomMiB();
  const uint64_t total = LargeBytes();
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = std::make_unique<ScratchDir>();
    auto store = OpenStore(dir->path() + "/store", state);
    if (!store) return;
    state.ResumeTiming();
    auto a = store->Create(kRootIno, "model.bin", S_IFREG | 0644, 0, 0);
    if (!Check(state, a.status(), "Create")) return;
    for (uint64_t off = 0; off < total; off += kMiB) {
      TagBuffer(&buf, off / kMiB);
      auto n = store->Write(a->ino, off, buf);
      if (!Check(state, n.status(), "Write")) return;
    }
    if (!Check(state, store->Fsync(a->ino, false), "Fsync")) return;
    state.PauseTiming();
    if (!Check(state, store->Close(), "Close")) return;
    store.reset();
    dir.reset();
    state.ResumeTiming();
  }
  SetLabels(state, total, 0);
}

void LargeWritePlain(benchmark::State& state) {
  std::string buf = RandomMiB();
  const uint64_t total = LargeBytes();
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = std::make_unique<ScratchDir>();
    const std::string path = dir->path() + "/model.bin";
    state.ResumeTiming();
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (!CheckSys(state, fd >= 0, "open " + path)) return;
    for (uint64_t off = 0; off < total; off += kMiB) {
      TagBuffer(&buf, off / kMiB);
      ssize_t n = ::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off));
      if (!CheckSys(state, n == static_cast<ssize_t>(buf.size()), "pwrite")) return;
    }
    if (!CheckSys(state, ::fsync(fd) == 0, "fsync")) return;
    ::close(fd);
    state.PauseTiming();
    dir.reset();
    state.ResumeTiming();
  }
  SetLabels(state, total, 0);
}

// A store and a plain file with the same large contents, made once.
struct LargeFixture {
  ScratchDir dir;
  std::unique_ptr<Store> store;
  Ino ino = 0;
  std::string store_dir, plain_path;
};
std::unique_ptr<LargeFixture> g_large;

LargeFixture* GetLarge(benchmark::State& state) {
  if (g_large) return g_large.get();
  auto fx = std::make_unique<LargeFixture>();
  fx->store_dir = fx->dir.path() + "/store";
  fx->plain_path = fx->dir.path() + "/plain.bin";
  fx->store = OpenStore(fx->store_dir, state);
  if (!fx->store) return nullptr;
  auto a = fx->store->Create(kRootIno, "model.bin", S_IFREG | 0644, 0, 0);
  if (!Check(state, a.status(), "Create")) return nullptr;
  fx->ino = a->ino;
  int fd = ::open(fx->plain_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (!CheckSys(state, fd >= 0, "open")) return nullptr;
  std::string buf = RandomMiB();
  for (uint64_t off = 0; off < LargeBytes(); off += kMiB) {
    TagBuffer(&buf, off / kMiB);
    if (!Check(state, fx->store->Write(fx->ino, off, buf).status(), "Write")) return nullptr;
    if (!CheckSys(state, ::pwrite(fd, buf.data(), buf.size(), off) == (ssize_t)buf.size(),
                  "pwrite")) {
      return nullptr;
    }
  }
  ::fsync(fd);
  ::close(fd);
  if (!Check(state, fx->store->SyncAll(), "SyncAll")) return nullptr;
  g_large = std::move(fx);
  return g_large.get();
}

void LargeReadCkptfs(benchmark::State& state) {
  LargeFixture* fx = GetLarge(state);
  if (!fx) return;
  std::string buf(kMiB, '\0');
  for (auto _ : state) {
    state.PauseTiming();
    DropCaches(fx->store.get(), {fx->store_dir});
    state.ResumeTiming();
    for (uint64_t off = 0; off < LargeBytes(); off += kMiB) {
      auto n = fx->store->Read(fx->ino, off, kMiB, buf.data());
      if (!Check(state, n.status(), "Read")) return;
      if (*n != kMiB || TagOf(buf.data()) != off / kMiB) {
        state.SkipWithError("Read returned wrong data");
        return;
      }
    }
  }
  SetLabels(state, LargeBytes(), 0);
}

void LargeReadPlain(benchmark::State& state) {
  LargeFixture* fx = GetLarge(state);
  if (!fx) return;
  std::string buf(kMiB, '\0');
  for (auto _ : state) {
    state.PauseTiming();
    DropCaches(nullptr, {fx->plain_path});
    state.ResumeTiming();
    int fd = ::open(fx->plain_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (!CheckSys(state, fd >= 0, "open")) return;
    for (uint64_t off = 0; off < LargeBytes(); off += kMiB) {
      ssize_t n = ::pread(fd, buf.data(), kMiB, static_cast<off_t>(off));
      if (n != static_cast<ssize_t>(kMiB) || TagOf(buf.data()) != off / kMiB) {
        state.SkipWithError("pread returned wrong data");
        ::close(fd);
        return;
      }
    }
    ::close(fd);
  }
  SetLabels(state, LargeBytes(), 0);
}

// ---- Small files. ----

std::string DirName(int d) { return "d" + std::to_string(d); }
std::string FileName(int i) { return "f" + std::to_string(i); }

// Creates SmallFiles() files of `size` bytes in kSmallDirs directories of the
// store; no sync.
Status CreateSmallCkptfs(Store* store, size_t size, std::string* buf) {
  std::vector<Ino> dirs;
  for (int d = 0; d < kSmallDirs; ++d) {
    auto a = store->Mkdir(kRootIno, DirName(d), 0755, 0, 0);
    if (!a.ok()) return a.status();
    dirs.push_back(a->ino);
  }
  for (int i = 0; i < SmallFiles(); ++i) {
    auto a = store->Create(dirs[i % kSmallDirs], FileName(i), S_IFREG | 0644, 0, 0);
    if (!a.ok()) return a.status();
    TagBuffer(buf, i);
    auto n = store->Write(a->ino, 0, std::string_view(buf->data(), size));
    if (!n.ok()) return n.status();
  }
  return Status::OK();
}

// The same with ordinary files under `root`.
bool CreateSmallPlain(const std::string& root, size_t size, std::string* buf) {
  for (int d = 0; d < kSmallDirs; ++d) {
    if (::mkdir((root + "/" + DirName(d)).c_str(), 0755) != 0) return false;
  }
  for (int i = 0; i < SmallFiles(); ++i) {
    std::string p = root + "/" + DirName(i % kSmallDirs) + "/" + FileName(i);
    int fd = ::open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    TagBuffer(buf, i);
    bool ok = ::write(fd, buf->data(), size) == static_cast<ssize_t>(size);
    ::close(fd);
    if (!ok) return false;
  }
  return true;
}

bool SyncFs(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::syncfs(fd) == 0;
  ::close(fd);
  return ok;
}

void SmallCreateCkptfs(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  std::string buf = RandomMiB();
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = std::make_unique<ScratchDir>();
    auto store = OpenStore(dir->path() + "/store", state);
    if (!store) return;
    state.ResumeTiming();
    if (!Check(state, CreateSmallCkptfs(store.get(), size, &buf), "create")) return;
    if (!Check(state, store->SyncAll(), "SyncAll")) return;
    state.PauseTiming();
    if (!Check(state, store->Close(), "Close")) return;
    store.reset();
    dir.reset();
    state.ResumeTiming();
  }
  SetLabels(state, size * SmallFiles(), SmallFiles());
}

void SmallCreatePlain(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  std::string buf = RandomMiB();
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = std::make_unique<ScratchDir>();
    state.ResumeTiming();
    if (!CheckSys(state, CreateSmallPlain(dir->path(), size, &buf), "create")) return;
    if (!CheckSys(state, SyncFs(dir->path()), "syncfs")) return;
    state.PauseTiming();
    dir.reset();
    state.ResumeTiming();
  }
  SetLabels(state, size * SmallFiles(), SmallFiles());
}

struct SmallFixture {
  ScratchDir dir;
  std::unique_ptr<Store> store;
  std::string store_dir, plain_dir;
};
std::map<size_t, std::unique_ptr<SmallFixture>> g_small;

SmallFixture* GetSmall(benchmark::State& state, size_t size) {
  auto& slot = g_small[size];
  if (slot) return slot.get();
  auto fx = std::make_unique<SmallFixture>();
  fx->store_dir = fx->dir.path() + "/store";
  fx->plain_dir = fx->dir.path() + "/plain";
  fx->store = OpenStore(fx->store_dir, state);
  if (!fx->store) return nullptr;
  std::string buf = RandomMiB();
  if (!Check(state, CreateSmallCkptfs(fx->store.get(), size, &buf), "create")) return nullptr;
  if (!Check(state, fx->store->SyncAll(), "SyncAll")) return nullptr;
  if (!CheckSys(state, ::mkdir(fx->plain_dir.c_str(), 0755) == 0, "mkdir")) return nullptr;
  if (!CheckSys(state, CreateSmallPlain(fx->plain_dir, size, &buf), "create")) return nullptr;
  SyncFs(fx->plain_dir);
  slot = std::move(fx);
  return slot.get();
}

void SmallReadCkptfs(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  SmallFixture* fx = GetSmall(state, size);
  if (!fx) return;
  Store* store = fx->store.get();
  std::string buf(size + 1, '\0');
  for (auto _ : state) {
    state.PauseTiming();
    DropCaches(store, {fx->store_dir});
    state.ResumeTiming();
    std::vector<Ino> dirs;
    for (int d = 0; d < kSmallDirs; ++d) {
      auto a = store->Lookup(kRootIno, DirName(d));
      if (!Check(state, a.status(), "Lookup dir")) return;
      dirs.push_back(a->ino);
    }
    for (int i = 0; i < SmallFiles(); ++i) {
      auto a = store->Lookup(dirs[i % kSmallDirs], FileName(i));
      if (!Check(state, a.status(), "Lookup")) return;
      if (!Check(state, store->OpenFile(a->ino), "OpenFile")) return;
      auto n = store->Read(a->ino, 0, buf.size(), buf.data());
      if (!Check(state, n.status(), "Read")) return;
      if (*n != size || TagOf(buf.data()) != static_cast<uint64_t>(i)) {
        state.SkipWithError("Read returned wrong data");
        return;
      }
      if (!Check(state, store->Release(a->ino), "Release")) return;
    }
  }
  SetLabels(state, size * SmallFiles(), SmallFiles());
}

void SmallReadPlain(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  SmallFixture* fx = GetSmall(state, size);
  if (!fx) return;
  std::string buf(size + 1, '\0');
  for (auto _ : state) {
    state.PauseTiming();
    DropCaches(nullptr, {fx->plain_dir});
    state.ResumeTiming();
    for (int i = 0; i < SmallFiles(); ++i) {
      std::string p = fx->plain_dir + "/" + DirName(i % kSmallDirs) + "/" + FileName(i);
      int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (!CheckSys(state, fd >= 0, "open " + p)) return;
      ssize_t n = ::read(fd, buf.data(), buf.size());
      ::close(fd);
      if (n != static_cast<ssize_t>(size) || TagOf(buf.data()) != static_cast<uint64_t>(i)) {
        state.SkipWithError("read returned wrong data");
        return;
      }
    }
  }
  SetLabels(state, size * SmallFiles(), SmallFiles());
}

// The bytes of the files under `dir`, and of those no other link shares.
void DirBytes(const std::string& dir, uint64_t* all, uint64_t* unshared) {
  *all = *unshared = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    *all += static_cast<uint64_t>(st.st_size);
    if (st.st_nlink == 1) *unshared += static_cast<uint64_t>(st.st_size);
  }
}

// A backup of the index of the small_read_16k store (its files, plus 1,000
// new 16 KiB files written untimed before each backup, as a checkpoint step
// would between two backups): the time of Store::BackupIndex (a flush of
// what the memtables hold, then links), and the disk space the newest
// backup takes of its own (what it does not share with the index).
void IndexBackup(benchmark::State& state) {
  constexpr size_t kSize = 16384;
  constexpr int kNewFiles = 1000;
  SmallFixture* fx = GetSmall(state, kSize);
  if (!fx) return;
  Store* store = fx->store.get();
  std::string buf = RandomMiB();
  static int round = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto dir = store->Mkdir(kRootIno, "backup_round" + std::to_string(round++), 0755, 0, 0);
    if (!Check(state, dir.status(), "Mkdir")) return;
    for (int i = 0; i < kNewFiles; ++i) {
      auto a = store->Create(dir->ino, FileName(i), S_IFREG | 0644, 0, 0);
      if (!Check(state, a.status(), "Create")) return;
      TagBuffer(&buf, i);
      if (!Check(state, store->Write(a->ino, 0, std::string_view(buf.data(), kSize)).status(),
                 "Write")) {
        return;
      }
    }
    state.ResumeTiming();
    if (!Check(state, store->BackupIndex(0), "BackupIndex")) return;
  }
  uint64_t index_all, index_unshared, backup_all, backup_unshared = 0;
  DirBytes(fx->store_dir + "/index", &index_all, &index_unshared);
  std::string newest;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fx->store_dir + "/backup", ec)) {
    newest = std::max(newest, e.path().string());
  }
  DirBytes(newest, &backup_all, &backup_unshared);
  state.counters["index_mib"] = static_cast<double>(index_all) / kMiB;
  state.counters["backup_own_kib"] = static_cast<double>(backup_unshared) / 1024;
  state.counters["files"] = SmallFiles();
}

void Register() {
  auto one = [](benchmark::internal::Benchmark* b) {
    b->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
  };
  one(benchmark::RegisterBenchmark("large_write/ckptfs", LargeWriteCkptfs));
  one(benchmark::RegisterBenchmark("large_write/plain", LargeWritePlain));
  one(benchmark::RegisterBenchmark("large_read/ckptfs", LargeReadCkptfs));
  one(benchmark::RegisterBenchmark("large_read/plain", LargeReadPlain));
  for (int64_t size : {4096, 16384}) {
    std::string k = size == 4096 ? "4k" : "16k";
    one(benchmark::RegisterBenchmark(("small_create_" + k + "/ckptfs").c_str(),
                                     SmallCreateCkptfs)->Arg(size));
    one(benchmark::RegisterBenchmark(("small_create_" + k + "/plain").c_str(),
                                     SmallCreatePlain)->Arg(size));
    one(benchmark::RegisterBenchmark(("small_read_" + k + "/ckptfs").c_str(),
                                     SmallReadCkptfs)->Arg(size));
    one(benchmark::RegisterBenchmark(("small_read_" + k + "/plain").c_str(),
                                     SmallReadPlain)->Arg(size));
  }
  one(benchmark::RegisterBenchmark("index_backup/ckptfs", IndexBackup));
}

}  // namespace
}  // namespace ckptfs::engine::bench

int main(int argc, char** argv) {
  ckptfs::engine::bench::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("bench_dir", ckptfs::engine::bench::BenchParent());
  benchmark::AddCustomContext("cache_drop", ckptfs::engine::bench::DropName());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Remove the fixtures (stores closed first).
  for (auto& [size, fx] : ckptfs::engine::bench::g_small) {
    if (fx && fx->store) (void)fx->store->Close();
  }
  ckptfs::engine::bench::g_small.clear();
  if (ckptfs::engine::bench::g_large && ckptfs::engine::bench::g_large->store) {
    (void)ckptfs::engine::bench::g_large->store->Close();
  }
  ckptfs::engine::bench::g_large.reset();
  return 0;
}
