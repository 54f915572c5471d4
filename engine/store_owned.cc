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
  MutexLock l(&give_up_mu_);
  if (give_up_hook_) give_up_hook_(ino, names);
}

void StoreImpl::SetGiveUpHook(GiveUpHook hook) {
  MutexLock l(&give_up_mu_);
  give_up_hook_ = std::move(hook);
}

std::vector<meta::Writes::Range> StoreImpl::ReaderRanges(const meta::Writes& batch) const {
  const Ownership& own = host_.ownership();
  if (!mode_->OthersWrite() || !own.started()) return {};
  // The directories it changes: those of the names, the extended
  // attributes and the inodes it writes (a change of a directory's names
  // writes its inode too: its times change).
  std::vector<uint64_t> dirs;
  for (const meta::Write& w : batch.list()) {
    if (w.key.size() < 8) continue;
    const uint64_t ino = format::GetBE64(w.key.data());
    if (w.space == Space::kDentries || w.space == Space::kXattrs) {
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
  // No other host reads what this mount owns.
  dirs.erase(std::remove_if(dirs.begin(), dirs.end(), [&](uint64_t d) { return own.Owns(d); }),
             dirs.end());
  return own.ReaderRanges(dirs);
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
