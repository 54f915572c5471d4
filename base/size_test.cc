#include "base/size.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(ParseSizeTest, SuffixesArePowersOf1024) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("256K"), 256u << 10);
  EXPECT_EQ(*ParseSize("64m"), 64u << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseSize("1MB"), 1u << 20);
  EXPECT_EQ(*ParseSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseSize("3GiB"), 3ull << 30);
}

TEST(ParseSizeTest, RejectsMalformed) {
  for (const char* bad : {"", "K", "abc", "1.5M", "-1", "1X", "1 M", "99999999999999999999",
                          "99999999999T", "iB", "5iB", "B"}) {
    EXPECT_EQ(ParseSize(bad).status().code(), EINVAL) << bad;
  }
}

}  // namespace
}  // namespace ckptfs
