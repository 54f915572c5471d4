// Where a store's data lives: its own directory, or an object store that
// the store names in its STORAGE file (docs/FORMAT.md), chosen when the
// store is created and remembered from then on, as SHARED remembers where
// the index is.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "format/format.h"
#include "io/env.h"

namespace ckptfs::engine {

// The STORAGE file of `dir`; nullopt when it has none (the data is in the
// store's directory). Corruption when it cannot be parsed.
Result<std::optional<format::DataStorage>> ReadStorageFile(const std::string& dir);

// Where the data of the store in `dir` lives. A store being created with
// `data` set (rados://POOL[/NAMESPACE], or s3://BUCKET[/PREFIX] with
// `s3_endpoint`) gets a STORAGE file naming it (and a new prefix); an
// existing store keeps what its STORAGE file says, and `data` or
// `s3_endpoint` set to anything else is EINVAL.
Result<std::optional<format::DataStorage>> ChooseDataStorage(const std::string& dir,
                                                             bool creating,
                                                             const std::string& data,
                                                             const std::string& s3_endpoint = "");

// The Env through which the store in `dir` reads and writes its segments,
// data files and snapshots: `local` when `where` is nullopt; else one that
// keeps them in the object store and every other path in `local`. Ceph's
// configuration comes from Ceph's own search (CEPH_CONF, /etc/ceph), S3's
// keys from AWS's usual places (io::FindS3Credentials). A
// request unanswered for `timeout_s` fails with EIO. `staging`: the
// directory of the staging logs (io/staging_log.h) for the one
// process that writes the store's files ("" for a reader): what earlier
// processes left there is sent on first.
Result<std::shared_ptr<io::Env>> OpenDataEnv(const std::string& dir,
                                             const std::optional<format::DataStorage>& where,
                                             std::shared_ptr<io::Env> local,
                                             double timeout_s = 30,
                                             const std::string& staging = "");

}  // namespace ckptfs::engine
