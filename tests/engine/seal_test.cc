// Sealed trees (Store::Seal): every inode of the tree is marked in one
// commit; changes fail with EROFS and change nothing; removals, reads and
// a rename of the tree's root stay allowed; the seal outlives a reopen.
#include <linux/falloc.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "meta/snapshot_file.h"
#include "tests/engine/store_files.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

class SealTest : public StoreFixture {
 protected:
  // dir/{a (data), sub/{b (data), l -> a}}, beside out/ (not sealed).
  void SetUp() override {
    StoreFixture::SetUp();
    ASSERT_OK_AND_ASSIGN(Attr d, s()->Mkdir(kRootIno, "dir", 0755, 0, 0));
    dir = d.ino;
    ASSERT_OK_AND_ASSIGN(Attr o, s()->Mkdir(kRootIno, "out", 0755, 0, 0));
    out = o.ino;
    a = MakeFile(dir, "a", "alpha bytes");
    ASSERT_OK_AND_ASSIGN(Attr sd, s()->Mkdir(dir, "sub", 0755, 0, 0));
    sub = sd.ino;
    b = MakeFile(sub, "b", std::string(100000, 'b'));
    ASSERT_OK_AND_ASSIGN(Attr l, s()->Symlink(sub, "l", "../a", 0, 0));
    link = l.ino;
    ASSERT_OK(s()->SetXattr(a, "user.k", "v", 0));
  }
  Ino MakeFile(Ino parent, const std::string& name, const std::string& data) {
    auto f = s()->Create(parent, name, S_IFREG | 0644, 0, 0);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    EXPECT_OK(s()->Write(f->ino, 0, data).status());
    return f->ino;
  }
  bool Sealed(Ino ino) {
    auto at = s()->GetAttr(ino);
    EXPECT_TRUE(at.ok()) << at.status().ToString();
    return at.ok() && at->sealed;
  }
  std::string Contents(Ino ino) {
    auto at = s()->GetAttr(ino);
    EXPECT_TRUE(at.ok());
    std::string buf(at.ok() ? at->size : 0, '\0');
    auto n = s()->Read(ino, 0, buf.size(), buf.data());
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    buf.resize(n.ok() ? *n : 0);
    return buf;
  }
  static void ExpectErofs(const Status& st, const char* what) {
    EXPECT_EQ(st.code(), EROFS) << what << ": " << st.ToString();
  }
  Ino dir = 0, out = 0, a = 0, sub = 0, b = 0, link = 0;
};

TEST_F(SealTest, MarksEveryInodeOfTheTreeOnce) {
  EXPECT_FALSE(Sealed(dir));
  ASSERT_OK_AND_ASSIGN(uint64_t n, s()->Seal(dir));
  EXPECT_EQ(n, 5u);  // dir, a, sub, b, l
  for (Ino i : {dir, a, sub, b, link}) {
    EXPECT_TRUE(Sealed(i)) << i;
    EXPECT_TRUE(s()->KnownSealed(i)) << i;
    EXPECT_EQ(s()->CacheSecondsOf(i), HUGE_VAL) << i;
  }
  EXPECT_EQ(s()->CacheSecondsOfName(sub, b), HUGE_VAL);
  EXPECT_FALSE(Sealed(out));
  EXPECT_FALSE(Sealed(kRootIno));
  EXPECT_FALSE(s()->KnownSealed(out));
  ASSERT_OK_AND_ASSIGN(n, s()->Seal(dir));
  EXPECT_EQ(n, 0u);
  ASSERT_OK_AND_ASSIGN(n, s()->Seal(sub));
  EXPECT_EQ(n, 0u);
  // One record, of the root.
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].ino, dir);
  EXPECT_EQ(trees[0].seal.inodes, 5u);
  EXPECT_EQ(trees[0].seal.logical_bytes, 11u + 100000u);
  EXPECT_GT(trees[0].seal.sealed_ms, 1'700'000'000'000);
}

// The snapshot file the record names holds the tree's index entries as
// the seal left them: its inodes (sealed), the entries of its
// directories, the extents and extended attributes of its inodes, and
// nothing of the rest of the store.
TEST_F(SealTest, TheRecordNamesASnapshotOfTheTreesIndex) {
  ASSERT_OK(s()->Seal(dir).status());
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  const std::string& name = trees[0].seal.snapshot;
  ASSERT_FALSE(name.empty());
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<meta::SnapshotFile> snap,
      meta::SnapshotFile::FromBytes(
          name, StoreFiles(dir_.store()).Contents(dir_.store() + "/snapshots/" + name)));
  for (Ino i : {dir, a, sub, b, link}) {
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> v, snap->Get(meta::Space::kInodes, format::InodeKey(i)));
    ASSERT_TRUE(v.has_value()) << i;
    format::InodeValue iv;
    ASSERT_OK(format::DecodeInode(*v, &iv));
    EXPECT_TRUE(iv.flags & format::kInodeSealed) << i;
    ASSERT_OK_AND_ASSIGN(Attr at, s()->GetAttr(i));
    EXPECT_EQ(iv.size, at.size) << i;
  }
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> none,
                       snap->Get(meta::Space::kInodes, format::InodeKey(out)));
  EXPECT_FALSE(none.has_value());
  std::vector<std::string> names;
  ASSERT_OK(snap->Scan(meta::Space::kDentries, format::DentryPrefix(sub), format::DentryPrefix(sub + 1),
                       [&](std::string_view k, std::string_view) {
                         names.emplace_back(k.substr(8));
                         return true;
                       }));
  EXPECT_EQ(names, (std::vector<std::string>{"b", "l"}));
  ASSERT_OK_AND_ASSIGN(std::vector<ExtentInfo> extents, s()->GetExtents(b));
  size_t in_snapshot = 0;
  ASSERT_OK(snap->Scan(meta::Space::kExtents, format::ExtentPrefix(b), format::ExtentPrefix(b + 1),
                       [&](std::string_view, std::string_view) {
                         ++in_snapshot;
                         return true;
                       }));
  EXPECT_EQ(in_snapshot, extents.size());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> x, snap->Get(meta::Space::kXattrs, format::XattrKey(a, "user.k")));
  EXPECT_EQ(x.value_or("?"), "v");
  EXPECT_LT(snap->bytes(), 100u * 5 + 4096) << "about 100 bytes a file, and the file's tables";
}

TEST_F(SealTest, SealingAParentSealsWhatItsSealedChildLacks) {
  ASSERT_OK_AND_ASSIGN(uint64_t n, s()->Seal(sub));
  EXPECT_EQ(n, 3u);  // sub, b, l
  EXPECT_FALSE(Sealed(a));
  ASSERT_OK(s()->Write(a, 0, "A").status());  // still writable
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].ino, sub);
  ASSERT_OK_AND_ASSIGN(n, s()->Seal(dir));
  EXPECT_EQ(n, 2u);  // dir, a
  // sub is a root no more.
  const std::string inner = trees[0].seal.snapshot;
  ASSERT_OK_AND_ASSIGN(trees, s()->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].ino, dir);
  EXPECT_EQ(trees[0].seal.inodes, 5u);
  // Its snapshot went with its record.
  EXPECT_FALSE(StoreFiles(dir_.store()).Exists(dir_.store() + "/snapshots/" + inner)) << inner;
  EXPECT_TRUE(StoreFiles(dir_.store()).Exists(dir_.store() + "/snapshots/" + trees[0].seal.snapshot));
}

TEST_F(SealTest, ChangesFailWithErofsAndChangeNothing) {
  ASSERT_OK_AND_ASSIGN(Attr before_a, s()->GetAttr(a));
  ASSERT_OK_AND_ASSIGN(Attr before_dir, s()->GetAttr(dir));
  ASSERT_OK(s()->Seal(dir).status());

  ExpectErofs(s()->Write(a, 0, "x").status(), "write");
  ExpectErofs(s()->Write(b, 100000, "appended").status(), "append");
  SetAttrRequest truncate;
  truncate.size = 0;
  ExpectErofs(s()->SetAttr(a, truncate).status(), "truncate");
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ExpectErofs(s()->SetAttr(a, chmod).status(), "chmod");
  ExpectErofs(s()->SetAttr(dir, chmod).status(), "chmod of the root");
  SetAttrRequest chown;
  chown.uid = 7;
  ExpectErofs(s()->SetAttr(sub, chown).status(), "chown");
  SetAttrRequest touch;
  touch.mtime_now = true;
  touch.atime_now = true;
  ExpectErofs(s()->SetAttr(link, touch).status(), "utimes");
  ExpectErofs(s()->SetXattr(a, "user.k", "w", 0), "setxattr");
  ExpectErofs(s()->SetXattr(dir, "user.new", "w", 0), "setxattr of the root");
  ExpectErofs(s()->RemoveXattr(a, "user.k"), "removexattr");
  ExpectErofs(s()->Fallocate(b, 0, 0, 1 << 20), "fallocate");
  ExpectErofs(s()->Fallocate(b, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
              "punch");
  ExpectErofs(s()->BeginDirectWrite(a).status(), "direct write");
  ExpectErofs(s()->Create(dir, "new", S_IFREG | 0644, 0, 0).status(), "create");
  ExpectErofs(s()->Mkdir(sub, "new", 0755, 0, 0).status(), "mkdir");
  ExpectErofs(s()->Symlink(dir, "new", "a", 0, 0).status(), "symlink");
  ExpectErofs(s()->Link(a, out, "a2").status(), "link of a sealed file");
  ASSERT_OK_AND_ASSIGN(Attr o, s()->Create(out, "o", S_IFREG | 0644, 0, 0));
  ExpectErofs(s()->Link(o.ino, dir, "o").status(), "link into a sealed directory");
  ExpectErofs(s()->Rename(dir, "a", dir, "a2", RenameMode::kReplace), "rename within");
  ExpectErofs(s()->Rename(dir, "a", sub, "a", RenameMode::kReplace), "rename between");
  ExpectErofs(s()->Rename(dir, "a", out, "a", RenameMode::kReplace), "rename out");
  ExpectErofs(s()->Rename(out, "o", dir, "o", RenameMode::kReplace), "rename in");
  ExpectErofs(s()->Rename(out, "o", dir, "a", RenameMode::kReplace), "rename over");
  ExpectErofs(s()->Rename(out, "o", dir, "a", RenameMode::kExchange), "exchange");

  // Nothing changed.
  EXPECT_EQ(Contents(a), "alpha bytes");
  EXPECT_EQ(Contents(b), std::string(100000, 'b'));
  ASSERT_OK_AND_ASSIGN(Attr after_a, s()->GetAttr(a));
  EXPECT_EQ(after_a.mode, before_a.mode);
  EXPECT_EQ(after_a.mtime, before_a.mtime);
  EXPECT_EQ(after_a.ctime, before_a.ctime);
  EXPECT_EQ(after_a.nlink, 1u);
  ASSERT_OK_AND_ASSIGN(Attr after_dir, s()->GetAttr(dir));
  EXPECT_EQ(after_dir.mtime, before_dir.mtime);
  EXPECT_EQ(after_dir.nlink, before_dir.nlink);
  ASSERT_OK_AND_ASSIGN(std::string v, s()->GetXattr(a, "user.k"));
  EXPECT_EQ(v, "v");
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> names, ListDir(s(), dir));
  EXPECT_EQ(names.size(), 2u);  // a, sub
  EXPECT_EQ(s()->Lookup(out, "a").status().code(), ENOENT);
  ASSERT_OK_AND_ASSIGN(std::string target, s()->ReadLink(link));
  EXPECT_EQ(target, "../a");
}

TEST_F(SealTest, ReadsLeaveTheAccessTimeAlone) {
  ASSERT_OK(s()->Seal(dir).status());
  ASSERT_OK_AND_ASSIGN(Attr before, s()->GetAttr(a));
  ASSERT_OK(s()->Accessed(a, AtimeRule::kAlways));
  ASSERT_OK(s()->Accessed(dir, AtimeRule::kAlways));
  ASSERT_OK_AND_ASSIGN(Attr after, s()->GetAttr(a));
  EXPECT_EQ(after.atime, before.atime);
  EXPECT_EQ(Contents(a), "alpha bytes");
}

TEST_F(SealTest, TheTreeCanBeRemovedAndItsRootMoved) {
  ASSERT_OK(s()->Seal(dir).status());
  // The root moves out of the way (its directory is not sealed).
  ASSERT_OK(s()->Rename(kRootIno, "dir", out, "old", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(Attr moved, s()->Lookup(out, "old"));
  EXPECT_EQ(moved.ino, dir);
  EXPECT_TRUE(moved.sealed);
  // rm -r: files first, then directories, deepest first.
  ASSERT_OK(s()->Unlink(sub, "b"));
  ASSERT_OK(s()->Unlink(sub, "l"));
  ASSERT_OK(s()->Rmdir(dir, "sub"));
  ASSERT_OK(s()->Unlink(dir, "a"));
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  EXPECT_EQ(trees.size(), 1u);
  ASSERT_OK(s()->Rmdir(out, "old"));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> left, ListDir(s(), out));
  EXPECT_TRUE(left.empty());
  const std::string snapshot = trees[0].seal.snapshot;
  ASSERT_OK_AND_ASSIGN(trees, s()->SealedTrees());
  EXPECT_TRUE(trees.empty());  // the record went with the root
  // Its snapshot goes at the next open; on a shared store once it is ten
  // minutes old (another host may be sealing).
  EXPECT_TRUE(StoreFiles(dir_.store()).Exists(dir_.store() + "/snapshots/" + snapshot));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(StoreFiles(dir_.store()).Exists(dir_.store() + "/snapshots/" + snapshot), s()->Shared()) << snapshot;
  for (Ino i : {dir, a, sub, b, link}) {
    Status st = s()->GetAttr(i).status();
    EXPECT_TRUE(st.code() == ENOENT || st.code() == ESTALE) << i << ": " << st.ToString();
  }
}

TEST_F(SealTest, ASealedFileCanBeReplacedWhereItsDirectoryIsNotSealed) {
  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(out, "weights", S_IFREG | 0644, 0, 0));
  ASSERT_OK(s()->Write(f.ino, 0, "old").status());
  ASSERT_OK_AND_ASSIGN(uint64_t n, s()->Seal(f.ino));
  EXPECT_EQ(n, 1u);
  ExpectErofs(s()->Write(f.ino, 0, "new").status(), "write");
  ASSERT_OK_AND_ASSIGN(Attr g, s()->Create(out, "weights.tmp", S_IFREG | 0644, 0, 0));
  ASSERT_OK(s()->Write(g.ino, 0, "new").status());
  ASSERT_OK(s()->Rename(out, "weights.tmp", out, "weights", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(Attr now, s()->Lookup(out, "weights"));
  EXPECT_EQ(now.ino, g.ino);
  EXPECT_FALSE(now.sealed);
  EXPECT_EQ(Contents(g.ino), "new");
}

TEST_F(SealTest, TheSealOutlivesAReopen) {
  ASSERT_OK(s()->Seal(dir).status());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  for (Ino i : {dir, a, sub, b, link}) EXPECT_TRUE(Sealed(i)) << i;
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].ino, dir);
  EXPECT_FALSE(Sealed(out));
  ExpectErofs(s()->Write(a, 0, "x").status(), "write after reopen");
  ExpectErofs(s()->Create(sub, "new", S_IFREG | 0644, 0, 0).status(), "create after reopen");
  EXPECT_EQ(Contents(a), "alpha bytes");
  EXPECT_EQ(Contents(b), std::string(100000, 'b'));
}

TEST_F(SealTest, AFileWrittenDirectlyKeepsTheTreeUnsealed) {
  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(sub, "big", S_IFREG | 0644, 0, 0));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, s()->BeginDirectWrite(f.ino));
  if (!path.has_value()) GTEST_SKIP() << "no data files on this store";
  Status busy = s()->Seal(dir).status();
  EXPECT_EQ(busy.code(), EBUSY) << busy.ToString();
  for (Ino i : {dir, a, sub, b, link, f.ino}) EXPECT_FALSE(Sealed(i)) << i;
  ASSERT_OK_AND_ASSIGN(std::vector<SealedTree> trees, s()->SealedTrees());
  EXPECT_TRUE(trees.empty());
  ASSERT_OK(s()->EndDirectWrite(f.ino));
  ASSERT_OK_AND_ASSIGN(uint64_t n, s()->Seal(dir));
  EXPECT_EQ(n, 6u);
}

TEST_F(SealTest, ARemovedDirectoryCannotBeSealed) {
  ASSERT_OK_AND_ASSIGN(Attr e, s()->Mkdir(out, "empty", 0755, 0, 0));
  ASSERT_OK(s()->OpenFile(e.ino));
  ASSERT_OK(s()->Rmdir(out, "empty"));
  EXPECT_EQ(s()->Seal(e.ino).status().code(), ENOENT);
  ASSERT_OK(s()->Release(e.ino));
}

}  // namespace
}  // namespace ckptfs::engine::test
