#include "engine/data/data_storage.h"

#include <cstdio>
#include <random>

#include "io/rados_env.h"
#include "io/s3_env.h"

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
                                                             const std::string& data,
                                                             const std::string& s3_endpoint) {
  CKPTFS_ASSIGN_OR_RETURN(std::optional<format::DataStorage> where, ReadStorageFile(dir));
  if (where.has_value()) {
    if (!data.empty() && data != where->data) {
      return Status(EINVAL, dir + " keeps its data in " + where->data + ", not " + data);
    }
    if (!s3_endpoint.empty() && s3_endpoint != where->endpoint) {
      return Status(EINVAL, dir + " reaches its data through " +
                                (where->endpoint.empty() ? where->data : where->endpoint) +
                                ", not " + s3_endpoint);
    }
    return where;
  }
  if (data.empty()) {
    if (!s3_endpoint.empty()) {
      return Status(EINVAL, "s3_endpoint= is the S3 service of a store created with "
                            "data=s3://BUCKET");
    }
    return where;
  }
  if (!creating) {
    return Status(EINVAL, dir + " keeps its data in its own directory: data= chooses where "
                              "the data of a new store goes");
  }
  if (data.starts_with("s3://")) {
    CKPTFS_RETURN_IF_ERROR(io::ParseS3Url(data).status());
    if (s3_endpoint.empty()) {
      return Status(EINVAL, "data=" + data + " needs s3_endpoint=URL, the S3 service");
    }
    if (!s3_endpoint.starts_with("http://") && !s3_endpoint.starts_with("https://")) {
      return Status(EINVAL, "s3_endpoint=" + s3_endpoint + " is not http[s]://HOST[:PORT]");
    }
  } else {
    CKPTFS_RETURN_IF_ERROR(io::ParseRadosUrl(data).status().Annotate("data= is rados:// or s3://"));
    if (!s3_endpoint.empty()) {
      return Status(EINVAL, "s3_endpoint= is for data=s3://BUCKET, not " + data);
    }
  }
  std::random_device rd;
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "ckptfs_%08x%08x/", rd(), rd());
  where = format::DataStorage{data, prefix, s3_endpoint};
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
  auto common = [&](io::ObjectStoreOptions& o) {
    o.root = dir;
    o.dirs = {format::kSegmentsDirName, format::kDataDirName, format::kSnapshotsDirName};
    o.prefix = where->prefix;
    o.local = std::move(local);
    o.staging = staging;
    o.op_timeout_s = timeout_s;
  };
  if (where->data.starts_with("s3://")) {
    io::S3Options o;
    CKPTFS_ASSIGN_OR_RETURN(o.where, io::ParseS3Url(where->data));
    o.endpoint = where->endpoint;
    common(o);
    CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::S3Env> env, io::S3Env::Connect(o));
    return std::shared_ptr<io::Env>(std::move(env));
  }
  io::RadosOptions o;
  CKPTFS_ASSIGN_OR_RETURN(o.where, io::ParseRadosUrl(where->data));
  common(o);
  CKPTFS_ASSIGN_OR_RETURN(std::shared_ptr<io::RadosEnv> env, io::RadosEnv::Connect(o));
  return std::shared_ptr<io::Env>(std::move(env));
}

}  // namespace ckptfs::engine
