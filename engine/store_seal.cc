// Sealed trees (docs/DESIGN.md, "Sealed trees"): Seal marks every inode of
// a tree with format's kInodeSealed in one commit; the changes of
// store_namespace.cc, store_attr.cc, store_write.cc and store_xattr.cc ask
// Unsealed before they change an inode, and reads leave a sealed inode's
// access time alone. The seal writes the tree's index entries into a
// snapshot file (meta/snapshot_file.h) that its record names.
#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "engine/store_impl.h"

namespace ckptfs::engine {

Status StoreImpl::Unsealed(uint64_t ino, const format::InodeValue& v, std::string_view what) {
  if ((v.flags & format::kInodeSealed) == 0) return Status::OK();
  sealed_.Note(ino);
  return Status(EROFS, std::string(what) + ": inode " + std::to_string(ino) + " is sealed");
}

Result<std::vector<uint64_t>> StoreImpl::TreeOf(Ino ino, meta::ReadTxn* in,
                                                std::vector<meta::SnapshotEntry>* dentries) {
  std::vector<uint64_t> inos = {ino};
  std::vector<uint64_t> dirs = {ino};
  while (!dirs.empty()) {
    const uint64_t dir = dirs.back();
    dirs.pop_back();
    Status bad;
    CKPTFS_RETURN_IF_ERROR(IndexScan(in, Space::kDentries, format::DentryPrefix(dir),
                                     format::DentryPrefix(dir + 1),
                                     [&](std::string_view key, std::string_view value) {
                                       format::DentryValue d;
                                       bad = format::DecodeDentry(value, &d);
                                       if (!bad.ok()) return false;
                                       dentries->push_back({Space::kDentries, std::string(key),
                                                            std::string(value)});
                                       inos.push_back(d.ino);
                                       if ((uint32_t{d.type} << 12) == S_IFDIR) dirs.push_back(d.ino);
                                       return true;
                                     }));
    if (!bad.ok()) return Status(bad.code(), "an entry of directory " + std::to_string(dir) + ": " + bad.message());
  }
  return inos;
}

Result<uint64_t> StoreImpl::Seal(Ino ino) {
  CKPTFS_RETURN_IF_ERROR(CheckWritable());
  CKPTFS_RETURN_IF_ERROR(EnsureSnapshotsDir());
  std::vector<uint64_t> tree;
  std::vector<std::string> taken_in;  // the snapshots of trees this one takes in
  CKPTFS_ASSIGN_OR_RETURN(
      const uint64_t sealed, ChangeNamespace([&](Txn& t) -> Result<uint64_t> {
        std::vector<meta::SnapshotEntry> entries;
        taken_in.clear();
        CKPTFS_ASSIGN_OR_RETURN(tree, TreeOf(ino, t.reader(), &entries));
        CKPTFS_RETURN_IF_ERROR(t.Lock(tree));
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
        CKPTFS_ASSIGN_OR_RETURN(std::string bytes, meta::EncodeSnapshot(std::move(entries)));
        seal.snapshot = std::to_string(ino) + "-" + std::to_string(seal.sealed_ms) + ".sst";
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
  return sealed;
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
