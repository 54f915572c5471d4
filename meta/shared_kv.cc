#include "meta/shared_kv.h"

#include "meta/mem_kv.h"
#include "meta/pg_kv.h"

namespace ckptfs::meta {

namespace {
constexpr std::string_view kMemScheme = "mem://";
}  // namespace

bool IsMemUri(std::string_view uri) { return uri.substr(0, kMemScheme.size()) == kMemScheme; }

Result<std::unique_ptr<Kv>> OpenSharedKv(const SharedKvOptions& options) {
  if (IsMemUri(options.uri)) {
    const std::string name(options.uri.substr(kMemScheme.size()));
    if (name.empty()) return Status(EINVAL, "no name in " + options.uri);
    CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<MemKv> kv,
                            MemKv::Named(name + "/" + options.schema, options.create));
    return std::unique_ptr<Kv>(std::move(kv));
  }
  PgOptions po;
  po.uri = options.uri;
  po.schema = options.schema;
  po.create = options.create;
  po.reconnect_wait_s = options.reconnect_wait_s;
  CKPTFS_ASSIGN_OR_RETURN(std::unique_ptr<PgKv> kv, PgKv::Open(po));
  return std::unique_ptr<Kv>(std::move(kv));
}

}  // namespace ckptfs::meta
