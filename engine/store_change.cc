// StoreImpl::Txn: one namespace change, its locked inodes, their working
// attributes and the batch (and, on a shared store, the index transaction)
// that carries it.
#include <algorithm>

#include "engine/store_impl.h"

namespace ckptfs::engine {

Status StoreImpl::Txn::Begin() {
  CKPTFS_ASSIGN_OR_RETURN(index, st->mode_->BeginChange(st->kv()));
  return Status::OK();
}

Status StoreImpl::Txn::Lock(std::vector<uint64_t> inos, const std::map<uint64_t, ReadValue>* read) {
  std::sort(inos.begin(), inos.end());
  inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
  if (index != nullptr && st->mode_->OthersWrite()) {
    CKPTFS_RETURN_IF_ERROR(st->host_.ownership().MayChangeAll(inos));
  }
  for (uint64_t ino : inos) {
    refs.emplace_back(&st->inodes_, ino);
    locks.emplace_back(refs.back()->mu);
    InodeState* s = refs.back().get();
    if (index == nullptr) {
      CKPTFS_RETURN_IF_ERROR(st->LoadLocked(s));
    } else if (!st->host_.ownership().Owns(ino)) {
      // Read in the change's transaction, which conflicts with any other
      // change of it (alone too: a solo period ends by the clock, which a
      // change may outlast).
      const ReadValue* value = nullptr;
      if (read != nullptr) {
        auto it = read->find(ino);
        if (it != read->end()) value = &it->second;
      }
      CKPTFS_RETURN_IF_ERROR(st->RefreshLocked(s, reader(), value));
    } else if (!st->TrustedLocked(s)) {
      // Owned: it changes only through this mount, and another host's
      // change waits for this one (Ownership::GiveUp takes s->mu). Read
      // once, and trusted from then on.
      CKPTFS_RETURN_IF_ERROR(st->RefreshLocked(s, kLatest));
    }
  }
  return Status::OK();
}

InodeState* StoreImpl::Txn::State(uint64_t ino) {
  // Lock pinned them in ascending order (a seal locks a whole tree).
  auto it = std::lower_bound(refs.begin(), refs.end(), ino,
                             [](const InodeRef& r, uint64_t i) { return r->ino < i; });
  // nullptr is not reached: callers lock every inode they touch.
  return it != refs.end() && (*it)->ino == ino ? it->get() : nullptr;
}

format::InodeValue& StoreImpl::Txn::Edit(uint64_t ino) {
  auto it = attrs.find(ino);
  if (it == attrs.end()) it = attrs.emplace(ino, State(ino)->attr).first;
  return it->second;
}

Status StoreImpl::Txn::Purge(uint64_t ino) {
  CKPTFS_RETURN_IF_ERROR(st->PurgeLocked(State(ino), &batch, &deltas, reader()));
  purged.push_back(ino);
  return Status::OK();
}

Status StoreImpl::Txn::DropLink(uint64_t ino, const Timespec& now) {
  format::InodeValue& v = Edit(ino);
  if (v.nlink > 0) v.nlink--;
  SetCtime(&v, now);
  if (v.nlink > 0) return Status::OK();
  return Unnamed(ino);
}

Status StoreImpl::Txn::DropDir(uint64_t ino, const Timespec& now) {
  format::InodeValue& v = Edit(ino);
  v.nlink = 0;
  SetCtime(&v, now);
  return Unnamed(ino);
}

Status StoreImpl::Txn::Unnamed(uint64_t ino) {
  if (State(ino)->open_count.load() > 0) {
    batch.Put(Space::kMeta, format::OrphanKey(ino), st->mode_->OrphanValue());
    State(ino)->orphaned_here = true;
    return Status::OK();
  }
  return Purge(ino);
}

void StoreImpl::Txn::XattrsChanged(uint64_t ino) {
  State(ino)->no_xattrs_epoch = 0;
  State(ino)->absent_xattr_epoch = 0;
}

Status StoreImpl::Txn::Commit() {
  for (auto& [ino, v] : attrs) {
    if (std::find(purged.begin(), purged.end(), ino) == purged.end()) {
      st->PutInode(&batch, ino, v);
    }
  }
  EmitDeltas(deltas, &batch);
  CKPTFS_RETURN_IF_ERROR(index != nullptr ? st->CommitIn(index.get(), &batch) : st->Commit(&batch));
  for (uint64_t ino : purged) {
    if (State(ino)->attr.data_file_end != 0) {
      (void)st->data_files_->RemoveAfterSync(ino, State(ino)->attr.data_file_end);
      st->data_files_->EvictSoon(ino);
    }
  }
  for (auto& [ino, v] : attrs) {
    State(ino)->attr = v;
    st->snapshots_.Drop(ino);  // a sealed tree's snapshot holds it no more
  }
  for (uint64_t ino : purged) State(ino)->purged = true;
  if (index != nullptr) st->NamesChanged(batch);
  return Status::OK();
}

}  // namespace ckptfs::engine
