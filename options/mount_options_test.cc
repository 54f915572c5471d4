// Parsing of mount options into MountOptions, and the options only root
// may use.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "options/mount_options.h"

namespace ckptfs::options {
namespace {

using engine::Result;
using engine::Status;

TEST(ParseMountOptionsTest, SetsEveryOption) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("coalesce_gap=0,coalesce_max=2M,cache_size=1G,compression=3,"
                                "segment_size=64M,inline_max=8K,min_free=1G,threads=4,"
                                "attr_timeout=0.5,entry_timeout=2,allow_other,ro,"
                                "writeback_cache,readahead=4M,compact_dead=1G,compact_rate=8M",
                                &o)
                  .ok());
  EXPECT_EQ(o.store.coalesce_gap, 0u);
  EXPECT_EQ(o.store.coalesce_max, 2u << 20);
  EXPECT_EQ(o.store.cache_size, 1ull << 30);
  EXPECT_EQ(o.store.compression, 3);
  EXPECT_EQ(o.store.segment_size, 64u << 20);
  EXPECT_EQ(o.store.inline_max, 8u << 10);
  EXPECT_EQ(o.store.min_free, 1ull << 30);
  EXPECT_EQ(o.threads, 4u);
  EXPECT_DOUBLE_EQ(o.attr_timeout, 0.5);
  EXPECT_DOUBLE_EQ(o.entry_timeout, 2.0);
  EXPECT_TRUE(o.allow_other);
  EXPECT_TRUE(o.read_only);
  EXPECT_TRUE(o.writeback_cache);
  EXPECT_EQ(o.readahead, 4u << 20);
  EXPECT_EQ(o.store.compact_dead, 1ull << 30);
  EXPECT_EQ(o.store.compact_rate, 8u << 20);
  EXPECT_TRUE(MountOptions().store.free_empty);  // on for mounts
  ASSERT_TRUE(ParseMountOptions("free_empty=0", &o).ok());
  EXPECT_FALSE(o.store.free_empty);
  EXPECT_EQ(ParseMountOptions("compact_rate=0", &o).code(), EINVAL);
  ASSERT_TRUE(ParseMountOptions("rw,allow_other=0,,", &o).ok());
  EXPECT_FALSE(o.read_only);
  EXPECT_FALSE(o.allow_other);
}

TEST(ParseMountOptionsTest, PassthroughTurnsTheWritebackCacheOffAndVerifyReadsPassthrough) {
  MountOptions o;
  EXPECT_FALSE(o.AsksPassthrough());
  EXPECT_TRUE(o.UsesWritebackCache());
  EXPECT_EQ(o.store.data_file_min, 64u << 20);
  ASSERT_TRUE(ParseMountOptions("passthrough,data_file_min=16M", &o).ok());
  EXPECT_TRUE(o.AsksPassthrough());
  EXPECT_FALSE(o.UsesWritebackCache());
  EXPECT_EQ(o.store.data_file_min, 16u << 20);
  ASSERT_TRUE(ParseMountOptions("verify_reads", &o).ok());
  EXPECT_FALSE(o.AsksPassthrough());
  EXPECT_TRUE(o.UsesWritebackCache());
  ASSERT_TRUE(ParseMountOptions("data_file_min=0", &o).ok());
  EXPECT_EQ(o.store.data_file_min, 0u);
}

TEST(ParseMountOptionsTest, DirectIoIsOnUnlessTurnedOff) {
  MountOptions o;
  EXPECT_TRUE(o.direct_io);
  ASSERT_TRUE(ParseMountOptions("no_direct_io", &o).ok());
  EXPECT_FALSE(o.direct_io);
  ASSERT_TRUE(ParseMountOptions("direct_io", &o).ok());
  EXPECT_TRUE(o.direct_io);
}

TEST(ParseMountOptionsTest, ErrorsNameTheOption) {
  MountOptions o;
  engine::Status st = ParseMountOptions("ro,bogus=1", &o);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("unknown mount option 'bogus'"), std::string::npos);
  for (const char* bad : {"cache_size=lots", "cache_size", "compression=23", "threads=0",
                          "attr_timeout=-1", "attr_timeout=x", "ro=maybe", "rw=1",
                          "segment_size=4K", "inline_max=2M"}) {
    st = ParseMountOption(bad, &o);
    EXPECT_EQ(st.code(), EINVAL) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(st.message().find("'" + key + "'"), std::string::npos) << st.message();
  }
}

TEST(ParseMountOptionsTest, KernelFlags) {
  MountOptions o;
  EXPECT_FALSE(o.suid);
  EXPECT_FALSE(o.dev);
  EXPECT_TRUE(o.exec);
  EXPECT_FALSE(o.sync);
  EXPECT_FALSE(o.dirsync);
  ASSERT_TRUE(ParseMountOptions("suid,dev,noexec,sync,dirsync,ro", &o).ok());
  EXPECT_TRUE(o.suid);
  EXPECT_TRUE(o.dev);
  EXPECT_FALSE(o.exec);
  EXPECT_TRUE(o.sync);
  EXPECT_TRUE(o.dirsync);
  EXPECT_TRUE(o.read_only);
  ASSERT_TRUE(ParseMountOptions("nosuid,nodev,exec,async,dirsync=0,rw", &o).ok());
  EXPECT_FALSE(o.suid);
  EXPECT_FALSE(o.dev);
  EXPECT_TRUE(o.exec);
  EXPECT_FALSE(o.sync);
  EXPECT_FALSE(o.dirsync);
  EXPECT_FALSE(o.read_only);
  EXPECT_EQ(ParseMountOption("nosuid=1", &o).code(), EINVAL);
}

TEST(CheckPrivilegesTest, SuidAndDevNeedRoot) {
  MountOptions o;
  EXPECT_TRUE(CheckPrivileges(o, 1000).ok());
  o.suid = true;
  EXPECT_TRUE(CheckPrivileges(o, 0).ok());
  engine::Status st = CheckPrivileges(o, 1000);
  EXPECT_EQ(st.code(), EPERM);
  EXPECT_NE(st.message().find("'suid' needs root"), std::string::npos) << st.message();
  o.suid = false;
  o.dev = true;
  EXPECT_TRUE(CheckPrivileges(o, 0).ok());
  st = CheckPrivileges(o, 1000);
  EXPECT_EQ(st.code(), EPERM);
  EXPECT_NE(st.message().find("'dev' needs root"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ckptfs::options
