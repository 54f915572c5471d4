// Tests of the on-disk encodings: golden bytes read out of docs/FORMAT.md (so
// the document and the code cannot drift), round trips of every codec, and
// corruption of every decoder's input.
#include "format/format.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "format/segment_scan.h"

#ifndef CKPTFS_SOURCE_DIR
#error "CKPTFS_SOURCE_DIR must name the source tree (set in format/CMakeLists.txt)"
#endif

namespace ckptfs::format {
namespace {

// ---------------------------------------------------------------------------
// The example blocks of docs/FORMAT.md.
//
// A fenced block tagged "hex name=NAME" holds bytes: per line an optional
// decimal "OFFSET:" (checked against the bytes above it), two-digit hex bytes
// separated by whitespace, and an optional "# comment". A block tagged
// "text name=NAME" holds its lines joined with '\n' (no final newline). Other
// fenced blocks are skipped. docs/FORMAT.md states the same rules.
// ---------------------------------------------------------------------------

struct DocBlocks {
  std::map<std::string, std::string> hex;
  std::map<std::string, std::string> text;
  std::string error;  // empty when the document parsed
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Appends the bytes of one hex line to `out`; returns "" or what is wrong.
std::string ParseHexLine(std::string_view line, std::string* out) {
  if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  line = Trim(line);
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    std::string_view off = Trim(line.substr(0, colon));
    if (off.empty() || off.size() > 9 ||
        !std::all_of(off.begin(), off.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return "bad offset \"" + std::string(off) + "\"";
    }
    size_t want = std::stoul(std::string(off));
    if (want != out->size()) {
      return "offset " + std::to_string(want) + " but " + std::to_string(out->size()) +
             " bytes precede it";
    }
    line = line.substr(colon + 1);
  }
  std::istringstream tokens{std::string(line)};
  std::string tok;
  while (tokens >> tok) {
    if (tok.size() != 2 || HexDigit(tok[0]) < 0 || HexDigit(tok[1]) < 0) {
      return "bad hex byte \"" + tok + "\"";
    }
    out->push_back(static_cast<char>(HexDigit(tok[0]) * 16 + HexDigit(tok[1])));
  }
  return "";
}

DocBlocks ParseDocBlocks(std::string_view doc) {
  DocBlocks blocks;
  enum { kOutside, kHex, kText, kOther } state = kOutside;
  std::string name, bytes;
  std::vector<std::string> lines;
  size_t line_no = 0, block_line = 0;
  auto fail = [&](const std::string& what) {
    if (blocks.error.empty()) {
      blocks.error = "docs line " + std::to_string(line_no) + ": " + what;
    }
  };
  size_t pos = 0;
  while (pos < doc.size() && blocks.error.empty()) {
    size_t end = doc.find('\n', pos);
    if (end == std::string_view::npos) end = doc.size();
    std::string_view line = doc.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    std::string_view trimmed = Trim(line);
    bool fence = trimmed.substr(0, 3) == "```";
    if (state == kOutside) {
      if (!fence) continue;
      block_line = line_no;
      std::string_view info = Trim(trimmed.substr(3));
      state = kOther;
      for (auto [tag, kind] : {std::pair{"hex", kHex}, std::pair{"text", kText}}) {
        std::string prefix = std::string(tag) + " name=";
        if (info.substr(0, prefix.size()) == prefix) {
          name = std::string(Trim(info.substr(prefix.size())));
          if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
            fail("bad block name \"" + name + "\"");
          } else if (blocks.hex.count(name) || blocks.text.count(name)) {
            fail("duplicate block name \"" + name + "\"");
          }
          state = kind;
          bytes.clear();
          lines.clear();
        }
      }
      continue;
    }
    if (fence) {
      if (trimmed != "```") {
        fail("a fence inside a block");
      } else if (state == kHex) {
        if (bytes.empty()) fail("hex block \"" + name + "\" is empty");
        blocks.hex[name] = bytes;
      } else if (state == kText) {
        std::string joined;
        for (size_t i = 0; i < lines.size(); ++i) joined += (i ? "\n" : "") + lines[i];
        blocks.text[name] = joined;
      }
      state = kOutside;
      continue;
    }
    if (state == kHex) {
      std::string err = ParseHexLine(line, &bytes);
      if (!err.empty()) fail("block \"" + name + "\": " + err);
    } else if (state == kText) {
      lines.emplace_back(line);
    }
  }
  if (blocks.error.empty() && state != kOutside) {
    line_no = block_line;
    fail("block is not closed");
  }
  return blocks;
}

const DocBlocks& Doc() {
  static const DocBlocks* doc = [] {
    std::string path = std::string(CKPTFS_SOURCE_DIR) + "/docs/FORMAT.md";
    std::ifstream in(path, std::ios::binary);
    auto* blocks = new DocBlocks;
    if (!in) {
      blocks->error = "cannot read " + path;
      return blocks;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    *blocks = ParseDocBlocks(ss.str());
    return blocks;
  }();
  return *doc;
}

// The bytes of hex block `name` of docs/FORMAT.md; a test failure if missing.
std::string DocHex(const std::string& name) {
  const DocBlocks& doc = Doc();
  EXPECT_EQ(doc.error, "");
  auto it = doc.hex.find(name);
  if (it == doc.hex.end()) {
    ADD_FAILURE() << "docs/FORMAT.md has no ```hex name=" << name << "``` block";
    return "";
  }
  return it->second;
}

std::string DocText(const std::string& name) {
  const DocBlocks& doc = Doc();
  EXPECT_EQ(doc.error, "");
  auto it = doc.text.find(name);
  if (it == doc.text.end()) {
    ADD_FAILURE() << "docs/FORMAT.md has no ```text name=" << name << "``` block";
    return "";
  }
  return it->second;
}

// "01 a4 81 ..." so that a mismatch prints readably.
std::string Hex(std::string_view s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out.push_back(i % 16 ? ' ' : '\n');
    out.push_back(kDigits[static_cast<uint8_t>(s[i]) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(s[i]) & 15]);
  }
  return out;
}

// Every example block the tests below check. The document must have exactly these.
const std::set<std::string> kHexBlocks = {
    "format-file",    "orphan-key",   "inode-key",    "inode-file",         "inode-symlink",
    "inode-file-v2",  "inode-file-v3", "inode-file-v4", "extent-data-file",
    "dentry-key",     "dentry-value", "extent-key",   "extent-record",      "extent-window",
    "extent-inline",  "segment-key",  "segment-stat", "segment-stat-delta", "xattr-key",
    "segment-header", "record",       "host-value",   "owner-key",          "give-up-key",  "peer-key", "reader-key",
    "owner-value",    "seal-key",     "seal-value",   "seal-value-v2"};
const std::set<std::string> kTextBlocks = {"segment-file-names", "data-file-names",
                                           "column-families", "meta-keys", "shared-file",
                                           "storage-file", "storage-file-s3"};

// Asserts that `st` is a corruption whose message contains `what`.
void ExpectCorruption(const Status& st, std::string_view what) {
  EXPECT_FALSE(st.ok()) << "expected a corruption mentioning \"" << what << "\"";
  EXPECT_EQ(st.code(), EIO) << st.ToString();
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find(what), std::string::npos)
      << "message \"" << st.message() << "\" does not mention \"" << what << "\"";
}

std::string LE32Bytes(uint32_t v) {
  std::string s;
  PutLE32(&s, v);
  return s;
}
std::string LE64Bytes(uint64_t v) {
  std::string s;
  PutLE64(&s, v);
  return s;
}

// Recomputes the checksum of an edited header, so that a test reaches the
// check behind it.
void ResealRecordHeader(std::string* h) {
  h->replace(44, 4, LE32Bytes(static_cast<uint32_t>(Checksum(h->substr(0, 44)))));
}
void ResealSegmentHeader(std::string* h) {
  h->replace(24, 8, LE64Bytes(Checksum(h->substr(0, 24))));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// ---- The inputs of the examples in docs/FORMAT.md. ----

InodeValue ExampleFileInode() {
  InodeValue v;
  v.mode = 0100644;
  v.uid = 1000;
  v.gid = 1000;
  v.nlink = 1;
  v.size = 12;
  v.atime_sec = 1700000000;
  v.mtime_sec = 1700000001;
  v.mtime_nsec = 250000000;
  v.ctime_sec = 1700000001;
  v.ctime_nsec = 250000000;
  v.generation = 1;
  v.data_bytes_known = false;  // the version 1 example
  return v;
}

// The same file as a version 2 value: its 12 bytes are all data.
InodeValue ExampleFileInodeV2() {
  InodeValue v = ExampleFileInode();
  v.data_bytes_known = true;
  v.data_bytes = 12;
  return v;
}

InodeValue ExampleFileInodeV3() {
  InodeValue v = ExampleFileInodeV2();
  v.size = v.data_bytes = v.data_file_end = (64 << 20) + 12;
  return v;
}

InodeValue ExampleFileInodeV4() {
  InodeValue v = ExampleFileInodeV2();
  v.flags = kInodeSealed;
  return v;
}

InodeValue ExampleSymlinkInode() {
  InodeValue v;
  v.mode = 0120777;
  v.nlink = 1;
  v.size = 8;
  v.atime_sec = v.mtime_sec = v.ctime_sec = 1700000002;
  v.symlink_target = "model.pt";
  v.data_bytes_known = false;  // the version 1 example
  return v;
}

constexpr char kHelloData[] = "hello world\n";
constexpr uint64_t kHelloChecksum = 0xd42f7ed4b73c6bdeull;  // xxhsum -H3 agrees

ExtentValue ExampleRecordExtent() {
  ExtentValue v;
  v.length = 12;
  v.segment_id = 1;
  v.record_offset = 32;
  v.stored_len = 12;
  v.raw_len = 12;
  v.codec = Codec::kNone;
  v.skip = 0;
  v.checksum = kHelloChecksum;
  return v;
}

// ===========================================================================
// The document parser itself.
// ===========================================================================

TEST(DocParser, ReadsHexAndTextBlocksAndSkipsOthers) {
  DocBlocks b = ParseDocBlocks(
      "intro\n"
      "```\nnot a block: 00 11\n```\n"
      "```hex name=a\n 0: 01 02  # one, two\n\n 2: ff # three\n```\n"
      "```text name=t\nline one\nline two\n```\n"
      "```text\nignored\n```\n");
  ASSERT_EQ(b.error, "");
  ASSERT_EQ(b.hex.size(), 1u);
  EXPECT_EQ(b.hex["a"], std::string("\x01\x02\xff", 3));
  ASSERT_EQ(b.text.size(), 1u);
  EXPECT_EQ(b.text["t"], "line one\nline two");
}

TEST(DocParser, RejectsMalformedBlocks) {
  const char* bad[] = {
      "```hex name=a\n 1: 01\n```\n",                      // offset does not match
      "```hex name=a\n01 02\n 1: 03\n```\n",               // offset does not match
      "```hex name=a\n0g\n```\n",                          // not hex
      "```hex name=a\n012\n```\n",                         // three digits
      "```hex name=a\n1\n```\n",                           // one digit
      "```hex name=a\nx: 01\n```\n",                       // bad offset
      "```hex name=a\n```\n",                              // empty
      "```hex name=a\n01\n",                               // not closed
      "```hex name=a\n01\n```\n```hex name=a\n02\n```\n",  // duplicate
      "```hex name=a\n01\n```\n```text name=a\nx\n```\n",  // duplicate across kinds
      "```hex name=\n01\n```\n",                           // no name
  };
  for (const char* doc : bad) {
    EXPECT_NE(ParseDocBlocks(doc).error, "") << doc;
  }
}

TEST(DocExamples, DocumentHasExactlyTheCheckedBlocks) {
  const DocBlocks& doc = Doc();
  ASSERT_EQ(doc.error, "");
  std::set<std::string> hex, text;
  for (const auto& [name, bytes] : doc.hex) hex.insert(name);
  for (const auto& [name, s] : doc.text) text.insert(name);
  EXPECT_EQ(hex, kHexBlocks);
  EXPECT_EQ(text, kTextBlocks);
}

// ===========================================================================
// Golden bytes: the encoders produce exactly the bytes of docs/FORMAT.md, and
// the decoders read those bytes back into the example's input.
// ===========================================================================

TEST(Golden, FormatFile) {
  EXPECT_EQ(Hex(FormatFileContents()), Hex(DocHex("format-file")));
  EXPECT_TRUE(ParseFormatFile(DocHex("format-file")).ok());
}

TEST(Golden, SharedFile) {
  const SharedIndex v{"host=/run/postgresql dbname=ckpt user=trainer", "ckptfs_3f2a9c0d1e4b5a69"};
  EXPECT_EQ(SharedFileContents(v), DocText("shared-file") + "\n");
  SharedIndex back;
  ASSERT_TRUE(ParseSharedFile(DocText("shared-file"), &back).ok());
  EXPECT_EQ(back, v);
}

TEST(SharedFile, RejectsMissingAndUnknownLines) {
  SharedIndex v;
  ExpectCorruption(ParseSharedFile("meta=host=/x\n", &v), "no schema");
  ExpectCorruption(ParseSharedFile("schema=s\n", &v), "no meta");
  ExpectCorruption(ParseSharedFile("meta=host=/x\nschema=\n", &v), "bad line");
  ExpectCorruption(ParseSharedFile("meta=host=/x\nschema=s\npassword=p\n", &v), "bad line");
}

TEST(Golden, StorageFile) {
  const DataStorage v{"rados://checkpoints/team-a", "ckptfs_8d41c0e2a7b95f36/"};
  EXPECT_EQ(StorageFileContents(v), DocText("storage-file") + "\n");
  DataStorage back;
  ASSERT_TRUE(ParseStorageFile(DocText("storage-file"), &back).ok());
  EXPECT_EQ(back, v);
  const DataStorage s3{"s3://checkpoints/team-a", "ckptfs_8d41c0e2a7b95f36/",
                       "https://s3.eu-west-3.amazonaws.com"};
  EXPECT_EQ(StorageFileContents(s3), DocText("storage-file-s3") + "\n");
  ASSERT_TRUE(ParseStorageFile(DocText("storage-file-s3"), &back).ok());
  EXPECT_EQ(back, s3);
}

TEST(StorageFile, RejectsMissingRepeatedAndUnknownLines) {
  DataStorage v;
  ExpectCorruption(ParseStorageFile("data=rados://p\n", &v), "no prefix");
  ExpectCorruption(ParseStorageFile("prefix=x/\n", &v), "no data");
  ExpectCorruption(ParseStorageFile("data=rados://p\nprefix=\n", &v), "bad line");
  ExpectCorruption(ParseStorageFile("data=rados://p\ndata=rados://q\nprefix=x/\n", &v),
                   "bad line");
  ExpectCorruption(ParseStorageFile("data=rados://p\nprefix=x/\nkey=k\n", &v), "bad line");
  ExpectCorruption(ParseStorageFile("data=s3://b\nprefix=x/\n", &v), "without an endpoint");
  ExpectCorruption(ParseStorageFile("data=rados://p\nprefix=x/\nendpoint=http://h\n", &v),
                   "with an endpoint");
}

TEST(Golden, SegmentFileNames) {
  EXPECT_EQ(SegmentFileName(1) + "\n" + SegmentFileName(42) + "\n" + SegmentFileName(123456789),
            DocText("segment-file-names"));
}

TEST(Golden, ColumnFamiliesAndMetaKeys) {
  // The meta family is RocksDB's "default" family.
  EXPECT_EQ(std::string("default\n") + kCfInodes + "\n" + kCfDentries + "\n" + kCfExtents + "\n" +
                kCfSegments + "\n" + kCfXattrs,
            DocText("column-families"));
  EXPECT_EQ(std::string(kMetaFormatVersion) + "\n" + kMetaNextIno + "\n" + kMetaInodeCount + "\n" +
                kMetaCleanShutdown + "\n" + kMetaOrphanPrefix + "\n" + kMetaNextHostId + "\n" +
                kMetaHostPrefix + "\n" + kMetaOwnerPrefix + "\n" + kMetaGiveUpPrefix + "\n" +
                kMetaReaderPrefix + "\n" + kMetaSealPrefix + "\n" + kMetaPeerSecret + "\n" + kMetaPeerPrefix,
            DocText("meta-keys"));
}

TEST(Golden, PeerKey) {
  EXPECT_EQ(Hex(PeerKey("node07")), Hex(DocHex("peer-key")));
  EXPECT_EQ(kPeerSecretBytes, 32u);
}

TEST(Golden, OwnerKeysAndValue) {
  EXPECT_EQ(Hex(OwnerKey(2)), Hex(DocHex("owner-key")));
  EXPECT_EQ(Hex(GiveUpKey(3, 2)), Hex(DocHex("give-up-key")));
  EXPECT_EQ(GiveUpKey(3, 2).substr(0, GiveUpPrefix(3).size()), GiveUpPrefix(3));
  EXPECT_EQ(Hex(ReaderKey(2, 3)), Hex(DocHex("reader-key")));
  EXPECT_EQ(ReaderKey(2, 3).substr(0, ReadersPrefix(2).size()), ReadersPrefix(2));
  EXPECT_LT(ReaderKey(2, 0xffffffff), ReadersPrefix(3));
  const OwnerValue v{3, 4242, "node07"};
  EXPECT_EQ(Hex(EncodeOwner(v)), Hex(DocHex("owner-value")));
  OwnerValue back;
  ASSERT_TRUE(DecodeOwner(DocHex("owner-value"), &back).ok());
  EXPECT_EQ(back, v);
  ExpectCorruption(DecodeOwner(DocHex("owner-value").substr(0, 9), &back), "owner value");
  ExpectCorruption(DecodeOwner(DocHex("owner-value").substr(0, 15), &back), "owner value");
  ExpectCorruption(DecodeOwner(std::string(10, '\0'), &back), "id 0");
}

TEST(Golden, SealKeyAndValue) {
  EXPECT_EQ(Hex(SealKey(2)), Hex(DocHex("seal-key")));
  EXPECT_EQ(SealKey(2).substr(0, 5), kMetaSealPrefix);
  const SealValue v{1'800'000'000'000, 5001, 1'000'000'000};
  EXPECT_EQ(Hex(EncodeSeal(v)), Hex(DocHex("seal-value")));
  SealValue back;
  ASSERT_TRUE(DecodeSeal(DocHex("seal-value"), &back).ok());
  EXPECT_EQ(back, v);
  ExpectCorruption(DecodeSeal(DocHex("seal-value").substr(0, 24), &back), "seal value");
  std::string bad = DocHex("seal-value");
  bad[0] = 3;
  ExpectCorruption(DecodeSeal(bad, &back), "version 3");
  bad[0] = 2;  // version 2 without its snapshot's name
  ExpectCorruption(DecodeSeal(bad, &back), "seal value");
  bad = DocHex("seal-value");
  bad.replace(9, 8, std::string(8, '\0'));
  ExpectCorruption(DecodeSeal(bad, &back), "no inode");
  // Version 2: the snapshot's name after the fields.
  SealValue v2 = v;
  v2.snapshot = "2-1800000000000.sst";
  EXPECT_EQ(Hex(EncodeSeal(v2)), Hex(DocHex("seal-value-v2")));
  ASSERT_TRUE(DecodeSeal(DocHex("seal-value-v2"), &back).ok());
  EXPECT_EQ(back, v2);
  ExpectCorruption(DecodeSeal(DocHex("seal-value-v2").substr(0, 45), &back), "seal value");
  ExpectCorruption(DecodeSeal(DocHex("seal-value-v2").substr(0, 26), &back), "seal value");
  ExpectCorruption(DecodeSeal(DocHex("seal-value") + "x", &back), "seal value");
}

TEST(Golden, HostValue) {
  const HostValue v{3, 1'800'000'000'000, 4242, "node07", "mount /ck"};
  EXPECT_EQ(Hex(EncodeHost(v)), Hex(DocHex("host-value")));
  HostValue back;
  ASSERT_TRUE(DecodeHost(DocHex("host-value"), &back).ok());
  EXPECT_EQ(back, v);
  EXPECT_EQ(HostKey("node07"), "host/node07");
  ExpectCorruption(DecodeHost(DocHex("host-value").substr(0, 17), &back), "host value");
  ExpectCorruption(DecodeHost(DocHex("host-value").substr(0, 23), &back), "host value");
  ExpectCorruption(DecodeHost(std::string(18, '\0'), &back), "id 0");
}

TEST(Golden, Keys) {
  EXPECT_EQ(Hex(InodeKey(2)), Hex(DocHex("inode-key")));
  EXPECT_EQ(Hex(DentryKey(1, "model.pt")), Hex(DocHex("dentry-key")));
  EXPECT_EQ(Hex(ExtentKey(2, 1 << 20)), Hex(DocHex("extent-key")));
  EXPECT_EQ(Hex(SegmentKey(1)), Hex(DocHex("segment-key")));
  EXPECT_EQ(Hex(XattrKey(2, "user.step")), Hex(DocHex("xattr-key")));
  EXPECT_EQ(Hex(OrphanKey(2)), Hex(DocHex("orphan-key")));
  // The prefixes are the leading bytes of the keys.
  EXPECT_EQ(Hex(DentryPrefix(1)), Hex(DocHex("dentry-key").substr(0, 8)));
  EXPECT_EQ(Hex(ExtentPrefix(2)), Hex(DocHex("extent-key").substr(0, 8)));
}

TEST(Golden, Inodes) {
  EXPECT_EQ(Hex(EncodeInode(ExampleFileInode())), Hex(DocHex("inode-file")));
  EXPECT_EQ(Hex(EncodeInode(ExampleSymlinkInode())), Hex(DocHex("inode-symlink")));
  InodeValue v;
  ASSERT_TRUE(DecodeInode(DocHex("inode-file"), &v).ok());
  EXPECT_EQ(v, ExampleFileInode());
  ASSERT_TRUE(DecodeInode(DocHex("inode-symlink"), &v).ok());
  EXPECT_EQ(v, ExampleSymlinkInode());
  EXPECT_EQ(Hex(EncodeInode(ExampleFileInodeV2())), Hex(DocHex("inode-file-v2")));
  ASSERT_TRUE(DecodeInode(DocHex("inode-file-v2"), &v).ok());
  EXPECT_EQ(v, ExampleFileInodeV2());
  EXPECT_EQ(Hex(EncodeInode(ExampleFileInodeV3())), Hex(DocHex("inode-file-v3")));
  ASSERT_TRUE(DecodeInode(DocHex("inode-file-v3"), &v).ok());
  EXPECT_EQ(v, ExampleFileInodeV3());
  // Without a data file the value is version 2 again.
  InodeValue none = ExampleFileInodeV3();
  none.data_file_end = 0;
  EXPECT_EQ(EncodeInode(none)[0], 2);
  // Version 3 always names a data file.
  std::string zero = DocHex("inode-file-v3");
  std::memset(zero.data() + 89, 0, 8);
  ExpectCorruption(DecodeInode(zero, &v), "data file end 0");
  ExpectCorruption(DecodeInode(DocHex("inode-file-v3").substr(0, 100), &v), "inode value");
  EXPECT_EQ(Hex(EncodeInode(ExampleFileInodeV4())), Hex(DocHex("inode-file-v4")));
  ASSERT_TRUE(DecodeInode(DocHex("inode-file-v4"), &v).ok());
  EXPECT_EQ(v, ExampleFileInodeV4());
  // With a data file too; without flags the value is version 3 again.
  InodeValue both = ExampleFileInodeV4();
  both.data_file_end = 1 << 20;
  ASSERT_TRUE(DecodeInode(EncodeInode(both), &v).ok());
  EXPECT_EQ(v, both);
  both.flags = 0;
  EXPECT_EQ(EncodeInode(both)[0], 3);
  // Version 4 always carries a known flag.
  std::string none4 = DocHex("inode-file-v4");
  std::memset(none4.data() + 97, 0, 4);
  ExpectCorruption(DecodeInode(none4, &v), "flags 0");
  std::string unknown = DocHex("inode-file-v4");
  unknown[97] = 2;
  ExpectCorruption(DecodeInode(unknown, &v), "flags 2");
  ExpectCorruption(DecodeInode(DocHex("inode-file-v4").substr(0, 104), &v), "inode value");
}

TEST(Golden, Dentry) {
  EXPECT_EQ(Hex(EncodeDentry(DentryValue{2, 010})), Hex(DocHex("dentry-value")));
  DentryValue v;
  ASSERT_TRUE(DecodeDentry(DocHex("dentry-value"), &v).ok());
  EXPECT_EQ(v, (DentryValue{2, 8}));
}

TEST(Golden, Extents) {
  ExtentValue rec = ExampleRecordExtent();
  EXPECT_EQ(Hex(EncodeExtent(rec)), Hex(DocHex("extent-record")));
  ExtentValue window = rec;
  window.skip = 6;
  window.length = 6;
  EXPECT_EQ(Hex(EncodeExtent(window)), Hex(DocHex("extent-window")));
  ExtentValue inl;
  inl.is_inline = true;
  inl.inline_data = "{\"step\":1}";
  inl.length = static_cast<uint32_t>(inl.inline_data.size());
  EXPECT_EQ(Hex(EncodeExtent(inl)), Hex(DocHex("extent-inline")));

  ExtentValue v;
  ASSERT_TRUE(DecodeExtent(DocHex("extent-record"), &v).ok());
  EXPECT_EQ(v, rec);
  ASSERT_TRUE(DecodeExtent(DocHex("extent-window"), &v).ok());
  EXPECT_EQ(v, window);
  ASSERT_TRUE(DecodeExtent(DocHex("extent-inline"), &v).ok());
  EXPECT_EQ(v, inl);
  EXPECT_EQ(DocHex("extent-record").size(), kExtentRecordValueSize);

  ExtentValue df;
  df.in_data_file = true;
  df.length = 12;
  df.record_offset = 64 << 20;
  df.stored_len = df.raw_len = 12;
  df.checksum = Checksum("hello world\n");
  EXPECT_EQ(df.checksum, kHelloChecksum);
  EXPECT_EQ(Hex(EncodeExtent(df)), Hex(DocHex("extent-data-file")));
  ASSERT_TRUE(DecodeExtent(DocHex("extent-data-file"), &v).ok());
  EXPECT_EQ(v, df);
  EXPECT_EQ(DocHex("extent-data-file").size(), kExtentDataFileValueSize);
  EXPECT_TRUE(CheckDataFileBlock(df, "hello world\n").ok());
  ExpectCorruption(CheckDataFileBlock(df, "hello world!"), "[67108864, 67108876): checksum mismatch");
  ExpectCorruption(CheckDataFileBlock(df, "hello"), "5 bytes, expected 12");
  // A window that leaves the block, an empty one, a short value.
  ExtentValue bad = df;
  bad.skip = 1;
  ExpectCorruption(DecodeExtent(EncodeExtent(bad), &v), "outside block");
  bad = df;
  bad.length = 0;
  ExpectCorruption(DecodeExtent(EncodeExtent(bad), &v), "outside block");
  ExpectCorruption(DecodeExtent(DocHex("extent-data-file").substr(0, 28), &v), "extent value");
  bad = df;
  bad.record_offset = UINT64_MAX - 4;
  ExpectCorruption(DecodeExtent(EncodeExtent(bad), &v), "past the largest offset");
}

TEST(Golden, DataFileNames) {
  EXPECT_EQ(DataFileName(2) + "\n" + DataFileName(123456789), DocText("data-file-names"));
  uint64_t ino = 0;
  EXPECT_TRUE(ParseDataFileName("00000002.dat", &ino));
  EXPECT_EQ(ino, 2u);
  EXPECT_FALSE(ParseDataFileName("00000002.seg", &ino));
  EXPECT_FALSE(ParseDataFileName("000000002.dat", &ino));
  EXPECT_FALSE(ParseSegmentFileName("00000002.dat", &ino));
}

TEST(Golden, SegmentStats) {
  SegmentStat sealed{10485760, 4096, 1, 10489984};
  SegmentStat delta{-6, 6, 0, 0};
  EXPECT_EQ(Hex(EncodeSegmentStat(sealed)), Hex(DocHex("segment-stat")));
  EXPECT_EQ(Hex(EncodeSegmentStat(delta)), Hex(DocHex("segment-stat-delta")));
  SegmentStat v;
  ASSERT_TRUE(DecodeSegmentStat(DocHex("segment-stat"), &v).ok());
  EXPECT_EQ(v, sealed);
  ASSERT_TRUE(DecodeSegmentStat(DocHex("segment-stat-delta"), &v).ok());
  EXPECT_EQ(v, delta);
}

TEST(Golden, SegmentHeader) {
  EXPECT_EQ(Hex(EncodeSegmentHeader(1)), Hex(DocHex("segment-header")));
  uint64_t id = 0;
  ASSERT_TRUE(DecodeSegmentHeader(DocHex("segment-header"), &id).ok());
  EXPECT_EQ(id, 1u);
  EXPECT_EQ(DocHex("segment-header").size(), kSegmentHeaderSize);
}

TEST(Golden, RecordOfTheWorkedExample) {
  std::string doc = DocHex("record");
  ASSERT_EQ(doc.size(), kRecordHeaderSize + 12);
  RecordHeader built;
  std::string record = BuildRecord(2, 0, kHelloData, 0, &built);
  EXPECT_EQ(Hex(record), Hex(doc));

  RecordHeader want;
  want.codec = Codec::kNone;
  want.ino = 2;
  want.file_offset = 0;
  want.raw_len = 12;
  want.stored_len = 12;
  want.payload_checksum = kHelloChecksum;
  EXPECT_EQ(built, want);
  EXPECT_EQ(Hex(EncodeRecordHeader(want)), Hex(doc.substr(0, kRecordHeaderSize)));

  RecordHeader h;
  ASSERT_TRUE(DecodeRecordHeader(doc, &h).ok());
  EXPECT_EQ(h, want);
  std::string data;
  ASSERT_TRUE(DecodeRecordPayload(h, std::string_view(doc).substr(kRecordHeaderSize), &data).ok());
  EXPECT_EQ(data, kHelloData);

  // The worked example's extent describes this record, placed right after the
  // segment header.
  ExtentValue e;
  ASSERT_TRUE(DecodeExtent(DocHex("extent-record"), &e).ok());
  EXPECT_EQ(e.record_offset, DocHex("segment-header").size());
  EXPECT_EQ(e.stored_len, h.stored_len);
  EXPECT_EQ(e.raw_len, h.raw_len);
  EXPECT_EQ(e.codec, h.codec);
  EXPECT_EQ(e.checksum, h.payload_checksum);
}

// ===========================================================================
// Fixed-width coding, checksum and key order.
// ===========================================================================

TEST(Coding, ByteOrder) {
  std::string s;
  PutBE64(&s, 0x0102030405060708ull);
  EXPECT_EQ(Hex(s), "01 02 03 04 05 06 07 08");
  EXPECT_EQ(GetBE64(s.data()), 0x0102030405060708ull);
  s.clear();
  PutBE32(&s, 0x0102f304u);
  EXPECT_EQ(Hex(s), "01 02 f3 04");
  EXPECT_EQ(GetBE32(s.data()), 0x0102f304u);
  s.clear();
  PutLE64(&s, 0x0102030405060708ull);
  EXPECT_EQ(Hex(s), "08 07 06 05 04 03 02 01");
  EXPECT_EQ(GetLE64(s.data()), 0x0102030405060708ull);
  s.clear();
  PutLE32(&s, 0x01020304u);
  EXPECT_EQ(Hex(s), "04 03 02 01");
  EXPECT_EQ(GetLE32(s.data()), 0x01020304u);
  s.clear();
  PutLE16(&s, 0x0102);
  EXPECT_EQ(Hex(s), "02 01");
  EXPECT_EQ(GetLE16(s.data()), 0x0102);
}

TEST(Coding, RoundTripsExtremes) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> values = {0,
                                  1,
                                  0x80,
                                  0xff,
                                  0x100,
                                  0x7fffffffffffffffull,
                                  0x8000000000000000ull,
                                  std::numeric_limits<uint64_t>::max()};
  for (int i = 0; i < 1000; ++i) values.push_back(rng());
  for (uint64_t v : values) {
    std::string s;
    PutBE64(&s, v);
    PutLE64(&s, v);
    PutLE32(&s, static_cast<uint32_t>(v));
    PutLE16(&s, static_cast<uint16_t>(v));
    ASSERT_EQ(s.size(), 22u);
    EXPECT_EQ(GetBE64(s.data()), v);
    EXPECT_EQ(GetLE64(s.data() + 8), v);
    EXPECT_EQ(GetLE32(s.data() + 16), static_cast<uint32_t>(v));
    EXPECT_EQ(GetLE16(s.data() + 20), static_cast<uint16_t>(v));
  }
}

TEST(Coding, ChecksumIsXxh3_64) {
  // Values printed by `xxhsum -H3`.
  EXPECT_EQ(Checksum(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(Checksum(kHelloData), kHelloChecksum);
}

TEST(Coding, ChecksumIsXxh3_64AtEveryLengthClass) {
  // Checksum may run other instructions than libxxhash's XXH3_64bits (the
  // x86-64 dispatcher); the value must be the same at every length class of
  // XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240, stripes, blocks) and offset.
  std::mt19937_64 rng(7);
  std::string data((1u << 20) + 4099, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2100; ++n) lengths.push_back(n);
  for (size_t n : {4095u, 4096u, 4097u, 65536u + 3, 1u << 20}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t at : {0u, 1u, 13u}) {
      const std::string_view piece(data.data() + at, n);
      ASSERT_EQ(Checksum(piece), XXH3_64bits(piece.data(), piece.size())) << "length " << n << " at " << at;
    }
  }
}

TEST(Keys, ByteOrderIsNumericOrder) {
  std::mt19937_64 rng(11);
  auto pick = [&rng]() -> uint64_t {
    switch (rng() % 3) {
      case 0:
        return rng() % 1000;  // close values, differing in the low byte
      case 1:
        return rng() >> (rng() % 64);
      default:
        return rng();
    }
  };
  for (int i = 0; i < 5000; ++i) {
    uint64_t a = pick(), b = pick(), c = pick(), d = pick();
    EXPECT_EQ(a < b, InodeKey(a) < InodeKey(b)) << a << " " << b;
    EXPECT_EQ(a < b, SegmentKey(a) < SegmentKey(b)) << a << " " << b;
    EXPECT_EQ(std::pair(a, c) < std::pair(b, d), ExtentKey(a, c) < ExtentKey(b, d))
        << a << "," << c << " " << b << "," << d;
  }
}

TEST(Keys, PrefixesGroupOneInode) {
  // Every dentry of directory 5 lies in [prefix(5), prefix(6)), whatever its name.
  for (std::string name : {std::string(""), std::string("a"), std::string(255, '\xff'),
                           std::string("\0\0", 2), std::string("model.pt")}) {
    std::string k = DentryKey(5, name);
    EXPECT_EQ(k.substr(0, 8), DentryPrefix(5));
    EXPECT_EQ(k.substr(8), name);
    EXPECT_GE(k, DentryPrefix(5));
    EXPECT_LT(k, DentryPrefix(6));
    EXPECT_EQ(XattrKey(5, name), k);
  }
  EXPECT_LT(DentryKey(1, "a"), DentryKey(1, "ab"));
  EXPECT_LT(DentryKey(1, "ab"), DentryKey(1, "b"));
  for (uint64_t off : {0ull, 1ull, 0xffffffffffffffffull}) {
    std::string k = ExtentKey(9, off);
    ASSERT_EQ(k.size(), 16u);
    EXPECT_EQ(k.substr(0, 8), ExtentPrefix(9));
    EXPECT_EQ(GetBE64(k.data() + 8), off);
  }
  std::string orphan = OrphanKey(0x0102030405060708ull);
  EXPECT_EQ(orphan.substr(0, 7), kMetaOrphanPrefix);
  EXPECT_EQ(GetBE64(orphan.data() + 7), 0x0102030405060708ull);
  EXPECT_LT(OrphanKey(255), OrphanKey(256));
}

// ===========================================================================
// Store directory: FORMAT file and segment file names.
// ===========================================================================

TEST(FormatFile, AcceptsWhatItWrites) {
  EXPECT_TRUE(ParseFormatFile(FormatFileContents()).ok());
  EXPECT_TRUE(ParseFormatFile("ckptfs store format 1").ok());               // no newline
  EXPECT_TRUE(ParseFormatFile("ckptfs store format 1\nfuture: x\n").ok());  // reserved lines
}

TEST(FormatFile, RejectsBadMagic) {
  for (const char* s :
       {"", "ckptfs", "ckptfs store format", "CKPTFS store format 1\n", "ckptfs store  format 1\n",
        " ckptfs store format 1\n", "leveldb store format 1\n"}) {
    ExpectCorruption(ParseFormatFile(s), "does not start with");
  }
}

TEST(FormatFile, RejectsMissingOrMalformedVersion) {
  ExpectCorruption(ParseFormatFile("ckptfs store format \n"), "no version");
  ExpectCorruption(ParseFormatFile("ckptfs store format "), "no version");
  ExpectCorruption(ParseFormatFile("ckptfs store format x1\n"), "no version");
  ExpectCorruption(ParseFormatFile("ckptfs store format -1\n"), "no version");
  ExpectCorruption(ParseFormatFile("ckptfs store format 1x\n"), "junk");
  ExpectCorruption(ParseFormatFile("ckptfs store format 1 \n"), "junk");
  ExpectCorruption(ParseFormatFile("ckptfs store format 1.5\n"), "junk");
  // 2^32 + 1 must not wrap around to version 1.
  ExpectCorruption(ParseFormatFile("ckptfs store format 4294967297\n"), "too long");
  ExpectCorruption(ParseFormatFile("ckptfs store format 18446744073709551617\n"), "too long");
}

TEST(FormatFile, RejectsOtherVersionsAsUnsupported) {
  for (const char* s : {"ckptfs store format 0\n", "ckptfs store format 2\n",
                        "ckptfs store format 11\n", "ckptfs store format 999999999\n"}) {
    Status st = ParseFormatFile(s);
    EXPECT_EQ(st.code(), EINVAL) << s << ": " << st.ToString();
    EXPECT_NE(st.message().find("not supported"), std::string::npos) << st.message();
  }
}

TEST(SegmentFileNames, RoundTrip) {
  for (uint64_t id : {0ull, 1ull, 42ull, 99999999ull, 100000000ull, 123456789ull, 0xffffffffull,
                      10000000000000000000ull, 0xffffffffffffffffull}) {
    std::string path = SegmentFileName(id);
    ASSERT_EQ(path.substr(0, 9), "segments/") << path;
    uint64_t got = ~id;
    ASSERT_TRUE(ParseSegmentFileName(path.substr(9), &got)) << path;
    EXPECT_EQ(got, id) << path;
  }
  EXPECT_EQ(SegmentFileName(0), "segments/00000000.seg");
  EXPECT_EQ(SegmentFileName(0xffffffffffffffffull), "segments/18446744073709551615.seg");
}

TEST(SegmentFileNames, RejectsOtherNames) {
  for (const char* name : {
           "",
           ".seg",
           "1.seg",
           "0000001.seg",  // fewer than 8 digits
           "00000001",
           "00000001.se",
           "00000001.SEG",
           "00000001.seg.tmp",
           "00000001.seg~",
           "0000000a.seg",
           "-0000001.seg",
           "+00000001.seg",
           " 00000001.seg",
           "0000 001.seg",
           "segments/00000001.seg",  // a path, not a base name
           "000000001.seg",          // 9 digits with a leading zero: not canonical
           "0123456789.seg",
           "18446744073709551616.seg",   // 2^64: does not fit
           "99999999999999999999.seg",   // 20 digits that overflow
           "100000000000000000000.seg",  // 21 digits
       }) {
    uint64_t id = 77;
    EXPECT_FALSE(ParseSegmentFileName(name, &id)) << name;
    EXPECT_EQ(id, 77u) << name << ": output changed on failure";
  }
}

// ===========================================================================
// Inodes.
// ===========================================================================

TEST(InodeCodec, RoundTrip) {
  std::vector<InodeValue> values = {InodeValue(), ExampleFileInode(), ExampleSymlinkInode(),
                                    ExampleFileInodeV2()};
  InodeValue max;
  max.mode = max.uid = max.gid = max.nlink = max.rdev = 0xffffffffu;
  max.size = max.generation = max.parent = std::numeric_limits<uint64_t>::max();
  max.atime_sec = std::numeric_limits<int64_t>::max();
  max.mtime_sec = std::numeric_limits<int64_t>::min();
  max.ctime_sec = -1;  // before 1970
  max.atime_nsec = max.mtime_nsec = max.ctime_nsec = 999999999;
  max.symlink_target = std::string(4095, 'x');
  values.push_back(max);
  InodeValue binary = ExampleSymlinkInode();
  binary.symlink_target = std::string("a\0b\xff", 4);
  values.push_back(binary);
  InodeValue dir;
  dir.mode = 040755;
  dir.nlink = 2;
  dir.parent = 1;
  values.push_back(dir);
  // Every field different, so that two swapped fields cannot go unnoticed.
  InodeValue distinct;
  distinct.mode = 0100600;
  distinct.uid = 1001;
  distinct.gid = 1002;
  distinct.nlink = 3;
  distinct.rdev = 0x0804;
  distinct.size = 0x0102030405060708ull;
  distinct.atime_sec = 1600000001;
  distinct.atime_nsec = 11;
  distinct.mtime_sec = 1600000002;
  distinct.mtime_nsec = 22;
  distinct.ctime_sec = 1600000003;
  distinct.ctime_nsec = 33;
  distinct.generation = 5;
  distinct.parent = 6;
  distinct.symlink_target = "t";
  distinct.data_bytes = 0x1112131415161718ull;
  values.push_back(distinct);
  InodeValue old = distinct;  // version 1: no data_bytes
  old.data_bytes = 0;
  old.data_bytes_known = false;
  values.push_back(old);
  for (const InodeValue& in : values) {
    std::string enc = EncodeInode(in);
    EXPECT_EQ(enc.size(), (in.data_bytes_known ? 93 : 85) + in.symlink_target.size());
    EXPECT_EQ(enc[0], in.data_bytes_known ? 2 : 1);
    InodeValue out;
    out.symlink_target = "stale";
    ASSERT_TRUE(DecodeInode(enc, &out).ok());
    EXPECT_EQ(out, in);
  }
}

TEST(InodeCodec, RejectsTruncation) {
  InodeValue v2 = ExampleSymlinkInode();
  v2.data_bytes_known = true;
  for (const std::string& enc : {EncodeInode(ExampleSymlinkInode()), EncodeInode(v2)}) {
    for (size_t n = 0; n < enc.size(); ++n) {
      InodeValue v;
      Status st = DecodeInode(enc.substr(0, n), &v);
      ExpectCorruption(st, "inode value");
      ExpectCorruption(st, "expected");
    }
  }
}

TEST(InodeCodec, RejectsBadVersion) {
  for (uint8_t version : {0, 5, 255}) {
    std::string enc = EncodeInode(ExampleFileInode());
    enc[0] = static_cast<char>(version);
    InodeValue v;
    ExpectCorruption(DecodeInode(enc, &v), "inode value version " + std::to_string(version));
  }
}

TEST(InodeCodec, RejectsTargetLengthMismatch) {
  InodeValue v;
  std::string enc = EncodeInode(ExampleFileInode());
  ExpectCorruption(DecodeInode(enc + "x", &v), "expected 85");  // trailing junk
  std::string link = EncodeInode(ExampleSymlinkInode());
  ExpectCorruption(DecodeInode(link + "x", &v), "expected 93");
  std::string huge = link;
  huge.replace(81, 4, "\xff\xff\xff\xff");  // target length 2^32-1
  ExpectCorruption(DecodeInode(huge, &v), "inode value");
  std::string shorter = link;
  shorter.replace(81, 4, LE32Bytes(7));
  ExpectCorruption(DecodeInode(shorter, &v), "inode value");
  // Version 2: the target length moves to offset 89.
  ExpectCorruption(DecodeInode(EncodeInode(ExampleFileInodeV2()) + "x", &v), "expected 93");
  std::string link2 = EncodeInode(ExampleFileInodeV2());
  link2.replace(89, 4, LE32Bytes(1));
  ExpectCorruption(DecodeInode(link2, &v), "expected 94");
}

// ===========================================================================
// Dentries.
// ===========================================================================

TEST(DentryCodec, RoundTrip) {
  for (DentryValue in : {DentryValue{1, 4}, DentryValue{2, 8}, DentryValue{3, 10},
                         DentryValue{std::numeric_limits<uint64_t>::max(), 255}}) {
    std::string enc = EncodeDentry(in);
    EXPECT_EQ(enc.size(), 9u);
    DentryValue out;
    ASSERT_TRUE(DecodeDentry(enc, &out).ok());
    EXPECT_EQ(out, in);
  }
}

TEST(DentryCodec, RejectsBadLength) {
  std::string enc = EncodeDentry({2, 8});
  DentryValue v;
  for (size_t n = 0; n < enc.size(); ++n) {
    ExpectCorruption(DecodeDentry(enc.substr(0, n), &v), "expected 9");
  }
  ExpectCorruption(DecodeDentry(enc + '\0', &v), "expected 9");
}

TEST(DentryCodec, RejectsInodeZero) {
  DentryValue v;
  ExpectCorruption(DecodeDentry(EncodeDentry({0, 8}), &v), "inode 0");
}

// ===========================================================================
// Extents.
// ===========================================================================

TEST(ExtentCodec, RoundTrip) {
  std::vector<ExtentValue> values = {ExampleRecordExtent()};
  ExtentValue max;
  max.length = 1;
  max.segment_id = max.record_offset = max.checksum = std::numeric_limits<uint64_t>::max();
  max.stored_len = max.raw_len = 0xffffffffu;
  max.codec = Codec::kZstd;
  max.skip = 0xfffffffeu;  // window [2^32-2, 2^32-1): the record's last byte
  values.push_back(max);
  ExtentValue whole = ExampleRecordExtent();
  whole.length = whole.raw_len = 1u << 20;
  whole.stored_len = 1000;
  whole.codec = Codec::kZstd;
  values.push_back(whole);
  ExtentValue distinct;  // every field different
  distinct.length = 100;
  distinct.segment_id = 7;
  distinct.record_offset = 0x10000000020ull;
  distinct.stored_len = 300;
  distinct.raw_len = 400;
  distinct.codec = Codec::kZstd;
  distinct.skip = 200;
  distinct.checksum = 0xfedcba9876543210ull;
  values.push_back(distinct);
  for (std::string data :
       {std::string(), std::string("x"), std::string("a\0b", 3), RandomBytes(4096, 3)}) {
    ExtentValue inl;
    inl.is_inline = true;
    inl.inline_data = data;
    inl.length = static_cast<uint32_t>(data.size());
    values.push_back(inl);
  }
  for (const ExtentValue& in : values) {
    std::string enc = EncodeExtent(in);
    EXPECT_EQ(enc.size(), in.is_inline ? 1 + in.inline_data.size() : kExtentRecordValueSize);
    ExtentValue out;
    // A stale destination of the other kind must not leak into the result.
    if (in.is_inline) {
      out = max;
    } else {
      out.is_inline = true;
      out.inline_data = "stale";
    }
    ASSERT_TRUE(DecodeExtent(enc, &out).ok()) << Hex(enc);
    EXPECT_EQ(out, in);
  }
}

TEST(ExtentCodec, RejectsBadLength) {
  std::string enc = EncodeExtent(ExampleRecordExtent());
  ExtentValue v;
  ExpectCorruption(DecodeExtent("", &v), "extent value");
  for (size_t n = 1; n < enc.size(); ++n) {
    ExpectCorruption(DecodeExtent(enc.substr(0, n), &v), "expected 42");
  }
  ExpectCorruption(DecodeExtent(enc + '\0', &v), "expected 42");
}

TEST(ExtentCodec, RejectsUnknownKind) {
  for (uint8_t kind : {3, 128, 255}) {
    std::string enc = EncodeExtent(ExampleRecordExtent());
    enc[0] = static_cast<char>(kind);
    ExtentValue v;
    ExpectCorruption(DecodeExtent(enc, &v), "kind " + std::to_string(kind));
  }
}

TEST(ExtentCodec, RejectsUnknownCodec) {
  for (uint8_t codec : {2, 7, 255}) {
    std::string enc = EncodeExtent(ExampleRecordExtent());
    enc[29] = static_cast<char>(codec);
    ExtentValue v;
    ExpectCorruption(DecodeExtent(enc, &v), "codec " + std::to_string(codec) + " is unknown");
  }
}

TEST(ExtentCodec, RejectsWindowOutsideRecord) {
  struct Window {
    uint32_t skip, length, raw_len;
    bool ok;
  };
  const Window windows[] = {
      {0, 12, 12, true},
      {11, 1, 12, true},
      {6, 6, 12, true},
      {0, 13, 12, false},
      {12, 1, 12, false},
      {7, 6, 12, false},
      {0, 0, 12, false},  // empty extent
      {13, 0, 12, false},
      {0xffffffffu, 1, 0xffffffffu, false},  // skip + length wraps in 32 bits
      {1, 0xffffffffu, 0xffffffffu, false},
      {0, 1, 0, false},
  };
  for (const Window& w : windows) {
    ExtentValue e = ExampleRecordExtent();
    e.skip = w.skip;
    e.length = w.length;
    e.raw_len = w.raw_len;
    ExtentValue v;
    Status st = DecodeExtent(EncodeExtent(e), &v);
    if (w.ok) {
      EXPECT_TRUE(st.ok()) << w.skip << "+" << w.length << " of " << w.raw_len << ": "
                           << st.ToString();
    } else {
      ExpectCorruption(st, "outside record");
    }
  }
}

// ===========================================================================
// Segment stats.
// ===========================================================================

TEST(SegmentStatCodec, RoundTrip) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (SegmentStat in : {SegmentStat{}, SegmentStat{1, 2, 3, 4}, SegmentStat{-6, 6, 0, 0},
                         SegmentStat{kMin, kMax, -1, kMin}, SegmentStat{kMax, kMin, 5, -7}}) {
    std::string enc = EncodeSegmentStat(in);
    EXPECT_EQ(enc.size(), kSegmentStatSize);
    SegmentStat out{9, 9, 9, 9};
    ASSERT_TRUE(DecodeSegmentStat(enc, &out).ok());
    EXPECT_EQ(out, in);
  }
}

TEST(SegmentStatCodec, RejectsBadLength) {
  std::string enc = EncodeSegmentStat({1, 2, 3, 4});
  SegmentStat v;
  for (size_t n = 0; n < enc.size(); ++n) {
    ExpectCorruption(DecodeSegmentStat(enc.substr(0, n), &v), "expected 32");
  }
  ExpectCorruption(DecodeSegmentStat(enc + '\0', &v), "expected 32");
}

TEST(SegmentStatCheck, AcceptsWholeValuesAndRejectsImpossibleOnes) {
  EXPECT_TRUE(CheckSegmentStat(SegmentStat{}).ok());
  EXPECT_TRUE(CheckSegmentStat(SegmentStat{10485760, 4096, 1, 10489984}).ok());
  EXPECT_TRUE(CheckSegmentStat(SegmentStat{0, 0, 0, 0}).ok());
  ExpectCorruption(CheckSegmentStat(SegmentStat{-6, 6, 0, 0}), "live -6");
  ExpectCorruption(CheckSegmentStat(SegmentStat{6, -6, 0, 0}), "dead -6");
  ExpectCorruption(CheckSegmentStat(SegmentStat{0, 0, 1, -1}), "size -1");
  ExpectCorruption(CheckSegmentStat(SegmentStat{0, 0, 2, 0}), "sealed 2");
}

TEST(SegmentStatMerge, LiveAndDeadAddSealedAndSizeTakeTheMaximum) {
  EXPECT_EQ(MergeSegmentStat({10, 1, 0, 0}, {-6, 6, 0, 0}), (SegmentStat{4, 7, 0, 0}));
  EXPECT_EQ(MergeSegmentStat({10, 1, 1, 500}, {5, 0, 0, 0}), (SegmentStat{15, 1, 1, 500}));
  EXPECT_EQ(MergeSegmentStat({0, 0, 0, 100}, {0, 0, 1, 50}), (SegmentStat{0, 0, 1, 100}));
  // Sealing twice (e.g. an operand replayed) still leaves sealed = 1.
  EXPECT_EQ(MergeSegmentStat({7, 3, 1, 100}, {0, 0, 1, 100}), (SegmentStat{7, 3, 1, 100}));
  // The doc's sealed segment merged with the doc's delta.
  EXPECT_EQ(MergeSegmentStat({10485760, 4096, 1, 10489984}, {-6, 6, 0, 0}),
            (SegmentStat{10485754, 4102, 1, 10489984}));
  // An absent value counts as all zeros: merging into {} yields the operand.
  EXPECT_EQ(MergeSegmentStat({}, {3, 4, 1, 9}), (SegmentStat{3, 4, 1, 9}));

  // Any grouping and order of the operands gives the same result, so RocksDB
  // may combine partial merges as it likes.
  std::mt19937_64 rng(5);
  auto random_stat = [&rng] {
    return SegmentStat{static_cast<int64_t>(rng() % 2000) - 1000,
                       static_cast<int64_t>(rng() % 2000) - 1000, static_cast<int64_t>(rng() % 2),
                       static_cast<int64_t>(rng() % 100000)};
  };
  for (int i = 0; i < 1000; ++i) {
    SegmentStat a = random_stat(), b = random_stat(), c = random_stat();
    EXPECT_EQ(MergeSegmentStat(MergeSegmentStat(a, b), c),
              MergeSegmentStat(a, MergeSegmentStat(b, c)));
    EXPECT_EQ(MergeSegmentStat(a, b), MergeSegmentStat(b, a));
  }
}

// ===========================================================================
// Segment headers.
// ===========================================================================

TEST(SegmentHeaderCodec, RoundTrip) {
  for (uint64_t id : {0ull, 1ull, 99999999ull, 0xffffffffffffffffull}) {
    std::string enc = EncodeSegmentHeader(id);
    EXPECT_EQ(enc.size(), kSegmentHeaderSize);
    uint64_t got = ~id;
    ASSERT_TRUE(DecodeSegmentHeader(enc, &got).ok());
    EXPECT_EQ(got, id);
    // A decoder is handed the start of the file: bytes after the header are records.
    got = ~id;
    ASSERT_TRUE(DecodeSegmentHeader(enc + DocHex("record"), &got).ok());
    EXPECT_EQ(got, id);
  }
}

TEST(SegmentHeaderCodec, RejectsTruncation) {
  std::string enc = EncodeSegmentHeader(1);
  for (size_t n = 0; n < enc.size(); ++n) {
    uint64_t id;
    ExpectCorruption(DecodeSegmentHeader(enc.substr(0, n), &id), "expected 32");
  }
}

TEST(SegmentHeaderCodec, RejectsBadMagic) {
  for (int i = 0; i < 8; ++i) {
    std::string enc = EncodeSegmentHeader(1);
    enc[i] ^= 0x20;
    ResealSegmentHeader(&enc);  // so that only the magic is wrong
    uint64_t id;
    ExpectCorruption(DecodeSegmentHeader(enc, &id), "magic");
  }
  // The record magic is not a segment magic.
  uint64_t id;
  ExpectCorruption(DecodeSegmentHeader(std::string(32, '\0'), &id), "magic");
}

TEST(SegmentHeaderCodec, RejectsBadVersion) {
  for (uint32_t version : {0u, 2u, 0x01000000u}) {
    std::string enc = EncodeSegmentHeader(1);
    enc.replace(8, 4, LE32Bytes(version));
    ResealSegmentHeader(&enc);
    uint64_t id;
    ExpectCorruption(DecodeSegmentHeader(enc, &id),
                     "segment version " + std::to_string(version) + ", expected 1");
  }
}

TEST(SegmentHeaderCodec, EverySingleBitFlipIsDetected) {
  const std::string good = EncodeSegmentHeader(1);
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string enc = good;
      enc[i] ^= static_cast<char>(1 << bit);
      uint64_t id = 5;
      Status st = DecodeSegmentHeader(enc, &id);
      EXPECT_FALSE(st.ok()) << "byte " << i << " bit " << bit;
      EXPECT_EQ(st.code(), EIO);
      EXPECT_EQ(id, 5u) << "output changed on failure";
    }
  }
  // Reserved and id bytes are covered by the checksum.
  for (size_t i : {12u, 16u, 23u, 24u, 31u}) {
    std::string enc = good;
    enc[i] ^= 1;
    uint64_t id;
    ExpectCorruption(DecodeSegmentHeader(enc, &id), "checksum mismatch");
  }
}

// The one reading of a segment file's header: the bytes of a file read
// through a callback, a short file and a wrong id as corruption, a read
// error as it is.
TEST(ReadSegmentHeader, ChecksWhatTheFileHolds) {
  std::string file = EncodeSegmentHeader(7) + DocHex("record");
  size_t asked = 0;
  const ReadAtFn read_file = [&](uint64_t off, size_t len, char* buf) -> Result<size_t> {
    asked = len;
    if (off >= file.size()) return size_t{0};
    const size_t n = std::min<size_t>(len, file.size() - off);
    std::memcpy(buf, file.data() + off, n);
    return n;
  };
  EXPECT_TRUE(ReadSegmentHeader(read_file, 7).ok());
  EXPECT_EQ(asked, kSegmentHeaderSize);
  ExpectCorruption(ReadSegmentHeader(read_file, 8), "segment");
  file.resize(kSegmentHeaderSize - 1);
  ExpectCorruption(ReadSegmentHeader(read_file, 7), "the file has 31 bytes");
  file.clear();
  ExpectCorruption(ReadSegmentHeader(read_file, 7), "the file has 0 bytes");
  file = EncodeSegmentHeader(7);
  file[0] ^= 1;
  ExpectCorruption(ReadSegmentHeader(read_file, 7), "magic");
  const ReadAtFn failing = [](uint64_t, size_t, char*) -> Result<size_t> {
    return Status(EACCES, "denied");
  };
  const Status st = ReadSegmentHeader(failing, 7);
  EXPECT_EQ(st.code(), EACCES);
  EXPECT_FALSE(st.IsCorruption());
}

// ===========================================================================
// Record headers.
// ===========================================================================

TEST(RecordHeaderCodec, RoundTrip) {
  RecordHeader max;
  max.codec = Codec::kZstd;
  max.ino = max.file_offset = max.payload_checksum = std::numeric_limits<uint64_t>::max();
  max.raw_len = 0xffffffffu;
  max.stored_len = 0xfffffffeu;
  RecordHeader raw;
  raw.ino = 2;
  raw.file_offset = 1ull << 40;
  raw.raw_len = raw.stored_len = 1u << 20;
  raw.payload_checksum = 0x0123456789abcdefull;
  RecordHeader distinct;  // every field different
  distinct.codec = Codec::kZstd;
  distinct.ino = 11;
  distinct.file_offset = 22;
  distinct.raw_len = 33;
  distinct.stored_len = 44;
  distinct.payload_checksum = 55;
  for (const RecordHeader& in : {RecordHeader(), max, raw, distinct}) {
    std::string enc = EncodeRecordHeader(in);
    ASSERT_EQ(enc.size(), kRecordHeaderSize);
    EXPECT_EQ(Hex(enc.substr(0, 4)), "43 4b 50 52");  // "CKPR"
    RecordHeader out;
    out.ino = 99;
    ASSERT_TRUE(DecodeRecordHeader(enc, &out).ok());
    EXPECT_EQ(out, in);
  }
}

TEST(RecordHeaderCodec, RejectsTruncation) {
  std::string enc = DocHex("record");
  for (size_t n = 0; n < kRecordHeaderSize; ++n) {
    RecordHeader h;
    ExpectCorruption(DecodeRecordHeader(enc.substr(0, n), &h), "expected 48");
  }
}

TEST(RecordHeaderCodec, RejectsBadMagic) {
  for (int i = 0; i < 4; ++i) {
    std::string enc = EncodeRecordHeader(RecordHeader());
    enc[i] ^= 0x01;
    ResealRecordHeader(&enc);
    RecordHeader h;
    ExpectCorruption(DecodeRecordHeader(enc, &h), "expected 0x52504b43");
  }
  // A zero-filled gap left by a crash is not a record.
  RecordHeader h;
  ExpectCorruption(DecodeRecordHeader(std::string(48, '\0'), &h), "record magic 0x00000000");
  // Nor is a segment header.
  ExpectCorruption(DecodeRecordHeader(EncodeSegmentHeader(1) + std::string(16, '\0'), &h),
                   "record magic");
}

TEST(RecordHeaderCodec, RejectsBadVersion) {
  for (uint8_t version : {0, 2, 255}) {
    std::string enc = EncodeRecordHeader(RecordHeader());
    enc[4] = static_cast<char>(version);
    ResealRecordHeader(&enc);
    RecordHeader h;
    ExpectCorruption(DecodeRecordHeader(enc, &h),
                     "record version " + std::to_string(version) + ", expected 1");
  }
}

TEST(RecordHeaderCodec, RejectsUnknownCodec) {
  for (uint8_t codec : {2, 3, 255}) {
    std::string enc = EncodeRecordHeader(RecordHeader());
    enc[5] = static_cast<char>(codec);
    ResealRecordHeader(&enc);
    RecordHeader h;
    ExpectCorruption(DecodeRecordHeader(enc, &h), "codec " + std::to_string(codec) + " is unknown");
  }
}

TEST(RecordHeaderCodec, RejectsRawRecordWithDifferentLengths) {
  RecordHeader in;
  in.raw_len = 12;
  in.stored_len = 11;
  RecordHeader h;
  ExpectCorruption(DecodeRecordHeader(EncodeRecordHeader(in), &h), "uncompressed record");
  in.codec = Codec::kZstd;  // compressed: the lengths differ
  EXPECT_TRUE(DecodeRecordHeader(EncodeRecordHeader(in), &h).ok());
}

TEST(RecordHeaderCodec, EverySingleBitFlipIsDetected) {
  const std::string good = DocHex("record").substr(0, kRecordHeaderSize);
  ASSERT_EQ(good.size(), kRecordHeaderSize);
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string enc = good;
      enc[i] ^= static_cast<char>(1 << bit);
      RecordHeader h;
      Status st = DecodeRecordHeader(enc, &h);
      EXPECT_FALSE(st.ok()) << "byte " << i << " bit " << bit;
      EXPECT_EQ(st.code(), EIO);
      if (i >= 4) {
        EXPECT_NE(st.message().find("header checksum mismatch"), std::string::npos)
            << "byte " << i << ": " << st.message();
      }
    }
  }
}

// ===========================================================================
// Records: build, payload decoding, compression.
// ===========================================================================

std::string Compressible(size_t n) {
  std::string s;
  while (s.size() < n) s += "optimizer.state.step=000123 ";
  s.resize(n);
  return s;
}

// Decodes a whole record (header + payload) as a reader does.
Status ReadRecord(std::string_view record, RecordHeader* h, std::string* data) {
  CKPTFS_RETURN_IF_ERROR(DecodeRecordHeader(record, h));
  if (record.size() != kRecordHeaderSize + h->stored_len) {
    return Status::Corruption("record size does not match its header");
  }
  return DecodeRecordPayload(*h, record.substr(kRecordHeaderSize), data);
}

TEST(Records, RawRoundTrip) {
  for (std::string data : {std::string(), std::string("x"), std::string(kHelloData),
                           RandomBytes(1 << 20, 1), Compressible(1 << 16)}) {
    RecordHeader built;
    std::string record = BuildRecord(7, 4096, data, 0, &built);
    EXPECT_EQ(built.codec, Codec::kNone);
    EXPECT_EQ(built.ino, 7u);
    EXPECT_EQ(built.file_offset, 4096u);
    EXPECT_EQ(built.raw_len, data.size());
    EXPECT_EQ(built.stored_len, data.size());
    EXPECT_EQ(built.payload_checksum, Checksum(data));
    ASSERT_EQ(record.size(), kRecordHeaderSize + data.size());
    EXPECT_EQ(record.substr(kRecordHeaderSize), data);
    RecordHeader h;
    std::string out = "stale";
    ASSERT_TRUE(ReadRecord(record, &h, &out).ok());
    EXPECT_EQ(h, built);
    EXPECT_EQ(out, data);
  }
}

TEST(Records, ZstdKeepsCompressibleDataCompressed) {
  for (int level : {1, 3, 19}) {
    std::string data = Compressible(1 << 20);
    RecordHeader built;
    std::string record = BuildRecord(3, 1 << 20, data, level, &built);
    EXPECT_EQ(built.codec, Codec::kZstd) << "level " << level;
    EXPECT_EQ(built.raw_len, data.size());
    EXPECT_LT(built.stored_len, data.size() / 10);
    ASSERT_EQ(record.size(), kRecordHeaderSize + built.stored_len);
    EXPECT_EQ(built.payload_checksum, Checksum(std::string_view(record).substr(kRecordHeaderSize)));
    RecordHeader h;
    std::string out;
    ASSERT_TRUE(ReadRecord(record, &h, &out).ok());
    EXPECT_EQ(h, built);
    EXPECT_EQ(out, data);
  }
}

TEST(Records, ZstdKeepsIncompressibleDataRaw) {
  std::string data = RandomBytes(1 << 16, 2);
  RecordHeader built;
  std::string record = BuildRecord(3, 0, data, 3, &built);
  EXPECT_EQ(built.codec, Codec::kNone);
  EXPECT_EQ(built.stored_len, data.size());
  EXPECT_EQ(record.substr(kRecordHeaderSize), data);
  RecordHeader h;
  std::string out;
  ASSERT_TRUE(ReadRecord(record, &h, &out).ok());
  EXPECT_EQ(out, data);
}

TEST(Records, ZstdIsNotTriedForSixtyFourBytesOrLess) {
  // As docs/FORMAT.md says: data of 64 bytes or less is stored raw.
  RecordHeader built;
  BuildRecord(1, 0, std::string(64, '\0'), 3, &built);
  EXPECT_EQ(built.codec, Codec::kNone);
  std::string record = BuildRecord(1, 0, std::string(65, '\0'), 3, &built);
  EXPECT_EQ(built.codec, Codec::kZstd);
  RecordHeader h;
  std::string out;
  ASSERT_TRUE(ReadRecord(record, &h, &out).ok());
  EXPECT_EQ(out, std::string(65, '\0'));
}

TEST(Records, PrepareRecordMatchesBuildRecord) {
  for (int level : {0, 3}) {
    for (const std::string& data : {Compressible(100000), RandomBytes(5000, 9), std::string()}) {
      PreparedRecord r = PrepareRecord(4, 8, data, level);
      RecordHeader built;
      std::string record = BuildRecord(4, 8, data, level, &built);
      EXPECT_EQ(r.header, built);
      EXPECT_EQ(Hex(r.header_bytes), Hex(record.substr(0, kRecordHeaderSize)));
      EXPECT_EQ(r.compressed.empty(), r.header.codec == Codec::kNone);
      std::string_view payload = r.compressed.empty() ? std::string_view(data) : r.compressed;
      EXPECT_EQ(payload, std::string_view(record).substr(kRecordHeaderSize));
    }
  }
}

TEST(Records, RejectsPayloadOfWrongLength) {
  std::string record = DocHex("record");
  RecordHeader h;
  ASSERT_TRUE(DecodeRecordHeader(record, &h).ok());
  std::string payload = record.substr(kRecordHeaderSize);
  std::string out;
  ExpectCorruption(DecodeRecordPayload(h, payload.substr(0, 11), &out), "11 bytes, expected 12");
  ExpectCorruption(DecodeRecordPayload(h, payload + "!", &out), "13 bytes, expected 12");
  ExpectCorruption(DecodeRecordPayload(h, "", &out), "0 bytes, expected 12");
  EXPECT_TRUE(VerifyRecordPayload(h, payload).ok());
  ExpectCorruption(VerifyRecordPayload(h, payload.substr(0, 11)), "11 bytes, expected 12");
  ExpectCorruption(VerifyRecordPayload(h, payload + "!"), "13 bytes, expected 12");
}

TEST(Records, RejectsPayloadChecksumMismatch) {
  for (int level : {0, 3}) {
    std::string data = Compressible(100000);
    RecordHeader h;
    std::string record = BuildRecord(1, 0, data, level, &h);
    ASSERT_EQ(h.codec, level ? Codec::kZstd : Codec::kNone);
    for (size_t i : {kRecordHeaderSize, kRecordHeaderSize + h.stored_len / 2, record.size() - 1}) {
      std::string bad = record;
      bad[i] ^= 0x40;
      RecordHeader got;
      std::string out;
      ExpectCorruption(ReadRecord(bad, &got, &out), "payload checksum mismatch");
      ASSERT_TRUE(DecodeRecordHeader(bad, &got).ok());
      ExpectCorruption(VerifyRecordPayload(got, std::string_view(bad).substr(kRecordHeaderSize)),
                       "payload checksum mismatch");
    }
    // A wrong checksum in the header (resealed, so the header itself decodes).
    std::string bad = record;
    bad[32] ^= 1;
    ResealRecordHeader(&bad);
    RecordHeader got;
    std::string out;
    ExpectCorruption(ReadRecord(bad, &got, &out), "payload checksum mismatch");
  }
}

TEST(Records, RejectsZstdPayloadOfWrongDecodedSize) {
  std::string data = Compressible(100000);
  RecordHeader built;
  std::string record = BuildRecord(1, 0, data, 3, &built);
  ASSERT_EQ(built.codec, Codec::kZstd);
  for (uint32_t raw_len : {built.raw_len - 1, built.raw_len + 1, 0u}) {
    RecordHeader h = built;
    h.raw_len = raw_len;
    std::string out;
    ExpectCorruption(
        DecodeRecordPayload(h, std::string_view(record).substr(kRecordHeaderSize), &out),
        "zstd payload does not decode to " + std::to_string(raw_len));
  }
}

TEST(Records, RejectsPayloadThatIsNotZstd) {
  // Raw bytes labelled zstd, with checksums that match: the frame check fails.
  RecordHeader h;
  std::string payload = Compressible(200);
  h.codec = Codec::kZstd;
  h.raw_len = 400;
  h.stored_len = static_cast<uint32_t>(payload.size());
  h.payload_checksum = Checksum(payload);
  std::string out;
  ExpectCorruption(DecodeRecordPayload(h, payload, &out), "zstd payload");
  // A truncated zstd frame whose checksum was recomputed.
  RecordHeader built;
  std::string record = BuildRecord(1, 0, Compressible(100000), 3, &built);
  ASSERT_EQ(built.codec, Codec::kZstd);
  std::string frame = record.substr(kRecordHeaderSize, built.stored_len - 1);
  built.stored_len -= 1;
  built.payload_checksum = Checksum(frame);
  ExpectCorruption(DecodeRecordPayload(built, frame, &out), "zstd payload");
}

// ---- The one record-versus-extent check and the segment header check ----

TEST(RecordForExtent, AcceptsTheRecordAndEveryWindowOfIt) {
  RecordHeader h;
  BuildRecord(9, 4096, Compressible(10000), 0, &h);
  ExtentValue e;
  e.segment_id = 3;
  e.record_offset = 32;
  e.stored_len = h.stored_len;
  e.raw_len = h.raw_len;
  e.codec = h.codec;
  e.checksum = h.payload_checksum;
  e.length = 10000;
  EXPECT_TRUE(CheckRecordForExtent(h, e, 9, 4096).ok());
  e.skip = 2000;
  e.length = 8000;
  EXPECT_TRUE(CheckRecordForExtent(h, e, 9, 6096).ok());
}

TEST(RecordForExtent, NamesEveryFieldThatDiffers) {
  RecordHeader h;
  BuildRecord(9, 4096, Compressible(10000), 3, &h);
  ExtentValue good;
  good.stored_len = h.stored_len;
  good.raw_len = h.raw_len;
  good.codec = h.codec;
  good.checksum = h.payload_checksum;
  good.skip = 100;
  good.length = 500;
  ASSERT_TRUE(CheckRecordForExtent(h, good, 9, 4196).ok());
  struct Case {
    const char* field;
    std::function<void(ExtentValue*, uint64_t*, uint64_t*)> change;
  };
  const std::vector<Case> cases = {
      {"stored_len", [](ExtentValue* e, uint64_t*, uint64_t*) { e->stored_len += 1; }},
      {"raw_len", [](ExtentValue* e, uint64_t*, uint64_t*) { e->raw_len -= 1; }},
      {"codec", [](ExtentValue* e, uint64_t*, uint64_t*) { e->codec = Codec::kNone; }},
      {"payload checksum", [](ExtentValue* e, uint64_t*, uint64_t*) { e->checksum ^= 1; }},
      {"inode", [](ExtentValue*, uint64_t* ino, uint64_t*) { *ino = 10; }},
      {"file offset", [](ExtentValue*, uint64_t*, uint64_t* off) { *off += 1; }},
      {"file offset", [](ExtentValue* e, uint64_t*, uint64_t*) { e->skip += 1; }},
      {"window end", [](ExtentValue* e, uint64_t*, uint64_t*) { e->length = 9901; }},
  };
  for (const Case& c : cases) {
    ExtentValue e = good;
    uint64_t ino = 9, off = 4196;
    c.change(&e, &ino, &off);
    ExpectCorruption(CheckRecordForExtent(h, e, ino, off), c.field);
  }
  ExtentValue in = good;
  in.is_inline = true;
  ExpectCorruption(CheckRecordForExtent(h, in, 9, 4196), "inline");
}

TEST(SegmentHeaderCheck, AcceptsItsOwnIdOnly) {
  const std::string hdr = EncodeSegmentHeader(77);
  EXPECT_TRUE(CheckSegmentHeader(hdr, 77).ok());
  ExpectCorruption(CheckSegmentHeader(hdr, 78), "names segment 77, expected 78");
  ExpectCorruption(CheckSegmentHeader(hdr.substr(0, 20), 77), "segment header");
  std::string bad = hdr;
  bad[0] ^= 1;
  ExpectCorruption(CheckSegmentHeader(bad, 77), "magic");
}

}  // namespace
}  // namespace ckptfs::format
