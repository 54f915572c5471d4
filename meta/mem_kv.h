// An implementation of the seam (meta/kv.h) in memory: an ordered map per
// key space with the versions of each key, for tests of what the engine
// does over a shared index without a server (a `mem://NAME` index,
// meta/shared_kv.h).
//
// Isolation as PostgreSQL's (meta/pg_kv.h) gives it, optimistically: every
// transaction reads a snapshot taken at its first read. A read-write
// transaction's commit fails with a conflict (IsConflict), applying
// nothing, when a commit after its snapshot changed a key it read, a key in
// a range it scanned (Scan, Last), or a key it puts or deletes. Merges are
// blind: they never conflict. An Insert of a key that exists at the commit
// fails with EEXIST. Durability is that of the process: Sync does nothing.
// A commit wakes the listeners of its notifications (Kv::Listen) as it
// returns.
//
// Thread-safe. Versions that no snapshot can see any more are dropped as
// keys are written.
#pragma once

#include <memory>
#include <string>

#include "meta/kv.h"

namespace ckptfs::meta {

// The keys and versions of one index (mem_kv.cc).
class MemIndex;

class MemKv final : public Kv {
 public:
  // A new, empty index of its own.
  MemKv();
  // The process-wide index named `name`: every MemKv of one name in a
  // process reads and writes one index, which lives as long as the
  // process. ENOENT when there is none of that name and `create` is false.
  static Result<std::unique_ptr<MemKv>> Named(const std::string& name, bool create);
  ~MemKv() override;

  Result<std::unique_ptr<ReadTxn>> BeginRead() override;
  Result<std::unique_ptr<Txn>> Begin() override;
  Status Sync() override { return Status::OK(); }
  std::string Describe() const override;
  Result<uint64_t> StoredBytes() override;
  // Every MemKv of the index hears the notifications of its commits.
  Result<std::unique_ptr<Listener>> Listen(std::string_view channel) override;

 private:
  MemKv(std::shared_ptr<MemIndex> index, std::string name);

  const std::shared_ptr<MemIndex> index_;
  const std::string name_;  // "" for one of its own
};

}  // namespace ckptfs::meta
