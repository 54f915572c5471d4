#include "format/format.h"

#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#endif
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace ckptfs::format {

void PutBE32(std::string* dst, uint32_t v) {
  PutBE64(dst, v);
  dst->erase(dst->size() - 8, 4);
}

void PutBE64(std::string* dst, uint64_t v) {
  char b[8];
  for (int i = 7; i >= 0; --i) {
    b[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  dst->append(b, 8);
}

uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint32_t GetBE32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

namespace {
template <typename T>
void PutLE(std::string* dst, T v) {
  char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) {
    b[i] = static_cast<char>(v & 0xff);
    v = static_cast<T>(v >> 8);
  }
  dst->append(b, sizeof(T));
}
template <typename T>
T GetLE(const char* p) {
  T v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | static_cast<uint8_t>(p[i]));
  return v;
}
Status Short(const char* what, size_t got, size_t want) {
  return Status::Corruption(std::string(what) + ": " + std::to_string(got) +
                            " bytes, expected " + std::to_string(want));
}
}  // namespace

void PutLE16(std::string* dst, uint16_t v) { PutLE(dst, v); }
void PutLE32(std::string* dst, uint32_t v) { PutLE(dst, v); }
void PutLE64(std::string* dst, uint64_t v) { PutLE(dst, v); }
uint16_t GetLE16(const char* p) { return GetLE<uint16_t>(p); }
uint32_t GetLE32(const char* p) { return GetLE<uint32_t>(p); }
uint64_t GetLE64(const char* p) { return GetLE<uint64_t>(p); }

// XXH3 is defined by its result, not by the instructions that compute it:
// on x86-64 libxxhash's dispatcher runs the widest vector code the CPU has
// (AVX2 or AVX-512), where XXH3_64bits is built for the baseline and hashes
// a MiB about ten times slower (bench/checksum_bench).
uint64_t Checksum(std::string_view data) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(data.data(), data.size());
#else
  return XXH3_64bits(data.data(), data.size());
#endif
}

// ---- Store directory. ----
namespace {
constexpr char kFormatMagicLine[] = "ckptfs store format ";
}

std::string FormatFileContents() {
  return std::string(kFormatMagicLine) + std::to_string(kFormatVersion) + "\n";
}

namespace {

// Parses `contents`, lines of "KEY=VALUE", into the values of `keys` (each
// once, none empty; every one present but those named in `optional`).
// `file` names the file in errors.
Status ParseKeyLines(std::string_view contents, std::string_view file,
                     std::initializer_list<std::pair<std::string_view, std::string*>> keys,
                     std::initializer_list<std::string_view> optional = {}) {
  std::vector<bool> seen(keys.size(), false);
  while (!contents.empty()) {
    const size_t nl = contents.find('\n');
    std::string_view line = contents.substr(0, nl);
    contents = nl == std::string_view::npos ? std::string_view() : contents.substr(nl + 1);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string_view key = line.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : line.substr(eq + 1);
    size_t i = 0;
    for (const auto& [name, out] : keys) {
      if (key == name && !value.empty() && !seen[i]) {
        *out = std::string(value);
        seen[i] = true;
        break;
      }
      ++i;
    }
    if (i == keys.size()) {
      return Status::Corruption(std::string(file) + " file: bad line \"" + std::string(line) + "\"");
    }
  }
  size_t i = 0;
  for (const auto& [name, out] : keys) {
    if (!seen[i++] && std::find(optional.begin(), optional.end(), name) == optional.end()) {
      return Status::Corruption(std::string(file) + " file: no " + std::string(name) + " line");
    }
  }
  return Status::OK();
}

}  // namespace

std::string SharedFileContents(const SharedIndex& v) {
  return "meta=" + v.meta + "\nschema=" + v.schema + "\n";
}

Status ParseSharedFile(std::string_view contents, SharedIndex* v) {
  SharedIndex out;
  CKPTFS_RETURN_IF_ERROR(
      ParseKeyLines(contents, kSharedFileName, {{"meta", &out.meta}, {"schema", &out.schema}}));
  *v = std::move(out);
  return Status::OK();
}

std::string StorageFileContents(const DataStorage& v) {
  return "data=" + v.data + "\nprefix=" + v.prefix + "\n" +
         (v.endpoint.empty() ? "" : "endpoint=" + v.endpoint + "\n");
}

Status ParseStorageFile(std::string_view contents, DataStorage* v) {
  DataStorage out;
  CKPTFS_RETURN_IF_ERROR(ParseKeyLines(
      contents, kStorageFileName,
      {{"data", &out.data}, {"prefix", &out.prefix}, {"endpoint", &out.endpoint}}, {"endpoint"}));
  // An S3 bucket is reached through its endpoint; a RADOS pool has none.
  if (out.data.starts_with("s3://") != !out.endpoint.empty()) {
    return Status::Corruption(std::string(kStorageFileName) + " file: data=" + out.data +
                              (out.endpoint.empty() ? " without an endpoint line"
                                                    : " with an endpoint line"));
  }
  *v = std::move(out);
  return Status::OK();
}

Status ParseFormatFile(std::string_view contents) {
  std::string_view magic(kFormatMagicLine);
  if (contents.substr(0, magic.size()) != magic) {
    return Status::Corruption("FORMAT file does not start with \"" + std::string(magic) + "\"");
  }
  std::string_view rest = contents.substr(magic.size());
  uint32_t version = 0;
  size_t i = 0;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
    // Nine digits cannot overflow; a longer number must not wrap to a valid one.
    if (i == 9) return Status::Corruption("FORMAT file version number is too long");
    version = version * 10 + static_cast<uint32_t>(rest[i] - '0');
  }
  if (i == 0) return Status::Corruption("FORMAT file has no version number");
  if (i < rest.size() && rest[i] != '\n') {
    return Status::Corruption("FORMAT file version number is followed by junk");
  }
  if (version != kFormatVersion) {
    return Status(EINVAL, "store format version " + std::to_string(version) +
                              " is not supported (this build reads version " +
                              std::to_string(kFormatVersion) + ")");
  }
  return Status::OK();
}

namespace {
// DIR + "/" + the number padded to 8 decimal digits + ext.
std::string NumberedFileName(const char* dir, uint64_t id, const char* ext) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08llu%s", static_cast<unsigned long long>(id), ext);
  return std::string(dir) + "/" + buf;
}

// Inverse of NumberedFileName's base name.
bool ParseNumberedFileName(std::string_view name, std::string_view ext, uint64_t* id) {
  if (name.size() <= ext.size() || name.substr(name.size() - ext.size()) != ext) return false;
  std::string_view digits = name.substr(0, name.size() - ext.size());
  if (digits.size() < 8 || digits.size() > 20) return false;
  // Names are padded to exactly 8 digits: a longer name with a leading zero
  // is not one of them (and would alias another file's number).
  if (digits.size() > 8 && digits[0] == '0') return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;  // does not fit in 64 bits
    v = v * 10 + d;
  }
  *id = v;
  return true;
}
}  // namespace

std::string SegmentFileName(uint64_t segment_id) {
  return NumberedFileName(kSegmentsDirName, segment_id, ".seg");
}

bool ParseSegmentFileName(std::string_view name, uint64_t* segment_id) {
  return ParseNumberedFileName(name, ".seg", segment_id);
}

std::string DataFileName(uint64_t ino) { return NumberedFileName(kDataDirName, ino, ".dat"); }

bool ParseDataFileName(std::string_view name, uint64_t* ino) {
  return ParseNumberedFileName(name, ".dat", ino);
}

// ---- Keys. ----
std::string InodeKey(uint64_t ino) {
  std::string k;
  PutBE64(&k, ino);
  return k;
}
std::string DentryPrefix(uint64_t parent) { return InodeKey(parent); }
std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string k = DentryPrefix(parent);
  k.append(name);
  return k;
}
std::string ExtentPrefix(uint64_t ino) { return InodeKey(ino); }
std::string ExtentKey(uint64_t ino, uint64_t file_offset) {
  std::string k = ExtentPrefix(ino);
  PutBE64(&k, file_offset);
  return k;
}
std::string SegmentKey(uint64_t segment_id) { return InodeKey(segment_id); }
std::string XattrKey(uint64_t ino, std::string_view name) { return DentryKey(ino, name); }
std::string OrphanKey(uint64_t ino) {
  std::string k(kMetaOrphanPrefix);
  PutBE64(&k, ino);
  return k;
}

std::string HostKey(std::string_view name) {
  std::string k(kMetaHostPrefix);
  k.append(name);
  return k;
}

std::string PeerKey(std::string_view host_name) {
  std::string k(kMetaPeerPrefix);
  k.append(host_name);
  return k;
}

std::string OwnerKey(uint64_t ino) {
  std::string k(kMetaOwnerPrefix);
  PutBE64(&k, ino);
  return k;
}

std::string GiveUpPrefix(uint32_t host) {
  std::string k(kMetaGiveUpPrefix);
  PutBE32(&k, host);
  return k;
}

std::string GiveUpKey(uint32_t host, uint64_t ino) {
  std::string k = GiveUpPrefix(host);
  PutBE64(&k, ino);
  return k;
}

std::string ReadersPrefix(uint64_t ino) {
  std::string k(kMetaReaderPrefix);
  PutBE64(&k, ino);
  return k;
}

std::string ReaderKey(uint64_t ino, uint32_t host) {
  std::string k = ReadersPrefix(ino);
  PutBE32(&k, host);
  return k;
}

std::string SealKey(uint64_t ino) {
  std::string k(kMetaSealPrefix);
  PutBE64(&k, ino);
  return k;
}

std::string EncodeSeal(const SealValue& v) {
  std::string s;
  s.push_back(static_cast<char>(v.snapshot.empty() ? kSealValueVersion : kSealValueVersion2));
  PutLE64(&s, static_cast<uint64_t>(v.sealed_ms));
  PutLE64(&s, v.inodes);
  PutLE64(&s, v.logical_bytes);
  if (!v.snapshot.empty()) {
    PutLE16(&s, static_cast<uint16_t>(v.snapshot.size()));
    s.append(v.snapshot);
  }
  return s;
}

Status DecodeSeal(std::string_view in, SealValue* v) {
  if (in.empty()) return Short("seal value", 0, 25);
  const uint8_t version = static_cast<uint8_t>(in[0]);
  if (version != kSealValueVersion && version != kSealValueVersion2) {
    return Status::Corruption("seal value has version " + std::to_string(version));
  }
  const size_t fixed = version == kSealValueVersion ? 25 : 27;
  if (in.size() < fixed) return Short("seal value", in.size(), fixed);
  v->sealed_ms = static_cast<int64_t>(GetLE64(in.data() + 1));
  v->inodes = GetLE64(in.data() + 9);
  v->logical_bytes = GetLE64(in.data() + 17);
  v->snapshot.clear();
  if (version == kSealValueVersion2) {
    const size_t name = GetLE16(in.data() + 25);
    if (in.size() != fixed + name) return Short("seal value", in.size(), fixed + name);
    if (name == 0) return Status::Corruption("seal value names an empty snapshot");
    v->snapshot.assign(in.substr(fixed, name));
  } else if (in.size() != fixed) {
    return Short("seal value", in.size(), fixed);
  }
  if (v->inodes == 0) return Status::Corruption("seal value counts no inode");
  return Status::OK();
}

std::string EncodeOwner(const OwnerValue& v) {
  std::string s;
  PutLE32(&s, v.id);
  PutLE32(&s, v.pid);
  PutLE16(&s, static_cast<uint16_t>(v.machine.size()));
  s.append(v.machine);
  return s;
}

Status DecodeOwner(std::string_view in, OwnerValue* v) {
  if (in.size() < 10) return Short("owner value", in.size(), 10);
  v->id = GetLE32(in.data());
  v->pid = GetLE32(in.data() + 4);
  const size_t machine = GetLE16(in.data() + 8);
  if (in.size() != 10 + machine) return Short("owner value", in.size(), 10 + machine);
  v->machine.assign(in.substr(10, machine));
  if (v->id == 0 || v->id > kMaxHostId) {
    return Status::Corruption("owner value has id " + std::to_string(v->id));
  }
  return Status::OK();
}

std::string EncodeHost(const HostValue& v) {
  std::string s;
  PutLE32(&s, v.id);
  PutLE64(&s, static_cast<uint64_t>(v.lease_until_ms));
  PutLE32(&s, v.pid);
  PutLE16(&s, static_cast<uint16_t>(v.machine.size()));
  s.append(v.machine);
  s.append(v.holder);
  return s;
}

Status DecodeHost(std::string_view in, HostValue* v) {
  if (in.size() < 18) return Short("host value", in.size(), 18);
  v->id = GetLE32(in.data());
  v->lease_until_ms = static_cast<int64_t>(GetLE64(in.data() + 4));
  v->pid = GetLE32(in.data() + 12);
  const size_t machine = GetLE16(in.data() + 16);
  if (in.size() < 18 + machine) return Short("host value", in.size(), 18 + machine);
  v->machine.assign(in.substr(18, machine));
  v->holder.assign(in.substr(18 + machine));
  if (v->id == 0 || v->id > kMaxHostId) {
    return Status::Corruption("host value has id " + std::to_string(v->id));
  }
  return Status::OK();
}

// ---- Inodes. ----
namespace {
constexpr size_t kInodeFixedSize1 = 1 + 5 * 4 + 8 + 3 * 12 + 8 + 8 + 4;  // 85
constexpr size_t kInodeFixedSize = kInodeFixedSize1 + 8;                    // 93
constexpr size_t kInodeFixedSize3 = kInodeFixedSize + 8;                     // 101
constexpr size_t kInodeFixedSize4 = kInodeFixedSize3 + 4;                    // 105
}

std::string EncodeInode(const InodeValue& v) {
  std::string s;
  s.reserve(kInodeFixedSize4 + v.symlink_target.size());
  const bool v4 = v.flags != 0;
  const bool v3 = v4 || v.data_file_end != 0;
  s.push_back(static_cast<char>(v4   ? kInodeValueVersion4
                                : v3 ? kInodeValueVersion3
                                : v.data_bytes_known ? kInodeValueVersion2
                                                     : kInodeValueVersion1));
  PutLE32(&s, v.mode);
  PutLE32(&s, v.uid);
  PutLE32(&s, v.gid);
  PutLE32(&s, v.nlink);
  PutLE32(&s, v.rdev);
  PutLE64(&s, v.size);
  PutLE64(&s, static_cast<uint64_t>(v.atime_sec));
  PutLE32(&s, v.atime_nsec);
  PutLE64(&s, static_cast<uint64_t>(v.mtime_sec));
  PutLE32(&s, v.mtime_nsec);
  PutLE64(&s, static_cast<uint64_t>(v.ctime_sec));
  PutLE32(&s, v.ctime_nsec);
  PutLE64(&s, v.generation);
  PutLE64(&s, v.parent);
  if (v.data_bytes_known || v3) PutLE64(&s, v.data_bytes);
  if (v3) PutLE64(&s, v.data_file_end);
  if (v4) PutLE32(&s, v.flags);
  PutLE32(&s, static_cast<uint32_t>(v.symlink_target.size()));
  s.append(v.symlink_target);
  return s;
}

Status DecodeInode(std::string_view in, InodeValue* v) {
  if (in.empty()) return Short("inode value", 0, kInodeFixedSize1);
  const uint8_t version = static_cast<uint8_t>(in[0]);
  if (version < kInodeValueVersion1 || version > kInodeValueVersion4) {
    return Status::Corruption("inode value version " + std::to_string(version) + ", expected " +
                              std::to_string(kInodeValueVersion1) + " to " +
                              std::to_string(kInodeValueVersion4));
  }
  const size_t fixed = version == kInodeValueVersion4   ? kInodeFixedSize4
                       : version == kInodeValueVersion3 ? kInodeFixedSize3
                       : version == kInodeValueVersion2 ? kInodeFixedSize
                                                        : kInodeFixedSize1;
  if (in.size() < fixed) return Short("inode value", in.size(), fixed);
  const char* p = in.data() + 1;
  auto u32 = [&p] { uint32_t x = GetLE32(p); p += 4; return x; };
  auto u64 = [&p] { uint64_t x = GetLE64(p); p += 8; return x; };
  v->mode = u32();
  v->uid = u32();
  v->gid = u32();
  v->nlink = u32();
  v->rdev = u32();
  v->size = u64();
  v->atime_sec = static_cast<int64_t>(u64());
  v->atime_nsec = u32();
  v->mtime_sec = static_cast<int64_t>(u64());
  v->mtime_nsec = u32();
  v->ctime_sec = static_cast<int64_t>(u64());
  v->ctime_nsec = u32();
  v->generation = u64();
  v->parent = u64();
  v->data_bytes_known = version != kInodeValueVersion1;
  v->data_bytes = v->data_bytes_known ? u64() : 0;
  v->data_file_end = version >= kInodeValueVersion3 ? u64() : 0;
  if (version == kInodeValueVersion3 && v->data_file_end == 0) {
    return Status::Corruption("inode value version 3 with data file end 0");
  }
  v->flags = version == kInodeValueVersion4 ? u32() : 0;
  if (version == kInodeValueVersion4 && (v->flags == 0 || (v->flags & ~kInodeKnownFlags) != 0)) {
    return Status::Corruption("inode value version 4 with flags " + std::to_string(v->flags));
  }
  uint32_t tlen = u32();
  if (in.size() != fixed + tlen) return Short("inode value", in.size(), fixed + tlen);
  v->symlink_target.assign(p, tlen);
  return Status::OK();
}

// ---- Dentries. ----
std::string EncodeDentry(const DentryValue& v) {
  std::string s;
  PutLE64(&s, v.ino);
  s.push_back(static_cast<char>(v.type));
  return s;
}

Status DecodeDentry(std::string_view in, DentryValue* v) {
  if (in.size() != 9) return Short("dentry value", in.size(), 9);
  v->ino = GetLE64(in.data());
  v->type = static_cast<uint8_t>(in[8]);
  if (v->ino == 0) return Status::Corruption("dentry value names inode 0");
  return Status::OK();
}

// ---- Extents. ----
std::string EncodeExtent(const ExtentValue& v) {
  std::string s;
  if (v.is_inline) {
    s.reserve(1 + v.inline_data.size());
    s.push_back(static_cast<char>(kExtentInline));
    s.append(v.inline_data);
    return s;
  }
  if (v.in_data_file) {
    s.reserve(kExtentDataFileValueSize);
    s.push_back(static_cast<char>(kExtentDataFile));
    PutLE32(&s, v.length);
    PutLE64(&s, v.record_offset);
    PutLE32(&s, v.stored_len);
    PutLE32(&s, v.skip);
    PutLE64(&s, v.checksum);
    return s;
  }
  s.reserve(kExtentRecordValueSize);
  s.push_back(static_cast<char>(kExtentRecord));
  PutLE32(&s, v.length);
  PutLE64(&s, v.segment_id);
  PutLE64(&s, v.record_offset);
  PutLE32(&s, v.stored_len);
  PutLE32(&s, v.raw_len);
  s.push_back(static_cast<char>(v.codec));
  PutLE32(&s, v.skip);
  PutLE64(&s, v.checksum);
  return s;
}

Status DecodeExtent(std::string_view in, ExtentValue* v) {
  if (in.empty()) return Short("extent value", 0, 1);
  uint8_t kind = static_cast<uint8_t>(in[0]);
  if (kind == kExtentInline) {
    *v = ExtentValue();
    v->is_inline = true;
    v->in_data_file = false;
    v->inline_data.assign(in.substr(1));
    v->length = static_cast<uint32_t>(v->inline_data.size());
    return Status::OK();
  }
  if (kind == kExtentDataFile) {
    if (in.size() != kExtentDataFileValueSize) {
      return Short("extent value", in.size(), kExtentDataFileValueSize);
    }
    const char* p = in.data() + 1;
    *v = ExtentValue();
    v->in_data_file = true;
    v->length = GetLE32(p);
    v->record_offset = GetLE64(p + 4);
    v->stored_len = v->raw_len = GetLE32(p + 12);
    v->skip = GetLE32(p + 16);
    v->checksum = GetLE64(p + 20);
    if (uint64_t{v->skip} + v->length > v->raw_len || v->length == 0) {
      return Status::Corruption("extent window [" + std::to_string(v->skip) + ", +" +
                                std::to_string(v->length) + ") outside block of " +
                                std::to_string(v->raw_len) + " bytes");
    }
    if (v->record_offset > UINT64_MAX - v->raw_len) {
      return Status::Corruption("data file block at " + std::to_string(v->record_offset) +
                                " runs past the largest offset");
    }
    return Status::OK();
  }
  if (kind != kExtentRecord) {
    return Status::Corruption("extent value kind " + std::to_string(kind) + ", expected 0, 1 or 2");
  }
  if (in.size() != kExtentRecordValueSize) {
    return Short("extent value", in.size(), kExtentRecordValueSize);
  }
  const char* p = in.data() + 1;
  v->is_inline = false;
  v->in_data_file = false;
  v->inline_data.clear();
  v->length = GetLE32(p);
  v->segment_id = GetLE64(p + 4);
  v->record_offset = GetLE64(p + 12);
  v->stored_len = GetLE32(p + 20);
  v->raw_len = GetLE32(p + 24);
  uint8_t codec = static_cast<uint8_t>(p[28]);
  v->skip = GetLE32(p + 29);
  v->checksum = GetLE64(p + 33);
  if (codec > static_cast<uint8_t>(Codec::kZstd)) {
    return Status::Corruption("extent codec " + std::to_string(codec) + " is unknown");
  }
  v->codec = static_cast<Codec>(codec);
  if (uint64_t{v->skip} + v->length > v->raw_len || v->length == 0) {
    return Status::Corruption("extent window [" + std::to_string(v->skip) + ", +" +
                              std::to_string(v->length) + ") outside record of " +
                              std::to_string(v->raw_len) + " bytes");
  }
  return Status::OK();
}

Status CheckDataFileBlock(const ExtentValue& e, std::string_view block) {
  const std::string range = "data file bytes [" + std::to_string(e.record_offset) + ", " +
                            std::to_string(e.record_offset + e.stored_len) + ")";
  if (block.size() != e.stored_len) {
    return Status::Corruption(range + ": " + std::to_string(block.size()) + " bytes, expected " +
                              std::to_string(e.stored_len));
  }
  if (Checksum(block) != e.checksum) return Status::Corruption(range + ": checksum mismatch");
  return Status::OK();
}

// ---- Segment stats. ----
std::string EncodeSegmentStat(const SegmentStat& v) {
  std::string s;
  PutLE64(&s, static_cast<uint64_t>(v.live));
  PutLE64(&s, static_cast<uint64_t>(v.dead));
  PutLE64(&s, static_cast<uint64_t>(v.sealed));
  PutLE64(&s, static_cast<uint64_t>(v.size));
  return s;
}

Status DecodeSegmentStat(std::string_view in, SegmentStat* v) {
  if (in.size() != kSegmentStatSize) return Short("segment stat", in.size(), kSegmentStatSize);
  v->live = static_cast<int64_t>(GetLE64(in.data()));
  v->dead = static_cast<int64_t>(GetLE64(in.data() + 8));
  v->sealed = static_cast<int64_t>(GetLE64(in.data() + 16));
  v->size = static_cast<int64_t>(GetLE64(in.data() + 24));
  return Status::OK();
}

Status CheckSegmentStat(const SegmentStat& v) {
  if (v.live < 0 || v.dead < 0 || v.size < 0) {
    return Status::Corruption("segment stat counts live " + std::to_string(v.live) + ", dead " +
                              std::to_string(v.dead) + ", size " + std::to_string(v.size) +
                              "; none may be negative");
  }
  if (v.sealed != 0 && v.sealed != 1) {
    return Status::Corruption("segment stat has sealed " + std::to_string(v.sealed) +
                              ", expected 0 or 1");
  }
  return Status::OK();
}

SegmentStat MergeSegmentStat(const SegmentStat& a, const SegmentStat& b) {
  return SegmentStat{a.live + b.live, a.dead + b.dead, std::max(a.sealed, b.sealed),
                     std::max(a.size, b.size)};
}

// ---- Segment header. ----
std::string EncodeSegmentHeader(uint64_t segment_id) {
  std::string s(kSegmentMagic, sizeof(kSegmentMagic));
  PutLE32(&s, kSegmentVersion);
  PutLE32(&s, 0);
  PutLE64(&s, segment_id);
  PutLE64(&s, Checksum(s));
  return s;
}

Status DecodeSegmentHeader(std::string_view in, uint64_t* segment_id) {
  if (in.size() < kSegmentHeaderSize) return Short("segment header", in.size(), kSegmentHeaderSize);
  if (std::memcmp(in.data(), kSegmentMagic, sizeof(kSegmentMagic)) != 0) {
    return Status::Corruption("segment header magic is not \"CKPTSEG1\"");
  }
  uint32_t version = GetLE32(in.data() + 8);
  if (version != kSegmentVersion) {
    return Status::Corruption("segment version " + std::to_string(version) + ", expected " +
                              std::to_string(kSegmentVersion));
  }
  uint64_t want = GetLE64(in.data() + 24);
  uint64_t got = Checksum(in.substr(0, 24));
  if (want != got) return Status::Corruption("segment header checksum mismatch");
  *segment_id = GetLE64(in.data() + 16);
  return Status::OK();
}

Status CheckSegmentHeader(std::string_view in, uint64_t segment_id) {
  uint64_t got = 0;
  CKPTFS_RETURN_IF_ERROR(DecodeSegmentHeader(in, &got));
  if (got != segment_id) {
    return Status::Corruption("segment header names segment " + std::to_string(got) +
                              ", expected " + std::to_string(segment_id));
  }
  return Status::OK();
}

// ---- Records. ----
std::string EncodeRecordHeader(const RecordHeader& h) {
  std::string s;
  s.reserve(kRecordHeaderSize);
  PutLE32(&s, kRecordMagic);
  s.push_back(static_cast<char>(kRecordVersion));
  s.push_back(static_cast<char>(h.codec));
  PutLE16(&s, 0);
  PutLE64(&s, h.ino);
  PutLE64(&s, h.file_offset);
  PutLE32(&s, h.raw_len);
  PutLE32(&s, h.stored_len);
  PutLE64(&s, h.payload_checksum);
  PutLE32(&s, 0);
  PutLE32(&s, static_cast<uint32_t>(Checksum(s)));
  return s;
}

Status DecodeRecordHeader(std::string_view in, RecordHeader* h) {
  if (in.size() < kRecordHeaderSize) return Short("record header", in.size(), kRecordHeaderSize);
  const char* p = in.data();
  uint32_t magic = GetLE32(p);
  if (magic != kRecordMagic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "record magic 0x%08x, expected 0x%08x", magic, kRecordMagic);
    return Status::Corruption(buf);
  }
  uint32_t want = GetLE32(p + 44);
  uint32_t got = static_cast<uint32_t>(Checksum(in.substr(0, 44)));
  if (want != got) return Status::Corruption("record header checksum mismatch");
  if (static_cast<uint8_t>(p[4]) != kRecordVersion) {
    return Status::Corruption("record version " + std::to_string(uint8_t(p[4])) + ", expected " +
                              std::to_string(kRecordVersion));
  }
  uint8_t codec = static_cast<uint8_t>(p[5]);
  if (codec > static_cast<uint8_t>(Codec::kZstd)) {
    return Status::Corruption("record codec " + std::to_string(codec) + " is unknown");
  }
  h->codec = static_cast<Codec>(codec);
  h->ino = GetLE64(p + 8);
  h->file_offset = GetLE64(p + 16);
  h->raw_len = GetLE32(p + 24);
  h->stored_len = GetLE32(p + 28);
  h->payload_checksum = GetLE64(p + 32);
  if (h->codec == Codec::kNone && h->stored_len != h->raw_len) {
    return Status::Corruption("uncompressed record stores " + std::to_string(h->stored_len) +
                              " bytes for " + std::to_string(h->raw_len));
  }
  return Status::OK();
}

PreparedRecord PrepareRecord(uint64_t ino, uint64_t file_offset, std::string_view data,
                             int level) {
  PreparedRecord r;
  RecordHeader& h = r.header;
  h.ino = ino;
  h.file_offset = file_offset;
  h.raw_len = static_cast<uint32_t>(data.size());
  h.codec = Codec::kNone;
  if (level > 0 && data.size() > 64) {
    size_t bound = ZSTD_compressBound(data.size());
    r.compressed.resize(bound);
    size_t n = ZSTD_compress(r.compressed.data(), bound, data.data(), data.size(), level);
    if (!ZSTD_isError(n) && n < data.size()) {
      r.compressed.resize(n);
      h.codec = Codec::kZstd;
    } else {
      r.compressed.clear();
    }
  }
  std::string_view payload = h.codec == Codec::kZstd ? std::string_view(r.compressed) : data;
  h.stored_len = static_cast<uint32_t>(payload.size());
  h.payload_checksum = Checksum(payload);
  r.header_bytes = EncodeRecordHeader(h);
  return r;
}

std::string BuildRecord(uint64_t ino, uint64_t file_offset, std::string_view data, int level,
                        RecordHeader* header_out) {
  PreparedRecord r = PrepareRecord(ino, file_offset, data, level);
  std::string out = r.header_bytes;
  out.append(r.header.codec == Codec::kZstd ? std::string_view(r.compressed) : data);
  if (header_out) *header_out = r.header;
  return out;
}

Status VerifyRecordPayload(const RecordHeader& h, std::string_view payload) {
  if (payload.size() != h.stored_len) return Short("record payload", payload.size(), h.stored_len);
  if (Checksum(payload) != h.payload_checksum) {
    return Status::Corruption("record payload checksum mismatch");
  }
  return Status::OK();
}

Status DecodeRecordPayload(const RecordHeader& h, std::string_view payload, std::string* out) {
  CKPTFS_RETURN_IF_ERROR(VerifyRecordPayload(h, payload));
  if (h.codec == Codec::kNone) {
    out->assign(payload);
    return Status::OK();
  }
  out->resize(h.raw_len);
  size_t n = ZSTD_decompress(out->data(), out->size(), payload.data(), payload.size());
  if (ZSTD_isError(n) || n != h.raw_len) {
    return Status::Corruption(std::string("zstd payload does not decode to ") +
                              std::to_string(h.raw_len) + " bytes");
  }
  return Status::OK();
}

Status DecodeRecord(std::string_view bytes, RecordView* out, std::string* decoded) {
  CKPTFS_RETURN_IF_ERROR(DecodeRecordHeader(bytes, &out->header));
  const RecordHeader& h = out->header;
  if (bytes.size() - kRecordHeaderSize < h.stored_len) {
    return Status::Corruption("record truncated: " + std::to_string(bytes.size()) + " bytes of " +
                              std::to_string(kRecordHeaderSize + h.stored_len));
  }
  out->payload = bytes.substr(kRecordHeaderSize, h.stored_len);
  if (h.codec == Codec::kNone) {
    CKPTFS_RETURN_IF_ERROR(VerifyRecordPayload(h, out->payload));
    out->data = out->payload;
  } else if (decoded == nullptr) {
    CKPTFS_RETURN_IF_ERROR(VerifyRecordPayload(h, out->payload));
    out->data = {};
  } else {
    CKPTFS_RETURN_IF_ERROR(DecodeRecordPayload(h, out->payload, decoded));
    out->data = *decoded;
  }
  return Status::OK();
}

// ---- The record an extent points at. ----
Status CheckRecordForExtent(const RecordHeader& h, const ExtentValue& e, uint64_t ino,
                            uint64_t file_offset) {
  auto field = [](const char* name, uint64_t rec, uint64_t ext) {
    return Status::Corruption(std::string(name) + " " + std::to_string(rec) + " in the record, " +
                              std::to_string(ext) + " in the extent");
  };
  if (e.is_inline) return Status::Corruption("an inline extent points at no record");
  if (h.stored_len != e.stored_len) return field("stored_len", h.stored_len, e.stored_len);
  if (h.raw_len != e.raw_len) return field("raw_len", h.raw_len, e.raw_len);
  if (h.codec != e.codec) {
    return field("codec", static_cast<uint64_t>(h.codec), static_cast<uint64_t>(e.codec));
  }
  if (h.payload_checksum != e.checksum) return field("payload checksum", h.payload_checksum, e.checksum);
  if (h.ino != ino) return field("inode", h.ino, ino);
  if (h.file_offset + e.skip != file_offset) {
    return field("file offset", h.file_offset + e.skip, file_offset);
  }
  if (static_cast<uint64_t>(e.skip) + e.length > h.raw_len) {
    return field("window end", static_cast<uint64_t>(e.skip) + e.length, h.raw_len);
  }
  return Status::OK();
}

void PointExtentAt(const RecordHeader& h, uint64_t segment_id, uint64_t offset, ExtentValue* e) {
  e->segment_id = segment_id;
  e->record_offset = offset;
  e->stored_len = h.stored_len;
  e->raw_len = h.raw_len;
  e->codec = h.codec;
  e->checksum = h.payload_checksum;
}

}  // namespace ckptfs::format
