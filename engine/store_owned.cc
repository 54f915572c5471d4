// The inodes a writable mount of a shared store owns (engine/shared/
// ownership.h, docs/SHARED.md "Owned inodes"): what StoreImpl asks of its
// HostSession's Ownership before a change, when it makes an inode, and
// when another host asks for one.
#include <sys/stat.h>

#include <algorithm>
#include <limits>

#include "engine/store_impl.h"

namespace ckptfs::engine {

Status StoreImpl::MayChange(Ino ino) {
  if (!mode_->OthersWrite()) return Status::OK();
  return host_.ownership().MayChange(ino);
}

Status StoreImpl::CommitAttrs(InodeState* s, meta::Writes* batch, bool sync, meta::Durability d) {
  if (!mode_->OthersWrite() || host_.ownership().Owns(s->ino)) {
    if (d != meta::Durability::kVolatile) return Commit(batch, sync);
    return meta::CommitWrites(kv(), batch, d);  // changes no extent map
  }
  const format::InodeValue base = s->attr;
  return RunChange([&](Txn& t) NO_THREAD_SAFETY_ANALYSIS -> Status {  // s->mu is held
    CKPTFS_RETURN_IF_ERROR(RefreshLocked(s, t.reader()));
    CKPTFS_RETURN_IF_ERROR(Unsealed(s->ino, s->attr, "change"));
    s->attr = base;  // what the change was made from; the caller sets the new
    Status c = CommitIn(t.index.get(), batch, d);
    if (c.ok() && sync) c = MakeDurable();
    return c;
  });
}

bool StoreImpl::OwnNew(meta::Writes* b, uint64_t ino, bool dir) {
  Ownership& own = host_.ownership();
  if (!own.started() || !own.Made(ino, dir)) return false;
  b->Put(Space::kMeta, format::OwnerKey(ino), own.owner_value());
  return true;
}

void StoreImpl::GiveUp(uint64_t ino, const std::vector<Ownership::Name>& names, bool owned) {
  if (owned) {
    // A change of the inode under way, which trusted what this mount knew
    // of it, commits before another host may change it. (A change of a
    // directory read under a grant reads it in its own transaction.)
    InodeRef s(&inodes_, ino);
    MutexLock l(&s->mu);
  }
  extent_maps_.Forget(ino);
  CallGiveUpHook(ino, names, /*wait=*/true);
}

void StoreImpl::CallGiveUpHook(Ino ino, const std::vector<Ownership::Name>& names, bool wait) {
  MutexLock l(&give_up_mu_);
  if (!give_up_hook_) return;
  GiveUpHook hook = give_up_hook_;
  give_up_calls_++;
  // Not under give_up_mu_: the kernel may make the call wait for a
  // request that is itself on its way to Unguard.
  l.Unlock();
  hook(ino, names, wait);
  l.Lock();
  if (--give_up_calls_ == 0) give_up_cv_.SignalAll();
}

void StoreImpl::SetGiveUpHook(GiveUpHook hook) {
  MutexLock l(&give_up_mu_);
  // The old one is not called any more once this returns.
  while (give_up_calls_ > 0) give_up_cv_.Wait(&give_up_mu_);
  give_up_hook_ = std::move(hook);
}

StoreImpl::ReaderGuard StoreImpl::GuardOf(const meta::Writes& batch) const {
  ReaderGuard g;
  const Ownership& own = host_.ownership();
  if (!mode_->OthersWrite() || !own.started()) return g;
  // The directories it changes: those of the names and the inodes it
  // writes. Every change of a directory writes its inode (its times
  // change), which a read grant's transaction read: PostgreSQL orders the
  // two by that key. Owned ones too: no reader key can exist for them,
  // unless the owner's grant ran out under a change.
  std::vector<uint64_t>& dirs = g.dirs;
  for (const meta::Write& w : batch.list()) {
    if (w.key.size() < 8) continue;
    const uint64_t ino = format::GetBE64(w.key.data());
    if (w.space == Space::kDentries) {
      dirs.push_back(ino);
    } else if (w.space == Space::kInodes) {
      format::InodeValue v;
      if (w.kind == meta::Write::Kind::kDelete ||
          (format::DecodeInode(w.value, &v).ok() && S_ISDIR(v.mode))) {
        dirs.push_back(ino);
      }
    }
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  g.ranges = own.ReaderRanges(dirs);
  return g;
}

Status StoreImpl::Unguard(const ReaderGuard& g) {
  Ownership& own = host_.ownership();
  // Its own grants first: another host that waits for this one to give
  // them up would wait while this one waits for it.
  Ownership::Dropped dropped;
  Status s = own.DropReads(g.dirs, &dropped);
  if (s.ok()) s = own.Unread(g.ranges, &dropped);
  // The kernel drops them later: a request of its own on those
  // directories (this one's) may hold them now.
  for (const auto& [dir, names] : dropped) CallGiveUpHook(dir, names, /*wait=*/false);
  return s;
}

void StoreImpl::NamesChanged(const meta::Writes& batch) {
  Ownership& own = host_.ownership();
  if (!own.started()) return;
  for (const meta::Write& w : batch.list()) {
    if (w.space != Space::kDentries || w.key.size() < 8) continue;
    const uint64_t parent = format::GetBE64(w.key.data());
    uint64_t ino = 0;
    if (w.kind != meta::Write::Kind::kDelete) {
      format::DentryValue d;
      // (Not reached: the batch was encoded here.)
      if (!format::DecodeDentry(w.value, &d).ok()) continue;
      ino = d.ino;
    }
    own.SetName(parent, std::string_view(w.key).substr(8), ino);
  }
}

double StoreImpl::CacheSecondsOf(Ino ino) const {
  if (sealed_.Contains(ino)) return std::numeric_limits<double>::infinity();
  if (!mode_->OthersWrite()) return mode_->CacheSeconds();
  const double host = host_.CacheSecondsOf(ino);
  // A directory on the path to a held sealed tree: kept a moment.
  if (host < HeldSnapshots::kPathSeconds && snapshots_.OnPath(ino)) return HeldSnapshots::kPathSeconds;
  return host;
}

double StoreImpl::CacheSecondsOfName(Ino dir, Ino ino) const {
  if (sealed_.Contains(dir)) return std::numeric_limits<double>::infinity();
  if (!mode_->OthersWrite()) return mode_->CacheSeconds();
  const double host = host_.CacheSecondsOfName(dir, ino);
  // The name of a held sealed tree's root, or of a directory above it.
  if (host < HeldSnapshots::kPathSeconds && snapshots_.OnPath(ino)) return HeldSnapshots::kPathSeconds;
  return host;
}

}  // namespace ckptfs::engine
