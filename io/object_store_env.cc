// ObjectStoreEnv's staging logs, the same for every object store.
#include "io/object_store_env.h"

#include "io/staging_log.h"

namespace ckptfs::io {

Status ObjectStoreEnv::SendStaged(const std::string& dir) {
  if (dir.empty()) return Status::OK();
  CKPTFS_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListStagingLogs(dir));
  for (const std::string& name : names) {
    const std::string log = dir + "/" + name;
    if (Status s = SendStagedLog(log, ObjectOfStagingName(name)); !s.ok()) {
      if (s.code() == ENOSPC) {
        return Status(ENOSPC, "writes made before the storage filled wait in " + log +
                                  " (" + s.message() +
                                  "): give it room (a larger quota, or fewer objects), then "
                                  "open the store again");
      }
      return s.Annotate("send the writes staged in " + log);
    }
    CKPTFS_RETURN_IF_ERROR(Env::Posix()->Remove(log));
  }
  return Status::OK();
}

Status ObjectStoreEnv::StartStaging(const std::string& dir) {
  CKPTFS_RETURN_IF_ERROR(SendStaged(dir));
  MutexLock l(&staging_mu_);
  staging_ = dir;
  return Status::OK();
}

std::string ObjectStoreEnv::StagingOf(const std::string& object) const {
  MutexLock l(&staging_mu_);
  return staging_.empty() ? "" : staging_ + "/" + StagingName(object);
}

}  // namespace ckptfs::io
