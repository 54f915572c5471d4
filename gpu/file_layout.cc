#include "gpu/file_layout.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace ckptfs::gpu {
namespace {

using nlohmann::json;

// The kernel's XATTR_SIZE_MAX: no page is larger.
constexpr size_t kPageMax = 65536;
// Restarts from the first page when the file changes in between.
constexpr int kLayoutAttempts = 3;

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
  format::ExtentValue& v = e->value;
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
    v.codec = format::Codec::kNone;
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
  v.codec = static_cast<format::Codec>(codec);  // ValidateLayout checks that it is known
  return Status::OK();
}

}  // namespace

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
  FileLayout h;
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
    layout->ino = h.ino;
    layout->size = h.size;
    layout->mtime_ns = h.mtime_ns;
    layout->ctime_ns = h.ctime_ns;
    layout->segments_dir = h.segments_dir;
    layout->data_dir = h.data_dir;
    layout->coalesce_gap = h.coalesce_gap;
    layout->coalesce_max = h.coalesce_max;
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
    const format::ExtentValue& e = x.value;
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
        if (e.codec != format::Codec::kNone && e.codec != format::Codec::kZstd) {
          return Malformed(at + "unknown codec " + std::to_string(static_cast<unsigned>(e.codec)));
        }
        if (e.codec == format::Codec::kNone && e.stored_len != e.raw_len) {
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
        if (e.stored_len != e.raw_len || e.codec != format::Codec::kNone) {
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
         std::filesystem::path(format::DataFileName(layout.ino)).filename().string();
}

Result<FileLayout> FetchLayout(int fd) {
  std::vector<char> buf(kPageMax);
  Status last;
  for (int attempt = 0; attempt < kLayoutAttempts; ++attempt) {
    FileLayout layout;
    std::optional<uint64_t> from = 0;
    Status st;
    while (from.has_value() && st.ok()) {
      const uint64_t page = *from;
      const std::string name =
          page == 0 ? std::string(kExtentsXattr) : kExtentsXattr + ("." + std::to_string(page));
      ssize_t n = fgetxattr(fd, name.c_str(), buf.data(), buf.size());
      if (n < 0 && errno == ERANGE) {  // cannot happen with pages <= 64 KiB; be safe
        ssize_t want = fgetxattr(fd, name.c_str(), nullptr, 0);
        if (want > 0) {
          buf.resize(static_cast<size_t>(want) + 4096);
          n = fgetxattr(fd, name.c_str(), buf.data(), buf.size());
        }
      }
      if (n < 0) {
        const int err = errno;
        if (err == ENODATA || err == ENOTSUP || err == EOPNOTSUPP) {
          return Status(ENOTSUP, "no " + std::string(kExtentsXattr) +
                                     " attribute (not a file of a ckptfs mount)");
        }
        return Status::IOError(err, "getxattr " + name);
      }
      st = ParseExtentsPage(std::string_view(buf.data(), static_cast<size_t>(n)), page, page == 0,
                            &layout, &from);
    }
    if (st.ok()) st = ValidateLayout(layout);
    if (st.ok()) return layout;
    if (st.code() != EAGAIN) return st;
    last = st;
  }
  return last;
}

}  // namespace ckptfs::gpu
