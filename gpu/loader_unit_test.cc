// Unit tests of the loader without a mount: the xattr value (fs encoder and
// gpu parser together), copy merging, read planning, and the staging
// pipeline over segment files built here with format/format.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "format/format.h"
#include "fs/extents_xattr.h"
#include "gpu/file_layout.h"
#include "gpu/load_plan.h"
#include "gpu/loader.h"
#include "gpu/pipeline.h"
#include "gpu/safetensors.h"
#include "gpu/sink.h"
#include "gpu/test_util.h"

namespace ckptfs::gpu {
namespace {

namespace format = ::ckptfs::format;
using testing::CompressibleBytes;
using testing::RandomBytes;
using testing::TempDir;

// ---- base64 and the xattr pages ----

TEST(Base64, RoundTripsEveryLength) {
  for (size_t n = 0; n < 70; ++n) {
    const std::string data = RandomBytes(n, n);
    const std::string enc = fs::Base64Encode(data);
    EXPECT_EQ(enc.size() % 4, 0u);
    std::string dec;
    ASSERT_TRUE(Base64Decode(enc, &dec)) << n;
    EXPECT_EQ(dec, data) << n;
  }
  EXPECT_EQ(fs::Base64Encode("hello world\n"), "aGVsbG8gd29ybGQK");
}

TEST(Base64, RejectsMalformed) {
  std::string out;
  EXPECT_FALSE(Base64Decode("abc", &out));       // length
  EXPECT_FALSE(Base64Decode("ab=c", &out));      // data after padding
  EXPECT_FALSE(Base64Decode("a===", &out));      // too much padding
  EXPECT_FALSE(Base64Decode("ab!c", &out));      // alphabet
  EXPECT_FALSE(Base64Decode("ab==abcd", &out));  // padding before the end
  EXPECT_TRUE(Base64Decode("", &out));
}

engine::ExtentInfo RecordExtent(uint64_t off, uint32_t len, uint64_t seg, uint64_t rec) {
  engine::ExtentInfo x;
  x.file_offset = off;
  format::ExtentValue& e = x.value;
  e.length = len;
  e.segment_id = seg;
  e.record_offset = rec;
  e.stored_len = len + 10;
  e.raw_len = len + 10;
  e.codec = format::Codec::kNone;
  e.checksum = 0xfedcba9876543210ull ^ off;
  e.skip = 10;
  return x;
}

// A window at `off` of the data-file block that holds it: the block starts
// `skip` bytes earlier (byte N of the data file is byte N of the file).
engine::ExtentInfo DataFileExtent(uint64_t off, uint32_t len, uint32_t skip) {
  engine::ExtentInfo x;
  x.file_offset = off;
  format::ExtentValue& e = x.value;
  e.in_data_file = true;
  e.length = len;
  e.record_offset = off - skip;
  e.stored_len = e.raw_len = len + skip + 3;
  e.checksum = 0x8877665544332211ull ^ off;
  e.skip = skip;
  return x;
}

fs::ExtentsPageHeader Header(uint64_t size) {
  fs::ExtentsPageHeader h;
  h.ino = 42;
  h.size = size;
  h.mtime_ns = 1700000000123456789;
  h.ctime_ns = 1700000000223456789;
  h.segments_dir = "/store/with \"quotes\"/segments";
  h.data_dir = "/store/with \"quotes\"/data";
  h.coalesce_gap = 256 << 10;
  h.coalesce_max = 1 << 20;
  return h;
}

// Reads every page the way FetchLayout does, from EncodeExtentsPage.
Status ParseAllPages(const fs::ExtentsPageHeader& h, const std::vector<engine::ExtentInfo>& ex,
                     size_t budget, FileLayout* layout, std::vector<size_t>* page_sizes) {
  std::optional<uint64_t> from = 0;
  while (from) {
    const std::string page = fs::EncodeExtentsPage(h, ex, *from, budget);
    page_sizes->push_back(page.size());
    const uint64_t at = *from;
    CKPTFS_RETURN_IF_ERROR(ParseExtentsPage(page, at, at == 0, layout, &from));
  }
  return ValidateLayout(*layout);
}

TEST(ExtentsXattr, PagesRoundTripAndStayUnderTheBudget) {
  std::vector<engine::ExtentInfo> ex;
  uint64_t off = 0;
  engine::ExtentInfo in;
  in.file_offset = 0;
  in.value.length = 3000;
  in.value.is_inline = true;
  in.value.inline_data = RandomBytes(3000, 1);
  ex.push_back(in);
  off = 5000;  // a hole before
  for (int i = 0; i < 2000; ++i) {
    ex.push_back(RecordExtent(off, 1000 + i, 1 + i / 700, 32 + 2000ull * i));
    off += 1000 + i + (i % 3 == 0 ? 17 : 0);
  }
  for (int i = 0; i < 300; ++i) {  // the tail in the data file, some blocks windowed
    ex.push_back(DataFileExtent(off, 4096 - (i % 5), i % 3 == 1 ? 7 : 0));
    off += 4096 - (i % 5);
  }
  const fs::ExtentsPageHeader h = Header(off + 10);
  FileLayout layout;
  std::vector<size_t> sizes;
  ASSERT_TRUE(ParseAllPages(h, ex, fs::kExtentsPageBytes, &layout, &sizes).ok());
  EXPECT_GT(sizes.size(), 3u);
  for (size_t s : sizes) EXPECT_LE(s, fs::kExtentsPageBytes);
  EXPECT_EQ(layout.pages, static_cast<int>(sizes.size()));
  EXPECT_EQ(layout.ino, 42u);
  EXPECT_EQ(layout.size, h.size);
  EXPECT_EQ(layout.mtime_ns, h.mtime_ns);
  EXPECT_EQ(layout.segments_dir, h.segments_dir);
  EXPECT_EQ(layout.data_dir, h.data_dir);
  EXPECT_EQ(layout.coalesce_gap, h.coalesce_gap);
  EXPECT_EQ(layout.coalesce_max, h.coalesce_max);
  ASSERT_EQ(layout.extents.size(), ex.size());
  EXPECT_EQ(layout.extents[0].kind, LayoutExtent::Kind::kInline);
  EXPECT_EQ(layout.extents[0].value, in.value);
  for (size_t i = 1; i < ex.size(); ++i) {
    const LayoutExtent& l = layout.extents[i];
    ASSERT_EQ(l.kind, i <= 2000 ? LayoutExtent::Kind::kRecord : LayoutExtent::Kind::kDataFile);
    EXPECT_EQ(l.file_offset, ex[i].file_offset);
    EXPECT_EQ(l.value, ex[i].value);  // every field, through the JSON and back
  }
}

TEST(ExtentsXattr, InlineDataTooLargeForAPageIsOmitted) {
  engine::ExtentInfo in;
  in.value.length = 64 << 10;  // inline_max_bytes can reach 64 KiB; base64 of it cannot fit
  in.value.is_inline = true;
  in.value.inline_data = RandomBytes(in.value.length, 2);
  const std::vector<engine::ExtentInfo> ex = {in};
  FileLayout layout;
  std::vector<size_t> sizes;
  ASSERT_TRUE(
      ParseAllPages(Header(in.value.length), ex, fs::kExtentsPageBytes, &layout, &sizes).ok());
  ASSERT_EQ(layout.extents.size(), 1u);
  EXPECT_EQ(layout.extents[0].kind, LayoutExtent::Kind::kInlineOmitted);
  EXPECT_TRUE(layout.extents[0].value.is_inline);
  EXPECT_EQ(layout.extents[0].value.length, in.value.length);
  EXPECT_TRUE(layout.extents[0].value.inline_data.empty());

  // A smaller one that does not fit next to others moves to its own page.
  in.value.length = 30000;
  in.value.inline_data = RandomBytes(in.value.length, 3);
  std::vector<engine::ExtentInfo> two = {RecordExtent(0, 100, 1, 32), in};
  two[1].file_offset = 100;
  FileLayout l2;
  sizes.clear();
  // A budget where the inline extent fits alone but not after the record.
  const size_t alone = fs::EncodeExtentsPage(Header(30100), {two[1]}, 100, 1 << 20).size();
  ASSERT_TRUE(ParseAllPages(Header(30100), two, alone + 50, &l2, &sizes).ok());
  ASSERT_EQ(l2.extents.size(), 2u);
  EXPECT_EQ(sizes.size(), 2u);
  EXPECT_EQ(l2.extents[1].kind, LayoutExtent::Kind::kInline);
  EXPECT_EQ(l2.extents[1].value.inline_data, in.value.inline_data);
}

// The example of docs/GPU_LOAD.md, byte for byte.
TEST(ExtentsXattr, PageIsTheDocumentedFormat) {
  fs::ExtentsPageHeader h;
  h.ino = 2;
  h.size = 1048586;
  h.mtime_ns = h.ctime_ns = 1700000001250000000;
  h.segments_dir = "/data/store/segments";
  h.data_dir = "/data/store/data";
  h.coalesce_gap = 262144;
  h.coalesce_max = 1048576;
  engine::ExtentInfo a = RecordExtent(0, 1048576, 1, 32);
  a.value.stored_len = a.value.raw_len = 1048576;
  a.value.checksum = 0x9d8c6b0e5a1f2c33;
  a.value.skip = 0;
  engine::ExtentInfo b = RecordExtent(1048576, 10, 1, 1048656);
  b.value.stored_len = b.value.raw_len = 10;
  b.value.checksum = 0x0f1e2d3c4b5a6978;
  b.value.skip = 0;
  EXPECT_EQ(fs::EncodeExtentsPage(h, {a, b}, 0),
            R"({"version":1,"ino":2,"size":1048586,"mtime_ns":1700000001250000000,)"
            R"("ctime_ns":1700000001250000000,"segments_dir":"/data/store/segments",)"
            R"("data_dir":"/data/store/data",)"
            R"("coalesce_gap":262144,"coalesce_max":1048576,"from":0,)"
            R"("extents":[)"
            R"({"file_offset":0,"length":1048576,"segment_id":1,"record_offset":32,)"
            R"("record_stored_len":1048576,"record_raw_len":1048576,"codec":0,)"
            R"("payload_checksum":"9d8c6b0e5a1f2c33","skip":0},)"
            R"({"file_offset":1048576,"length":10,"segment_id":1,"record_offset":1048656,)"
            R"("record_stored_len":10,"record_raw_len":10,"codec":0,)"
            R"("payload_checksum":"0f1e2d3c4b5a6978","skip":0}],)"
            R"("next":null})");

  // Inline data, a window of a zstd record, and inline data listed without
  // its bytes (alone on a page too small for it).
  h.size = 8192;
  engine::ExtentInfo in;
  in.value.is_inline = true;
  in.value.length = 4;
  in.value.inline_data = "abcd";
  engine::ExtentInfo z = RecordExtent(4096, 4000, 7, 48);
  z.value.codec = format::Codec::kZstd;
  z.value.stored_len = 700;
  z.value.raw_len = 4096;
  z.value.skip = 96;
  z.value.checksum = 0xab;
  const std::string head =
      R"({"version":1,"ino":2,"size":8192,"mtime_ns":1700000001250000000,)"
      R"("ctime_ns":1700000001250000000,"segments_dir":"/data/store/segments",)"
      R"("data_dir":"/data/store/data",)"
      R"("coalesce_gap":262144,"coalesce_max":1048576,)";
  EXPECT_EQ(fs::EncodeExtentsPage(h, {in, z}, 0),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":"YWJjZA=="},)"
                   R"({"file_offset":4096,"length":4000,"segment_id":7,"record_offset":48,)"
                   R"("record_stored_len":700,"record_raw_len":4096,"codec":1,)"
                   R"("payload_checksum":"00000000000000ab","skip":96}],"next":null})");
  EXPECT_EQ(fs::EncodeExtentsPage(h, {in, z}, 0, head.size() + 40),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":null}],)"
                   R"("next":4096})");

  // A block of the data file, as the second example of docs/GPU_LOAD.md.
  h.size = 68157440;
  engine::ExtentInfo d = DataFileExtent(67108864, 1048576, 0);
  d.value.stored_len = d.value.raw_len = 1048576;
  d.value.checksum = 0x5be0c3a1f7d2e946;
  EXPECT_EQ(fs::EncodeExtentsPage(h, {d}, 0),
            R"({"version":1,"ino":2,"size":68157440,"mtime_ns":1700000001250000000,)"
            R"("ctime_ns":1700000001250000000,"segments_dir":"/data/store/segments",)"
            R"("data_dir":"/data/store/data",)"
            R"("coalesce_gap":262144,"coalesce_max":1048576,"from":0,"extents":[)"
            R"({"file_offset":67108864,"length":1048576,"data_file":true,)"
            R"("block_offset":67108864,"block_len":1048576,"checksum":"5be0c3a1f7d2e946",)"
            R"("skip":0}],"next":null})");
  FileLayout l;
  std::optional<uint64_t> next;
  ASSERT_TRUE(ParseExtentsPage(fs::EncodeExtentsPage(h, {d}, 0), 0, true, &l, &next).ok());
  ASSERT_TRUE(ValidateLayout(l).ok());
  EXPECT_EQ(l.data_dir, "/data/store/data");
  EXPECT_EQ(DataFilePath(l), "/data/store/data/00000002.dat");
  ASSERT_EQ(l.extents.size(), 1u);
  EXPECT_EQ(l.extents[0].kind, LayoutExtent::Kind::kDataFile);
  EXPECT_EQ(l.extents[0].value, d.value);
}

TEST(ExtentsXattr, EmptyFileIsOnePage) {
  FileLayout layout;
  std::vector<size_t> sizes;
  ASSERT_TRUE(ParseAllPages(Header(0), {}, fs::kExtentsPageBytes, &layout, &sizes).ok());
  EXPECT_EQ(sizes.size(), 1u);
  EXPECT_TRUE(layout.extents.empty());
}

TEST(ExtentsXattr, NamesOfTheFamily) {
  uint64_t from = 7;
  EXPECT_TRUE(fs::IsExtentsXattrName("user.ckptfs.extents"));
  EXPECT_TRUE(fs::IsExtentsXattrName("user.ckptfs.extents.123"));
  EXPECT_TRUE(fs::IsExtentsXattrName("user.ckptfs.extents.junk"));
  EXPECT_FALSE(fs::IsExtentsXattrName("user.ckptfs.extentsX"));
  EXPECT_FALSE(fs::IsExtentsXattrName("user.ckptfs.extent"));
  EXPECT_FALSE(fs::IsExtentsXattrName("user.other"));
  EXPECT_TRUE(fs::ParseExtentsXattrName("user.ckptfs.extents", &from));
  EXPECT_EQ(from, 0u);
  EXPECT_TRUE(fs::ParseExtentsXattrName("user.ckptfs.extents.1048576", &from));
  EXPECT_EQ(from, 1048576u);
  EXPECT_FALSE(fs::ParseExtentsXattrName("user.ckptfs.extents.junk", &from));
  EXPECT_FALSE(fs::ParseExtentsXattrName("user.ckptfs.extents.", &from));
  EXPECT_FALSE(fs::ParseExtentsXattrName("user.ckptfs.extents.-1", &from));
}

TEST(ExtentsXattr, ParserRejectsBadPages) {
  const std::vector<engine::ExtentInfo> ex = {RecordExtent(0, 100, 1, 32)};
  const std::string good = fs::EncodeExtentsPage(Header(100), ex, 0);
  std::optional<uint64_t> next;
  {
    FileLayout l;
    EXPECT_TRUE(ParseExtentsPage(good, 0, true, &l, &next).ok());
    EXPECT_FALSE(next.has_value());
  }
  auto bad = [&](const std::string& text, uint64_t from = 0) {
    FileLayout l;
    return ParseExtentsPage(text, from, true, &l, &next).code();
  };
  EXPECT_EQ(bad("not json"), EINVAL);
  EXPECT_EQ(bad("[]"), EINVAL);
  EXPECT_EQ(bad(good, 5), EINVAL);  // page does not start where asked
  std::string v2 = good;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  EXPECT_EQ(bad(v2), ENOTSUP);
  std::string no_sum = good;
  no_sum.replace(no_sum.find("\"payload_checksum\""), 18, "\"payload_chksum__\"");
  EXPECT_EQ(bad(no_sum), EINVAL);
  // No extent is longer than a record: a length wider than 32 bits is malformed.
  const std::string length100 = "\"length\":100,";
  std::string widest = good;
  widest.replace(widest.find(length100), length100.size(), "\"length\":4294967295,");
  {
    FileLayout l;
    ASSERT_TRUE(ParseExtentsPage(widest, 0, true, &l, &next).ok());
    EXPECT_EQ(l.extents.at(0).value.length, UINT32_MAX);
  }
  std::string wider = good;
  wider.replace(wider.find(length100), length100.size(), "\"length\":4294967296,");
  EXPECT_EQ(bad(wider), EINVAL);

  // Data-file extents: every field is needed, data_file is true, and a page
  // without data_dir (an older mount) lists none.
  const std::string dgood = fs::EncodeExtentsPage(Header(100), {DataFileExtent(0, 100, 0)}, 0);
  {
    FileLayout l;
    ASSERT_TRUE(ParseExtentsPage(dgood, 0, true, &l, &next).ok());
    EXPECT_TRUE(ValidateLayout(l).ok());
  }
  std::string no_block = dgood;
  no_block.replace(no_block.find("\"block_len\""), 11, "\"block_lem\"");
  EXPECT_EQ(bad(no_block), EINVAL);
  std::string not_true = dgood;
  not_true.replace(not_true.find("\"data_file\":true"), 16, "\"data_file\":0   ");
  EXPECT_EQ(bad(not_true), EINVAL);
  std::string no_dir = dgood;
  const size_t dir_at = no_dir.find(",\"data_dir\"");
  no_dir.erase(dir_at, no_dir.find(",\"coalesce_gap\"") - dir_at);
  {
    FileLayout l;
    ASSERT_TRUE(ParseExtentsPage(no_dir, 0, true, &l, &next).ok());
    EXPECT_TRUE(l.data_dir.empty());
    EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
    FileLayout r;
    ASSERT_TRUE(ParseExtentsPage(good, 0, true, &r, &next).ok());  // records need no data_dir
    r.data_dir.clear();
    EXPECT_TRUE(ValidateLayout(r).ok());
  }

  // A later page of a file that changed in between: EAGAIN.
  FileLayout l;
  l.ino = 42;
  l.size = 100;
  l.mtime_ns = 1;  // differs
  l.ctime_ns = Header(100).ctime_ns;
  EXPECT_EQ(ParseExtentsPage(good, 0, false, &l, &next).code(), EAGAIN);
}

TEST(ExtentsXattr, ValidateRejectsInconsistentLayouts) {
  FileLayout l;
  l.size = 1000;
  l.segments_dir = "/s";
  LayoutExtent a;
  a.file_offset = 0;
  a.value.length = 100;
  a.value.raw_len = a.value.stored_len = 200;
  l.extents = {a};
  EXPECT_TRUE(ValidateLayout(l).ok());
  LayoutExtent b = a;
  b.file_offset = 50;  // overlaps a
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  b.file_offset = 950;  // ends past the size
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  b.file_offset = 100;
  b.value.skip = 150;  // window leaves its record
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  b.value.skip = 0;
  b.value.codec = static_cast<format::Codec>(2);  // unknown
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  b.value.codec = format::Codec::kNone;
  b.value.stored_len = 10;  // uncompressed record with stored != raw
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  l.extents = {a};
  l.segments_dir = "relative";
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);

  // Data-file windows stay in their block, at their own offset.
  l.segments_dir = "/s";
  l.data_dir = "/d";
  LayoutExtent d;
  d.kind = LayoutExtent::Kind::kDataFile;
  d.file_offset = 300;
  d.value.in_data_file = true;
  d.value.length = 100;
  d.value.record_offset = 250;
  d.value.skip = 50;
  d.value.stored_len = d.value.raw_len = 200;
  l.extents = {a, d};
  EXPECT_TRUE(ValidateLayout(l).ok());
  LayoutExtent e = d;
  e.value.skip = 51;  // block_offset + skip != file_offset
  l.extents = {a, e};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  e = d;
  e.value.record_offset = 301;  // the block starts after the bytes it holds
  e.value.skip = 0;
  l.extents = {a, e};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  e = d;
  e.value.stored_len = e.value.raw_len = 149;  // window leaves the block
  l.extents = {a, e};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  e = d;
  e.value.raw_len = 300;  // a block is stored as it is
  l.extents = {a, e};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  l.extents = {a, d};
  l.data_dir = "relative";
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
}

// ---- copy merging ----

TEST(MergeCopies, GluesContiguousAndStridedCopies) {
  // Contiguous on both sides: one run.
  std::vector<CopyRun> r = MergeCopies({{0, 100, 10}, {10, 110, 5}, {15, 115, 1}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], (CopyRun{0, 100, 16, 1, 16, 16}));
  // Records behind 48-byte headers, packed in the destination: one 2-D run.
  std::vector<CopyOp> recs;
  for (uint64_t i = 0; i < 16; ++i) recs.push_back({48 + i * (1048 + 48), i * 1048, 1048});
  std::reverse(recs.begin(), recs.end());
  r = MergeCopies(recs);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], (CopyRun{48, 0, 1048, 16, 1096, 1048}));
  // A break in the pattern starts a new run.
  recs = {{0, 0, 10}, {20, 10, 10}, {40, 20, 10}, {55, 30, 10}};
  r = MergeCopies(recs);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].height, 3u);
  EXPECT_EQ(r[1], (CopyRun{55, 30, 10, 1, 10, 10}));
}

TEST(MergeCopies, MovesTheSameBytesAsTheCopies) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    // Disjoint copies from a 64 KiB staging buffer to a 64 KiB destination.
    std::vector<CopyOp> copies;
    uint64_t s = 0, d = 0;
    while (true) {
      const uint64_t len = 1 + rng() % 300;
      s += rng() % 3 == 0 ? 0 : rng() % 60;
      d += rng() % 2 == 0 ? 0 : rng() % 60;
      if (s + len > 65536 || d + len > 65536) break;
      copies.push_back({s, d, rng() % 4 == 0 ? 100 : len});
      s += copies.back().length;
      d += copies.back().length;
    }
    std::shuffle(copies.begin(), copies.end(), rng);
    const std::string staging = RandomBytes(65536 + 512, round);
    std::string want(65536 + 512, 'x'), got(65536 + 512, 'x');
    for (const CopyOp& c : copies) {
      std::memcpy(&want[c.dest_offset], &staging[c.staging_offset], c.length);
    }
    HostSink sink(got.data(), got.size());
    ASSERT_TRUE(sink.Submit(0, staging.data(), MergeCopies(copies), {}).ok());
    ASSERT_EQ(got, want) << round;
  }
}

// ---- read planning and the pipeline over hand-built segments ----

// The inode every hand-built record names.
constexpr uint64_t kFakeIno = 7;

// A store's segments directory built record by record, with the file
// contents the extents describe.
class FakeSegments {
 public:
  FakeSegments() : segdir_(dir_.path() + "/segments") {
    std::filesystem::create_directories(segdir_);
  }
  const std::string& dir() const { return segdir_; }

  // Appends a record of `data` to segment `seg` and returns an extent for
  // [skip, skip+len) of it at `file_offset`.
  LayoutExtent Add(uint64_t seg, const std::string& data, int level, uint64_t file_offset,
                   uint32_t skip = 0, uint64_t len = UINT64_MAX) {
    std::string& s = segs_[seg];
    if (s.empty()) s = format::EncodeSegmentHeader(seg);
    format::RecordHeader h;
    LayoutExtent x;
    x.kind = LayoutExtent::Kind::kRecord;
    x.file_offset = file_offset;
    format::ExtentValue& e = x.value;
    e.record_offset = s.size();
    s += format::BuildRecord(kFakeIno, file_offset - skip, data, level, &h);
    e.length = static_cast<uint32_t>(len == UINT64_MAX ? data.size() - skip : len);
    e.segment_id = seg;
    e.stored_len = h.stored_len;
    e.raw_len = h.raw_len;
    e.codec = h.codec;
    e.checksum = h.payload_checksum;
    e.skip = skip;
    return x;
  }
  // Dead bytes no extent refers to.
  void AddJunk(uint64_t seg, size_t n) {
    std::string& s = segs_[seg];
    if (s.empty()) s = format::EncodeSegmentHeader(seg);
    s += RandomBytes(n, n);
  }
  std::string& segment(uint64_t seg) { return segs_[seg]; }
  void Flush() {
    for (const auto& [id, bytes] : segs_) {
      const std::string name = std::filesystem::path(format::SegmentFileName(id)).filename();
      ASSERT_TRUE(testing::WriteFile(segdir_ + "/" + name, bytes));
    }
  }

 private:
  TempDir dir_;
  std::string segdir_;
  std::map<uint64_t, std::string> segs_;
};

// A file with every kind of extent, its expected bytes, and a plain copy of
// those (the source of "through the file" reads).
struct FakeFile {
  FakeSegments segs;
  FileLayout layout;
  std::string want;
  TempDir plain_dir;
  std::string plain_path;
};

void BuildFakeFile(FakeFile* f) {
  FileLayout& l = f->layout;
  l.ino = kFakeIno;
  std::string& want = f->want;
  auto put = [&](const LayoutExtent& x, const std::string& record_data) {
    l.extents.push_back(x);
    const format::ExtentValue& e = x.value;
    if (want.size() < x.file_offset + e.length) want.resize(x.file_offset + e.length, '\0');
    std::memcpy(&want[x.file_offset], record_data.data() + e.skip, e.length);
  };
  // Inline head.
  LayoutExtent in;
  in.kind = LayoutExtent::Kind::kInline;
  in.file_offset = 0;
  in.value.is_inline = true;
  in.value.length = 100;
  in.value.inline_data = RandomBytes(100, 11);
  put(in, in.value.inline_data);
  // A hole [100, 5000), then a whole raw 1 MiB record.
  uint64_t off = 5000;
  std::string d = RandomBytes(1 << 20, 12);
  put(f->segs.Add(1, d, 0, off), d);
  off += d.size();
  f->segs.AddJunk(1, 3000);  // dead bytes between records
  // A window of a raw record.
  d = RandomBytes(300000, 13);
  put(f->segs.Add(1, d, 0, off, 1000, 200000), d);
  off += 200000;
  // A whole zstd record, then a window of another.
  d = CompressibleBytes(1 << 20, 14);
  put(f->segs.Add(1, d, 3, off), d);
  off += d.size();
  d = CompressibleBytes(400000, 15);
  put(f->segs.Add(1, d, 3, off, 5000, 10000), d);
  off += 10000;
  // 40 small raw records back to back (coalescing, 2-D copies), and
  // compressed ones among them.
  for (int i = 0; i < 40; ++i) {
    d = i % 10 == 9 ? CompressibleBytes(3000, i) : RandomBytes(3000, 100 + i);
    put(f->segs.Add(2, d, i % 10 == 9 ? 3 : 0, off), d);
    off += d.size();
  }
  // Records written out of file order: later file bytes earlier in the segment.
  const std::string late = RandomBytes(70000, 16), early = RandomBytes(50000, 17);
  LayoutExtent el = f->segs.Add(3, late, 0, off + 50000);
  LayoutExtent ee = f->segs.Add(3, early, 0, off);
  put(ee, early);
  put(el, late);
  off += 120000;
  // A hole, then an inline extent too large for the xattr (read through the file).
  off += 77777;
  LayoutExtent om;
  om.kind = LayoutExtent::Kind::kInlineOmitted;
  om.file_offset = off;
  om.value.is_inline = true;
  om.value.length = 40000;
  const std::string om_data = RandomBytes(40000, 18);
  put(om, om_data);
  off += 40000;
  // A hole at the end of the file.
  l.size = off + 12345;
  want.resize(l.size, '\0');
  l.segments_dir = f->segs.dir();
  ASSERT_TRUE(ValidateLayout(l).ok());
  f->segs.Flush();
  f->plain_path = f->plain_dir.path() + "/file";
  ASSERT_TRUE(testing::WriteFile(f->plain_path, want));
}

// Runs a direct plan for `ranges` into a host buffer of `dest_size` ('?'
// where nothing is written).
Status RunDirect(const FakeFile& f, const std::vector<Range>& ranges, const PlanSettings& ps,
                 const PipelineOptions& po, uint64_t dest_size, std::string* out,
                 LoadPlan* plan_out = nullptr) {
  out->assign(dest_size, '?');
  CKPTFS_RETURN_IF_ERROR(CheckRanges(ranges, f.layout.size, dest_size));
  LoadPlan plan = PlanDirect(f.layout, ranges, ps);
  PlanSources src;
  std::vector<std::unique_ptr<io::File>> files;
  auto open = [&](const std::string& p) -> Status {
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file,
                            io::Env::Posix()->Open(p, io::OpenMode::kRead));
    files.push_back(std::move(file));
    return Status::OK();
  };
  CKPTFS_RETURN_IF_ERROR(open(f.plain_path));
  src.file = files.back().get();
  for (uint64_t id : plan.segment_ids) {
    CKPTFS_RETURN_IF_ERROR(open(f.layout.segments_dir + "/" +
                                std::filesystem::path(format::SegmentFileName(id)).filename().string()));
    src.segments.push_back(files.back().get());
  }
  if (plan.reads_data_file) {
    CKPTFS_RETURN_IF_ERROR(open(DataFilePath(f.layout)));
    src.data_file = files.back().get();
  }
  HostSink sink(out->data(), out->size());
  Status st = RunPipeline(plan, src, &sink, po);
  if (plan_out) *plan_out = std::move(plan);
  return st;
}

// Thirty rounds of up to `max_ranges` random ranges of `f` (mostly up to
// `max_len` bytes, a third under 100) loaded by the direct pipeline into one
// destination with gaps: every byte lands where its range says.
void ExpectRandomRangesLand(const FakeFile& f, uint64_t seed, int max_ranges, uint64_t max_len) {
  std::mt19937_64 rng(seed);
  const uint64_t size = f.layout.size;
  for (int round = 0; round < 30; ++round) {
    std::vector<Range> ranges;
    uint64_t dest = rng() % 7;
    const int n = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_ranges));
    for (int i = 0; i < n; ++i) {
      const uint64_t a = rng() % size;
      const uint64_t len =
          std::min<uint64_t>(size - a, rng() % 3 == 0 ? rng() % 100 : rng() % max_len);
      ranges.push_back(Range{a, len, dest});
      dest += len + rng() % 5;
    }
    std::string got;
    Status st = RunDirect(f, ranges, PlanSettings{1 << 20, 64 << 10, 1 << 20},
                          PipelineOptions{3, 2}, dest, &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::string want(dest, '?');
    for (const Range& r : ranges)
      want.replace(r.dest_offset, r.length, f.want.substr(r.file_offset, r.length));
    ASSERT_TRUE(got == want) << "round " << round;
  }
}

class DirectPipeline : public ::testing::Test {
 protected:
  void SetUp() override { BuildFakeFile(&f_); }
  FakeFile f_;
};

TEST_F(DirectPipeline, WholeFileUnderManySettings) {
  struct Case {
    uint64_t buffer;
    uint64_t gap, max;
    int buffers, readers;
  };
  const Case cases[] = {
      {16 << 20, 256 << 10, 1 << 20, 4, 2},  // the defaults
      {16 << 20, 0, 0, 4, 2},                // coalescing off
      {16 << 20, 1 << 20, 16 << 20, 4, 2},   // large merged reads
      {1 << 20, 4096, 1 << 20, 1, 1},        // one buffer, one reader
      {300000, 64 << 10, 256 << 10, 3, 4},   // small buffers: grown to a record, split reads
      {4096, 1 << 20, 1 << 20, 2, 3},        // buffers smaller than records
  };
  for (const Case& c : cases) {
    std::string got;
    LoadPlan plan;
    Status st = RunDirect(f_, {Range{0, f_.layout.size, 0}}, PlanSettings{c.buffer, c.gap, c.max},
                          PipelineOptions{c.buffers, c.readers}, f_.layout.size, &got, &plan);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(got == f_.want) << "buffer " << c.buffer << " gap " << c.gap << " max " << c.max;
    EXPECT_GE(plan.buffer_bytes, c.buffer);
    EXPECT_EQ(plan.records, 46u);
    EXPECT_EQ(plan.compressed_records, 6u);
    EXPECT_EQ(plan.inline_bytes, 100u + 40000u);
    EXPECT_GT(plan.hole_bytes, 4900u + 77777u + 12345u - 1);
    if (c.gap == 0) {
      EXPECT_EQ(plan.backing_reads, 46u + 1u);  // one per record, one through the file
    }
    if (c.gap >= (1u << 20) && c.max >= (16u << 20)) {
      EXPECT_LT(plan.backing_reads, 10u);
    }
  }
}

TEST_F(DirectPipeline, RandomRangesLandAtTheirDestinations) {
  ExpectRandomRangesLand(f_, 99, 12, 600000);
}

TEST_F(DirectPipeline, RangesOutsideTheFileOrDestinationAreRefused) {
  std::string got;
  EXPECT_EQ(RunDirect(f_, {Range{f_.layout.size - 1, 2, 0}}, {}, {}, 10, &got).code(), EINVAL);
  EXPECT_EQ(RunDirect(f_, {Range{0, 11, 0}}, {}, {}, 10, &got).code(), EINVAL);
  EXPECT_EQ(RunDirect(f_, {Range{0, 5, 6}}, {}, {}, 10, &got).code(), EINVAL);
  EXPECT_TRUE(RunDirect(f_, {Range{0, 5, 5}, Range{f_.layout.size, 0, 10}}, {}, {}, 10, &got).ok());
}

// Flips one byte of segment `seg` at `pos` in the file.
void FlipByte(const FakeFile& f, uint64_t seg, uint64_t pos) {
  const std::string p = f.layout.segments_dir + "/" +
                        std::filesystem::path(format::SegmentFileName(seg)).filename().string();
  int fd = open(p.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(pread(fd, &c, 1, pos), 1);
  c ^= 0x20;
  ASSERT_EQ(pwrite(fd, &c, 1, pos), 1);
  close(fd);
}

TEST_F(DirectPipeline, CorruptPayloadIsAChecksumError) {
  const format::ExtentValue& raw = f_.layout.extents[1].value;  // the raw 1 MiB record
  FlipByte(f_, raw.segment_id, raw.record_offset + format::kRecordHeaderSize + 777);
  std::string got;
  Status st = RunDirect(f_, {Range{0, f_.layout.size, 0}}, {}, {}, f_.layout.size, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("record payload checksum mismatch"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("00000001.seg"), std::string::npos) << st.ToString();
  // Bytes elsewhere still load.
  EXPECT_TRUE(RunDirect(f_, {Range{0, 100, 0}}, {}, {}, 100, &got).ok());
}

TEST_F(DirectPipeline, CorruptCompressedPayloadIsAChecksumError) {
  const LayoutExtent& z = f_.layout.extents[3];
  ASSERT_EQ(z.value.codec, format::Codec::kZstd);
  FlipByte(f_, z.value.segment_id, z.value.record_offset + format::kRecordHeaderSize + 5);
  std::string got;
  Status st =
      RunDirect(f_, {Range{z.file_offset, z.value.length, 0}}, {}, {}, z.value.length, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.ToString();
}

TEST_F(DirectPipeline, CorruptHeaderIsReported) {
  const LayoutExtent& raw = f_.layout.extents[1];
  FlipByte(f_, raw.value.segment_id, raw.value.record_offset + 20);
  std::string got;
  Status st = RunDirect(f_, {Range{raw.file_offset, 10, 0}}, {}, {}, 10, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("record header checksum mismatch"), std::string::npos)
      << st.ToString();
}

TEST_F(DirectPipeline, RecordThatDoesNotMatchTheIndexIsReported) {
  f_.layout.extents[1].value.checksum ^= 1;
  std::string got;
  Status st = RunDirect(f_, {Range{f_.layout.extents[1].file_offset, 10, 0}}, {}, {}, 10, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("payload checksum"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("in the extent"), std::string::npos) << st.ToString();
}

// A record of another file, or of another place in this one, is not this
// extent's data even though its checksums are right.
TEST_F(DirectPipeline, RecordOfAnotherFileOrOffsetIsReported) {
  const uint64_t at = f_.layout.extents[1].file_offset;
  std::string got;
  f_.layout.ino += 1;
  Status st = RunDirect(f_, {Range{at, 10, 0}}, {}, {}, 10, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("inode"), std::string::npos) << st.ToString();
  f_.layout.ino -= 1;
  f_.layout.extents[1].value.skip += 1;  // the window now claims the record starts a byte later
  st = RunDirect(f_, {Range{at, 10, 0}}, {}, {}, 10, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("file offset"), std::string::npos) << st.ToString();
}

TEST_F(DirectPipeline, TruncatedSegmentIsReported) {
  const LayoutExtent& last = f_.layout.extents[f_.layout.extents.size() - 2];  // in segment 3
  std::string& s = f_.segs.segment(last.value.segment_id);
  s.resize(s.size() - 10);
  f_.segs.Flush();
  std::string got;
  Status st = RunDirect(f_, {Range{0, f_.layout.size, 0}}, {}, {}, f_.layout.size, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("ends at"), std::string::npos) << st.ToString();
}

// ---- data files ----

// A file past data_file_bytes, as the engine leaves it: its bytes in its
// data file (byte N at offset N) in blocks of at most 1 MiB, one of them
// partly overwritten by a segment record, a hole in the middle (absent from
// the data file too) and one at the end.
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kOverwriteAt = kMiB + kMiB / 2, kOverwriteLen = 1000;
constexpr uint64_t kLastBlockAt = 3 * kMiB + 8192, kLastBlockLen = 500;

void BuildDataFileFake(FakeFile* f) {
  FileLayout& l = f->layout;
  l.ino = kFakeIno;
  l.segments_dir = f->segs.dir();
  l.data_dir = std::filesystem::path(f->segs.dir()).parent_path().string() + "/data";
  std::filesystem::create_directories(l.data_dir);
  std::string data_file(kLastBlockAt + kLastBlockLen, '\0');
  auto block = [&](uint64_t at, uint64_t len, uint64_t skip, uint64_t window) {
    LayoutExtent x;
    x.kind = LayoutExtent::Kind::kDataFile;
    x.file_offset = at + skip;
    x.value.in_data_file = true;
    x.value.record_offset = at;
    x.value.stored_len = x.value.raw_len = static_cast<uint32_t>(len);
    x.value.skip = static_cast<uint32_t>(skip);
    x.value.length = static_cast<uint32_t>(window);
    x.value.checksum = format::Checksum(std::string_view(data_file).substr(at, len));
    return x;
  };
  const std::string bytes = RandomBytes(3 * kMiB, 21);
  data_file.replace(0, bytes.size(), bytes);
  data_file.replace(kLastBlockAt, kLastBlockLen, RandomBytes(kLastBlockLen, 22));
  f->want = data_file;
  l.extents.push_back(block(0, kMiB, 0, kMiB));
  // Block 1 with [kOverwriteAt, +kOverwriteLen) overwritten in a segment.
  l.extents.push_back(block(kMiB, kMiB, 0, kOverwriteAt - kMiB));
  const std::string over = RandomBytes(kOverwriteLen, 23);
  l.extents.push_back(f->segs.Add(1, over, 0, kOverwriteAt));
  f->want.replace(kOverwriteAt, kOverwriteLen, over);
  const uint64_t after = kOverwriteAt + kOverwriteLen;
  l.extents.push_back(block(kMiB, kMiB, after - kMiB, 2 * kMiB - after));
  l.extents.push_back(block(2 * kMiB, kMiB, 0, kMiB));
  l.extents.push_back(block(kLastBlockAt, kLastBlockLen, 0, kLastBlockLen));
  l.size = kLastBlockAt + kLastBlockLen + 4000;
  f->want.resize(l.size, '\0');
  ASSERT_TRUE(ValidateLayout(l).ok()) << ValidateLayout(l).ToString();
  f->segs.Flush();
  ASSERT_TRUE(testing::WriteFile(DataFilePath(l), data_file));
  f->plain_path = f->plain_dir.path() + "/file";
  ASSERT_TRUE(testing::WriteFile(f->plain_path, f->want));
}

class DataFilePipeline : public ::testing::Test {
 protected:
  void SetUp() override { BuildDataFileFake(&f_); }
  // Flips one byte of the data file at `pos`.
  void FlipDataFileByte(uint64_t pos) {
    ASSERT_TRUE(testing::FlipByte(DataFilePath(f_.layout), pos, 0x20));
  }
  FakeFile f_;
};

TEST_F(DataFilePipeline, WholeFileUnderManySettings) {
  struct Case {
    uint64_t buffer;
    uint64_t gap, max;
    int buffers, readers;
  };
  const Case cases[] = {
      {16 << 20, 256 << 10, 1 << 20, 4, 2},  // the defaults
      {16 << 20, 0, 0, 4, 2},                // coalescing off
      {16 << 20, 1 << 20, 16 << 20, 4, 2},   // blocks merged into large reads
      {300000, 64 << 10, 256 << 10, 3, 4},   // buffers grown to a block
      {4096, 1 << 20, 1 << 20, 1, 1},        // one buffer smaller than a block
  };
  for (const Case& c : cases) {
    std::string got;
    LoadPlan plan;
    Status st = RunDirect(f_, {Range{0, f_.layout.size, 0}}, PlanSettings{c.buffer, c.gap, c.max},
                          PipelineOptions{c.buffers, c.readers}, f_.layout.size, &got, &plan);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(got == f_.want) << "buffer " << c.buffer << " gap " << c.gap << " max " << c.max;
    EXPECT_TRUE(plan.reads_data_file);
    EXPECT_EQ(plan.data_file_blocks, 4u);  // block 1 once, for both of its windows
    EXPECT_EQ(plan.records, 1u);
    EXPECT_EQ(plan.compressed_records, 0u);
    EXPECT_GE(plan.buffer_bytes, kMiB);
    EXPECT_EQ(plan.hole_bytes, 8192u + 4000u);
    if (c.gap == 0) EXPECT_EQ(plan.backing_reads, 4u + 1u);
    if (c.max >= (16u << 20)) EXPECT_EQ(plan.backing_reads, 1u + 1u);  // every block, the record
  }
}

TEST_F(DataFilePipeline, RandomRangesLandAtTheirDestinations) {
  ExpectRandomRangesLand(f_, 7, 8, 1500000);
}

// A flipped byte anywhere in a block fails every read of the block, even one
// that uses none of the flipped byte's window (the block is checked whole).
TEST_F(DataFilePipeline, CorruptBlockIsAChecksumErrorNamingItsBytes) {
  FlipDataFileByte(kOverwriteAt + 10);  // under the segment record, inside block 1
  std::string got;
  for (uint64_t at : {kMiB + 5, kOverwriteAt + kOverwriteLen + 5}) {
    Status st = RunDirect(f_, {Range{at, 10, 0}}, {}, {}, 10, &got);
    EXPECT_EQ(st.code(), EIO);
    EXPECT_NE(st.message().find("data file bytes [1048576, 2097152): checksum mismatch"),
              std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("00000007.dat"), std::string::npos) << st.ToString();
  }
  // The overwritten bytes come from the segment, the other blocks check.
  EXPECT_TRUE(
      RunDirect(f_, {Range{kOverwriteAt, kOverwriteLen, 0}}, {}, {}, kOverwriteLen, &got).ok());
  EXPECT_EQ(got, f_.want.substr(kOverwriteAt, kOverwriteLen));
  EXPECT_TRUE(RunDirect(f_, {Range{2 * kMiB, 100, 0}}, {}, {}, 100, &got).ok());
}

TEST_F(DataFilePipeline, BlockThatDoesNotMatchTheIndexIsReported) {
  f_.layout.extents[0].value.checksum ^= 1;
  std::string got;
  Status st = RunDirect(f_, {Range{0, 10, 0}}, {}, {}, 10, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("data file bytes [0, 1048576): checksum mismatch"), std::string::npos)
      << st.ToString();
}

TEST_F(DataFilePipeline, TruncatedDataFileIsReported) {
  ASSERT_EQ(truncate(DataFilePath(f_.layout).c_str(), kLastBlockAt + 100), 0);
  std::string got;
  Status st = RunDirect(f_, {Range{0, f_.layout.size, 0}}, {}, {}, f_.layout.size, &got);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find("data file"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("ends at"), std::string::npos) << st.ToString();
}

TEST_F(DataFilePipeline, PlanWithoutItsDataFileIsRefused) {
  const LoadPlan plan = PlanDirect(f_.layout, {Range{0, 100, 0}}, {});
  ASSERT_TRUE(plan.reads_data_file);
  std::string got(100, '?');
  HostSink sink(got.data(), got.size());
  EXPECT_EQ(RunPipeline(plan, PlanSources{}, &sink, {}).code(), EINVAL);
}

TEST(ThroughFile, PlainFileLoadsThroughItsPath) {
  TempDir dir;
  const std::string path = dir.path() + "/plain";
  const std::string data = RandomBytes((5 << 20) + 12345, 5);
  ASSERT_TRUE(testing::WriteFile(path, data));
  LoadOptions o;
  o.buffer_bytes = 1 << 20;
  o.buffers = 3;
  auto f = SourceFile::Open(path, o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE((*f)->direct());
  EXPECT_NE((*f)->fallback_reason().find("not on a ckptfs mount"), std::string::npos);
  std::string got(data.size(), '?');
  HostSink sink(got.data(), got.size());
  auto s = (*f)->LoadAll(&sink);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->direct);
  EXPECT_EQ(s->bytes, data.size());
  EXPECT_EQ(s->backing_reads, 6u);
  EXPECT_TRUE(got == data);

  // Ranges, into a second destination through the same sink.
  std::string part(300, '?');
  sink.SetDestination(part.data(), part.size());
  s = (*f)->Load({Range{10, 100, 200}, Range{(5 << 20) + 12000, 345, 0}}, &sink);
  ASSERT_FALSE(s.ok());  // 345 bytes at dest 0 overlap nothing but 0+345 > 300: refused
  EXPECT_EQ(s.status().code(), EINVAL);
  s = (*f)->Load({Range{10, 100, 200}, Range{(5 << 20) + 12000, 150, 0}}, &sink);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(part.substr(200), data.substr(10, 100));
  EXPECT_EQ(part.substr(0, 150), data.substr((5 << 20) + 12000, 150));
  EXPECT_EQ(part.substr(150, 50), std::string(50, '?'));

  // The file shrinking under the loader is an error, not zeros.
  ASSERT_EQ(truncate(path.c_str(), 1000), 0);
  sink.SetDestination(got.data(), got.size());
  s = (*f)->LoadAll(&sink);
  EXPECT_EQ(s.status().code(), EIO);
}

TEST(ThroughFile, OpenErrors) {
  EXPECT_EQ(SourceFile::Open("/nonexistent/file").status().code(), ENOENT);
  EXPECT_EQ(SourceFile::Open("/tmp").status().code(), EINVAL);
}

// ---- safetensors ----

TEST(Safetensors, ParsesAndChecksHeaders) {
  using testing::BuildSafetensors;
  using testing::TestTensor;
  const std::string file = BuildSafetensors(
      {TestTensor{"b", "F32", {2, 3}, RandomBytes(24, 1)},
       TestTensor{"a", "BF16", {5}, RandomBytes(10, 2)},
       TestTensor{"scalar", "I64", {}, RandomBytes(8, 3)}, TestTensor{"empty", "F16", {0, 4}, ""},
       TestTensor{"odd", "X_UNKNOWN", {3}, RandomBytes(7, 4)}},
      {{"format", "pt"}});
  const uint64_t n = format::GetLE64(file.data());
  auto h = ParseSafetensorsHeader(std::string_view(file).substr(8, n), file.size() - 8 - n);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data_offset, 8 + n);
  EXPECT_EQ(h->data_bytes, 24u + 10 + 8 + 7);
  ASSERT_EQ(h->tensors.size(), 5u);
  EXPECT_EQ(h->tensors[0].name, "b");
  EXPECT_EQ(h->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->tensors[1].name, "a");
  EXPECT_EQ(h->tensors[1].dtype, "BF16");
  EXPECT_EQ(h->metadata.at("format"), "pt");

  auto parse = [](const std::string& json, uint64_t data = 1000) {
    return ParseSafetensorsHeader(json, data).status().code();
  };
  EXPECT_EQ(parse("{"), EINVAL);
  EXPECT_EQ(parse("[]"), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), 0);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})"), EINVAL);
  EXPECT_EQ(parse(R"({"t":{"shape":[2],"data_offsets":[0,8]}})"), EINVAL);
  EXPECT_EQ(parse(R"({"__metadata__":{"k":1}})"), EINVAL);
  EXPECT_EQ(
      parse(
          R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})"),
      EINVAL);
}

TEST(Safetensors, LoadsAPlainFileIntoHostMemory) {
  using testing::TestTensor;
  TempDir dir;
  const std::string path = dir.path() + "/m.safetensors";
  const std::vector<TestTensor> tensors = {
      TestTensor{"w", "F32", {1024, 300}, RandomBytes(1228800, 1)},
      TestTensor{"b", "U8", {3}, "xyz"}};
  ASSERT_TRUE(testing::WriteFile(path, testing::BuildSafetensors(tensors)));
  auto st = LoadSafetensors(path, -1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const LoadedSafetensors& l = **st;
  EXPECT_EQ(l.device(), -1);
  ASSERT_EQ(l.tensors().size(), 2u);
  EXPECT_EQ(std::string(static_cast<char*>(l.data(0)), 1228800), tensors[0].data);
  EXPECT_EQ(std::string(static_cast<char*>(l.data(1)), 3), "xyz");
  EXPECT_FALSE(l.stats().direct);

  ASSERT_TRUE(testing::WriteFile(path, "\xff\xff\xff\xff\xff\xff\xff\x7f{}"));
  EXPECT_EQ(LoadSafetensors(path, -1).status().code(), EINVAL);
  ASSERT_TRUE(testing::WriteFile(path, "abc"));
  EXPECT_EQ(LoadSafetensors(path, -1).status().code(), EINVAL);
}

}  // namespace
}  // namespace ckptfs::gpu
