// Fsck of the namespace: inodes, directory entries, reachability, link
// counts, parent pointers, the inode counter, extended attributes and
// sealed trees.
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <deque>

#include "engine/fsck/checker.h"
#include "meta/snapshot_file.h"
#include "engine/store_clock.h"

namespace ckptfs::engine::fsck {

namespace {

uint8_t TypeOf(uint32_t mode) { return static_cast<uint8_t>((mode & S_IFMT) >> 12); }

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string Counter(uint64_t v) {
  std::string s;
  format::PutLE64(&s, v);
  return s;
}

}  // namespace

Status Checker::LoadNamespace() {
  CKPTFS_RETURN_IF_ERROR(LoadMeta());
  CKPTFS_RETURN_IF_ERROR(LoadInodes());
  return LoadEntries();
}

Status Checker::LoadMeta() {
  std::string v;
  bool found = false;
  CKPTFS_RETURN_IF_ERROR(Get(Space::kMeta, format::kMetaFormatVersion, &v, &found));
  if (!found || v.size() != 4 || format::GetLE32(v.data()) != format::kFormatVersion) {
    Add(kBadMeta, {},
        found ? "format_version in the index does not match this build"
              : "the index has no format_version",
        opt_.repair);
    if (opt_.repair) {
      std::string ver;
      format::PutLE32(&ver, format::kFormatVersion);
      batch_.Put(Space::kMeta, format::kMetaFormatVersion, ver);
      batch_used_ = true;
    }
  }
  CKPTFS_RETURN_IF_ERROR(Get(Space::kMeta, format::kMetaNextIno, &v, &found));
  next_ino_ = found && v.size() == 8 ? format::GetLE64(v.data()) : 0;
  CKPTFS_RETURN_IF_ERROR(Get(Space::kMeta, format::kMetaInodeCount, &v, &found));
  has_inode_count_ = found && v.size() == 8;
  stored_inode_count_ = has_inode_count_ ? format::GetLE64(v.data()) : 0;
  const std::string_view prefix(format::kMetaOrphanPrefix);
  const std::string_view seal(format::kMetaSealPrefix);
  return ScanAll(Space::kMeta, [&](std::string_view key, std::string_view value) {
    if (key.starts_with(prefix) && key.size() == prefix.size() + 8) {
      orphan_keys_.insert(format::GetBE64(key.data() + prefix.size()));
    }
    if (key.starts_with(seal) && key.size() == seal.size() + 8) {
      format::SealValue v;
      seal_keys_[format::GetBE64(key.data() + seal.size())] =
          format::DecodeSeal(value, &v).ok() ? std::optional<format::SealValue>(v) : std::nullopt;
    }
  });
}

Status Checker::LoadInodes() {
  return ScanAll(Space::kInodes, [&](std::string_view key, std::string_view value) {
    const uint64_t ino = key.size() == 8 ? format::GetBE64(key.data()) : 0;
    Node n;
    Status s = key.size() == 8 ? format::DecodeInode(value, &n.v)
                               : Status::Corruption("inode key is " + std::to_string(key.size()) +
                                                    " bytes, expected 8");
    if (!s.ok() || ino == 0) {
      Add(kBadInode, Inode(ino), s.ok() ? "inode number 0" : s.message(), opt_.repair);
      if (opt_.repair) {
        batch_.Delete(Space::kInodes, key);
        batch_used_ = true;
      }
      if (ino != 0) bad_inos_.insert(ino);
      return;
    }
    n.is_dir = S_ISDIR(n.v.mode);
    n.orphan_key = orphan_keys_.count(ino) > 0;
    max_ino_ = std::max(max_ino_, ino);
    nodes_.emplace(ino, std::move(n));
  });
}

Status Checker::LoadEntries() {
  return ScanAll(Space::kDentries, [&](std::string_view key, std::string_view value) {
    RawEntry e;
    Status s;
    if (key.size() < 9) {
      s = Status::Corruption("entry key is " + std::to_string(key.size()) + " bytes");
    } else {
      e.parent = format::GetBE64(key.data());
      e.name.assign(key.substr(8));
      s = format::DecodeDentry(value, &e.d);
    }
    if (!s.ok()) {
      Add(kBadDentry, Inode(e.parent), "entry \"" + e.name + "\": " + s.message(), opt_.repair);
      if (opt_.repair) {
        batch_.Delete(Space::kDentries, key);
        batch_used_ = true;
      }
      return;
    }
    entries_.push_back(std::move(e));
  });
}

void Checker::WalkTree(uint64_t from) {
  std::deque<uint64_t> queue{from};
  while (!queue.empty()) {
    const uint64_t d = queue.front();
    queue.pop_front();
    Node& dir = nodes_[d];
    for (const auto& [name, c] : dir.children) {
      Node& cn = nodes_[c];
      const std::string path = Join(dir.path, name);
      if (!cn.is_dir) {
        cn.links++;
        if (!cn.reachable) {
          cn.reachable = true;
          cn.path = path;
        }
        continue;
      }
      if (cn.reachable || c == kRootIno) {
        // A second entry for a directory: a hard link or a cycle. Keep the first.
        bool cycle = false;
        for (uint64_t a = d; a != 0; a = a == kRootIno ? 0 : nodes_[a].tree_parent) {
          if (a == c) {
            cycle = true;
            break;
          }
        }
        Add(cycle ? kDirectoryCycle : kExtraDirectoryLink, Inode(c, path),
            (cycle ? "entry leads back to its own ancestor " + cn.path
                   : "second entry for directory " + cn.path + " (inode " + std::to_string(c) +
                         ")") +
                (opt_.repair ? "; entry removed" : ""),
            opt_.repair);
        if (opt_.repair) {
          batch_.Delete(Space::kDentries, format::DentryKey(d, name));
          batch_used_ = true;
        }
        continue;
      }
      cn.reachable = true;
      cn.tree_parent = d;
      cn.path = path;
      dir.subdirs++;
      queue.push_back(c);
    }
  }
}

uint64_t Checker::EnsureLostFound() {
  if (lost_found_ != 0) return lost_found_;
  Node& root = nodes_[kRootIno];
  for (int n = 0;; ++n) {
    const std::string name = n == 0 ? "lost+found" : "lost+found." + std::to_string(n);
    auto it = std::find_if(root.children.begin(), root.children.end(),
                           [&](const auto& e) { return e.first == name; });
    if (it == root.children.end()) {
      lost_found_name_ = name;
      break;
    }
    Node& existing = nodes_[it->second];
    if (existing.is_dir && existing.reachable && existing.tree_parent == kRootIno) {
      lost_found_ = it->second;
      lost_found_name_ = name;
      return lost_found_;
    }
  }
  // Create it: a new inode number above every one in use or handed out.
  // ... and above every one that records or data files name.
  const uint64_t ino = std::max({max_ino_ + 1, next_ino_, ino_floor_ + 1});
  Node n;
  n.created = true;
  n.is_dir = true;
  n.reachable = true;
  n.attr_dirty = true;
  n.tree_parent = kRootIno;
  n.path = "/" + lost_found_name_;
  n.v.mode = S_IFDIR | 0700;
  n.v.uid = root.v.uid;
  n.v.gid = root.v.gid;
  n.v.nlink = 2;
  n.v.parent = kRootIno;
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  SetAllTimes(&n.v, Timespec{ts.tv_sec, static_cast<uint32_t>(ts.tv_nsec)});
  nodes_.emplace(ino, std::move(n));
  Node& r = nodes_[kRootIno];
  r.children.emplace_back(lost_found_name_, ino);
  r.subdirs++;
  r.v.nlink++;  // our own change: not a finding about the root
  r.attr_dirty = true;
  max_ino_ = ino;
  next_ino_ = std::max(next_ino_, ino + 1);
  if (opt_.repair) {
    batch_.Put(Space::kDentries, format::DentryKey(kRootIno, lost_found_name_),
               format::EncodeDentry({ino, TypeOf(S_IFDIR)}));
    batch_.Put(Space::kMeta, format::kMetaNextIno, Counter(next_ino_));
    batch_used_ = true;
  }
  lost_found_ = ino;
  return ino;
}

void Checker::LinkUnderLostFound(uint64_t ino) {
  const uint64_t lf = EnsureLostFound();
  Node& dir = nodes_[lf];
  std::string name = std::to_string(ino);
  for (int n = 1; std::any_of(dir.children.begin(), dir.children.end(),
                              [&](const auto& e) { return e.first == name; });
       ++n) {
    name = std::to_string(ino) + "." + std::to_string(n);
  }
  dir.children.emplace_back(name, ino);
  Node& n = nodes_[ino];
  n.reachable = true;
  n.attached = true;
  n.path = Join(dir.path, name);
  if (opt_.repair) {
    batch_.Put(Space::kDentries, format::DentryKey(lf, name),
               format::EncodeDentry({ino, TypeOf(n.v.mode)}));
    batch_used_ = true;
  }
}

void Checker::Attach(uint64_t ino) {
  LinkUnderLostFound(ino);
  const uint64_t lf = lost_found_;
  Node& dir = nodes_[lf];
  Node& n = nodes_[ino];
  Add(kOrphanedInode, Inode(ino, n.path),
      std::string(n.is_dir ? "directory" : "file") + " not reachable from the root; " +
          (opt_.repair ? "moved to " : "belongs in ") + n.path,
      opt_.repair);
  if (n.is_dir) {
    n.tree_parent = lf;
    n.v.parent = lf;  // part of the move, not a separate finding
    n.attr_dirty = true;
    dir.subdirs++;
    dir.v.nlink++;
    dir.attr_dirty = true;
    WalkTree(ino);
  } else {
    n.links++;
  }
}

void Checker::CheckNamespace() {
  EnsureRoot();
  const std::vector<BadEntry> bad = ClassifyEntries();
  WalkTree(kRootIno);
  AttachUnreachable();
  ReportBadEntries(bad);
  std::vector<uint64_t> inos;
  inos.reserve(nodes_.size());
  for (const auto& [ino, n] : nodes_) inos.push_back(ino);
  std::sort(inos.begin(), inos.end());
  for (uint64_t ino : inos) CheckLinks(ino, nodes_[ino]);
}

void Checker::EnsureRoot() {
  auto root_it = nodes_.find(kRootIno);
  if (root_it == nodes_.end() || !root_it->second.is_dir) {
    Add(kMissingRoot, Inode(kRootIno, "/"),
        root_it == nodes_.end() ? "the root directory's inode is missing"
                                : "the root inode is not a directory",
        opt_.repair);
    Node n;
    n.created = root_it == nodes_.end();
    n.is_dir = true;
    n.attr_dirty = true;
    n.v.mode = S_IFDIR | 0755;
    n.v.nlink = 2;
    n.v.parent = kRootIno;
    nodes_[kRootIno] = std::move(n);
    max_ino_ = std::max(max_ino_, kRootIno);
  }
  Node& root = nodes_[kRootIno];
  root.reachable = true;
  root.path = "/";
}

std::vector<Checker::BadEntry> Checker::ClassifyEntries() {
  std::vector<BadEntry> bad;
  for (const RawEntry& e : entries_) {
    auto p = nodes_.find(e.parent);
    auto c = nodes_.find(e.d.ino);
    if (p == nodes_.end()) {
      bad.push_back({kDanglingEntry, &e,
                     "its directory (inode " + std::to_string(e.parent) + ") does not exist"});
    } else if (!p->second.is_dir) {
      bad.push_back(
          {kEntryInNonDirectory, &e, "inode " + std::to_string(e.parent) + " is not a directory"});
    } else if (c == nodes_.end()) {
      bad.push_back(
          {kDanglingEntry, &e,
           "names inode " + std::to_string(e.d.ino) +
               (bad_inos_.count(e.d.ino) ? ", which is unreadable" : ", which does not exist")});
    } else {
      p->second.children.emplace_back(e.name, e.d.ino);
      c->second.incoming++;
      if (e.d.type != TypeOf(c->second.v.mode)) {
        Add(kEntryTypeMismatch, Inode(e.d.ino),
            "entry \"" + e.name + "\" says type " + std::to_string(e.d.type) +
                ", the inode is type " + std::to_string(TypeOf(c->second.v.mode)),
            opt_.repair);
        if (opt_.repair) {
          batch_.Put(Space::kDentries, format::DentryKey(e.parent, e.name),
                     format::EncodeDentry({e.d.ino, TypeOf(c->second.v.mode)}));
          batch_used_ = true;
        }
      }
    }
  }
  return bad;
}

void Checker::AttachUnreachable() {
  // Unreachable inodes: first those no entry names (the tops of detached
  // trees), then what is left (directory cycles), in inode order.
  std::vector<uint64_t> detached;
  for (const auto& [ino, n] : nodes_) {
    if (!n.reachable && !n.orphan_key) detached.push_back(ino);
  }
  std::sort(detached.begin(), detached.end());
  for (uint64_t ino : detached) {
    if (!nodes_[ino].reachable && nodes_[ino].incoming == 0) Attach(ino);
  }
  for (uint64_t ino : detached) {
    if (!nodes_[ino].reachable) Attach(ino);
  }
}

void Checker::ReportBadEntries(const std::vector<BadEntry>& bad) {
  for (const BadEntry& b : bad) {
    auto p = nodes_.find(b.e->parent);
    const std::string path = p != nodes_.end() && !p->second.path.empty()
                                 ? Join(p->second.path, b.e->name)
                                 : "(inode " + std::to_string(b.e->parent) + ")/" + b.e->name;
    if (opt_.repair) {
      batch_.Delete(Space::kDentries, format::DentryKey(b.e->parent, b.e->name));
      batch_used_ = true;
    }
    if (nodes_.find(b.e->d.ino) == nodes_.end()) dangling_paths_.emplace(b.e->d.ino, path);
    Add(b.kind, Inode(b.e->d.ino, path),
        "entry " + b.why + (opt_.repair ? "; entry removed" : ""), opt_.repair);
  }
}

void Checker::CheckLinks(uint64_t ino, Node& n) {
  if (n.orphan_key && n.reachable) {
    Add(kOrphanKeyOnLinkedInode, Inode(ino, n.path),
        "inode is marked for purging at the next open but still has a name", opt_.repair);
    if (opt_.repair) {
      batch_.Delete(Space::kMeta, format::OrphanKey(ino));
      batch_used_ = true;
    }
    n.orphan_key = false;
  }
  if (n.orphan_key) {
    Add(kPendingOrphan, Inode(ino, PathOf(ino)),
        "unlinked while open; its data is freed when the store is next opened", false);
    return;
  }
  const uint32_t want = n.is_dir ? 2 + n.subdirs : n.links;
  if (n.v.nlink != want) {
    if (!n.created) {
      Add(kBadLinkCount, Inode(ino, n.path),
          "link count " + std::to_string(n.v.nlink) + ", expected " + std::to_string(want),
          opt_.repair);
    }
    n.v.nlink = want;
    n.attr_dirty = true;
  }
  if (n.is_dir) {
    const uint64_t want_parent = ino == kRootIno ? kRootIno : n.tree_parent;
    if (n.v.parent != want_parent) {
      if (!n.created) {
        Add(kBadParent, Inode(ino, n.path),
            "parent pointer names inode " + std::to_string(n.v.parent) + ", the entry is in " +
                std::to_string(want_parent),
            opt_.repair);
      }
      n.v.parent = want_parent;
      n.attr_dirty = true;
    }
  }
}

void Checker::CheckCounters() {
  uint64_t created = 0;
  for (const auto& [ino, n] : nodes_) created += n.created ? 1 : 0;
  const uint64_t before = nodes_.size() - created + bad_inos_.size();
  const uint64_t after = nodes_.size();
  if (!has_inode_count_ || stored_inode_count_ != before) {
    Add(kBadInodeCount, {},
        has_inode_count_ ? "inode_count is " + std::to_string(stored_inode_count_) +
                               ", the index holds " + std::to_string(before) + " inodes"
                         : "the index has no inode_count",
        opt_.repair);
  }
  if (opt_.repair && (stored_inode_count_ != after || !has_inode_count_)) {
    batch_.Put(Space::kMeta, format::kMetaInodeCount, Counter(after));
    batch_used_ = true;
  }
  if (next_ino_ <= max_ino_) {
    Add(kBadNextIno, {},
        "next_ino is " + std::to_string(next_ino_) + " but inode " + std::to_string(max_ino_) +
            " exists: new files would reuse inode numbers",
        opt_.repair);
    if (opt_.repair) {
      batch_.Put(Space::kMeta, format::kMetaNextIno, Counter(max_ino_ + 4096));
      batch_used_ = true;
    }
  }
}

void Checker::CheckSeals() {
  auto sealed = [](const Node& n) { return (n.v.flags & format::kInodeSealed) != 0; };
  // A seal is one commit: below a sealed directory every inode is sealed.
  std::deque<uint64_t> queue;
  for (const auto& [ino, n] : nodes_) {
    if (n.is_dir && sealed(n)) queue.push_back(ino);
  }
  while (!queue.empty()) {
    const uint64_t d = queue.front();
    queue.pop_front();
    for (const auto& [name, c] : nodes_[d].children) {
      auto it = nodes_.find(c);
      if (it == nodes_.end() || sealed(it->second)) continue;
      Node& cn = it->second;
      Add(kHalfSealed, Inode(c, cn.path),
          "an entry of sealed directory " + PathOf(d) + " is not sealed", opt_.repair);
      if (!opt_.repair) continue;
      cn.v.flags |= format::kInodeSealed;
      cn.attr_dirty = true;
      if (cn.is_dir) queue.push_back(c);
    }
  }
  for (auto& [ino, record] : seal_keys_) {
    const bool decodes = record.has_value();
    auto it = nodes_.find(ino);
    if (decodes && it != nodes_.end() && sealed(it->second)) continue;
    const std::string what = !decodes             ? "does not decode"
                             : it == nodes_.end() ? "names inode " + std::to_string(ino) + ", which does not exist"
                                                  : "names inode " + std::to_string(ino) + ", which is not sealed";
    Add(kBadSealRecord, Inode(ino, PathOf(ino)), "the seal record " + what, opt_.repair);
    if (opt_.repair) {
      batch_.Delete(Space::kMeta, format::SealKey(ino));
      batch_used_ = true;
      record.reset();  // its snapshot is named by nothing now
    }
  }
}

Status Checker::CheckSnapshots() {
  std::set<std::string> named;
  for (auto& [ino, record] : seal_keys_) {
    if (!record.has_value() || record->snapshot.empty()) continue;
    named.insert(record->snapshot);
    const std::string path = dir_ + "/" + format::kSnapshotsDirName + "/" + record->snapshot;
    std::string why;
    Result<std::unique_ptr<meta::SnapshotFile>> snap = ReadSnapshotFile(env_.get(), path);
    if (!snap.ok()) {
      why = snap.status().message();
    } else {
      // Where the index still has an inode of the tree, the snapshot's is
      // the same but for what a removal changes (links, change time).
      CKPTFS_RETURN_IF_ERROR((*snap)->Scan(
          Space::kInodes, "", "", [&](std::string_view key, std::string_view value) {
            format::InodeValue v;
            const uint64_t i = key.size() == 8 ? format::GetBE64(key.data()) : 0;
            if (!format::DecodeInode(value, &v).ok()) {
              why = "inode " + std::to_string(i) + " does not decode";
              return false;
            }
            auto it = nodes_.find(i);
            if (it == nodes_.end()) return true;  // removed since
            const format::InodeValue& now = it->second.v;
            if (v.mode != now.mode || v.size != now.size || v.flags != now.flags ||
                v.data_file_end != now.data_file_end) {
              why = "inode " + std::to_string(i) + " differs from the index's";
              return false;
            }
            return true;
          }));
    }
    if (why.empty()) continue;
    Add(kBadSnapshot, Inode(ino, PathOf(ino)),
        "snapshot " + record->snapshot + " of the sealed tree: " + why +
            (opt_.repair ? "; the record no longer names it" : ""),
        opt_.repair);
    if (opt_.repair) {
      format::SealValue without = *record;
      without.snapshot.clear();
      batch_.Put(Space::kMeta, format::SealKey(ino), format::EncodeSeal(without));
      batch_used_ = true;
      named.erase(record->snapshot);
    }
  }
  const std::string dir = dir_ + "/" + format::kSnapshotsDirName;
  Result<std::vector<std::string>> files = env_->List(dir);
  if (!files.ok()) return files.status().code() == ENOENT ? Status::OK() : files.status();
  for (const std::string& name : *files) {
    if (named.count(name)) continue;
    if (opt_.repair) CKPTFS_RETURN_IF_ERROR(env_->Remove(dir + "/" + name));
    Add(kUnusedSnapshot, {}, "snapshots/" + name + " is named by no seal record" +
                                 (opt_.repair ? "; deleted" : "; repair deletes it"),
        opt_.repair);
  }
  return Status::OK();
}

Status Checker::CheckXattrs() {
  uint64_t last = 0;
  return ScanAll(Space::kXattrs, [&](std::string_view key, std::string_view) {
    const uint64_t ino = key.size() >= 8 ? format::GetBE64(key.data()) : 0;
    if (ino != 0 && nodes_.count(ino)) return;
    if (opt_.repair) {
      batch_.Delete(Space::kXattrs, key);
      batch_used_ = true;
    }
    if (ino == last && !report_.findings.empty() && report_.findings.back().kind == kXattrWithoutInode) {
      return;
    }
    last = ino;
    auto d = dangling_paths_.find(ino);
    Add(kXattrWithoutInode, Inode(ino, d != dangling_paths_.end() ? d->second : ""),
        "extended attributes of inode " + std::to_string(ino) + ", which does not exist",
        opt_.repair);
  });
}

}  // namespace ckptfs::engine::fsck
