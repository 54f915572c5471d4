#include "format/extents_attr.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace ckptfs::format {
namespace {

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}


TEST(Base64, RoundTripsEveryLength) {
  for (size_t n = 0; n < 70; ++n) {
    const std::string data = RandomBytes(n, n);
    const std::string enc = Base64Encode(data);
    EXPECT_EQ(enc.size() % 4, 0u);
    std::string dec;
    ASSERT_TRUE(Base64Decode(enc, &dec)) << n;
    EXPECT_EQ(dec, data) << n;
  }
  EXPECT_EQ(Base64Encode("hello world\n"), "aGVsbG8gd29ybGQK");
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

FileExtent RecordExtent(uint64_t off, uint32_t len, uint64_t seg, uint64_t rec) {
  FileExtent x;
  x.file_offset = off;
  ExtentValue& e = x.value;
  e.length = len;
  e.segment_id = seg;
  e.record_offset = rec;
  e.stored_len = len + 10;
  e.raw_len = len + 10;
  e.codec = Codec::kNone;
  e.checksum = 0xfedcba9876543210ull ^ off;
  e.skip = 10;
  return x;
}

// A window at `off` of the data-file block that holds it: the block starts
// `skip` bytes earlier (byte N of the data file is byte N of the file).
FileExtent DataFileExtent(uint64_t off, uint32_t len, uint32_t skip) {
  FileExtent x;
  x.file_offset = off;
  ExtentValue& e = x.value;
  e.in_data_file = true;
  e.length = len;
  e.record_offset = off - skip;
  e.stored_len = e.raw_len = len + skip + 3;
  e.checksum = 0x8877665544332211ull ^ off;
  e.skip = skip;
  return x;
}

ExtentsPageHeader Header(uint64_t size) {
  ExtentsPageHeader h;
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
Status ParseAllPages(const ExtentsPageHeader& h, const std::vector<FileExtent>& ex,
                     size_t budget, FileLayout* layout, std::vector<size_t>* page_sizes) {
  std::optional<uint64_t> from = 0;
  while (from) {
    const std::string page = EncodeExtentsPage(h, ex, *from, budget);
    page_sizes->push_back(page.size());
    const uint64_t at = *from;
    CKPTFS_RETURN_IF_ERROR(ParseExtentsPage(page, at, at == 0, layout, &from));
  }
  return ValidateLayout(*layout);
}

TEST(ExtentsXattr, PagesRoundTripAndStayUnderTheBudget) {
  std::vector<FileExtent> ex;
  uint64_t off = 0;
  FileExtent in;
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
  const ExtentsPageHeader h = Header(off + 10);
  FileLayout layout;
  std::vector<size_t> sizes;
  ASSERT_TRUE(ParseAllPages(h, ex, kExtentsPageBytes, &layout, &sizes).ok());
  EXPECT_GT(sizes.size(), 3u);
  for (size_t s : sizes) EXPECT_LE(s, kExtentsPageBytes);
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
  FileExtent in;
  in.value.length = 64 << 10;  // inline_max can reach 64 KiB; base64 of it cannot fit
  in.value.is_inline = true;
  in.value.inline_data = RandomBytes(in.value.length, 2);
  const std::vector<FileExtent> ex = {in};
  FileLayout layout;
  std::vector<size_t> sizes;
  ASSERT_TRUE(
      ParseAllPages(Header(in.value.length), ex, kExtentsPageBytes, &layout, &sizes).ok());
  ASSERT_EQ(layout.extents.size(), 1u);
  EXPECT_EQ(layout.extents[0].kind, LayoutExtent::Kind::kInlineOmitted);
  EXPECT_TRUE(layout.extents[0].value.is_inline);
  EXPECT_EQ(layout.extents[0].value.length, in.value.length);
  EXPECT_TRUE(layout.extents[0].value.inline_data.empty());

  // A smaller one that does not fit next to others moves to its own page.
  in.value.length = 30000;
  in.value.inline_data = RandomBytes(in.value.length, 3);
  std::vector<FileExtent> two = {RecordExtent(0, 100, 1, 32), in};
  two[1].file_offset = 100;
  FileLayout l2;
  sizes.clear();
  // A budget where the inline extent fits alone but not after the record.
  const size_t alone = EncodeExtentsPage(Header(30100), {two[1]}, 100, 1 << 20).size();
  ASSERT_TRUE(ParseAllPages(Header(30100), two, alone + 50, &l2, &sizes).ok());
  ASSERT_EQ(l2.extents.size(), 2u);
  EXPECT_EQ(sizes.size(), 2u);
  EXPECT_EQ(l2.extents[1].kind, LayoutExtent::Kind::kInline);
  EXPECT_EQ(l2.extents[1].value.inline_data, in.value.inline_data);
}

// The example of docs/GPU_LOAD.md, byte for byte.
TEST(ExtentsXattr, PageIsTheDocumentedFormat) {
  ExtentsPageHeader h;
  h.ino = 2;
  h.size = 1048586;
  h.mtime_ns = h.ctime_ns = 1700000001250000000;
  h.segments_dir = "/data/store/segments";
  h.data_dir = "/data/store/data";
  h.coalesce_gap = 262144;
  h.coalesce_max = 1048576;
  FileExtent a = RecordExtent(0, 1048576, 1, 32);
  a.value.stored_len = a.value.raw_len = 1048576;
  a.value.checksum = 0x9d8c6b0e5a1f2c33;
  a.value.skip = 0;
  FileExtent b = RecordExtent(1048576, 10, 1, 1048656);
  b.value.stored_len = b.value.raw_len = 10;
  b.value.checksum = 0x0f1e2d3c4b5a6978;
  b.value.skip = 0;
  EXPECT_EQ(EncodeExtentsPage(h, {a, b}, 0),
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
  FileExtent in;
  in.value.is_inline = true;
  in.value.length = 4;
  in.value.inline_data = "abcd";
  FileExtent z = RecordExtent(4096, 4000, 7, 48);
  z.value.codec = Codec::kZstd;
  z.value.stored_len = 700;
  z.value.raw_len = 4096;
  z.value.skip = 96;
  z.value.checksum = 0xab;
  const std::string head =
      R"({"version":1,"ino":2,"size":8192,"mtime_ns":1700000001250000000,)"
      R"("ctime_ns":1700000001250000000,"segments_dir":"/data/store/segments",)"
      R"("data_dir":"/data/store/data",)"
      R"("coalesce_gap":262144,"coalesce_max":1048576,)";
  EXPECT_EQ(EncodeExtentsPage(h, {in, z}, 0),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":"YWJjZA=="},)"
                   R"({"file_offset":4096,"length":4000,"segment_id":7,"record_offset":48,)"
                   R"("record_stored_len":700,"record_raw_len":4096,"codec":1,)"
                   R"("payload_checksum":"00000000000000ab","skip":96}],"next":null})");
  EXPECT_EQ(EncodeExtentsPage(h, {in, z}, 0, head.size() + 40),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":null}],)"
                   R"("next":4096})");

  // A block of the data file, as the second example of docs/GPU_LOAD.md.
  h.size = 68157440;
  FileExtent d = DataFileExtent(67108864, 1048576, 0);
  d.value.stored_len = d.value.raw_len = 1048576;
  d.value.checksum = 0x5be0c3a1f7d2e946;
  EXPECT_EQ(EncodeExtentsPage(h, {d}, 0),
            R"({"version":1,"ino":2,"size":68157440,"mtime_ns":1700000001250000000,)"
            R"("ctime_ns":1700000001250000000,"segments_dir":"/data/store/segments",)"
            R"("data_dir":"/data/store/data",)"
            R"("coalesce_gap":262144,"coalesce_max":1048576,"from":0,"extents":[)"
            R"({"file_offset":67108864,"length":1048576,"data_file":true,)"
            R"("block_offset":67108864,"block_len":1048576,"checksum":"5be0c3a1f7d2e946",)"
            R"("skip":0}],"next":null})");
  FileLayout l;
  std::optional<uint64_t> next;
  ASSERT_TRUE(ParseExtentsPage(EncodeExtentsPage(h, {d}, 0), 0, true, &l, &next).ok());
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
  ASSERT_TRUE(ParseAllPages(Header(0), {}, kExtentsPageBytes, &layout, &sizes).ok());
  EXPECT_EQ(sizes.size(), 1u);
  EXPECT_TRUE(layout.extents.empty());
}

TEST(ExtentsXattr, NamesOfTheFamily) {
  uint64_t from = 7;
  EXPECT_TRUE(IsExtentsXattrName("user.ckptfs.extents"));
  EXPECT_TRUE(IsExtentsXattrName("user.ckptfs.extents.123"));
  EXPECT_TRUE(IsExtentsXattrName("user.ckptfs.extents.junk"));
  EXPECT_FALSE(IsExtentsXattrName("user.ckptfs.extentsX"));
  EXPECT_FALSE(IsExtentsXattrName("user.ckptfs.extent"));
  EXPECT_FALSE(IsExtentsXattrName("user.other"));
  EXPECT_TRUE(ParseExtentsXattrName("user.ckptfs.extents", &from));
  EXPECT_EQ(from, 0u);
  EXPECT_TRUE(ParseExtentsXattrName("user.ckptfs.extents.1048576", &from));
  EXPECT_EQ(from, 1048576u);
  EXPECT_FALSE(ParseExtentsXattrName("user.ckptfs.extents.junk", &from));
  EXPECT_FALSE(ParseExtentsXattrName("user.ckptfs.extents.", &from));
  EXPECT_FALSE(ParseExtentsXattrName("user.ckptfs.extents.-1", &from));
}

TEST(ExtentsXattr, ParserRejectsBadPages) {
  const std::vector<FileExtent> ex = {RecordExtent(0, 100, 1, 32)};
  const std::string good = EncodeExtentsPage(Header(100), ex, 0);
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
  const std::string dgood = EncodeExtentsPage(Header(100), {DataFileExtent(0, 100, 0)}, 0);
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
  b.value.codec = static_cast<Codec>(2);  // unknown
  l.extents = {a, b};
  EXPECT_EQ(ValidateLayout(l).code(), EINVAL);
  b.value.codec = Codec::kNone;
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

}  // namespace
}  // namespace ckptfs::format
