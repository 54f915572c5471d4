// kv_bench: the index's seam (meta/kv.h) on each implementation, with the
// transactions a store runs most, from 1 and from several threads:
//   create   read the directory's inode, insert the new entry (Txn::Insert),
//            write the new inode and merge the inode count: one create(2);
//            on PostgreSQL also as get+put: read the entry's absent key,
//            then put it (what Insert avoids: conflicts between creates)
//   lookup   read an entry, then its inode, each in a read-only transaction
//   extent   write one extent, no read: the index part of a write(2)
// Every thread creates its names in one common directory, so that the
// creates of all threads meet in one key range. Prints operations per
// second, microseconds per operation, and the transactions that were run
// again after a conflict.
//
// Usage: kv_bench [--ops N] [--threads A,B,...]
//   RocksDB in a temporary directory always; PostgreSQL too when
//   CKPTFS_TEST_PG holds a URI: scripts/with-postgres.sh build/bench/kv_bench
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "format/format.h"
#include "meta/kv.h"
#include "meta/pg_kv.h"
#include "meta/rocks_kv.h"

namespace ckptfs::meta {
namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double ops_per_s = 0;
  double us_per_op = 0;
  uint64_t reruns = 0;
};

// Runs `op(thread, i)` `ops` times over `threads` threads.
Figures Run(int threads, int ops, const std::function<Status(int, int, std::atomic<uint64_t>*)>& op) {
  std::atomic<uint64_t> reruns{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = t; i < ops; i += threads) {
        Status st = op(t, i, &reruns);
        if (!st.ok() && !failed.exchange(true)) {
          std::fprintf(stderr, "kv_bench: %s\n", st.ToString().c_str());
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  if (failed) std::exit(1);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return Figures{ops / s, s * 1e6 / ops * threads, reruns.load()};
}

// A read-only transaction's body, run once.
Status Reads(Kv* kv, const std::function<Status(ReadTxn*)>& body) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<ReadTxn> t, kv->BeginRead());
  return body(t.get());
}

// RunTxn, counting the bodies run more than once.
Status Counted(Kv* kv, std::atomic<uint64_t>* reruns, const std::function<Status(Txn*)>& body) {
  bool first = true;
  return RunTxn(kv, [&](Txn* t) {
    if (!first) ++*reruns;
    first = false;
    return body(t);
  }, Durability::kLogged);
}

#define CKPTFS_CHECK_OK(expr)                                         \
  do {                                                                \
    Status _st = (expr);                                              \
    if (!_st.ok()) {                                                  \
      std::fprintf(stderr, "kv_bench: %s\n", _st.ToString().c_str()); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

// `read_then_put`: a create reads its entry's absent key, then puts it;
// otherwise it reads the directory's inode and inserts the entry (Insert).
void Bench(const char* name, Kv* kv, int ops, const std::vector<int>& thread_counts,
           bool read_then_put) {
  static std::atomic<uint64_t> round{0};
  format::InodeValue inode;
  inode.mode = 0100644;
  inode.nlink = 1;
  const std::string inode_value = format::EncodeInode(inode);
  for (int threads : thread_counts) {
    const uint64_t dir = 1000 + round++;
    CKPTFS_CHECK_OK(RunTxn(kv, [&](Txn* t) {
      t->Put(Space::kInodes, format::InodeKey(dir), inode_value);
      return Status::OK();
    }, Durability::kLogged));
    Figures create = Run(threads, ops, [&](int, int i, std::atomic<uint64_t>* reruns) {
      const std::string name = "param_" + std::to_string(i) + ".zarray";
      const uint64_t ino = dir * 1000000 + i;
      return Counted(kv, reruns, [&](Txn* t) -> Status {
        if (read_then_put) {
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> old,
                                  t->Get(Space::kDentries, format::DentryKey(dir, name)));
          if (old.has_value()) return Status(EEXIST, name);
        } else {
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> parent,
                                  t->Get(Space::kInodes, format::InodeKey(dir)));
          if (!parent.has_value()) return Status(ENOENT, "directory");
        }
        format::DentryValue d;
        d.ino = ino;
        d.type = 8;
        if (read_then_put) {
          t->Put(Space::kDentries, format::DentryKey(dir, name), format::EncodeDentry(d));
        } else {
          t->Insert(Space::kDentries, format::DentryKey(dir, name), format::EncodeDentry(d));
        }
        t->Put(Space::kInodes, format::InodeKey(ino), inode_value);
        t->Merge(Space::kMeta, format::kMetaInodeCount, CounterOperand(1));
        return Status::OK();
      });
    });
    Figures lookup = Run(threads, ops, [&](int, int i, std::atomic<uint64_t>* reruns) -> Status {
      const std::string name = "param_" + std::to_string(i) + ".zarray";
      uint64_t ino = 0;
      CKPTFS_RETURN_IF_ERROR(Reads(kv, [&](ReadTxn* t) -> Status {
        CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                                t->Get(Space::kDentries, format::DentryKey(dir, name)));
        if (!v.has_value()) return Status(ENOENT, name);
        format::DentryValue d;
        CKPTFS_RETURN_IF_ERROR(format::DecodeDentry(*v, &d));
        ino = d.ino;
        return Status::OK();
      }));
      return Reads(kv, [&](ReadTxn* t) -> Status {
        CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> v,
                                t->Get(Space::kInodes, format::InodeKey(ino)));
        return v.has_value() ? Status::OK() : Status(ENOENT, "inode");
      });
    });
    format::ExtentValue e;
    e.length = 1 << 20;
    e.segment_id = 1;
    e.stored_len = e.raw_len = 1 << 20;
    const std::string extent_value = format::EncodeExtent(e);
    Figures extent = Run(threads, ops, [&](int t, int i, std::atomic<uint64_t>* reruns) {
      return Counted(kv, reruns, [&](Txn* txn) {
        txn->Put(Space::kExtents, format::ExtentKey(dir * 1000000 + t, uint64_t(i) << 20),
                 extent_value);
        return Status::OK();
      });
    });
    const char* create_name = read_then_put ? "get+put" : "create";
    for (auto [what, f] :
         {std::pair{create_name, create}, {"lookup", lookup}, {"extent", extent}}) {
      std::printf("%-10s %-7s %2d threads  %9.0f ops/s  %8.1f us/op  %6llu reruns\n", name, what,
                  threads, f.ops_per_s, f.us_per_op, static_cast<unsigned long long>(f.reruns));
    }
  }
}

int Main(int argc, char** argv) {
  int ops = 4000;
  std::vector<int> threads = {1, 4, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ops") {
      ops = std::atoi(argv[i + 1]);
    } else if (flag == "--threads") {
      threads.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        threads.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: kv_bench [--ops N] [--threads A,B,...]\n");
      return 2;
    }
  }

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ckptfs-kv-bench-" + std::to_string(getpid()));
  {
    Result<std::unique_ptr<OwnedRocksKv>> db = OwnedRocksKv::Open(dir.string());
    if (!db.ok()) {
      std::fprintf(stderr, "kv_bench: %s\n", db.status().ToString().c_str());
      return 1;
    }
    Bench("rocksdb", (*db)->kv(), ops, threads, /*read_then_put=*/false);
  }
  std::filesystem::remove_all(dir);

  if (const char* uri = std::getenv("CKPTFS_TEST_PG")) {
    PgOptions po;
    po.uri = uri;
    po.schema = "kv_bench_" + std::to_string(getpid());
    po.create = true;
    po.idle_connections = 32;
    Result<std::unique_ptr<PgKv>> kv = PgKv::Open(po);
    if (!kv.ok()) {
      std::fprintf(stderr, "kv_bench: %s\n", kv.status().ToString().c_str());
      return 1;
    }
    Bench("postgresql", kv->get(), ops, threads, /*read_then_put=*/true);
    Bench("postgresql", kv->get(), ops, threads, /*read_then_put=*/false);
    (void)(*kv)->DropSchema();
  } else {
    std::printf("postgresql: CKPTFS_TEST_PG is not set (run through scripts/with-postgres.sh)\n");
  }
  return 0;
}

}  // namespace
}  // namespace ckptfs::meta

int main(int argc, char** argv) { return ckptfs::meta::Main(argc, argv); }
