// The filesystem RocksDB keeps a store's index on, made from the store's
// io::Env: RocksDB's own, with every write, sync, truncation, deletion and
// rename of the index's files passed through the Env's IndexFileHooks
// (io/env.h) when it has them (a fault-injecting Env in tests, which then
// drops the index's unsynced bytes at a power cut with the segments').
#pragma once

#include <rocksdb/env.h>

#include <memory>

#include "io/env.h"

namespace ckptfs::engine {

// The Env for the index's RocksDB options; nullptr, RocksDB's own, when
// `env` has no IndexFileHooks. `env` must outlive what it returns only for
// the hooks, which the returned Env holds.
std::unique_ptr<rocksdb::Env> NewIndexEnv(io::Env* env);

}  // namespace ckptfs::engine
