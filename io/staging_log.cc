// Staging logs (io/staging_log.h).
#include "io/staging_log.h"

#include <sys/stat.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ckptfs::io {
namespace {

void PutLe(char* at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe(const char* at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(at[i])) << (8 * i);
  }
  return v;
}

// The header of the record of `pieces` (`len` bytes in all) at `offset`.
void StagedHeader(uint64_t offset, std::span<const std::string_view> pieces, size_t len,
                  char out[kStagedHeaderBytes]) {
  PutLe(out, offset, 8);
  PutLe(out + 8, len, 4);
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, out, 12);
  for (std::string_view p : pieces) XXH3_64bits_update(&st, p.data(), p.size());
  PutLe(out + 12, XXH3_64bits_digest(&st), 8);
}

}  // namespace

std::string StagedRecord(uint64_t offset, std::string_view data) {
  char header[kStagedHeaderBytes];
  StagedHeader(offset, std::span<const std::string_view>(&data, 1), data.size(), header);
  return std::string(header, sizeof(header)) + std::string(data);
}

std::string StagingName(std::string_view object) {
  std::string name(object);
  std::replace(name.begin(), name.end(), '/', '#');
  return name;
}

std::string ObjectOfStagingName(std::string_view name) {
  std::string object(name);
  std::replace(object.begin(), object.end(), '#', '/');
  return object;
}

Status StagingLog::Append(uint64_t offset, std::span<const std::string_view> pieces) {
  size_t len = 0;
  for (std::string_view p : pieces) len += p.size();
  if (len == 0) return Status::OK();
  if (file_ == nullptr) {
    // A log left by a file of the same name whose close failed was sent
    // on before this process wrote anything.
    CKPTFS_RETURN_IF_ERROR(Env::Posix()->Remove(path_));
    CKPTFS_ASSIGN_OR_RETURN(file_, Env::Posix()->CreateUnsynced(path_));
    end_ = 0;
  }
  char header[kStagedHeaderBytes];
  StagedHeader(offset, pieces, len, header);
  std::vector<std::string_view> record;
  record.reserve(pieces.size() + 1);
  record.emplace_back(header, sizeof(header));
  record.insert(record.end(), pieces.begin(), pieces.end());
  Status s = file_->WriteAt(end_, record);
  if (!s.ok()) {
    (void)file_->Truncate(end_);  // a whole record or none
    return s.Annotate("append to staging log " + path_);
  }
  end_ += sizeof(header) + len;
  return Status::OK();
}

void StagingLog::Clear() {
  if (file_ == nullptr || end_ == 0) return;
  if (file_->Truncate(0).ok()) end_ = 0;
}

void StagingLog::Remove() {
  if (file_ == nullptr) return;
  file_.reset();
  (void)Env::Posix()->Remove(path_);
}

Status ReplayStagingLog(const std::string& path,
                        const std::function<Status(uint64_t, std::string_view)>& write) {
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<File> log, Env::Posix()->Open(path, OpenMode::kRead));
  std::string buf;
  uint64_t at = 0;
  for (;;) {
    char header[kStagedHeaderBytes];
    CKPTFS_ASSIGN_OR_RETURN(const size_t got, log->ReadAt(at, sizeof(header), header));
    if (got != sizeof(header)) return Status::OK();
    const uint64_t offset = GetLe(header, 8);
    const size_t len = static_cast<size_t>(GetLe(header + 8, 4));
    buf.resize(len);
    CKPTFS_ASSIGN_OR_RETURN(const size_t data, log->ReadAt(at + sizeof(header), len, buf.data()));
    if (data != len) return Status::OK();
    const std::string_view piece(buf);
    char want[kStagedHeaderBytes];
    StagedHeader(offset, std::span<const std::string_view>(&piece, 1), len, want);
    if (std::memcmp(want, header, sizeof(header)) != 0) return Status::OK();
    CKPTFS_RETURN_IF_ERROR(write(offset, piece));
    at += sizeof(header) + len;
  }
}

Result<std::vector<std::string>> ListStagingLogs(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(errno, "make staging directory " + dir);
  }
  CKPTFS_ASSIGN_OR_RETURN(std::vector<std::string> names, Env::Posix()->List(dir));
  names.erase(std::remove_if(names.begin(), names.end(),
                             [](const std::string& n) { return n.empty() || n[0] == '.'; }),
              names.end());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ckptfs::io
