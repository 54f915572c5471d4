// `ckptfs info [--json] PATH...`: where a file's bytes lie in the store, or
// what a directory holds, from the index alone (no file data is read).
//
// A file: its size, its data file when it has one, and, for each extent,
// the segment record that holds it (segment, record offset, stored and raw
// lengths, codec, checksum, the window of the decoded record it uses), the
// block of the data file (block offset and length, checksum, the window it
// uses), or that it is inline in the index.
// A directory: files, directories, symlinks and other inodes below it, their
// logical bytes (sizes, holes included), stored bytes and extents.
//
// Everything comes from the mount's "user.ckptfs.extents" attribute
// (format/extents_attr.h, read with gpu::FetchLayout), so info shows exactly
// what readers of that attribute and fsck see. A file's stored bytes are
// its share of the records it uses: a record's stored length times the part
// of its decoded bytes the file's extent covers, plus its inline bytes and
// the data-file bytes its extents cover.
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "gpu/file_layout.h"
#include "tools/commands.h"
#include "tools/progress.h"  // HumanBytes

namespace ckptfs::tools {
namespace {

// `what` and errno's text, as the status of the call that just failed.
engine::Status SysError(const std::string& what) {
  const int e = errno;
  return engine::Status::Errno(e, what + ": " + std::strerror(e));
}

// Whether `path` is part of a sealed tree (its "user.ckptfs.seal" reads 1).
bool IsSealed(const char* path) {
  char v[2];
  return ::lgetxattr(path, "user.ckptfs.seal", v, sizeof(v)) == 1 && v[0] == '1';
}

const char* CodecName(format::Codec c) { return c == format::Codec::kZstd ? "zstd" : "none"; }

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// The stored bytes extent `e` accounts for (see the file comment).
uint64_t StoredShare(const gpu::LayoutExtent& e) {
  const format::ExtentValue& v = e.value;
  if (v.is_inline) return v.length;
  if (v.raw_len == 0) return 0;
  return static_cast<uint64_t>(v.stored_len) * v.length / v.raw_len;
}

// The layout of the regular file at `path`, opened without following a
// final symlink. Prints the one-line error on failure.
engine::Result<gpu::FileLayout> LayoutOf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return SysError("cannot open " + path);
  engine::Result<gpu::FileLayout> layout = gpu::FetchLayout(fd);
  ::close(fd);
  if (!layout.ok() && layout.status().code() == ENOTSUP) {
    return engine::Status::Errno(ENOTSUP, path + " is not on a ckptfs mount");
  }
  return layout;
}

nlohmann::ordered_json FileJson(const std::string& path, const gpu::FileLayout& l) {
  nlohmann::ordered_json extents = nlohmann::ordered_json::array();
  uint64_t stored = 0, in_data_file = 0;
  bool all_inline = true;
  for (const gpu::LayoutExtent& e : l.extents) {
    const format::ExtentValue& v = e.value;
    stored += StoredShare(e);
    all_inline = all_inline && v.is_inline;
    nlohmann::ordered_json x = {{"file_offset", e.file_offset}, {"length", v.length}};
    if (v.is_inline) {
      x["inline"] = true;
    } else if (v.in_data_file) {
      in_data_file += v.length;
      x["data_file"] = true;
      x["block_offset"] = v.record_offset;
      x["block_len"] = v.stored_len;
      x["checksum"] = Hex64(v.checksum);
      x["skip"] = v.skip;
    } else {
      x["segment_id"] = v.segment_id;
      x["segment"] = (std::filesystem::path(l.segments_dir).parent_path() /
                      format::SegmentFileName(v.segment_id)).string();
      x["record_offset"] = v.record_offset;
      x["stored_len"] = v.stored_len;
      x["raw_len"] = v.raw_len;
      x["codec"] = CodecName(v.codec);
      x["payload_checksum"] = Hex64(v.checksum);
      x["skip"] = v.skip;
    }
    extents.push_back(std::move(x));
  }
  // The data file, when extents lie there; null otherwise.
  nlohmann::ordered_json data_file = nullptr;
  if (in_data_file > 0) data_file = gpu::DataFilePath(l);
  return {{"path", path},
          {"type", "file"},
          {"ino", l.ino},
          {"size", l.size},
          {"stored_bytes", stored},
          {"inline", !l.extents.empty() && all_inline},
          {"data_file", data_file},
          {"data_file_bytes", in_data_file},
          {"extents", extents}};
}

void PrintFile(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j["path"].get<std::string>().c_str());
  std::printf("  inode   %" PRIu64 "\n", j["ino"].get<uint64_t>());
  std::printf("  size    %s\n", HumanBytes(j["size"].get<uint64_t>()).c_str());
  std::printf("  stored  %s in %zu extent(s)%s\n",
              HumanBytes(j["stored_bytes"].get<uint64_t>()).c_str(), j["extents"].size(),
              j["inline"].get<bool>() ? ", inline in the index" : "");
  if (j["sealed"].get<bool>()) std::printf("  sealed  (nothing of it changes but its removal)\n");
  if (!j["data_file"].is_null()) {
    std::printf("  data    %s in %s\n", HumanBytes(j["data_file_bytes"].get<uint64_t>()).c_str(),
                j["data_file"].get<std::string>().c_str());
  }
  // A long list shows its head and tail; --json lists every extent.
  constexpr size_t kHead = 8, kTail = 4;
  const size_t n = j["extents"].size();
  for (size_t i = 0; i < n; ++i) {
    if (n > kHead + kTail + 1 && i == kHead) {
      std::printf("  ... %zu more extent(s) (--json lists them all) ...\n", n - kHead - kTail);
      i = n - kTail;
    }
    const nlohmann::ordered_json& x = j["extents"][i];
    const uint64_t off = x["file_offset"], len = x["length"];
    if (x.contains("inline")) {
      std::printf("  [%" PRIu64 ", +%" PRIu64 ")  inline\n", off, len);
      continue;
    }
    if (x.contains("data_file")) {
      std::printf("  [%" PRIu64 ", +%" PRIu64 ")  data file block @%" PRIu64 " len %" PRIu64
                  "  checksum %s  skip %" PRIu64 "\n",
                  off, len, x["block_offset"].get<uint64_t>(), x["block_len"].get<uint64_t>(),
                  x["checksum"].get<std::string>().c_str(), x["skip"].get<uint64_t>());
      continue;
    }
    std::printf("  [%" PRIu64 ", +%" PRIu64 ")  %s @%" PRIu64
                "  stored %" PRIu64 " raw %" PRIu64 " %s  checksum %s  skip %" PRIu64 "\n",
                off, len, x["segment"].get<std::string>().c_str(),
                x["record_offset"].get<uint64_t>(), x["stored_len"].get<uint64_t>(),
                x["raw_len"].get<uint64_t>(), x["codec"].get<std::string>().c_str(),
                x["payload_checksum"].get<std::string>().c_str(), x["skip"].get<uint64_t>());
  }
}

// What a directory walk counts. nftw takes a plain function: the walk in
// progress is the one global (info walks one tree at a time, on one thread).
struct Tally {
  uint64_t files = 0, directories = 0, symlinks = 0, other = 0;
  uint64_t logical_bytes = 0, stored_bytes = 0, extents = 0, inline_files = 0;
  std::string first_error;
  std::string root;                       // the walk's
  std::set<std::string> sealed_dirs;      // sealed directories met so far
  std::vector<std::string> sealed_trees;  // roots of sealed trees, from `root`
};
Tally* g_tally = nullptr;

int CountEntry(const char* path, const struct stat* st, int type, struct FTW*) {
  Tally& t = *g_tally;
  if (type == FTW_DNR || type == FTW_NS) {
    if (t.first_error.empty()) t.first_error = std::string("cannot read ") + path;
    return 0;
  }
  if (IsSealed(path)) {
    // A tree's root: the walk's own, or one whose directory is not sealed
    // (nftw visits a directory before what it holds).
    const std::string p(path);
    const std::string parent = std::filesystem::path(p).parent_path().string();
    if (p != t.root && t.sealed_dirs.count(parent) == 0) {
      t.sealed_trees.push_back(std::filesystem::path(p).lexically_relative(t.root).string());
    }
    if (S_ISDIR(st->st_mode)) t.sealed_dirs.insert(p);
  }
  if (S_ISDIR(st->st_mode)) {
    t.directories++;
  } else if (S_ISLNK(st->st_mode)) {
    t.symlinks++;
  } else if (!S_ISREG(st->st_mode)) {
    t.other++;
  } else {
    t.files++;
    t.logical_bytes += static_cast<uint64_t>(st->st_size);
    engine::Result<gpu::FileLayout> l = LayoutOf(path);
    if (!l.ok()) {
      if (t.first_error.empty()) t.first_error = l.status().ToString();
      return 0;
    }
    bool all_inline = !l->extents.empty();
    for (const gpu::LayoutExtent& e : l->extents) {
      t.stored_bytes += StoredShare(e);
      all_inline = all_inline && e.value.is_inline;
    }
    t.extents += l->extents.size();
    t.inline_files += all_inline ? 1 : 0;
  }
  return 0;
}

engine::Result<nlohmann::ordered_json> DirectoryJson(const std::string& path) {
  Tally t;
  t.root = path;
  g_tally = &t;
  const int rc = ::nftw(path.c_str(), CountEntry, 64, FTW_PHYS | FTW_MOUNT);
  g_tally = nullptr;
  if (rc != 0) return SysError("cannot walk " + path);
  if (!t.first_error.empty()) return engine::Status::Errno(EIO, t.first_error);
  return nlohmann::ordered_json{{"path", path},
                                {"type", "directory"},
                                {"files", t.files},
                                {"directories", t.directories},
                                {"symlinks", t.symlinks},
                                {"other", t.other},
                                {"logical_bytes", t.logical_bytes},
                                {"stored_bytes", t.stored_bytes},
                                {"extents", t.extents},
                                {"inline_files", t.inline_files},
                                {"sealed", t.sealed_dirs.count(path) != 0},
                                {"sealed_trees", t.sealed_trees}};
}

void PrintDirectory(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j["path"].get<std::string>().c_str());
  std::printf("  files %" PRIu64 ", directories %" PRIu64 " (itself included), symlinks %" PRIu64
              ", other %" PRIu64 "\n",
              j["files"].get<uint64_t>(), j["directories"].get<uint64_t>(),
              j["symlinks"].get<uint64_t>(), j["other"].get<uint64_t>());
  std::printf("  logical %s, stored %s in %" PRIu64 " extent(s); %" PRIu64
              " file(s) inline in the index\n",
              HumanBytes(j["logical_bytes"].get<uint64_t>()).c_str(),
              HumanBytes(j["stored_bytes"].get<uint64_t>()).c_str(), j["extents"].get<uint64_t>(),
              j["inline_files"].get<uint64_t>());
  if (j["sealed"].get<bool>()) {
    std::printf("  sealed  (nothing in it changes but its removal)\n");
    return;
  }
  const auto& trees = j["sealed_trees"];
  if (trees.empty()) return;
  std::string list;
  for (size_t i = 0; i < trees.size() && i < 5; ++i) {
    list += (i > 0 ? ", " : "") + trees[i].get<std::string>();
  }
  if (trees.size() > 5) list += ", ...";
  std::printf("  sealed trees in it: %zu (%s)\n", trees.size(), list.c_str());
}

engine::Result<nlohmann::ordered_json> InfoOf(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return SysError("cannot stat " + path);
  if (S_ISDIR(st.st_mode)) return DirectoryJson(path);
  if (!S_ISREG(st.st_mode)) {
    return engine::Status::Errno(EINVAL, path + " is neither a regular file nor a directory");
  }
  CKPTFS_ASSIGN_OR_RETURN(const gpu::FileLayout l, LayoutOf(path));
  nlohmann::ordered_json j = FileJson(path, l);
  j["sealed"] = IsSealed(path.c_str());
  return j;
}

}  // namespace

int RunInfo(const std::vector<std::string>& paths, bool json) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  int status = 0;
  for (const std::string& path : paths) {
    engine::Result<nlohmann::ordered_json> j = InfoOf(path);
    if (!j.ok()) {
      std::fprintf(stderr, "ckptfs: info: %s\n", j.status().ToString().c_str());
      status = 1;
      continue;
    }
    if (json) {
      all.push_back(std::move(*j));
    } else if ((*j)["type"] == "file") {
      PrintFile(*j);
    } else {
      PrintDirectory(*j);
    }
  }
  if (json) std::printf("%s\n", all.dump(2).c_str());
  return status;
}

}  // namespace ckptfs::tools
