// Namespace operations of ckptfs::engine::Store through its public API:
// lookup, attributes, directories, links, rename, readdir, xattrs, statfs,
// persistence across reopen, and how Open treats locked or foreign
// directories.
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>

#include <atomic>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "meta/pg_kv.h"
#include "meta/shared_kv.h"
#include "tests/engine/test_util.h"

namespace ckptfs::engine::test {
namespace {

class NamespaceTest : public StoreFixture {
 protected:
  // Creates helpers that fail the test (and return 0) on error.
  Ino File(Ino parent, const std::string& name, uint32_t perm = 0644) {
    auto a = s()->Create(parent, name, S_IFREG | perm, 0, 0);
    EXPECT_TRUE(a.ok()) << "Create " << name << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  Ino Dir(Ino parent, const std::string& name) {
    auto a = s()->Mkdir(parent, name, 0755, 0, 0);
    EXPECT_TRUE(a.ok()) << "Mkdir " << name << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  Attr AttrOf(Ino ino) {
    auto a = s()->GetAttr(ino);
    EXPECT_TRUE(a.ok()) << "GetAttr " << ino << ": " << a.status().ToString();
    return a.ok() ? *a : Attr{};
  }
  uint32_t NlinkOf(Ino ino) { return AttrOf(ino).nlink; }
  Ino LookupIno(Ino parent, const std::string& name) {
    auto a = s()->Lookup(parent, name);
    EXPECT_TRUE(a.ok()) << "Lookup " << name << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  // An inode that no longer exists answers ENOENT or ESTALE.
  void ExpectGone(Ino ino) {
    Status st = s()->GetAttr(ino).status();
    EXPECT_TRUE(st.code() == ENOENT || st.code() == ESTALE)
        << "GetAttr of removed inode " << ino << ": " << st.ToString();
  }
  std::set<std::string> Names(Ino dir) {
    auto list = ListDir(s(), dir);
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    std::set<std::string> out;
    if (list.ok()) {
      for (const DirEntry& e : *list) out.insert(e.name);
    }
    return out;
  }

};

std::string Long(size_t n) { return std::string(n, 'n'); }

TEST_F(NamespaceTest, RootIsAnEmptyDirectory) {
  ASSERT_OK_AND_ASSIGN(Attr root, s()->GetAttr(kRootIno));
  EXPECT_EQ(root.ino, kRootIno);
  EXPECT_TRUE(S_ISDIR(root.mode));
  EXPECT_EQ(root.nlink, 2u);
  EXPECT_TRUE(Names(kRootIno).empty());
  EXPECT_TRUE(Store::IsStore(dir_.store()));
}

TEST_F(NamespaceTest, MkdirCreateLookupGetAttr) {
  ASSERT_OK_AND_ASSIGN(Attr d, s()->Mkdir(kRootIno, "dir", 0750, 1000, 1001));
  EXPECT_TRUE(S_ISDIR(d.mode));
  EXPECT_EQ(d.mode & 07777, 0750u);
  EXPECT_EQ(d.uid, 1000u);
  EXPECT_EQ(d.gid, 1001u);
  EXPECT_EQ(d.nlink, 2u);
  EXPECT_EQ(d.size, 0u);
  EXPECT_EQ(d.parent, kRootIno);
  EXPECT_NE(d.ino, kRootIno);

  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(d.ino, "file", S_IFREG | 0640, 1002, 1003));
  EXPECT_TRUE(S_ISREG(f.mode));
  EXPECT_EQ(f.mode & 07777, 0640u);
  EXPECT_EQ(f.uid, 1002u);
  EXPECT_EQ(f.gid, 1003u);
  EXPECT_EQ(f.nlink, 1u);
  EXPECT_EQ(f.size, 0u);
  // Inode numbers are allocated monotonically.
  EXPECT_GT(f.ino, d.ino);

  ASSERT_OK_AND_ASSIGN(Attr ld, s()->Lookup(kRootIno, "dir"));
  EXPECT_EQ(ld.ino, d.ino);
  EXPECT_EQ(ld.mode, d.mode);
  ASSERT_OK_AND_ASSIGN(Attr lf, s()->Lookup(d.ino, "file"));
  EXPECT_EQ(lf.ino, f.ino);
  EXPECT_EQ(lf.mode, f.mode);
  EXPECT_EQ(lf.uid, 1002u);
  ASSERT_OK_AND_ASSIGN(Attr gf, s()->GetAttr(f.ino));
  EXPECT_EQ(gf.ino, f.ino);
  EXPECT_EQ(gf.mode, f.mode);
  EXPECT_EQ(gf.generation, 1u);

  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> root, ListDir(s(), kRootIno));
  ASSERT_EQ(root.size(), 1u);
  EXPECT_EQ(root[0].name, "dir");
  EXPECT_EQ(root[0].ino, d.ino);
  EXPECT_EQ(root[0].type, static_cast<uint32_t>(S_IFDIR));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> sub, ListDir(s(), d.ino));
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].name, "file");
  EXPECT_EQ(sub[0].ino, f.ino);
  EXPECT_EQ(sub[0].type, static_cast<uint32_t>(S_IFREG));
}

// What is made in a set-group-ID directory takes the directory's group,
// in the commit that makes it; a directory takes the bit too, a file not.
TEST_F(NamespaceTest, ASetGroupIdDirectoryGivesItsGroup) {
  ASSERT_OK_AND_ASSIGN(Attr d, s()->Mkdir(kRootIno, "sg", S_ISGID | 0775, 1000, 4242));
  EXPECT_EQ(d.mode & 07777, static_cast<uint32_t>(S_ISGID | 0775));
  ASSERT_OK_AND_ASSIGN(Attr f, s()->Create(d.ino, "file", S_IFREG | 0644, 1002, 1003));
  EXPECT_EQ(f.gid, 4242u);
  EXPECT_EQ(f.uid, 1002u);
  EXPECT_EQ(f.mode & 07777, 0644u);
  ASSERT_OK_AND_ASSIGN(Attr sub, s()->Mkdir(d.ino, "sub", 0755, 1002, 1003));
  EXPECT_EQ(sub.gid, 4242u);
  EXPECT_EQ(sub.mode & 07777, static_cast<uint32_t>(S_ISGID | 0755));
  ASSERT_OK_AND_ASSIGN(Attr l, s()->Symlink(d.ino, "link", "file", 1002, 1003));
  EXPECT_EQ(l.gid, 4242u);
  ASSERT_OK_AND_ASSIGN(Attr deeper, s()->Create(sub.ino, "deeper", S_IFREG | 0600, 7, 8));
  EXPECT_EQ(deeper.gid, 4242u);
  ASSERT_OK_AND_ASSIGN(Attr plain, s()->Create(kRootIno, "plain", S_IFREG | 0600, 7, 8));
  EXPECT_EQ(plain.gid, 8u);
  ASSERT_OK_AND_ASSIGN(Attr again, s()->GetAttr(deeper.ino));
  EXPECT_EQ(again.gid, 4242u);
}

TEST_F(NamespaceTest, SpecialFiles) {
  ASSERT_OK_AND_ASSIGN(Attr fifo, s()->Create(kRootIno, "fifo", S_IFIFO | 0600, 0, 0));
  EXPECT_TRUE(S_ISFIFO(fifo.mode));
  ASSERT_OK_AND_ASSIGN(Attr sock, s()->Create(kRootIno, "sock", S_IFSOCK | 0600, 0, 0));
  EXPECT_TRUE(S_ISSOCK(sock.mode));
  uint32_t dev = static_cast<uint32_t>(makedev(1, 3));
  ASSERT_OK_AND_ASSIGN(Attr chr, s()->Create(kRootIno, "null", S_IFCHR | 0666, 0, 0, dev));
  EXPECT_TRUE(S_ISCHR(chr.mode));
  EXPECT_EQ(chr.rdev, dev);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_TRUE(S_ISFIFO(AttrOf(fifo.ino).mode));
  EXPECT_TRUE(S_ISSOCK(AttrOf(sock.ino).mode));
  EXPECT_EQ(AttrOf(chr.ino).rdev, dev);
  ASSERT_OK_AND_ASSIGN(Attr l, s()->Lookup(kRootIno, "null"));
  EXPECT_TRUE(S_ISCHR(l.mode));
}

TEST_F(NamespaceTest, EexistForEveryKindOfCreation) {
  Ino d = Dir(kRootIno, "d");
  Ino f = File(d, "f");
  ASSERT_NE(f, 0u);
  EXPECT_ERRNO(EEXIST, s()->Create(d, "f", S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(EEXIST, s()->Mkdir(d, "f", 0755, 0, 0));
  EXPECT_ERRNO(EEXIST, s()->Mkdir(kRootIno, "d", 0755, 0, 0));
  EXPECT_ERRNO(EEXIST, s()->Create(kRootIno, "d", S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(EEXIST, s()->Symlink(d, "f", "x", 0, 0));
  EXPECT_ERRNO(EEXIST, s()->Link(f, d, "f"));
  // The failed calls changed nothing.
  EXPECT_EQ(LookupIno(d, "f"), f);
  EXPECT_TRUE(S_ISREG(AttrOf(f).mode));
  EXPECT_EQ(NlinkOf(f), 1u);
  EXPECT_EQ(Names(d), std::set<std::string>{"f"});
}

TEST_F(NamespaceTest, Enoent) {
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "missing"));
  EXPECT_ERRNO(ENOENT, s()->Unlink(kRootIno, "missing"));
  EXPECT_ERRNO(ENOENT, s()->Rmdir(kRootIno, "missing"));
  EXPECT_ERRNO(ENOENT, s()->Rename(kRootIno, "missing", kRootIno, "x", RenameMode::kReplace));
  EXPECT_ERRNO(ENOENT, s()->Rename(kRootIno, "missing", kRootIno, "x", RenameMode::kNoReplace));
  Ino f = File(kRootIno, "f");
  EXPECT_ERRNO(ENOENT, s()->Rename(kRootIno, "f", kRootIno, "missing", RenameMode::kExchange));
  EXPECT_EQ(LookupIno(kRootIno, "f"), f);
  // Unknown inode numbers: ENOENT or ESTALE, never a crash.
  constexpr Ino kNoSuchIno = 987654321;
  ExpectGone(kNoSuchIno);
  EXPECT_FALSE(s()->Lookup(kNoSuchIno, "x").ok());
  EXPECT_FALSE(s()->Create(kNoSuchIno, "x", S_IFREG | 0644, 0, 0).ok());
  EXPECT_FALSE(s()->Mkdir(kNoSuchIno, "x", 0755, 0, 0).ok());
  EXPECT_FALSE(s()->Link(kNoSuchIno, kRootIno, "x").ok());
  EXPECT_FALSE(s()->ReadDir(kNoSuchIno, "", [](const DirEntry&) { return true; }).ok());
  EXPECT_FALSE(s()->SetAttr(kNoSuchIno, SetAttrRequest{}).ok());
  char buf[8];
  EXPECT_FALSE(s()->Read(kNoSuchIno, 0, sizeof(buf), buf).ok());
  EXPECT_FALSE(s()->Write(kNoSuchIno, 0, "x").ok());
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "x"));
}

TEST_F(NamespaceTest, Enotdir) {
  Ino f = File(kRootIno, "f");
  ASSERT_NE(f, 0u);
  EXPECT_ERRNO(ENOTDIR, s()->Lookup(f, "x"));
  EXPECT_ERRNO(ENOTDIR, s()->Create(f, "x", S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(ENOTDIR, s()->Mkdir(f, "x", 0755, 0, 0));
  EXPECT_ERRNO(ENOTDIR, s()->Symlink(f, "x", "t", 0, 0));
  EXPECT_ERRNO(ENOTDIR, s()->Link(f, f, "x"));
  EXPECT_ERRNO(ENOTDIR, s()->ReadDir(f, "", [](const DirEntry&) { return true; }));
  EXPECT_ERRNO(ENOTDIR, s()->Rmdir(kRootIno, "f"));
  EXPECT_ERRNO(ENOTDIR, s()->Rename(kRootIno, "f", f, "x", RenameMode::kReplace));
  EXPECT_EQ(LookupIno(kRootIno, "f"), f);
}

TEST_F(NamespaceTest, Eisdir) {
  Ino d = Dir(kRootIno, "d");
  ASSERT_NE(d, 0u);
  EXPECT_ERRNO(EISDIR, s()->Unlink(kRootIno, "d"));
  char buf[16];
  EXPECT_ERRNO(EISDIR, s()->Read(d, 0, sizeof(buf), buf));
  EXPECT_ERRNO(EISDIR, s()->Write(d, 0, "data"));
  SetAttrRequest trunc;
  trunc.size = 0;
  EXPECT_ERRNO(EISDIR, s()->SetAttr(d, trunc));
  EXPECT_EQ(LookupIno(kRootIno, "d"), d);
}

TEST_F(NamespaceTest, NameTooLong) {
  Ino f = File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  const std::string n255 = Long(kMaxNameLen);
  const std::string n256 = Long(kMaxNameLen + 1);
  EXPECT_ERRNO(ENAMETOOLONG, s()->Create(kRootIno, n256, S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Mkdir(kRootIno, n256, 0755, 0, 0));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Lookup(kRootIno, n256));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Symlink(kRootIno, n256, "t", 0, 0));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Link(f, kRootIno, n256));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Rename(kRootIno, "f", kRootIno, n256, RenameMode::kReplace));
  EXPECT_ERRNO(ENAMETOOLONG, s()->Rename(kRootIno, "d", kRootIno, n256, RenameMode::kReplace));
  EXPECT_EQ(Names(kRootIno), (std::set<std::string>{"d", "f"}));
  // 255 bytes is fine.
  ASSERT_OK_AND_ASSIGN(Attr a, s()->Create(kRootIno, n255, S_IFREG | 0644, 0, 0));
  EXPECT_EQ(LookupIno(kRootIno, n255), a.ino);
  ASSERT_OK(s()->Mkdir(d, n255, 0755, 0, 0));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(LookupIno(kRootIno, n255), a.ino);
  EXPECT_EQ(Names(d), std::set<std::string>{n255});
}

TEST_F(NamespaceTest, SetAttrKillSuidSgid) {
  SetAttrRequest kill;
  kill.kill_suidgid = true;
  // Set-user-ID goes; set-group-ID goes only with group execute.
  const std::pair<uint32_t, uint32_t> cases[] = {
      {06755, 0755}, {06745, 02745}, {04700, 0700}, {02710, 0710}, {02700, 02700}, {0755, 0755},
  };
  for (const auto& [before, after] : cases) {
    Ino f = File(kRootIno, "k" + std::to_string(before), before);
    SetAttrRequest m;
    m.mode = before;
    ASSERT_OK(s()->SetAttr(f, m).status());
    ASSERT_OK_AND_ASSIGN(Attr a, s()->SetAttr(f, kill));
    EXPECT_TRUE(S_ISREG(a.mode));
    EXPECT_EQ(a.mode & 07777, after) << std::oct << before;
    EXPECT_EQ(AttrOf(f).mode & 07777, after) << std::oct << before;
  }

  // Nothing to clear and nothing else asked: nothing written, ctime kept.
  Ino plain = File(kRootIno, "plain", 0644);
  const Attr before = AttrOf(plain);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->SetAttr(plain, kill));
  EXPECT_EQ(a.ctime, before.ctime);
  EXPECT_EQ(a.mode, before.mode);

  // kill_sgid: set-group-ID also without group execute (a writer outside
  // the group).
  Ino outside = File(kRootIno, "outside", 0644);
  SetAttrRequest sgid_mode;
  sgid_mode.mode = 06745;
  ASSERT_OK(s()->SetAttr(outside, sgid_mode).status());
  SetAttrRequest kill_both = kill;
  kill_both.kill_sgid = true;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(outside, kill_both));
  EXPECT_EQ(a.mode & 07777, 0745u);

  // Directories keep theirs.
  Ino dir = Dir(kRootIno, "sgid_dir");
  SetAttrRequest dir_mode;
  dir_mode.mode = 02775;
  ASSERT_OK(s()->SetAttr(dir, dir_mode).status());
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(dir, kill_both));
  EXPECT_EQ(a.mode & 07777, 02775u);

  // With a change of owner (chown): the owner changes and the bits go.
  Ino owned = File(kRootIno, "owned", 06755);
  SetAttrRequest chown;
  chown.uid = 1000;
  chown.gid = 1000;
  chown.kill_suidgid = true;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(owned, chown));
  EXPECT_EQ(a.uid, 1000u);
  EXPECT_EQ(a.mode & 07777, 0755u);

  // With a mode in the same request, the mode applies first.
  SetAttrRequest mode_and_kill;
  mode_and_kill.mode = 04777;
  mode_and_kill.kill_suidgid = true;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(owned, mode_and_kill));
  EXPECT_EQ(a.mode & 07777, 0777u);

  // Persisted: the same after reopen.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(AttrOf(owned).mode & 07777, 0777u);
  EXPECT_EQ(AttrOf(plain).mode & 07777, 0644u);
}

TEST_F(NamespaceTest, SetAttrModeOwnerTimes) {
  Ino f = File(kRootIno, "f", 0644);
  Ino d = Dir(kRootIno, "d");
  SetAttrRequest m;
  m.mode = 04711;
  ASSERT_OK_AND_ASSIGN(Attr a, s()->SetAttr(f, m));
  EXPECT_TRUE(S_ISREG(a.mode));
  EXPECT_EQ(a.mode & 07777, 04711u);
  m.mode = 0700;
  ASSERT_OK_AND_ASSIGN(Attr ad, s()->SetAttr(d, m));
  EXPECT_TRUE(S_ISDIR(ad.mode)) << "SetAttr mode must keep the file type";
  EXPECT_EQ(ad.mode & 07777, 0700u);

  SetAttrRequest own;
  own.uid = 4242;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, own));
  EXPECT_EQ(a.uid, 4242u);
  EXPECT_EQ(a.gid, 0u);
  own = SetAttrRequest{};
  own.gid = 4343;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, own));
  EXPECT_EQ(a.uid, 4242u);
  EXPECT_EQ(a.gid, 4343u);
  EXPECT_EQ(a.mode & 07777, 04711u);

  SetAttrRequest t;
  t.atime = Timespec{1234567890, 123456789};
  t.mtime = Timespec{1000000000, 987654321};
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, t));
  EXPECT_EQ(a.atime, (Timespec{1234567890, 123456789}));
  EXPECT_EQ(a.mtime, (Timespec{1000000000, 987654321}));
  // Only mtime: atime stays.
  t = SetAttrRequest{};
  t.mtime = Timespec{1500000000, 5};
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, t));
  EXPECT_EQ(a.atime, (Timespec{1234567890, 123456789}));
  EXPECT_EQ(a.mtime, (Timespec{1500000000, 5}));

  ASSERT_NO_FATAL_FAILURE(Reopen());
  a = AttrOf(f);
  EXPECT_EQ(a.uid, 4242u);
  EXPECT_EQ(a.gid, 4343u);
  EXPECT_EQ(a.mode, static_cast<uint32_t>(S_IFREG | 04711));
  EXPECT_EQ(a.atime, (Timespec{1234567890, 123456789}));
  EXPECT_EQ(a.mtime, (Timespec{1500000000, 5}));
  EXPECT_EQ(AttrOf(d).mode, static_cast<uint32_t>(S_IFDIR | 0700));

  // *_now use the current time (the store's clock is the system clock).
  struct timespec before, after;
  clock_gettime(CLOCK_REALTIME, &before);
  t = SetAttrRequest{};
  t.atime_now = true;
  t.mtime_now = true;
  ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, t));
  clock_gettime(CLOCK_REALTIME, &after);
  EXPECT_GE(a.atime.sec, before.tv_sec - 1);
  EXPECT_LE(a.atime.sec, after.tv_sec + 1);
  EXPECT_GE(a.mtime.sec, before.tv_sec - 1);
  EXPECT_LE(a.mtime.sec, after.tv_sec + 1);
  EXPECT_NE(a.mtime, (Timespec{1500000000, 5}));
  Attr g = AttrOf(f);
  EXPECT_EQ(g.atime, a.atime);
  EXPECT_EQ(g.mtime, a.mtime);
  // ctime follows a change of attributes.
  EXPECT_GE(g.ctime.sec, before.tv_sec - 1);
}

TEST_F(NamespaceTest, AccessedMovesAtimeUnderTheRule) {
  Ino f = File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  const int64_t now = time(nullptr);
  for (Ino ino : {f, d}) {
    SCOPED_TRACE("inode " + std::to_string(ino));
    // Not after the modification time: relatime moves it.
    SetAttrRequest t;
    t.atime = Timespec{now - 1000, 0};
    t.mtime = Timespec{now - 500, 0};
    ASSERT_OK(s()->SetAttr(ino, t).status());
    // The store's clock is the coarse one: past the change time SetAttr
    // stamped, the access time it stamps is after it (else relatime would
    // rightly move it again below).
    const Timespec changed = AttrOf(ino).ctime;
    auto after_change = [&] {
      timespec c{};
      clock_gettime(CLOCK_REALTIME_COARSE, &c);
      return c.tv_sec > changed.sec || (c.tv_sec == changed.sec && c.tv_nsec > changed.nsec);
    };
    while (!after_change()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_OK(s()->Accessed(ino, AtimeRule::kRelative));
    const Attr moved = AttrOf(ino);
    EXPECT_GE(moved.atime.sec, now - 1);
    EXPECT_EQ(moved.mtime, (Timespec{now - 500, 0})) << "only the access time moves";
    // After the modification and change times, and fresh: it stays.
    ASSERT_OK(s()->Accessed(ino, AtimeRule::kRelative));
    EXPECT_EQ(AttrOf(ino).atime, moved.atime);
    // Later than both (a time in the future): relatime keeps it, strictatime
    // moves it.
    t = SetAttrRequest{};
    t.atime = Timespec{now + 100000, 0};
    ASSERT_OK(s()->SetAttr(ino, t).status());
    ASSERT_OK(s()->Accessed(ino, AtimeRule::kRelative));
    EXPECT_EQ(AttrOf(ino).atime, (Timespec{now + 100000, 0}));
    ASSERT_OK(s()->Accessed(ino, AtimeRule::kAlways));
    const Attr strict = AttrOf(ino);
    EXPECT_LT(strict.atime.sec, now + 100);
    EXPECT_EQ(strict.ctime, AttrOf(ino).ctime);
  }
  // Written without the index's log, kept by a clean close.
  const Timespec atime = AttrOf(f).atime;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(AttrOf(f).atime, atime);
  EXPECT_EQ(s()->Accessed(999999, AtimeRule::kAlways).code(), ENOENT);
}

TEST_F(NamespaceTest, AccessedChangesNothingOnAReadOnlyStore) {
  Ino f = File(kRootIno, "f");
  SetAttrRequest t;
  t.atime = Timespec{1000, 0};
  ASSERT_OK(s()->SetAttr(f, t).status());
  options_.read_only = true;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK(s()->Accessed(f, AtimeRule::kAlways));
  EXPECT_EQ(AttrOf(f).atime, (Timespec{1000, 0}));
}

TEST_F(NamespaceTest, SetAttrSizeDownAndUp) {
  for (size_t len : {size_t{3000}, size_t{300000}}) {
    SCOPED_TRACE("file of " + std::to_string(len) + " bytes");
    std::string name = "f" + std::to_string(len);
    Ino f = File(kRootIno, name);
    const std::string data = PatternData(len, 0, len);
    ASSERT_OK(WriteAll(s(), f, 0, data));
    EXPECT_EQ(AttrOf(f).size, len);

    SetAttrRequest r;
    r.size = len / 3;
    ASSERT_OK_AND_ASSIGN(Attr a, s()->SetAttr(f, r));
    EXPECT_EQ(a.size, len / 3);
    ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f));
    EXPECT_EQ(got, data.substr(0, len / 3));

    // Extending shows zeros, never the bytes cut off before.
    r.size = len + 1000;
    ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, r));
    EXPECT_EQ(a.size, len + 1000);
    std::string want = data.substr(0, len / 3) + std::string(len + 1000 - len / 3, '\0');
    ASSERT_OK_AND_ASSIGN(got, ReadAll(s(), f));
    EXPECT_TRUE(got == want) << "extended file does not read as prefix + zeros";
    ASSERT_NO_FATAL_FAILURE(Reopen());
    ASSERT_OK_AND_ASSIGN(got, ReadAll(s(), f));
    EXPECT_TRUE(got == want) << "after reopen";

    r.size = 0;
    ASSERT_OK_AND_ASSIGN(a, s()->SetAttr(f, r));
    EXPECT_EQ(a.size, 0u);
    ASSERT_OK_AND_ASSIGN(got, ReadAll(s(), f));
    EXPECT_EQ(got, "");
  }
}

TEST_F(NamespaceTest, SymlinkAndReadLink) {
  ASSERT_OK_AND_ASSIGN(Attr l, s()->Symlink(kRootIno, "ln", "target/of/link", 7, 8));
  EXPECT_TRUE(S_ISLNK(l.mode));
  EXPECT_EQ(l.size, 14u);
  EXPECT_EQ(l.uid, 7u);
  EXPECT_EQ(l.gid, 8u);
  EXPECT_EQ(l.nlink, 1u);
  ASSERT_OK_AND_ASSIGN(std::string t, s()->ReadLink(l.ino));
  EXPECT_EQ(t, "target/of/link");
  ASSERT_OK_AND_ASSIGN(Attr lk, s()->Lookup(kRootIno, "ln"));
  EXPECT_EQ(lk.ino, l.ino);
  EXPECT_TRUE(S_ISLNK(lk.mode));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ents, ListDir(s(), kRootIno));
  ASSERT_EQ(ents.size(), 1u);
  EXPECT_EQ(ents[0].type, static_cast<uint32_t>(S_IFLNK));

  Ino f = File(kRootIno, "f");
  EXPECT_ERRNO(EINVAL, s()->ReadLink(f));
  EXPECT_ERRNO(EINVAL, s()->ReadLink(kRootIno));

  const std::string longest(kMaxSymlinkLen, 'x');
  ASSERT_OK_AND_ASSIGN(Attr big, s()->Symlink(kRootIno, "big", longest, 0, 0));
  EXPECT_EQ(big.size, kMaxSymlinkLen);
  EXPECT_ERRNO(ENAMETOOLONG,
               s()->Symlink(kRootIno, "toolong", std::string(kMaxSymlinkLen + 1, 'x'), 0, 0));
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "toolong"));

  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(t, s()->ReadLink(l.ino));
  EXPECT_EQ(t, "target/of/link");
  ASSERT_OK_AND_ASSIGN(t, s()->ReadLink(big.ino));
  EXPECT_EQ(t, longest);
}

TEST_F(NamespaceTest, HardLinks) {
  Ino d = Dir(kRootIno, "d");
  Ino f = File(kRootIno, "f");
  ASSERT_OK(WriteAll(s(), f, 0, "shared bytes"));
  ASSERT_OK_AND_ASSIGN(Attr a, s()->Link(f, kRootIno, "f2"));
  EXPECT_EQ(a.ino, f);
  EXPECT_EQ(a.nlink, 2u);
  ASSERT_OK_AND_ASSIGN(a, s()->Link(f, d, "f3"));
  EXPECT_EQ(a.nlink, 3u);
  EXPECT_EQ(NlinkOf(f), 3u);
  EXPECT_EQ(LookupIno(kRootIno, "f2"), f);
  EXPECT_EQ(LookupIno(d, "f3"), f);
  EXPECT_EQ(NlinkOf(d), 2u) << "a hard link to a file is not a subdirectory";

  EXPECT_ERRNO(EPERM, s()->Link(d, kRootIno, "dlink"));
  EXPECT_ERRNO(EPERM, s()->Link(kRootIno, d, "rootlink"));
  EXPECT_ERRNO(EEXIST, s()->Link(f, d, "f3"));
  EXPECT_EQ(NlinkOf(f), 3u);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(NlinkOf(f), 3u);
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_EQ(NlinkOf(f), 2u);
  ASSERT_OK(s()->Unlink(kRootIno, "f2"));
  EXPECT_EQ(NlinkOf(f), 1u);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), LookupIno(d, "f3")));
  EXPECT_EQ(got, "shared bytes");
  ASSERT_OK(s()->Unlink(d, "f3"));
  ExpectGone(f);
}

TEST_F(NamespaceTest, UnlinkRemovesTheInode) {
  Ino f = File(kRootIno, "f");
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(1, 0, 100000)));
  ASSERT_OK(s()->SetXattr(f, "user.k", "v", 0));
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "f"));
  ExpectGone(f);
  EXPECT_TRUE(Names(kRootIno).empty());
  // The name can be used again; the inode number is new.
  Ino g = File(kRootIno, "f");
  EXPECT_GT(g, f);
  EXPECT_EQ(AttrOf(g).size, 0u);
  EXPECT_ERRNO(ENODATA, s()->GetXattr(g, "user.k"));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ExpectGone(f);
  EXPECT_EQ(LookupIno(kRootIno, "f"), g);
  // Fresh inode numbers stay above every number used before the reopen.
  Ino h = File(kRootIno, "h");
  EXPECT_GT(h, g);
}

TEST_F(NamespaceTest, Rmdir) {
  Ino d = Dir(kRootIno, "d");
  Ino sub = Dir(d, "sub");
  File(sub, "f");
  EXPECT_EQ(NlinkOf(kRootIno), 3u);
  EXPECT_ERRNO(ENOTEMPTY, s()->Rmdir(kRootIno, "d"));
  EXPECT_ERRNO(ENOTEMPTY, s()->Rmdir(d, "sub"));
  ASSERT_OK(s()->Unlink(sub, "f"));
  ASSERT_OK(s()->Rmdir(d, "sub"));
  ExpectGone(sub);
  EXPECT_EQ(NlinkOf(d), 2u);
  ASSERT_OK(s()->Rmdir(kRootIno, "d"));
  ExpectGone(d);
  EXPECT_EQ(NlinkOf(kRootIno), 2u);
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "d"));
  EXPECT_ERRNO(ENOENT, s()->Rmdir(kRootIno, "d"));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_TRUE(Names(kRootIno).empty());
  EXPECT_EQ(NlinkOf(kRootIno), 2u);
}

TEST_F(NamespaceTest, DirectoryNlinkCountsSubdirectories) {
  EXPECT_EQ(NlinkOf(kRootIno), 2u);
  Ino a = Dir(kRootIno, "a");
  Dir(kRootIno, "b");
  File(kRootIno, "file");
  ASSERT_OK(s()->Symlink(kRootIno, "link", "a", 0, 0));
  EXPECT_EQ(NlinkOf(kRootIno), 4u);
  Ino c = Dir(a, "c");
  Dir(a, "c2");
  File(a, "f");
  EXPECT_EQ(NlinkOf(a), 4u);
  EXPECT_EQ(NlinkOf(c), 2u);
  ASSERT_OK(s()->Rmdir(kRootIno, "b"));
  EXPECT_EQ(NlinkOf(kRootIno), 3u);
  // Moving a subdirectory moves its ".." link.
  ASSERT_OK(s()->Rename(a, "c", kRootIno, "c", RenameMode::kReplace));
  EXPECT_EQ(NlinkOf(a), 3u);
  EXPECT_EQ(NlinkOf(kRootIno), 4u);
  EXPECT_EQ(AttrOf(c).parent, kRootIno);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(NlinkOf(a), 3u);
  EXPECT_EQ(NlinkOf(kRootIno), 4u);
  EXPECT_EQ(AttrOf(c).parent, kRootIno);
}

TEST_F(NamespaceTest, RenameFileWithinAndAcrossDirectories) {
  Ino a = Dir(kRootIno, "a");
  Ino b = Dir(kRootIno, "b");
  Ino f = File(a, "f");
  ASSERT_OK(WriteAll(s(), f, 0, "contents"));
  ASSERT_OK(s()->Rename(a, "f", a, "g", RenameMode::kReplace));
  EXPECT_ERRNO(ENOENT, s()->Lookup(a, "f"));
  EXPECT_EQ(LookupIno(a, "g"), f);
  ASSERT_OK(s()->Rename(a, "g", b, "h", RenameMode::kNoReplace));
  EXPECT_TRUE(Names(a).empty());
  EXPECT_EQ(LookupIno(b, "h"), f);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f));
  EXPECT_EQ(got, "contents");
  // Renaming a name onto itself changes nothing.
  ASSERT_OK(s()->Rename(b, "h", b, "h", RenameMode::kReplace));
  EXPECT_EQ(LookupIno(b, "h"), f);
  EXPECT_EQ(NlinkOf(f), 1u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(LookupIno(b, "h"), f);
  EXPECT_TRUE(Names(a).empty());
}

TEST_F(NamespaceTest, RenameReplacesAnExistingFile) {
  Ino f = File(kRootIno, "f");
  Ino g = File(kRootIno, "g");
  ASSERT_OK(WriteAll(s(), f, 0, "new"));
  ASSERT_OK(WriteAll(s(), g, 0, PatternData(3, 0, 50000)));
  ASSERT_OK_AND_ASSIGN(FsStats before, s()->StatFs());
  ASSERT_OK(s()->Rename(kRootIno, "f", kRootIno, "g", RenameMode::kReplace));
  EXPECT_EQ(LookupIno(kRootIno, "g"), f);
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "f"));
  ExpectGone(g);
  ASSERT_OK_AND_ASSIGN(FsStats after, s()->StatFs());
  EXPECT_EQ(after.inodes + 1, before.inodes);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f));
  EXPECT_EQ(got, "new");

  // Replacing one name of a file with two links only drops a link.
  Ino h = File(kRootIno, "h");
  ASSERT_OK(s()->Link(h, kRootIno, "h2"));
  Ino k = File(kRootIno, "k");
  ASSERT_OK(s()->Rename(kRootIno, "k", kRootIno, "h2", RenameMode::kReplace));
  EXPECT_EQ(NlinkOf(h), 1u);
  EXPECT_EQ(LookupIno(kRootIno, "h2"), k);
  EXPECT_EQ(LookupIno(kRootIno, "h"), h);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Names(kRootIno), (std::set<std::string>{"g", "h", "h2"}));
  ExpectGone(g);
  EXPECT_EQ(NlinkOf(h), 1u);
}

TEST_F(NamespaceTest, RenameReplacesAnEmptyDirectory) {
  Ino x = Dir(kRootIno, "x");
  Ino child = File(x, "child");
  Ino y = Dir(kRootIno, "y");
  EXPECT_EQ(NlinkOf(kRootIno), 4u);
  ASSERT_OK(s()->Rename(kRootIno, "x", kRootIno, "y", RenameMode::kReplace));
  EXPECT_EQ(LookupIno(kRootIno, "y"), x);
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "x"));
  ExpectGone(y);
  EXPECT_EQ(LookupIno(x, "child"), child);
  EXPECT_EQ(NlinkOf(kRootIno), 3u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(NlinkOf(kRootIno), 3u);
  EXPECT_EQ(Names(kRootIno), std::set<std::string>{"y"});
}

TEST_F(NamespaceTest, RenameErrors) {
  Ino full = Dir(kRootIno, "full");
  File(full, "inside");
  Ino empty = Dir(kRootIno, "empty");
  Ino f = File(kRootIno, "f");
  Ino g = File(kRootIno, "g");
  // Non-empty target directory.
  EXPECT_ERRNO(ENOTEMPTY, s()->Rename(kRootIno, "empty", kRootIno, "full", RenameMode::kReplace));
  // File onto directory, directory onto file.
  EXPECT_ERRNO(EISDIR, s()->Rename(kRootIno, "f", kRootIno, "empty", RenameMode::kReplace));
  EXPECT_ERRNO(ENOTDIR, s()->Rename(kRootIno, "empty", kRootIno, "f", RenameMode::kReplace));
  // No-replace onto an existing name.
  EXPECT_ERRNO(EEXIST, s()->Rename(kRootIno, "f", kRootIno, "g", RenameMode::kNoReplace));
  EXPECT_ERRNO(EEXIST, s()->Rename(kRootIno, "empty", kRootIno, "full", RenameMode::kNoReplace));
  // A directory into its own subtree (or itself).
  Ino sub = Dir(full, "sub");
  Ino subsub = Dir(sub, "subsub");
  Ino x = File(subsub, "x");
  EXPECT_ERRNO(EINVAL, s()->Rename(kRootIno, "full", subsub, "y", RenameMode::kReplace));
  EXPECT_ERRNO(EINVAL, s()->Rename(kRootIno, "full", full, "x", RenameMode::kReplace));
  EXPECT_ERRNO(EINVAL, s()->Rename(kRootIno, "full", sub, "x", RenameMode::kNoReplace));
  EXPECT_ERRNO(EINVAL, s()->Rename(kRootIno, "full", subsub, "x", RenameMode::kExchange));

  // Nothing moved.
  EXPECT_EQ(Names(kRootIno), (std::set<std::string>{"empty", "f", "full", "g"}));
  EXPECT_EQ(LookupIno(kRootIno, "f"), f);
  EXPECT_EQ(LookupIno(kRootIno, "g"), g);
  EXPECT_EQ(LookupIno(kRootIno, "empty"), empty);
  EXPECT_EQ(LookupIno(kRootIno, "full"), full);
  EXPECT_EQ(Names(full), (std::set<std::string>{"inside", "sub"}));
  EXPECT_EQ(Names(subsub), std::set<std::string>{"x"});
  EXPECT_EQ(LookupIno(subsub, "x"), x);
  EXPECT_EQ(NlinkOf(kRootIno), 4u);
  EXPECT_EQ(NlinkOf(full), 3u);

  // No-replace onto a free name works.
  ASSERT_OK(s()->Rename(kRootIno, "f", full, "f", RenameMode::kNoReplace));
  EXPECT_EQ(LookupIno(full, "f"), f);
}

TEST_F(NamespaceTest, RenameExchangeFileAndDirectoryInDifferentParents) {
  Ino a = Dir(kRootIno, "a");
  Ino b = Dir(kRootIno, "b");
  Ino f = File(a, "f");
  ASSERT_OK(WriteAll(s(), f, 0, "file bytes"));
  Ino d = Dir(b, "d");
  Ino inner = File(d, "inner");
  EXPECT_EQ(NlinkOf(a), 2u);
  EXPECT_EQ(NlinkOf(b), 3u);
  ASSERT_OK(s()->Rename(a, "f", b, "d", RenameMode::kExchange));
  ASSERT_OK_AND_ASSIGN(Attr af, s()->Lookup(a, "f"));
  EXPECT_EQ(af.ino, d);
  EXPECT_TRUE(S_ISDIR(af.mode));
  ASSERT_OK_AND_ASSIGN(Attr bd, s()->Lookup(b, "d"));
  EXPECT_EQ(bd.ino, f);
  EXPECT_TRUE(S_ISREG(bd.mode));
  EXPECT_EQ(AttrOf(d).parent, a);
  EXPECT_EQ(NlinkOf(a), 3u);
  EXPECT_EQ(NlinkOf(b), 2u);
  EXPECT_EQ(LookupIno(d, "inner"), inner);
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> ea, ListDir(s(), a));
  ASSERT_EQ(ea.size(), 1u);
  EXPECT_EQ(ea[0].type, static_cast<uint32_t>(S_IFDIR));
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> eb, ListDir(s(), b));
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].type, static_cast<uint32_t>(S_IFREG));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(LookupIno(a, "f"), d);
  EXPECT_EQ(LookupIno(b, "d"), f);
  EXPECT_EQ(NlinkOf(a), 3u);
  EXPECT_EQ(NlinkOf(b), 2u);
  EXPECT_EQ(AttrOf(d).parent, a);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f));
  EXPECT_EQ(got, "file bytes");
}

TEST_F(NamespaceTest, RenameMovesLargeDirectoryWithItsChildren) {
  const int kChildren = ScaledCount(10000);
  Ino d = Dir(kRootIno, "d1");
  Ino other = Dir(kRootIno, "other");
  std::vector<Ino> inos;
  for (int i = 0; i < kChildren; ++i) {
    auto a = s()->Create(d, "c" + std::to_string(i), S_IFREG | 0644, 0, 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    inos.push_back(a->ino);
  }
  ASSERT_OK(s()->Rename(kRootIno, "d1", other, "d2", RenameMode::kReplace));
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "d1"));
  EXPECT_EQ(LookupIno(other, "d2"), d);
  EXPECT_EQ(AttrOf(d).parent, other);
  for (int i : {0, 1, kChildren / 2 - 1, kChildren / 2, kChildren - 1}) {
    EXPECT_EQ(LookupIno(d, "c" + std::to_string(i)), inos[i]);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> all, ListDir(s(), d));
  EXPECT_EQ(all.size(), static_cast<size_t>(kChildren));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(all, ListDir(s(), d));
  EXPECT_EQ(all.size(), static_cast<size_t>(kChildren));
  EXPECT_EQ(LookupIno(d, "c777"), inos[777]);
}

std::string Slot(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "n%07d", i);
  return buf;
}

TEST_F(NamespaceTest, ReadDirResumesByNameWhileEntriesChange) {
  const int kStable = ScaledCount(100000);  // names n0000000, n0000002, ... never touched
  const int kVolatile = ScaledCount(20000);
  Ino d = Dir(kRootIno, "big");
  std::set<std::string> stable;
  for (int i = 0; i < kStable; ++i) {
    std::string name = Slot(2 * i);
    ASSERT_OK(s()->Create(d, name, S_IFREG | 0644, 0, 0));
    stable.insert(name);
  }
  // Volatile entries sit between stable ones (odd slots).
  for (int i = 0; i < kVolatile; ++i) {
    ASSERT_OK(s()->Create(d, Slot(10 * i + 1), S_IFREG | 0644, 0, 0));
  }

  // A background thread adds and removes volatile names while the scan runs.
  std::atomic<bool> stop{false};
  std::atomic<int> churn_errors{0};
  struct StopAndJoin {
    std::atomic<bool>* stop;
    std::thread* t;
    ~StopAndJoin() {
      *stop = true;
      if (t->joinable()) t->join();
    }
  };
  std::thread churn([&] {
    std::mt19937 rng(1);
    while (!stop.load()) {
      std::string name = Slot(2 * static_cast<int>(rng() % kStable) + 1);
      Status st = s()->Unlink(d, name);
      if (!st.ok() && st.code() != ENOENT) churn_errors++;
      st = s()->Create(d, Slot(2 * static_cast<int>(rng() % kStable) + 1) + "x", S_IFREG | 0644,
                       0, 0)
               .status();
      if (!st.ok() && st.code() != EEXIST) churn_errors++;
    }
  });

  StopAndJoin stop_churn{&stop, &churn};  // also when an assertion returns early
  std::vector<std::string> seen;
  std::string after;
  std::mt19937 rng(2);
  int chunks = 0;
  const int kChunk = ScaledCount(500);  // entries a call takes: 1 to 3 times this
  for (;;) {
    size_t chunk = kChunk + rng() % (2 * kChunk);
    size_t got = 0;
    Status st = s()->ReadDir(d, after, [&](const DirEntry& e) {
      if (e.name == "." || e.name == "..") return true;
      seen.push_back(e.name);
      return ++got < chunk;
    });
    ASSERT_OK(st);
    ASSERT_LE(got, chunk) << "ReadDir kept calling after the callback returned false";
    if (got == 0) break;
    after = seen.back();
    ++chunks;
    // Deterministic changes between chunks: remove the next few volatile
    // names ahead and behind the position, add some in both places.
    int pos = std::atoi(after.c_str() + 1);
    for (int k = -3; k <= 3; ++k) {
      int slot = pos + 2 * k * 7 + 1;
      if (slot < 0 || slot % 2 == 0) continue;
      Status u = s()->Unlink(d, Slot(slot));
      ASSERT_TRUE(u.ok() || u.code() == ENOENT) << u.ToString();
      Status c = s()->Create(d, Slot(slot) + "y", S_IFREG | 0644, 0, 0).status();
      ASSERT_TRUE(c.ok() || c.code() == EEXIST) << c.ToString();
    }
  }
  stop = true;
  churn.join();
  EXPECT_EQ(churn_errors.load(), 0);
  EXPECT_GT(chunks, 50);

  // Names come strictly in order: nothing repeated.
  for (size_t i = 1; i < seen.size(); ++i) {
    ASSERT_LT(seen[i - 1], seen[i]) << "entry out of order or repeated at position " << i;
  }
  // Every entry that existed throughout was seen.
  size_t found = 0;
  for (const std::string& n : seen) found += stable.count(n);
  EXPECT_EQ(found, stable.size());

  // Resuming after a name that does not exist starts at the next one.
  std::vector<std::string> next;
  ASSERT_OK(s()->ReadDir(d, Slot(2 * 500) + "!", [&](const DirEntry& e) {
    next.push_back(e.name);
    return next.size() < 3;
  }));
  ASSERT_FALSE(next.empty());
  EXPECT_GT(next[0], Slot(2 * 500) + "!");
  EXPECT_LE(next[0], Slot(2 * 501));
  // Resuming after the last name yields nothing.
  ASSERT_OK_AND_ASSIGN(std::vector<DirEntry> all, ListDir(s(), d));
  ASSERT_FALSE(all.empty());
  int calls = 0;
  ASSERT_OK(s()->ReadDir(d, all.back().name, [&](const DirEntry& e) {
    if (e.name != "." && e.name != "..") ++calls;
    return true;
  }));
  EXPECT_EQ(calls, 0);
}

TEST_F(NamespaceTest, StatFsCountsInodes) {
  ASSERT_OK_AND_ASSIGN(FsStats st0, s()->StatFs());
  EXPECT_GE(st0.inodes, 1u);
  EXPECT_GT(st0.block_size, 0u);
  EXPECT_GT(st0.total_bytes, 0u);
  EXPECT_LE(st0.free_bytes, st0.total_bytes);
  EXPECT_LE(st0.avail_bytes, st0.total_bytes);
  auto inodes = [&]() -> uint64_t {
    auto st = s()->StatFs();
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->inodes - st0.inodes : ~0ull;
  };
  Ino f = File(kRootIno, "f");
  EXPECT_EQ(inodes(), 1u);
  Ino d = Dir(kRootIno, "d");
  EXPECT_EQ(inodes(), 2u);
  ASSERT_OK(s()->Symlink(d, "l", "f", 0, 0));
  EXPECT_EQ(inodes(), 3u);
  ASSERT_OK(s()->Link(f, d, "f2"));
  EXPECT_EQ(inodes(), 3u) << "a hard link is not an inode";
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(inodes(), 3u);
  ASSERT_OK(s()->Unlink(kRootIno, "f"));
  EXPECT_EQ(inodes(), 3u);
  ASSERT_OK(s()->Unlink(d, "f2"));
  EXPECT_EQ(inodes(), 2u);
  ASSERT_OK(s()->Unlink(d, "l"));
  ASSERT_OK(s()->Rmdir(kRootIno, "d"));
  EXPECT_EQ(inodes(), 0u);
  // An unlinked file that is still open counts until it is released.
  Ino g = File(kRootIno, "g");
  ASSERT_OK(s()->OpenFile(g));
  ASSERT_OK(s()->Unlink(kRootIno, "g"));
  ASSERT_OK(s()->Release(g));
  EXPECT_EQ(inodes(), 0u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(inodes(), 0u);
}

// A directory removed (rmdir, or renamed over) while a handle holds it
// keeps its attributes, with no links and no entries, until the last
// Release; then it is purged. One still held when the store closes without
// the Release is a pending orphan, purged by the next open.
TEST_F(NamespaceTest, RemovedDirectoryStaysUntilReleased) {
  auto inodes = [&]() -> uint64_t {
    auto st = s()->StatFs();
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->inodes : ~0ull;
  };
  const uint64_t base = inodes();
  const Ino a = Dir(kRootIno, "a");
  const Ino b = Dir(kRootIno, "b");
  const Ino c = Dir(kRootIno, "c");
  ASSERT_OK(s()->OpenFile(a));
  ASSERT_OK(s()->OpenFile(b));
  ASSERT_OK(s()->Rmdir(kRootIno, "a"));
  ASSERT_OK(s()->Rename(kRootIno, "c", kRootIno, "b", RenameMode::kReplace));
  for (Ino gone : {a, b}) {
    SCOPED_TRACE("inode " + std::to_string(gone));
    ASSERT_OK_AND_ASSIGN(Attr attr, s()->GetAttr(gone));
    EXPECT_TRUE(S_ISDIR(attr.mode));
    EXPECT_EQ(attr.nlink, 0u);
    int entries = 0;
    ASSERT_OK(s()->ReadDir(gone, "", [&](const DirEntry&) { return ++entries, true; }));
    EXPECT_EQ(entries, 0);
    EXPECT_ERRNO(ENOENT, s()->Mkdir(gone, "sub", 0755, 0, 0));
    EXPECT_ERRNO(ENOENT, s()->Create(gone, "f", S_IFREG | 0644, 0, 0));
  }
  ASSERT_OK_AND_ASSIGN(Attr root, s()->GetAttr(kRootIno));
  EXPECT_EQ(root.nlink, 3u);  // "." , ".." and "b" (which is c)
  ASSERT_OK_AND_ASSIGN(Attr now_b, s()->Lookup(kRootIno, "b"));
  EXPECT_EQ(now_b.ino, c);
  ASSERT_OK(s()->Release(a));
  EXPECT_ERRNO(ENOENT, s()->GetAttr(a));
  EXPECT_EQ(inodes(), base + 2);  // b, still held, and c
  ASSERT_NO_FATAL_FAILURE(Reopen());  // b never released
  EXPECT_ERRNO(ENOENT, s()->GetAttr(b));
  EXPECT_EQ(inodes(), base + 1);
  ASSERT_OK(s()->Close());
  store_.reset();
  ASSERT_OK_AND_ASSIGN(FsckReport r, engine::Fsck(dir_.store(), FsckOptions{}));
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.counts.count("pending_orphan"), 0u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
}

TEST_F(NamespaceTest, Xattrs) {
  Ino f = File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  ASSERT_OK_AND_ASSIGN(Attr l, s()->Symlink(kRootIno, "l", "f", 0, 0));
  for (Ino ino : {f, d, l.ino}) {
    SCOPED_TRACE("inode " + std::to_string(ino));
    EXPECT_ERRNO(ENODATA, s()->GetXattr(ino, "user.a"));
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, s()->ListXattr(ino));
    EXPECT_TRUE(names.empty());
    ASSERT_OK(s()->SetXattr(ino, "user.a", "one", 0));
    ASSERT_OK_AND_ASSIGN(std::string v, s()->GetXattr(ino, "user.a"));
    EXPECT_EQ(v, "one");
    EXPECT_ERRNO(EEXIST, s()->SetXattr(ino, "user.a", "two", XATTR_CREATE));
    EXPECT_ERRNO(ENODATA, s()->SetXattr(ino, "user.b", "two", XATTR_REPLACE));
    EXPECT_ERRNO(ENODATA, s()->GetXattr(ino, "user.b"));
    ASSERT_OK(s()->SetXattr(ino, "user.a", "two", XATTR_REPLACE));
    ASSERT_OK_AND_ASSIGN(v, s()->GetXattr(ino, "user.a"));
    EXPECT_EQ(v, "two");
    const std::string binary("\0\x01\xff value with NULs\0", 20);
    ASSERT_OK(s()->SetXattr(ino, "trusted.bin", binary, XATTR_CREATE));
    ASSERT_OK(s()->SetXattr(ino, "user.empty", "", 0));
    ASSERT_OK_AND_ASSIGN(v, s()->GetXattr(ino, "trusted.bin"));
    EXPECT_EQ(v, binary);
    ASSERT_OK_AND_ASSIGN(v, s()->GetXattr(ino, "user.empty"));
    EXPECT_EQ(v, "");
    ASSERT_OK_AND_ASSIGN(names, s()->ListXattr(ino));
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
              (std::set<std::string>{"trusted.bin", "user.a", "user.empty"}));
    EXPECT_EQ(names.size(), 3u);
    ASSERT_OK(s()->RemoveXattr(ino, "user.a"));
    EXPECT_ERRNO(ENODATA, s()->RemoveXattr(ino, "user.a"));
    EXPECT_ERRNO(ENODATA, s()->GetXattr(ino, "user.a"));
  }
  // xattrs of different inodes are separate.
  ASSERT_OK(s()->SetXattr(f, "user.only_f", "x", 0));
  EXPECT_ERRNO(ENODATA, s()->GetXattr(d, "user.only_f"));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, s()->ListXattr(f));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"trusted.bin", "user.empty", "user.only_f"}));
  ASSERT_OK_AND_ASSIGN(std::string v, s()->GetXattr(d, "trusted.bin"));
  EXPECT_EQ(v, std::string("\0\x01\xff value with NULs\0", 20));
}

// A textual description of the whole tree, for comparing before and after a
// reopen. atime and ctime are left out (reads may touch them).
void DumpTree(Store* store, Ino dir, const std::string& path, std::ostringstream* out) {
  auto list = ListDir(store, dir);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  for (const DirEntry& e : *list) {
    std::string p = path + "/" + e.name;
    ASSERT_OK_AND_ASSIGN(Attr a, store->Lookup(dir, e.name));
    ASSERT_EQ(a.ino, e.ino) << p;
    ASSERT_EQ(a.mode & S_IFMT, e.type) << p;
    *out << p << " ino=" << a.ino << " mode=" << std::oct << a.mode << std::dec
         << " uid=" << a.uid << " gid=" << a.gid << " nlink=" << a.nlink << " size=" << a.size
         << " rdev=" << a.rdev << " mtime=" << a.mtime.sec << "." << a.mtime.nsec;
    if (S_ISDIR(a.mode)) *out << " parent=" << a.parent;
    if (S_ISLNK(a.mode)) {
      ASSERT_OK_AND_ASSIGN(std::string t, store->ReadLink(a.ino));
      *out << " target=" << t;
    }
    if (S_ISREG(a.mode)) {
      ASSERT_OK_AND_ASSIGN(std::string data, ReadAll(store, a.ino));
      ASSERT_EQ(data.size(), a.size) << p;
      *out << " data=" << std::hash<std::string>()(data);
    }
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store->ListXattr(a.ino));
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      ASSERT_OK_AND_ASSIGN(std::string v, store->GetXattr(a.ino, n));
      *out << " xattr:" << n << "=" << v;
    }
    *out << "\n";
    if (S_ISDIR(a.mode)) DumpTree(store, a.ino, p, out);
  }
}

TEST_F(NamespaceTest, EverythingPersistsAcrossReopen) {
  Ino a = Dir(kRootIno, "a");
  Ino b = Dir(a, "b");
  Ino f = File(b, "f");
  ASSERT_OK(WriteAll(s(), f, 0, PatternData(9, 0, 200000)));
  Ino small = File(a, "small");
  ASSERT_OK(WriteAll(s(), small, 0, "tiny"));
  ASSERT_OK(s()->Link(f, kRootIno, "f-link"));
  ASSERT_OK(s()->Symlink(a, "sym", "b/f", 11, 12));
  ASSERT_OK(s()->Create(kRootIno, "fifo", S_IFIFO | 0600, 0, 0));
  ASSERT_OK(s()->SetXattr(b, "user.dir", "on a dir", 0));
  ASSERT_OK(s()->SetXattr(f, "user.file", "on a file", 0));
  SetAttrRequest r;
  r.mode = 0600;
  r.uid = 77;
  r.mtime = Timespec{1600000000, 42};
  ASSERT_OK(s()->SetAttr(small, r));
  ASSERT_OK(s()->Mkdir(b, "gone", 0755, 0, 0));
  ASSERT_OK(s()->Rmdir(b, "gone"));
  ASSERT_OK(s()->Rename(a, "small", b, "small2", RenameMode::kReplace));
  ASSERT_OK_AND_ASSIGN(FsStats st1, s()->StatFs());

  std::ostringstream before;
  ASSERT_NO_FATAL_FAILURE(DumpTree(s(), kRootIno, "", &before));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  std::ostringstream after;
  ASSERT_NO_FATAL_FAILURE(DumpTree(s(), kRootIno, "", &after));
  EXPECT_EQ(before.str(), after.str());
  ASSERT_OK_AND_ASSIGN(FsStats st2, s()->StatFs());
  EXPECT_EQ(st1.inodes, st2.inodes);
  EXPECT_EQ(NlinkOf(kRootIno), 3u);
  EXPECT_EQ(NlinkOf(a), 3u);
}

TEST_F(NamespaceTest, CallsAfterCloseFail) {
  Ino f = File(kRootIno, "f");
  ASSERT_OK(s()->OpenFile(f));  // a handle still open at Close
  ASSERT_OK(s()->Close());
  EXPECT_ERRNO(EIO, s()->Lookup(kRootIno, "f"));
  EXPECT_ERRNO(EIO, s()->GetAttr(f));
  EXPECT_ERRNO(EIO, s()->Create(kRootIno, "g", S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(EIO, s()->Write(f, 0, "x"));
  char buf[8];
  EXPECT_ERRNO(EIO, s()->Read(f, 0, sizeof(buf), buf));
  EXPECT_ERRNO(EIO, s()->SetAttr(f, SetAttrRequest{}));
  EXPECT_ERRNO(EIO, s()->Mkdir(kRootIno, "d", 0755, 0, 0));
  EXPECT_ERRNO(EIO, s()->Symlink(kRootIno, "l", "t", 0, 0));
  EXPECT_ERRNO(EIO, s()->ReadLink(f));
  EXPECT_ERRNO(EIO, s()->Link(f, kRootIno, "f2"));
  EXPECT_ERRNO(EIO, s()->Unlink(kRootIno, "f"));
  EXPECT_ERRNO(EIO, s()->Rmdir(kRootIno, "f"));
  EXPECT_ERRNO(EIO, s()->Rename(kRootIno, "f", kRootIno, "g", RenameMode::kReplace));
  EXPECT_ERRNO(EIO, s()->ReadDir(kRootIno, "", [](const DirEntry&) { return true; }));
  EXPECT_ERRNO(EIO, s()->StatFs());
  EXPECT_ERRNO(EIO, s()->SetXattr(f, "user.a", "b", 0));
  EXPECT_ERRNO(EIO, s()->GetXattr(f, "user.a"));
  EXPECT_ERRNO(EIO, s()->ListXattr(f));
  EXPECT_ERRNO(EIO, s()->RemoveXattr(f, "user.a"));
  EXPECT_ERRNO(EIO, s()->OpenFile(f));
  // Releasing a handle while shutting down is harmless: EIO or success.
  Status rel = s()->Release(f);
  EXPECT_TRUE(rel.ok() || rel.code() == EIO) << rel.ToString();
  EXPECT_ERRNO(EIO, s()->Fallocate(f, 0, 0, 100));
  EXPECT_ERRNO(EIO, s()->SeekData(f, 0, false));
  EXPECT_ERRNO(EIO, s()->Fsync(f, false));
  EXPECT_ERRNO(EIO, s()->SyncAll());
  EXPECT_ERRNO(EIO, s()->GetExtents(f));
  EXPECT_ERRNO(EIO, s()->UpdateOptions([](StoreOptions* o) { o->cache_size = 1024; }));
  // Introspection does not crash either; what reads the index fails.
  EXPECT_ERRNO(EIO, s()->GetStats());
  EXPECT_ERRNO(EIO, s()->ListSegments());
  (void)s()->GetOptions();
  (void)s()->LastCompaction();
  s()->DropCache();
  EXPECT_ERRNO(EIO, s()->Close());
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(LookupIno(kRootIno, "f"), f);
  EXPECT_ERRNO(ENOENT, s()->Lookup(kRootIno, "g"));
}

TEST_F(NamespaceTest, ReadOnlyRejectsMutations) {
  Ino f = File(kRootIno, "f");
  ASSERT_OK(WriteAll(s(), f, 0, "ro data"));
  ASSERT_OK(s()->Close());
  store_.reset();
  options_.read_only = true;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(LookupIno(kRootIno, "f"), f);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadAll(s(), f));
  EXPECT_EQ(got, "ro data");
  EXPECT_ERRNO(EROFS, s()->Create(kRootIno, "g", S_IFREG | 0644, 0, 0));
  EXPECT_ERRNO(EROFS, s()->Mkdir(kRootIno, "g", 0755, 0, 0));
  EXPECT_ERRNO(EROFS, s()->Write(f, 0, "x"));
  EXPECT_ERRNO(EROFS, s()->Unlink(kRootIno, "f"));
  EXPECT_ERRNO(EROFS, s()->Rename(kRootIno, "f", kRootIno, "h", RenameMode::kReplace));
  EXPECT_ERRNO(EROFS, s()->SetXattr(f, "user.x", "y", 0));
  SetAttrRequest r;
  r.size = 0;
  EXPECT_ERRNO(EROFS, s()->SetAttr(f, r));
  ASSERT_OK_AND_ASSIGN(got, ReadAll(s(), f));
  EXPECT_EQ(got, "ro data");
}

TEST_F(NamespaceTest, SecondOpenFailsWithEbusyNamingTheHolder) {
  StoreOptions other = TestOptions();
  other.holder = "second opener";
  // store_ was opened with holder "ckptfs engine test".
  auto second = Store::Open(dir_.store(), other);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), EBUSY) << second.status().ToString();
  EXPECT_NE(second.status().message().find("ckptfs engine test"), std::string::npos)
      << "message does not name the holder: " << second.status().message();
  const StoreHolder* holder = second.status().payload<StoreHolder>();
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(holder->holder, "ckptfs engine test");
  EXPECT_EQ(holder->pid, ::getpid());
  const Status copy = second.status();
  EXPECT_EQ(copy.payload<StoreHolder>(), holder) << "copies share one payload";
  EXPECT_EQ(copy.payload<int>(), nullptr) << "a payload of another type is not there";
  EXPECT_EQ(Status::OK().payload<StoreHolder>(), nullptr);
  // The first store is not disturbed.
  ASSERT_OK(s()->Create(kRootIno, "still-works", S_IFREG | 0644, 0, 0));
}

TEST_F(NamespaceTest, OpenHeldByAnotherProcessFailsAndStaleLockIsFree) {
  if (meta::IsMemUri(options_.meta)) {
    GTEST_SKIP() << "another process does not share this process's index in memory";
  }
  ASSERT_OK(s()->Close());
  store_.reset();
  const std::string holder = "holder-process-" + std::to_string(::getpid());
  Child child = StartChild({"hold", dir_.store(), holder, "{FD}"});
  ChildGuard guard(&child);
  ASSERT_GT(child.pid, 0);
  std::string line;
  ASSERT_TRUE(ReadLine(child.fd, &line)) << "child did not open the store";
  ASSERT_EQ(line, "ready");
  auto second = Store::Open(dir_.store(), options_);
  const pid_t child_pid = child.pid;
  guard.Reap(/*kill=*/true);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), EBUSY) << second.status().ToString();
  EXPECT_NE(second.status().message().find(holder), std::string::npos)
      << "message does not name the holder: " << second.status().message();
  const StoreHolder* who = second.status().payload<StoreHolder>();
  ASSERT_NE(who, nullptr);
  EXPECT_EQ(who->holder, holder);
  EXPECT_EQ(who->pid, child_pid);
  // The holder died: its lock went with it.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_OK(s()->GetAttr(kRootIno));
}

TEST(StoreOpenTest, ForeignDirectoryIsRejected) {
  TempDir tmp;
  const std::string foreign = tmp.path() + "/foreign";
  ASSERT_EQ(::mkdir(foreign.c_str(), 0755), 0);
  { std::ofstream(foreign + "/precious.txt") << "not a store"; }
  auto st = Store::Open(foreign, TestOptions());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), EINVAL) << st.status().ToString();
  EXPECT_FALSE(Store::IsStore(foreign));
  // Nothing was written into it.
  EXPECT_EQ(CountFilesRecursively(foreign), 1u);

  // A missing directory without create_if_missing is an error too.
  StoreOptions no_create = TestOptions();
  no_create.create_if_missing = false;
  EXPECT_FALSE(Store::Open(tmp.path() + "/missing", no_create).ok());
  EXPECT_FALSE(Store::IsStore(tmp.path() + "/missing"));

  // An existing empty directory becomes a store.
  const std::string empty = tmp.path() + "/empty";
  ASSERT_EQ(::mkdir(empty.c_str(), 0755), 0);
  {
    auto s = Store::Open(empty, TestOptions());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_OK((*s)->Close());
  }
  EXPECT_TRUE(Store::IsStore(empty));
}

// A store whose index is in PostgreSQL (the pg.namespace_test run): the
// merge operands its creates and deletes add (the inode count) are folded
// by the store's background thread, so that they do not pile up.
TEST_F(NamespaceTest, AnIndexInPostgreSqlHasItsMergesFoldedInTheBackground) {
  if (options_.meta.empty() || meta::IsMemUri(options_.meta)) {
    GTEST_SKIP() << "for stores whose index is in PostgreSQL";
  }
  options_.background_interval_ms = 100;
  Reopen();
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK(s()->Create(kRootIno, "f" + std::to_string(i), 0644, 0, 0, 0).status());
  }
  std::ifstream in(dir_.store() + "/SHARED");
  std::stringstream text;
  text << in.rdbuf();
  format::SharedIndex where;
  ASSERT_OK(format::ParseSharedFile(text.str(), &where));
  meta::PgOptions po;
  po.uri = options_.meta;
  po.schema = where.schema;
  auto kv = meta::PgKv::Open(po);
  ASSERT_OK(kv.status());
  uint64_t pending = 0;
  for (int tries = 0; tries < 200; ++tries) {
    auto n = (*kv)->PendingMerges();
    ASSERT_OK(n.status());
    pending = *n;
    if (pending == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(pending, 0u);
  ASSERT_OK_AND_ASSIGN(FsStats st, s()->StatFs());
  EXPECT_EQ(st.inodes, 301u);
}

TEST_F(NamespaceTest, CountNamespaceCountsInodesByType) {
  ASSERT_OK_AND_ASSIGN(NamespaceCounts empty, s()->CountNamespace());
  EXPECT_EQ(empty.directories, 1u);  // the root
  EXPECT_EQ(empty.files + empty.symlinks + empty.other + empty.logical_bytes, 0u);
  EXPECT_GT(empty.index_bytes, 0u);

  const Ino a = Dir(kRootIno, "a");
  Dir(a, "b");
  const Ino big = File(a, "big");
  const Ino small = File(kRootIno, "small");
  ASSERT_OK(s()->Write(big, 0, std::string(100000, 'x')).status());
  ASSERT_OK(s()->Write(small, 0, "hello").status());
  SetAttrRequest sparse;
  sparse.size = 1 << 20;  // a hole counts as logical bytes
  ASSERT_OK(s()->SetAttr(File(kRootIno, "sparse"), sparse).status());
  ASSERT_OK(s()->Link(small, a, "small-link").status());  // one inode, counted once
  ASSERT_OK(s()->Symlink(kRootIno, "link", "a/big", 0, 0).status());
  ASSERT_OK(s()->Create(kRootIno, "fifo", S_IFIFO | 0600, 0, 0).status());
  // Unlinked while open: no longer in the namespace.
  const Ino doomed = File(kRootIno, "doomed");
  ASSERT_OK(s()->Write(doomed, 0, "gone").status());
  ASSERT_OK(s()->OpenFile(doomed));
  ASSERT_OK(s()->Unlink(kRootIno, "doomed"));

  auto check = [](const NamespaceCounts& c) {
    EXPECT_EQ(c.files, 3u);
    EXPECT_EQ(c.directories, 3u);
    EXPECT_EQ(c.symlinks, 1u);
    EXPECT_EQ(c.other, 1u);
    EXPECT_EQ(c.logical_bytes, 100000u + 5u + (1u << 20));
  };
  ASSERT_OK_AND_ASSIGN(NamespaceCounts open_counts, s()->CountNamespace());
  check(open_counts);
  ASSERT_OK(s()->Release(doomed));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_OK_AND_ASSIGN(NamespaceCounts reopened, s()->CountNamespace());
  check(reopened);
}

}  // namespace
}  // namespace ckptfs::engine::test
