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
  ASSERT_TRUE(format::ValidateLayout(l).ok());
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

// A file past data_file_min, as the engine leaves it: its bytes in its
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
  ASSERT_TRUE(format::ValidateLayout(l).ok()) << format::ValidateLayout(l).ToString();
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
