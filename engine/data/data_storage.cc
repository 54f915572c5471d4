#include "engine/data/data_storage.h"

#include <cstdio>
#include <random>

#include "io/rados_env.h"

namespace ckptfs::engine {

Result<std::optional<format::DataStorage>> ReadStorageFile(const std::string& dir) {
  const std::string path = dir + "/" + format::kStorageFileName;
  Result<std::unique_ptr<io::File>> f = io::Env::Posix()->Open(path, io::OpenMode::kRead);
  if (!f.ok() && f.status().code() == ENOENT) return std::optional<format::DataStorage>();
  if (!f.ok()) return f.status();
  CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, (*f)->Size());
  if (size > 4096) return Status::Corruption(path + ": " + std::to_string(size) + " bytes");
  std::string text(size, '\0');
  CKPTFS_RETURN_IF_ERROR((*f)->ReadExactly(0, size, text.data()));
  format::DataStorage where;
  CKPTFS_RETURN_IF_ERROR(format::ParseStorageFile(text, &where).Annotate(dir));
  return std::optional<format::DataStorage>(std::move(where));
}

Result<std::optional<format::DataStorage>> ChooseDataStorage(const std::string& dir,
                                                             bool creating,
                                                             const std::string& data) {
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::DataStorage> where, ReadStorageFile(dir));
  if (where.has_value()) {
    if (!data.empty() && data != where->data) {
      return Status(EINVAL, dir + " keeps its data in " + where->data + ", not " + data);
    }
    return where;
  }
  if (data.empty()) return where;
  if (!creating) {
    return Status(EINVAL, dir + " keeps its data in its own directory: data= chooses where "
                              "the data of a new store goes");
  }
  CKPTFS_RETURN_IF_ERROR(io::ParseRadosUrl(data).status());
  std::random_device rd;
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "ckptfs_%08x%08x/", rd(), rd());
  where = format::DataStorage{data, prefix};
  CKPTFS_RETURN_IF_ERROR(io::Env::Posix()
                             ->Create(dir + "/" + format::kStorageFileName,
                                      format::StorageFileContents(*where))
                             .status());
  return where;
}

Result<std::shared_ptr<io::Env>> OpenDataEnv(const std::string& dir,
                                             const std::optional<format::DataStorage>& where,
                                             std::shared_ptr<io::Env> local,
                                             double timeout_s, const std::string& staging) {
  if (!where.has_value()) return local;
  io::RadosOptions o;
  o.op_timeout_s = timeout_s;
  o.staging = staging;
  CKPTFS_ASSIGN_OR_RETURN(o.where, io::ParseRadosUrl(where->data));
  o.root = dir;
  o.dirs = {format::kSegmentsDirName, format::kDataDirName, format::kSnapshotsDirName};
  o.prefix = where->prefix;
  o.local = std::move(local);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::RadosEnv> env, io::RadosEnv::Connect(o));
  return std::shared_ptr<io::Env>(std::move(env));
}

}  // namespace ckptfs::engine
