// Sealed trees (docs/DESIGN.md, "Sealed trees"): Seal marks every inode of
// a tree with format's kInodeSealed in one commit; the changes of
// store_namespace.cc, store_attr.cc, store_write.cc and store_xattr.cc ask
// Unsealed before they change an inode, and reads leave a sealed inode's
// access time alone. The seal writes the tree's index entries into a
// snapshot file (meta/snapshot_file.h) that its record names.
#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "engine/store_impl.h"

namespace ckptfs::engine {
namespace {

void Warn(const std::string& what) { std::fprintf(stderr, "ckptfs: %s\n", what.c_str()); }

}  // namespace

Status StoreImpl::Unsealed(uint64_t ino, const format::InodeValue& v, std::string_view what) {
  if ((v.flags & format::kInodeSealed) == 0) return Status::OK();
  sealed_.Note(ino);
  return Status(EROFS, std::string(what) + ": inode " + std::to_string(ino) + " is sealed");
}

Result<std::vector<uint64_t>> StoreImpl::TreeOf(Ino ino, meta::ReadTxn* in,
                                                std::vector<meta::SnapshotEntry>* dentries) {
  std::vector<uint64_t> inos = {ino};
  // Level by level: the entries of a level's directories in one scan over
  // their range of inode numbers when it is dense (a per-parameter tree's
  // thousands of directories in one round trip), else one scan each.
  std::set<uint64_t> level = {ino};
  while (!level.empty()) {
    std::set<uint64_t> next;
    Status bad;
    auto visit = [&](std::string_view key, std::string_view value) {
      if (key.size() < 8 || !level.count(format::GetBE64(key.data()))) return true;
      format::DentryValue d;
      bad = format::DecodeDentry(value, &d);
      if (!bad.ok()) {
        bad = bad.Annotate("an entry of directory " + std::to_string(format::GetBE64(key.data())));
        return false;
      }
      dentries->push_back({Space::kDentries, std::string(key), std::string(value)});
      inos.push_back(d.ino);
      if ((uint32_t{d.type} << 12) == S_IFDIR) next.insert(d.ino);
      return true;
    };
    const uint64_t lo = *level.begin();
    const uint64_t hi = *level.rbegin() + 1;
    // Between a level's directories lie their files' numbers, which own
    // no entries: a span of up to 16 numbers a directory reads little else.
    if (level.size() > 1 && hi - lo <= 16 * level.size() + kInoBlock) {
      CKPTFS_RETURN_IF_ERROR(IndexScan(in, Space::kDentries, format::DentryPrefix(lo),
                                       format::DentryPrefix(hi), visit));
    } else {
      for (uint64_t dir : level) {
        CKPTFS_RETURN_IF_ERROR(IndexScan(in, Space::kDentries, format::DentryPrefix(dir),
                                         format::DentryPrefix(dir + 1), visit));
        if (!bad.ok()) break;
      }
    }
    CKPTFS_RETURN_IF_ERROR(bad);
    level = std::move(next);
  }
  return inos;
}

Result<std::map<uint64_t, StoreImpl::ReadValue>> StoreImpl::ReadInodes(
    const std::vector<uint64_t>& inos, meta::ReadTxn* in) {
  std::map<uint64_t, ReadValue> values;
  if (inos.empty() || in == nullptr) return values;
  const std::set<uint64_t> wanted(inos.begin(), inos.end());
  const uint64_t lo = *wanted.begin();
  const uint64_t hi = *wanted.rbegin() + 1;
  if (hi - lo > 4 * wanted.size() + kInoBlock) return values;  // sparse: read one by one
  for (uint64_t i : wanted) values[i] = std::nullopt;
  CKPTFS_RETURN_IF_ERROR(IndexScan(in, Space::kInodes, format::InodeKey(lo), format::InodeKey(hi),
                                   [&](std::string_view key, std::string_view value) {
                                     if (key.size() != 8) return true;
                                     auto it = values.find(format::GetBE64(key.data()));
                                     if (it != values.end()) it->second = std::string(value);
                                     return true;
                                   }));
  return values;
}

Result<uint64_t> StoreImpl::Seal(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(EnsureSnapshotsDir());
  std::vector<uint64_t> tree;
  std::vector<std::string> taken_in;  // the snapshots of trees this one takes in
  std::string bytes;                  // the snapshot's
  std::string snapshot;               // its name
  uint64_t parent = 0;                // the root's, when it is a directory
  CKPTFS_ASSIGN_OR_RETURN(
      const uint64_t sealed, ChangeNamespace([&](Txn& t) -> Result<uint64_t> {
        std::vector<meta::SnapshotEntry> entries;
        taken_in.clear();
        CKPTFS_ASSIGN_OR_RETURN(tree, TreeOf(ino, t.reader(), &entries));
        CKPTFS_ASSIGN_OR_RETURN(const auto values, ReadInodes(tree, t.reader()));
        CKPTFS_RETURN_IF_ERROR(t.Lock(tree, &values));
        uint64_t n = 0;
        format::SealValue seal;
        const Timespec now = Now();
        seal.sealed_ms = now.sec * 1000 + now.nsec / 1'000'000;
        std::set<uint64_t> inos;
        for (uint64_t i : tree) {
          if (t.Direct(i)) {
            return Status(EBUSY, "inode " + std::to_string(i) + " is being written (passthrough)");
          }
          format::InodeValue& v = t.Edit(i);
          if (i == ino && v.nlink == 0) return Status(ENOENT, "inode " + std::to_string(i) + " was removed");
          if (i == ino) parent = S_ISDIR(v.mode) ? v.parent : 0;
          if ((v.flags & format::kInodeSealed) == 0) n++;
          v.flags |= format::kInodeSealed;
          if (!inos.insert(i).second) continue;  // another name of a file
          if (S_ISREG(v.mode)) seal.logical_bytes += v.size;
        }
        if (n == 0) return n;
        seal.inodes = inos.size();
        // The roots of sealed trees this one takes in are roots no more.
        CKPTFS_RETURN_IF_ERROR(IndexScan(t.reader(), Space::kMeta, format::kMetaSealPrefix,
                                         format::kMetaSealEnd,
                                         [&](std::string_view key, std::string_view value) {
                                           const std::string_view prefix = format::kMetaSealPrefix;
                                           if (key.size() != prefix.size() + 8) return true;
                                           const uint64_t root = format::GetBE64(key.data() + prefix.size());
                                           if (root != ino && inos.count(root)) {
                                             t.batch.Delete(Space::kMeta, key);
                                             format::SealValue old;
                                             if (format::DecodeSeal(value, &old).ok() && !old.snapshot.empty()) {
                                               taken_in.push_back(old.snapshot);
                                             }
                                           }
                                           return true;
                                         }));
        // The tree's index entries as this commit leaves them, in a
        // snapshot file that the seal record names, durable before it.
        for (uint64_t i : inos) {
          entries.push_back({Space::kInodes, format::InodeKey(i), format::EncodeInode(t.Edit(i))});
        }
        CKPTFS_RETURN_IF_ERROR(CollectTreeKeys(t.reader(), Space::kExtents, inos, &entries));
        CKPTFS_RETURN_IF_ERROR(CollectTreeKeys(t.reader(), Space::kXattrs, inos, &entries));
        CKPTFS_ASSIGN_OR_RETURN(bytes, meta::EncodeSnapshot(std::move(entries)));
        seal.snapshot = std::to_string(ino) + "-" + std::to_string(seal.sealed_ms) + ".sst";
        snapshot = seal.snapshot;
        const std::string path = SnapshotPath(seal.snapshot);
        CKPTFS_RETURN_IF_ERROR(env_->Create(path, bytes).status());
        t.batch.Put(Space::kMeta, format::SealKey(ino), format::EncodeSeal(seal));
        if (Status c = t.Commit(); !c.ok()) {
          (void)env_->Remove(path);  // named by nothing; a conflict makes another
          return c;
        }
        return n;
      }));
  for (uint64_t i : tree) sealed_.Note(i);
  for (const std::string& name : taken_in) (void)env_->Remove(SnapshotPath(name));
  // The tree's bytes and the seal, durable together.
  CKPTFS_RETURN_IF_ERROR(SyncAll());
  if (mode_->OthersWrite() && !bytes.empty() && parent != 0) {
    // This mount reads the tree from its snapshot too, from now on.
    for (uint64_t i : tree) snapshots_.Drop(i);  // the trees it took in
    Result<std::unique_ptr<meta::SnapshotFile>> file =
        meta::SnapshotFile::FromBytes(SnapshotPath(snapshot), std::move(bytes));
    Result<bool> held = file.ok() ? snapshots_.Hold(ino, std::move(*file), PathTo(parent)) : file.status();
    if (!held.ok()) Warn("sealed tree " + std::to_string(ino) + ": " + held.status().ToString());
  }
  return sealed;
}

std::shared_ptr<meta::SnapshotFile> StoreImpl::HeldFor(Space s, std::string_view begin,
                                                      std::optional<std::string_view> end) {
  if (snapshots_.empty()) return nullptr;
  if (s != Space::kInodes && s != Space::kDentries && s != Space::kExtents && s != Space::kXattrs) {
    return nullptr;
  }
  if (begin.size() < 8) return nullptr;
  const uint64_t ino = format::GetBE64(begin.data());
  if (end.has_value()) {
    // A scan: within the keys of `ino`, up to those of the next inode.
    if (end->size() < 8) return nullptr;
    const uint64_t last = format::GetBE64(end->data());
    if (last != ino && !(last == ino + 1 && end->size() == 8)) return nullptr;
  }
  return snapshots_.Find(ino);
}

void StoreImpl::HoldSnapshotOf(uint64_t ino, const format::InodeValue& v) {
  if ((v.flags & format::kInodeSealed) == 0 || !S_ISDIR(v.mode) || !mode_->OthersWrite()) return;
  // A directory whose parent is sealed lies inside a tree: not its root.
  if (sealed_.Contains(v.parent) || snapshots_.Holds(ino) || snapshots_.Tried(ino)) return;
  auto fail = [&](const Status& st) {
    snapshots_.NoteTried(ino);
    if (!st.ok()) Warn("sealed tree " + std::to_string(ino) + ": " + st.ToString() +
                             "; read from the index instead");
  };
  Result<std::optional<std::string>> record = IndexGet(Space::kMeta, format::SealKey(ino));
  if (!record.ok()) return;  // tried again at the next read
  if (!record->has_value()) return fail(Status::OK());  // inside a tree whose root moved
  format::SealValue seal;
  if (Status d = format::DecodeSeal(**record, &seal); !d.ok()) return fail(d);
  if (seal.snapshot.empty()) return fail(Status::OK());  // sealed without one
  Result<std::unique_ptr<meta::SnapshotFile>> file = ReadSnapshot(seal.snapshot);
  if (!file.ok()) return fail(file.status());
  Result<bool> held = snapshots_.Hold(ino, std::move(*file), PathTo(v.parent));
  if (!held.ok() || !*held) return fail(held.status());
}

std::vector<uint64_t> StoreImpl::PathTo(uint64_t dir) {
  std::vector<uint64_t> path;
  for (int depth = 0; depth < kMaxHeldPathDepth && dir != 0; ++depth) {
    path.push_back(dir);
    if (dir == kRootIno) return path;
    Result<std::optional<std::string>> v = IndexGet(Space::kInodes, format::InodeKey(dir));
    format::InodeValue iv;
    if (!v.ok() || !v->has_value() || !format::DecodeInode(**v, &iv).ok()) break;
    dir = iv.parent;
  }
  return path;  // as far as it was read: what lies above is read as always
}

Result<std::set<uint64_t>> StoreImpl::SnapshotSegments() {
  CKPTFS_ASSIGN_OR_RETURN(std::vector<SealedTree> trees, SealedTrees());
  std::set<uint64_t> used;
  for (const SealedTree& t : trees) {
    if (t.seal.snapshot.empty()) continue;
    Result<std::unique_ptr<meta::SnapshotFile>> file = ReadSnapshot(t.seal.snapshot);
    if (!file.ok()) {
      return file.status().Annotate("the snapshot of sealed tree " + std::to_string(t.ino) +
                                    " (no segment is known free of it)");
    }
    Status bad;
    CKPTFS_RETURN_IF_ERROR((*file)->Scan(Space::kExtents, "", "", [&](std::string_view, std::string_view v) {
      format::ExtentValue e;
      bad = format::DecodeExtent(v, &e);
      if (!bad.ok()) return false;
      if (!e.is_inline && !e.in_data_file) used.insert(e.segment_id);
      return true;
    }));
    if (!bad.ok()) return bad.Annotate("the snapshot of sealed tree " + std::to_string(t.ino));
  }
  return used;
}

Result<std::unique_ptr<meta::SnapshotFile>> StoreImpl::ReadSnapshot(const std::string& name) {
  return ReadSnapshotFile(env_.get(), SnapshotPath(name));
}

std::string StoreImpl::SnapshotPath(std::string_view name) const {
  return dir_ + "/" + format::kSnapshotsDirName + "/" + std::string(name);
}

Status StoreImpl::EnsureSnapshotsDir() {
  const std::string dir = dir_ + "/" + format::kSnapshotsDirName;
  if (::mkdir(dir.c_str(), 0755) == 0) return env_->SyncDir(dir_);
  if (errno == EEXIST) return Status::OK();
  return Status::Errno(errno, "create " + dir + ": " + std::strerror(errno));
}

Status StoreImpl::RemoveUnusedSnapshots() {
  const std::string dir = dir_ + "/" + format::kSnapshotsDirName;
  Result<std::vector<std::string>> files = env_->List(dir);
  if (!files.ok()) return files.status().code() == ENOENT ? Status::OK() : files.status();
  if (files->empty()) return Status::OK();
  CKPTFS_ASSIGN_OR_RETURN(std::vector<SealedTree> trees, SealedTrees());
  std::set<std::string> named;
  for (const SealedTree& t : trees) named.insert(t.seal.snapshot);
  const int64_t now = ::time(nullptr);
  for (const std::string& name : *files) {
    if (named.count(name)) continue;
    struct stat st;
    if (mode_->OthersWrite() &&
        (::stat(SnapshotPath(name).c_str(), &st) != 0 || now - st.st_mtime < kUnusedSnapshotSeconds)) {
      continue;
    }
    CKPTFS_RETURN_IF_ERROR(env_->Remove(SnapshotPath(name)));
  }
  return Status::OK();
}

Status StoreImpl::CollectTreeKeys(meta::ReadTxn* in, Space space, const std::set<uint64_t>& inos,
                                  std::vector<meta::SnapshotEntry>* out) {
  // Both families are keyed by BE64(ino) first: one scan over the tree's
  // range of inode numbers when it is dense, else one per inode.
  const uint64_t lo = *inos.begin();
  const uint64_t hi = *inos.rbegin() + 1;
  auto keep = [&](std::string_view key, std::string_view value) {
    if (key.size() >= 8 && inos.count(format::GetBE64(key.data()))) {
      out->push_back({space, std::string(key), std::string(value)});
    }
    return true;
  };
  if (hi - lo <= 4 * inos.size() + kInoBlock) {
    return IndexScan(in, space, format::ExtentPrefix(lo), format::ExtentPrefix(hi), keep);
  }
  for (uint64_t i : inos) {
    CKPTFS_RETURN_IF_ERROR(IndexScan(in, space, format::ExtentPrefix(i), format::ExtentPrefix(i + 1), keep));
  }
  return Status::OK();
}

Result<std::vector<SealedTree>> StoreImpl::SealedTrees() {
  if (closed_) return Status(EIO, "store is closed");
  std::vector<SealedTree> trees;
  Status bad;
  const std::string_view prefix = format::kMetaSealPrefix;
  CKPTFS_RETURN_IF_ERROR(IndexScan(Space::kMeta, prefix, format::kMetaSealEnd,
                                   [&](std::string_view key, std::string_view value) {
                                     SealedTree t;
                                     if (key.size() == prefix.size() + 8) {
                                       t.ino = format::GetBE64(key.data() + prefix.size());
                                       bad = format::DecodeSeal(value, &t.seal);
                                     } else {
                                       bad = Status::Corruption("seal key of " +
                                                                std::to_string(key.size()) + " bytes");
                                     }
                                     if (!bad.ok()) return false;
                                     trees.push_back(t);
                                     return true;
                                   }));
  CKPTFS_RETURN_IF_ERROR(bad);
  return trees;
}

}  // namespace ckptfs::engine
