// `ckptfs verify [--json] PATH...`: checks every checksum of the data of the
// files under PATH (on a mount), reading the store's segment files and data
// files directly (through io/, which asks a network filesystem's server for
// each file's size at its open), or, for a store whose data is in an object
// store, its objects (syncing each file through the mount first).
//
// For each regular file it takes the extents from the mount's
// "user.ckptfs.extents" attribute (gpu::FetchLayout), then reads each record
// and data-file block they use once, in store order, and runs the checks
// every reader of the store runs: for a record, its header and payload
// checksums (format::DecodeRecord) and that it is the one the extent names
// (format::CheckRecordForExtent); for a block of a data file, its length and
// checksum (format::CheckDataFileBlock). Inline extents live in the index,
// whose blocks RocksDB checksums on every read.
//
// Exit status as fsck(8): 0 every checksum matched, 4 damage found (each
// damaged record or block named by file and byte range, one line each), 8
// nothing could be checked (not a ckptfs mount, store files unreadable, ...).
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/data/data_storage.h"
#include "gpu/file_layout.h"
#include "io/env.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace ckptfs::tools {
namespace {

constexpr int kClean = 0, kDamage = 4, kOperational = 8;

// One extent that uses a record or block, to name the damage by file and
// byte range.
struct Use {
  size_t file;  // index into the file list
  uint64_t ino;
  uint64_t file_offset;
  format::ExtentValue value;
};

// A record (or data-file block): the store file that holds it and the
// offset of its header (of the block) there.
struct RecordKey {
  std::string path;
  uint64_t offset;
  bool operator<(const RecordKey& o) const {
    return std::tie(path, offset) < std::tie(o.path, o.offset);
  }
};

// Bytes to read for the record or block that `e` points at.
uint64_t StoredBytes(const format::ExtentValue& e) {
  return (e.in_data_file ? 0 : format::kRecordHeaderSize) + e.stored_len;
}

std::vector<std::string>* g_files = nullptr;  // nftw's callback has no context

int AddFile(const char* path, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_F && S_ISREG(st->st_mode)) g_files->push_back(path);
  return 0;
}

class Verifier {
 public:
  // Collects the files under `paths`; false (after saying why) when a path
  // cannot be read.
  bool Collect(const std::vector<std::string>& paths) {
    for (const std::string& p : paths) {
      struct stat st;
      if (::lstat(p.c_str(), &st) != 0) return Fail("cannot stat " + p + ": " + strerror(errno));
      if (S_ISREG(st.st_mode)) {
        files_.push_back(p);
      } else if (S_ISDIR(st.st_mode)) {
        g_files = &files_;
        const int rc = ::nftw(p.c_str(), AddFile, 64, FTW_PHYS | FTW_MOUNT);
        g_files = nullptr;
        if (rc != 0) return Fail("cannot walk " + p + ": " + strerror(errno));
      }
    }
    return true;
  }

  // Fetches every file's extents; false (after saying why) when one cannot
  // be fetched.
  bool Plan() {
    for (size_t i = 0; i < files_.size(); ++i) {
      const int fd = ::open(files_[i].c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return Fail("cannot open " + files_[i] + ": " + strerror(errno));
      engine::Result<gpu::FileLayout> l = gpu::FetchLayout(fd);
      // A store whose data is in an object store shows another reader only
      // what its mount has sent there: bytes written and not yet synced
      // wait in the mount. Sync them first, as a reader of the file would
      // see them.
      if (l.ok() && DataIsRemote(std::filesystem::path(l->segments_dir).parent_path()) &&
          ::fsync(fd) != 0) {
        const int e = errno;
        ::close(fd);
        return Fail("cannot sync " + files_[i] + ": " + strerror(e));
      }
      ::close(fd);
      if (!l.ok()) {
        return Fail(l.status().code() == ENOTSUP ? files_[i] + " is not on a ckptfs mount"
                                                  : files_[i] + ": " + l.status().ToString());
      }
      if (engine::Status st = format::ValidateLayout(*l); !st.ok()) {
        Damage(files_[i] + ": extents: " + st.ToString());
        continue;
      }
      for (const gpu::LayoutExtent& e : l->extents) {
        if (e.value.is_inline) continue;
        const std::string path = e.value.in_data_file
                                     ? gpu::DataFilePath(*l)
                                     : (std::filesystem::path(l->segments_dir).parent_path() /
                                        format::SegmentFileName(e.value.segment_id))
                                           .string();
        auto [it, fresh] = records_.try_emplace(RecordKey{path, e.value.record_offset});
        if (fresh) {
          bytes_total_ += StoredBytes(e.value);
          (e.value.in_data_file ? blocks_ : segment_records_)++;
        }
        it->second.push_back({i, l->ino, e.file_offset, e.value});
      }
    }
    return true;
  }

  // Reads and checks each record and block once, in store order; false
  // (after saying why) when a segment or data file cannot be read at all.
  bool Check() {
    ProgressBar progress("verify");
    std::unique_ptr<io::File> file;
    std::string buf;
    for (const auto& [key, uses] : records_) {
      const bool block = uses.front().value.in_data_file;
      if (file == nullptr || key.path != file->path()) {
        engine::Result<std::unique_ptr<io::File>> opened = OpenStoreFile(key.path);
        if (!opened.ok()) {
          const int e = opened.status().code();
          return Fail(std::string("cannot read ") + (block ? "data file " : "segment file ") +
                      opened.status().ToString() +
                      (e == EACCES ? " (run as the store's owner or root)" : ""));
        }
        file = std::move(*opened);
      }
      const size_t len = StoredBytes(uses.front().value);
      buf.resize(len);
      engine::Result<size_t> n = file->ReadAt(key.offset, len, buf.data());
      if (!n.ok()) return Fail("cannot read " + n.status().ToString());
      const std::string_view bytes(buf.data(), *n);
      if (block) {
        CheckBlock(key, bytes, uses);
      } else {
        CheckRecord(key, bytes, uses);
      }
      bytes_done_ += len;
      progress.Update(bytes_done_, bytes_total_);
    }
    progress.Finish();
    return true;
  }

  // What the STORAGE file of the store in `dir` says (read once): where
  // its data is, and the Env to read it through, opened at the first file.
  struct StoreData {
    engine::Result<std::optional<format::DataStorage>> where;
    std::shared_ptr<io::Env> env;
  };
  StoreData& StoreOf(const std::string& dir) {
    auto it = stores_.find(dir);
    if (it == stores_.end()) {
      it = stores_.emplace(dir, StoreData{engine::ReadStorageFile(dir), nullptr}).first;
    }
    return it->second;
  }

  // Whether the store in `dir` keeps its data in an object store (its
  // STORAGE file says so).
  bool DataIsRemote(const std::string& dir) {
    const StoreData& store = StoreOf(dir);
    return store.where.ok() && store.where->has_value();
  }

  // Opens a segment or data file (STORE/segments/NAME, STORE/data/NAME)
  // where its store keeps it: in its directory, or in the object store
  // that STORE/STORAGE names.
  engine::Result<std::unique_ptr<io::File>> OpenStoreFile(const std::string& path) {
    const std::string dir = std::filesystem::path(path).parent_path().parent_path().string();
    StoreData& store = StoreOf(dir);
    if (store.env == nullptr) {
      CKPTFS_RETURN_IF_ERROR(store.where.status());
      CKPTFS_ASSIGN_OR_RETURN(store.env, engine::OpenDataEnv(dir, *store.where, io::Env::Posix()));
    }
    return store.env->Open(path, io::OpenMode::kRead);
  }

  int Report(bool json) const {
    const int status = !failure_.empty() ? kOperational : damage_.empty() ? kClean : kDamage;
    if (json) {
      nlohmann::ordered_json j = {{"files", files_.size()},
                                  {"records", segment_records_},
                                  {"data_file_blocks", blocks_},
                                  {"bytes", bytes_done_},
                                  {"damage", damage_},
                                  {"error", nullptr},
                                  {"exit_status", status}};
      if (!failure_.empty()) j["error"] = failure_;
      std::printf("%s\n", j.dump(2).c_str());
      return status;
    }
    for (const std::string& d : damage_) std::fprintf(stderr, "ckptfs: verify: %s\n", d.c_str());
    if (!failure_.empty()) {
      std::fprintf(stderr, "ckptfs: verify: %s\n", failure_.c_str());
      return status;
    }
    const std::string blocks =
        blocks_ > 0 ? ", " + std::to_string(blocks_) + " data-file blocks" : std::string();
    std::printf("verify: %zu files, %zu records%s, %s checked: %s\n", files_.size(),
                segment_records_, blocks.c_str(), HumanBytes(bytes_done_).c_str(),
                damage_.empty() ? "every checksum matches"
                                : (std::to_string(damage_.size()) + " damaged").c_str());
    return status;
  }

 private:
  bool Fail(std::string why) {
    failure_ = std::move(why);
    return false;
  }
  void Damage(std::string what) { damage_.push_back(std::move(what)); }

  void DamageOfUse(const Use& u, const RecordKey& key, const engine::Status& st) {
    char range[96];
    std::snprintf(range, sizeof(range), " bytes [%" PRIu64 ", %" PRIu64 ")", u.file_offset,
                  u.file_offset + u.value.length);
    Damage(files_[u.file] + range + ": " + key.path + " offset " + std::to_string(key.offset) +
           ": " + st.ToString());
  }

  // One block of a data file: every extent that uses it names the same block
  // (offset, length, checksum) as the index has it; each is checked.
  void CheckBlock(const RecordKey& key, std::string_view bytes, const std::vector<Use>& uses) {
    for (const Use& u : uses) {
      const engine::Status st = format::CheckDataFileBlock(
          u.value, bytes.substr(0, std::min<size_t>(bytes.size(), u.value.stored_len)));
      if (!st.ok()) DamageOfUse(u, key, st);
    }
  }

  void CheckRecord(const RecordKey& key, std::string_view bytes, const std::vector<Use>& uses) {
    format::RecordView rec;
    const engine::Status st = format::DecodeRecord(bytes, &rec, /*decoded=*/nullptr);
    for (const Use& u : uses) {
      engine::Status use_st =
          st.ok() ? format::CheckRecordForExtent(rec.header, u.value, u.ino, u.file_offset) : st;
      if (!use_st.ok()) DamageOfUse(u, key, use_st);
    }
  }

  std::vector<std::string> files_;
  std::map<RecordKey, std::vector<Use>> records_;  // records and blocks
  std::map<std::string, StoreData> stores_;  // by store directory
  size_t segment_records_ = 0, blocks_ = 0;
  uint64_t bytes_total_ = 0, bytes_done_ = 0;
  std::vector<std::string> damage_;
  std::string failure_;
};

}  // namespace

int RunVerify(const std::vector<std::string>& paths, bool json) {
  Verifier v;
  if (v.Collect(paths) && v.Plan()) v.Check();
  return v.Report(json);
}

}  // namespace ckptfs::tools
