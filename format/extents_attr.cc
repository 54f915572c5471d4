#include "format/extents_attr.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace ckptfs::format {
namespace {

using nlohmann::json;

constexpr std::string_view kPageSuffixSep = ".";

bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string U64(uint64_t v) { return std::to_string(v); }

// One extent's JSON object. `with_data` = false lists an inline extent
// without its bytes ("inline": null).
std::string EncodeExtent(const FileExtent& x, bool with_data) {
  const ExtentValue& e = x.value;
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


Status Malformed(const std::string& what) {
  return Status(EINVAL, "malformed " + std::string(kExtentsXattr) + " value: " + what);
}

bool GetU64(const json& j, const char* key, uint64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *v = it->get<uint64_t>();
  return true;
}

bool GetI64(const json& j, const char* key, int64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  *v = it->get<int64_t>();
  return true;
}

bool GetU32(const json& j, const char* key, uint32_t* v) {
  uint64_t w = 0;
  if (!GetU64(j, key, &w) || w > UINT32_MAX) return false;
  *v = static_cast<uint32_t>(w);
  return true;
}

bool ParseHex64(const json& j, const char* key, uint64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > 16) return false;
  uint64_t r = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    r = (r << 4) | static_cast<uint64_t>(d);
  }
  *v = r;
  return true;
}

Status ParseExtent(const json& j, LayoutExtent* e) {
  if (!j.is_object()) return Malformed("an extent is not an object");
  ExtentValue& v = e->value;
  uint64_t length = 0;
  if (!GetU64(j, "file_offset", &e->file_offset) || !GetU64(j, "length", &length)) {
    return Malformed("an extent lacks file_offset or length");
  }
  // No extent is longer than a record or the inline limit.
  if (length > UINT32_MAX) {
    return Malformed("extent length " + std::to_string(length) + " exceeds 32 bits");
  }
  v.length = static_cast<uint32_t>(length);
  if (auto it = j.find("inline"); it != j.end()) {
    v.is_inline = true;
    if (it->is_null()) {
      e->kind = LayoutExtent::Kind::kInlineOmitted;
      return Status::OK();
    }
    e->kind = LayoutExtent::Kind::kInline;
    if (!it->is_string() || !Base64Decode(it->get_ref<const std::string&>(), &v.inline_data)) {
      return Malformed("inline data is not base64");
    }
    return Status::OK();
  }
  if (auto it = j.find("data_file"); it != j.end()) {
    if (!it->is_boolean() || !it->get<bool>()) return Malformed("data_file is not true");
    e->kind = LayoutExtent::Kind::kDataFile;
    v.in_data_file = true;
    v.codec = Codec::kNone;
    if (!GetU64(j, "block_offset", &v.record_offset) || !GetU32(j, "block_len", &v.stored_len) ||
        !ParseHex64(j, "checksum", &v.checksum) || !GetU32(j, "skip", &v.skip)) {
      return Malformed("a data-file extent lacks a field");
    }
    v.raw_len = v.stored_len;
    return Status::OK();
  }
  e->kind = LayoutExtent::Kind::kRecord;
  uint32_t codec = 0;
  if (!GetU64(j, "segment_id", &v.segment_id) || !GetU64(j, "record_offset", &v.record_offset) ||
      !GetU32(j, "record_stored_len", &v.stored_len) || !GetU32(j, "record_raw_len", &v.raw_len) ||
      !GetU32(j, "codec", &codec) || !ParseHex64(j, "payload_checksum", &v.checksum) ||
      !GetU32(j, "skip", &v.skip)) {
    return Malformed("a record extent lacks a field");
  }
  if (codec > 255) return Malformed("codec out of range");
  v.codec = static_cast<Codec>(codec);  // ValidateLayout checks that it is known
  return Status::OK();
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

std::string EncodeExtentsPage(const ExtentsPageHeader& h, const std::vector<FileExtent>& extents,
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
      // (inline_max reaches 64 KiB); it is listed without its bytes.
      e = EncodeExtent(extents[i], false);
    }
    if (listed > 0) body.push_back(',');
    body += e;
    ++listed;
  }
  std::string next = i < extents.size() ? U64(extents[i].file_offset) : "null";
  return head + body + "],\"next\":" + next + "}";
}

std::string ExtentsXattrName(uint64_t from) {
  return from == 0 ? std::string(kExtentsXattr)
                   : std::string(kExtentsXattr) + std::string(kPageSuffixSep) + U64(from);
}

bool Base64Decode(std::string_view in, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  if (in.size() % 4 != 0) return false;
  out->reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return false;  // data after padding
      v[k] = value(c);
      if (v[k] < 0) return false;
    }
    const uint32_t w =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out->push_back(static_cast<char>(w >> 16));
    if (pad < 2) out->push_back(static_cast<char>((w >> 8) & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(w & 0xff));
  }
  return true;
}

Status ParseExtentsPage(std::string_view text, uint64_t from, bool first, FileLayout* layout,
                        std::optional<uint64_t>* next) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Malformed("not a JSON object");
  uint64_t version = 0;
  if (!GetU64(j, "version", &version)) return Malformed("no version");
  if (version != 1) {
    return Status(ENOTSUP, std::string(kExtentsXattr) + " version " + std::to_string(version) +
                               " is not supported (expected 1)");
  }
  ExtentsPageHeader h;
  auto dir = j.find("segments_dir");
  if (!GetU64(j, "ino", &h.ino) || !GetU64(j, "size", &h.size) ||
      !GetI64(j, "mtime_ns", &h.mtime_ns) || !GetI64(j, "ctime_ns", &h.ctime_ns) ||
      dir == j.end() || !dir->is_string() || !GetU64(j, "coalesce_gap", &h.coalesce_gap) ||
      !GetU64(j, "coalesce_max", &h.coalesce_max)) {
    return Malformed("a header field is missing");
  }
  h.segments_dir = dir->get<std::string>();
  // Absent from mounts that predate data files, which list no such extents.
  if (auto data = j.find("data_dir"); data != j.end()) {
    if (!data->is_string()) return Malformed("data_dir is not a string");
    h.data_dir = data->get<std::string>();
  }
  uint64_t page_from = 0;
  if (!GetU64(j, "from", &page_from) || page_from != from) {
    return Malformed("page does not start at offset " + std::to_string(from));
  }
  if (first) {
    static_cast<ExtentsPageHeader&>(*layout) = h;
  } else if (h.ino != layout->ino || h.size != layout->size || h.mtime_ns != layout->mtime_ns ||
             h.ctime_ns != layout->ctime_ns) {
    return Status(EAGAIN, "the file changed while its extents were read");
  }
  auto ex = j.find("extents");
  if (ex == j.end() || !ex->is_array()) return Malformed("no extents array");
  for (const json& e : *ex) {
    LayoutExtent le;
    CKPTFS_RETURN_IF_ERROR(ParseExtent(e, &le));
    if (le.file_offset < from) return Malformed("an extent starts before the page");
    layout->extents.push_back(std::move(le));
  }
  auto nx = j.find("next");
  if (nx == j.end()) return Malformed("no next");
  if (nx->is_null()) {
    next->reset();
  } else if (nx->is_number_unsigned() && nx->get<uint64_t>() > from && !ex->empty()) {
    *next = nx->get<uint64_t>();
  } else {
    return Malformed("next does not move forward");
  }
  layout->pages++;
  return Status::OK();
}

Status ValidateLayout(const FileLayout& l) {
  if (l.segments_dir.empty() || l.segments_dir.front() != '/') {
    return Malformed("segments_dir is not absolute");
  }
  uint64_t end = 0;
  for (const LayoutExtent& x : l.extents) {
    const ExtentValue& e = x.value;
    const std::string at = "extent at " + std::to_string(x.file_offset) + ": ";
    if (e.length == 0) return Malformed(at + "empty");
    if (x.file_offset < end) return Malformed(at + "overlaps or is out of order");
    if (x.file_offset > l.size || e.length > l.size - x.file_offset) {
      return Malformed(at + "ends past the file size");
    }
    end = x.file_offset + e.length;
    switch (x.kind) {
      case LayoutExtent::Kind::kInline:
        if (e.inline_data.size() != e.length) return Malformed(at + "inline length differs");
        break;
      case LayoutExtent::Kind::kInlineOmitted:
        break;
      case LayoutExtent::Kind::kRecord:
        if (e.codec != Codec::kNone && e.codec != Codec::kZstd) {
          return Malformed(at + "unknown codec " + std::to_string(static_cast<unsigned>(e.codec)));
        }
        if (e.codec == Codec::kNone && e.stored_len != e.raw_len) {
          return Malformed(at + "uncompressed record with stored_len != raw_len");
        }
        if (e.skip > e.raw_len || e.length > e.raw_len - e.skip) {
          return Malformed(at + "window leaves its record");
        }
        break;
      case LayoutExtent::Kind::kDataFile:
        if (l.data_dir.empty() || l.data_dir.front() != '/') {
          return Malformed(at + "data-file extent without an absolute data_dir");
        }
        if (e.stored_len != e.raw_len || e.codec != Codec::kNone) {
          return Malformed(at + "data-file block with a codec or stored_len != raw_len");
        }
        if (e.skip > e.stored_len || e.length > e.stored_len - e.skip) {
          return Malformed(at + "window leaves its data-file block");
        }
        // Byte N of the data file is byte N of the file (docs/FORMAT.md).
        if (e.record_offset > x.file_offset || x.file_offset - e.record_offset != e.skip) {
          return Malformed(at + "data-file block at " + std::to_string(e.record_offset) +
                           " with skip " + std::to_string(e.skip) +
                           " does not hold this file offset");
        }
        break;
    }
  }
  return Status::OK();
}

std::string DataFilePath(const FileLayout& layout) {
  return layout.data_dir + "/" +
         std::filesystem::path(DataFileName(layout.ino)).filename().string();
}

}  // namespace ckptfs::format
