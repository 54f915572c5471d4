#include "fs/extents_xattr.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace ckptfs::fs {
namespace {

using engine::Attr;
using engine::ExtentInfo;
using engine::Result;
using engine::Status;

constexpr std::string_view kPageSuffixSep = ".";

bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

int64_t Nanos(const engine::Timespec& t) { return t.sec * 1000000000 + t.nsec; }

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string U64(uint64_t v) { return std::to_string(v); }

// One extent's JSON object. `with_data` = false lists an inline extent
// without its bytes ("inline": null).
std::string EncodeExtent(const ExtentInfo& x, bool with_data) {
  const format::ExtentValue& e = x.value;
  std::string s = "{\"file_offset\":" + U64(x.file_offset) + ",\"length\":" + U64(e.length);
  if (e.is_inline) {
    s += with_data ? ",\"inline\":\"" + Base64Encode(e.inline_data) + "\"}" : ",\"inline\":null}";
    return s;
  }
  if (e.in_data_file) {
    s += ",\"data_file\":true,\"block_offset\":" + U64(e.record_offset) +
         ",\"block_len\":" + U64(e.stored_len) + ",\"checksum\":\"" + Hex64(e.checksum) +
         "\",\"skip\":" + U64(e.skip) + "}";
    return s;
  }
  s += ",\"segment_id\":" + U64(e.segment_id) + ",\"record_offset\":" + U64(e.record_offset) +
       ",\"record_stored_len\":" + U64(e.stored_len) + ",\"record_raw_len\":" + U64(e.raw_len) +
       ",\"codec\":" + U64(static_cast<uint8_t>(e.codec)) + ",\"payload_checksum\":\"" +
       Hex64(e.checksum) + "\",\"skip\":" + U64(e.skip) + "}";
  return s;
}

}  // namespace

bool IsExtentsXattrName(std::string_view name) {
  if (name.substr(0, kExtentsXattr.size()) != kExtentsXattr) return false;
  return name.size() == kExtentsXattr.size() ||
         name.substr(kExtentsXattr.size(), kPageSuffixSep.size()) == kPageSuffixSep;
}

bool ParseExtentsXattrName(std::string_view name, uint64_t* from) {
  if (name.size() == kExtentsXattr.size()) {
    *from = 0;
    return true;
  }
  return ParseU64(name.substr(kExtentsXattr.size() + kPageSuffixSep.size()), from);
}

std::string Base64Encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(data[i])) << 16) | (uint32_t(uint8_t(data[i + 1])) << 8) |
                       uint8_t(data[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (i < data.size()) {
    uint32_t v = uint32_t(uint8_t(data[i])) << 16;
    if (i + 1 < data.size()) v |= uint32_t(uint8_t(data[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string EncodeExtentsPage(const ExtentsPageHeader& h, const std::vector<ExtentInfo>& extents,
                              uint64_t from, size_t budget) {
  std::string head = "{\"version\":" + U64(kExtentsXattrVersion) + ",\"ino\":" + U64(h.ino) +
                     ",\"size\":" + U64(h.size) + ",\"mtime_ns\":" + std::to_string(h.mtime_ns) +
                     ",\"ctime_ns\":" + std::to_string(h.ctime_ns) +
                     ",\"segments_dir\":" + nlohmann::json(h.segments_dir).dump() +
                     ",\"data_dir\":" + nlohmann::json(h.data_dir).dump() +
                     ",\"coalesce_gap\":" + U64(h.coalesce_gap) +
                     ",\"coalesce_max\":" + U64(h.coalesce_max) + ",\"from\":" + U64(from) +
                     ",\"extents\":[";
  // What follows the extents: `],"next":` + up to 20 digits (or null) + `}`.
  constexpr size_t kTailMax = 2 + 8 + 20 + 1;
  size_t i = 0;
  while (i < extents.size() && extents[i].file_offset < from) ++i;
  std::string body;
  size_t listed = 0;
  for (; i < extents.size(); ++i) {
    std::string e = EncodeExtent(extents[i], true);
    const size_t used = head.size() + body.size() + kTailMax + (listed ? 1 : 0);
    if (used + e.size() > budget) {
      if (listed > 0) break;  // continues on the next page
      // Alone on its page and still too large: only an inline extent can be
      // (inline_max_bytes reaches 64 KiB); it is listed without its bytes.
      e = EncodeExtent(extents[i], false);
    }
    if (listed > 0) body.push_back(',');
    body += e;
    ++listed;
  }
  std::string next = i < extents.size() ? U64(extents[i].file_offset) : "null";
  return head + body + "],\"next\":" + next + "}";
}

Result<std::string> ExtentsXattrValue(engine::Store& store, engine::Ino ino, uint64_t from) {
  // Bytes the kernel wrote to the data file since the last adoption would be
  // checked against the checksums of the bytes they replaced. Every page
  // adopts (an fstat when nothing changed): a write between two pages shows
  // as a new mtime in the next page's header, which the reader detects.
  CKPTFS_RETURN_IF_ERROR(store.AdoptDirectWrites(ino));
  CKPTFS_ASSIGN_OR_RETURN(Attr a, store.GetAttr(ino));
  if (!S_ISREG(a.mode)) return Status::Errno(ENODATA);
  CKPTFS_ASSIGN_OR_RETURN(std::vector<ExtentInfo> extents, store.GetExtents(ino));
  ExtentsPageHeader h;
  h.ino = a.ino;
  h.size = a.size;
  h.mtime_ns = Nanos(a.mtime);
  h.ctime_ns = Nanos(a.ctime);
  // SegmentPath(id) is STORE/segments/NNNNNNNN.seg, and the store's path is
  // absolute (MountOptions); its directory is the same for every id.
  const std::filesystem::path segments_dir =
      std::filesystem::path(store.SegmentPath(1)).parent_path();
  h.segments_dir = segments_dir.string();
  // DataFileName(ino) is "data/NNNNNNNN.dat" relative to the store, as
  // SegmentFileName(id) is "segments/NNNNNNNN.seg".
  h.data_dir = (segments_dir.parent_path() / format::DataFileName(a.ino)).parent_path().string();
  const engine::StoreOptions options = store.GetOptions();
  h.coalesce_gap = options.coalesce_gap;
  h.coalesce_max = options.coalesce_max;
  return EncodeExtentsPage(h, extents, from);
}

}  // namespace ckptfs::fs
