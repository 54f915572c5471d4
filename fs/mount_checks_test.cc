// The checks of paths and mounts made before mounting.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "fs/mount_checks.h"

namespace ckptfs::fs {
namespace {

using engine::Result;
using engine::Status;

TEST(ResolvePathsTest, MakesPathsAbsolute) {
  MountOptions o;
  o.store_dir = "relative/store/";
  o.mountpoint = "/tmp/../tmp/mnt";
  ASSERT_TRUE(ResolvePaths(&o).ok());
  EXPECT_EQ(o.store_dir.front(), '/');
  EXPECT_NE(o.store_dir.back(), '/');
  EXPECT_EQ(o.mountpoint, "/tmp/mnt");
  MountOptions empty;
  EXPECT_EQ(ResolvePaths(&empty).code(), EINVAL);
}

TEST(CheckUnmountableTest, NamesWhatIsThereWhenItIsNoCkptfsMount) {
  char tmpl[] = "/tmp/ckptfs-umount-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  Status st = CheckUnmountable(dir);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find(dir + " is not mounted"), std::string::npos) << st.message();
  st = CheckUnmountable(dir + "/missing");
  EXPECT_EQ(st.code(), ENOENT);
  EXPECT_NE(st.message().find("does not exist"), std::string::npos) << st.message();
  rmdir(dir.c_str());
  // The root filesystem is mounted, and not by ckptfs.
  st = CheckUnmountable("/");
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("not a ckptfs one; not unmounted"), std::string::npos)
      << st.message();
}

TEST(ResolvePathTest, ResolvesSymlinksAndKeepsMissingPaths) {
  char tmpl[] = "/tmp/ckptfs-resolve-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(symlink(dir.c_str(), (dir + "-link").c_str()), 0);
  Result<std::string> r = ResolvePath(dir + "-link/", "mountpoint");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, dir);
  r = ResolvePath(dir + "/a/../missing", "mountpoint");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, dir + "/missing");
  unlink((dir + "-link").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace ckptfs::fs
