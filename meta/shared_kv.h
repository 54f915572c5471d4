// Opening a shared store's index from its URL (the store's SHARED file,
// docs/SHARED.md): PostgreSQL for a libpq connection URI or string, or an
// index in this process's memory for `mem://NAME`, which the engine's tests
// use to run two stores of one process, standing for two hosts, over one
// index without a server.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "meta/kv.h"

namespace ckptfs::meta {

struct SharedKvOptions {
  // "postgresql://host/db", "host=/run/x dbname=ckptfs" (meta/pg_kv.h,
  // PgOptions::uri), or "mem://NAME": the process-wide index NAME in
  // memory (meta/mem_kv.h, MemKv::Named).
  std::string uri;
  // The PostgreSQL schema of the store's tables (PgOptions::schema); in
  // memory, part of the index's name.
  std::string schema = "ckptfs";
  // Creates the index when missing; else ENOENT.
  bool create = false;
  // PostgreSQL: how long a transaction waits for a server that is away
  // (PgOptions::reconnect_wait_s). Default: 60 s.
  double reconnect_wait_s = 60;
};

// Whether `uri` names an index in memory ("mem://NAME").
bool IsMemUri(std::string_view uri);

// Opens the index that `options.uri` names. EINVAL for a bad URI or schema
// name; PgKv::Open's errors.
Result<std::unique_ptr<Kv>> OpenSharedKv(const SharedKvOptions& options);

}  // namespace ckptfs::meta
