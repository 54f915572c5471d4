// The staging log's record (docs/FORMAT.md, "Staging logs") and its replay,
// and the names of an S3 file's parts (docs/FORMAT.md, "STORAGE"); the writes an
// object-store file gathers.
#include "io/staging_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "io/object_store_env.h"
#include "io/s3_client.h"
#include "io/s3_env.h"

namespace ckptfs::io {
namespace {

// The record of docs/FORMAT.md, "Staging logs", byte for byte.
TEST(StagedRecordTest, IsTheDocumentedBytes) {
  const std::string r = StagedRecord(0x0102030405060708ull, "abc");
  ASSERT_EQ(r.size(), kStagedHeaderBytes + 3);
  EXPECT_EQ(r.substr(0, 12), std::string("\x08\x07\x06\x05\x04\x03\x02\x01\x03\0\0\0", 12));
  EXPECT_EQ(r.substr(20), "abc");
  // The checksum covers the offset and the length too.
  EXPECT_NE(r.substr(12, 8), StagedRecord(0x0102030405060709ull, "abc").substr(12, 8));
  EXPECT_NE(r.substr(12, 8), StagedRecord(0x0102030405060708ull, "abd").substr(12, 8));
}

// A log written by StagingLog replays in order; a record whose checksum
// fails, or that is cut short, ends it.
TEST(StagingLogTest, ReplaysInOrderUpToATornRecord) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("ckptfs-staging-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Result<std::vector<std::string>> none = ListStagingLogs(dir);  // makes it
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  const std::string path = dir + "/" + StagingName("p/segments/00000001.seg");
  EXPECT_EQ(ObjectOfStagingName(StagingName("p/segments/00000001.seg")), "p/segments/00000001.seg");
  {
    StagingLog log(path);
    const std::string_view a[] = {"ab", "cd"};
    ASSERT_TRUE(log.Append(7, a).ok());
    const std::string_view b[] = {"xyz"};
    ASSERT_TRUE(log.Append(100, b).ok());
    EXPECT_EQ(log.bytes(), 2 * kStagedHeaderBytes + 7);
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(bytes, StagedRecord(7, "abcd") + StagedRecord(100, "xyz"));
  auto replay = [&] {
    std::vector<std::pair<uint64_t, std::string>> got;
    EXPECT_TRUE(ReplayStagingLog(path, [&](uint64_t off, std::string_view data) {
                  got.emplace_back(off, std::string(data));
                  return Status::OK();
                }).ok());
    return got;
  };
  using Got = std::vector<std::pair<uint64_t, std::string>>;
  EXPECT_EQ(replay(), (Got{{7, "abcd"}, {100, "xyz"}}));
  // The second record's last byte flipped, then the log cut in its header.
  bytes.back() ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(replay(), (Got{{7, "abcd"}}));
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << bytes.substr(0, kStagedHeaderBytes + 4 + 10);
  EXPECT_EQ(replay(), (Got{{7, "abcd"}}));
  Result<std::vector<std::string>> names = ListStagingLogs(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"p#segments#00000001.seg"});
  std::filesystem::remove_all(dir);
}

// docs/FORMAT.md, "STORAGE": part 1 written at offset 0, part 0x2a cutting
// to 0x1000.
// Writes that continue the last one join it, up to the longest run; any
// other starts a run of its own; Take() leaves none.
TEST(PendingWritesTest, JoinsContinuingWritesUpToTheLongestRun) {
  PendingWrites w(/*batch=*/64, /*max_run=*/10);
  const std::string_view a[] = {"abcd", "", "ef"};
  EXPECT_EQ(w.Add(100, a), 106u);
  const std::string_view b[] = {"ghij"};
  EXPECT_EQ(w.Add(106, b), 110u);  // joins: 10 bytes, the longest run
  const std::string_view c[] = {"k"};
  EXPECT_EQ(w.Add(110, c), 111u);  // past it: a run of its own
  const std::string_view d[] = {"xy"};
  EXPECT_EQ(w.Add(50, d), 52u);  // elsewhere: a run of its own
  EXPECT_EQ(w.bytes(), 13u);
  EXPECT_TRUE(w.Overlaps(51, 1));
  EXPECT_TRUE(w.Overlaps(109, 5));
  EXPECT_FALSE(w.Overlaps(52, 48));
  EXPECT_FALSE(w.Overlaps(111, 100));
  std::vector<PendingWrites::Run> runs = w.Take();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].offset, 100u);
  EXPECT_EQ(runs[0].bytes, "abcdefghij");
  EXPECT_EQ(runs[1].offset, 110u);
  EXPECT_EQ(runs[1].bytes, "k");
  EXPECT_EQ(runs[2].offset, 50u);
  EXPECT_EQ(runs[2].bytes, "xy");
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.bytes(), 0u);
  EXPECT_FALSE(w.Overlaps(0, 1000));
}

// A buffer given back after its write is where the next batch starts (the
// same memory, emptied); small ones and those past the most kept are not
// kept, and DropSpares frees them.
TEST(PendingWritesTest, TheNextBatchStartsInABufferGivenBack) {
  PendingWrites w(/*batch=*/64, /*max_run=*/SIZE_MAX, /*spares=*/2);
  const std::string big(64, 'a');
  const std::string_view first[] = {big};
  w.Add(0, first);
  std::vector<PendingWrites::Run> sent = w.Take();
  ASSERT_EQ(sent.size(), 1u);
  const char* memory = sent[0].bytes.data();
  w.Recycle(std::move(sent[0].bytes));
  w.Recycle(std::string("small"));  // cannot hold a batch
  EXPECT_EQ(w.spares(), 1u);

  const std::string_view next[] = {"xyz"};  // small, yet in the kept buffer
  w.Add(1000, next);
  EXPECT_EQ(w.spares(), 0u);
  std::vector<PendingWrites::Run> again = w.Take();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].offset, 1000u);
  EXPECT_EQ(again[0].bytes, "xyz");
  EXPECT_EQ(again[0].bytes.data(), memory);

  for (int i = 0; i < 3; ++i) {
    std::string b;
    b.reserve(64);
    w.Recycle(std::move(b));
  }
  EXPECT_EQ(w.spares(), 2u);  // the most kept
  w.DropSpares();
  EXPECT_EQ(w.spares(), 0u);
}

TEST(S3PartNameTest, IsTheDocumentedName) {
  EXPECT_EQ(S3PartName(1, 'd', 0), "0000000000000001d0000000000000000");
  EXPECT_EQ(S3PartName(0x2a, 't', 0x1000), "000000000000002at0000000000001000");
  uint64_t seq = 0, v = 0;
  char kind = 0;
  ASSERT_TRUE(ParseS3PartName("000000000000002at0000000000001000", &seq, &kind, &v));
  EXPECT_EQ(seq, 0x2au);
  EXPECT_EQ(kind, 't');
  EXPECT_EQ(v, 0x1000u);
  for (const char* bad : {"", "0000000000000001x0000000000000000", "0000000000000000d0000000000000000",
                          "000000000000001d0000000000000000", "000000000000000Gd0000000000000000",
                          "0000000000000001d00000000000000000"}) {
    EXPECT_FALSE(ParseS3PartName(bad, &seq, &kind, &v)) << bad;
  }
}

TEST(S3UrlTest, BucketAndPrefix) {
  Result<S3Location> a = ParseS3Url("s3://ckpt");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bucket, "ckpt");
  EXPECT_EQ(a->prefix, "");
  Result<S3Location> b = ParseS3Url("s3://ckpt/team/run7/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bucket, "ckpt");
  EXPECT_EQ(b->prefix, "team/run7/");
  for (const char* bad : {"s3://", "s3:///p", "s3://b//p", "rados://p", "b", "s3://b?x"}) {
    EXPECT_EQ(ParseS3Url(bad).status().code(), EINVAL) << bad;
  }
}

// Keys from the environment first, else the credentials file's profile;
// none at all is EACCES.
TEST(S3CredentialsTest, EnvironmentThenProfile) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("ckptfs-aws-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/credentials") << "[default]\naws_access_key_id = AKD\n"
                                         "aws_secret_access_key = SKD\n[team]\n"
                                         "aws_access_key_id=AKT\naws_secret_access_key=SKT\n";
  std::ofstream(dir + "/config") << "[profile team]\nregion = eu-west-3\n";
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"}) {
    ::unsetenv(v);
  }
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir + "/credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", (dir + "/config").c_str(), 1);
  Result<S3Credentials> d = FindS3Credentials();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->access_key, "AKD");
  EXPECT_EQ(d->region, "us-east-1");
  ::setenv("AWS_PROFILE", "team", 1);
  Result<S3Credentials> t = FindS3Credentials();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->secret_key, "SKT");
  EXPECT_EQ(t->region, "eu-west-3");
  ::setenv("AWS_ACCESS_KEY_ID", "AKE", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "SKE", 1);
  Result<S3Credentials> e = FindS3Credentials();
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->access_key, "AKE");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir + "/missing").c_str(), 1);
  EXPECT_EQ(FindS3Credentials().status().code(), EACCES);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ckptfs::io
