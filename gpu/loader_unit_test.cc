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

fs::ExtentsPageHeader Header(uint64_t size) {
  fs::ExtentsPageHeader h;
  h.ino = 42;
  h.size = size;
  h.mtime_ns = 1700000000123456789;
  h.ctime_ns = 1700000000223456789;
  h.segments_dir = "/store/with \"quotes\"/segments";
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
  EXPECT_EQ(layout.coalesce_gap, h.coalesce_gap);
  EXPECT_EQ(layout.coalesce_max, h.coalesce_max);
  ASSERT_EQ(layout.extents.size(), ex.size());
  EXPECT_EQ(layout.extents[0].kind, LayoutExtent::Kind::kInline);
  EXPECT_EQ(layout.extents[0].value, in.value);
  for (size_t i = 1; i < ex.size(); ++i) {
    const LayoutExtent& l = layout.extents[i];
    ASSERT_EQ(l.kind, LayoutExtent::Kind::kRecord);
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
      R"("coalesce_gap":262144,"coalesce_max":1048576,)";
  EXPECT_EQ(fs::EncodeExtentsPage(h, {in, z}, 0),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":"YWJjZA=="},)"
                   R"({"file_offset":4096,"length":4000,"segment_id":7,"record_offset":48,)"
                   R"("record_stored_len":700,"record_raw_len":4096,"codec":1,)"
                   R"("payload_checksum":"00000000000000ab","skip":96}],"next":null})");
  EXPECT_EQ(fs::EncodeExtentsPage(h, {in, z}, 0, head.size() + 40),
            head + R"("from":0,"extents":[{"file_offset":0,"length":4,"inline":null}],)"
                   R"("next":4096})");
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
  HostSink sink(out->data(), out->size());
  Status st = RunPipeline(plan, src, &sink, po);
  if (plan_out) *plan_out = std::move(plan);
  return st;
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
  std::mt19937_64 rng(99);
  const uint64_t size = f_.layout.size;
  for (int round = 0; round < 30; ++round) {
    std::vector<Range> ranges;
    uint64_t dest = rng() % 7;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint64_t a = rng() % size;
      const uint64_t len =
          std::min<uint64_t>(size - a, rng() % 3 == 0 ? rng() % 100 : rng() % 600000);
      ranges.push_back(Range{a, len, dest});
      dest += len + rng() % 5;
    }
    std::string got;
    Status st = RunDirect(f_, ranges, PlanSettings{1 << 20, 64 << 10, 1 << 20},
                          PipelineOptions{3, 2}, dest, &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::string want(dest, '?');
    for (const Range& r : ranges)
      want.replace(r.dest_offset, r.length, f_.want.substr(r.file_offset, r.length));
    ASSERT_TRUE(got == want) << "round " << round;
  }
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
