// An Env that keeps a store's data files in RADOS (Ceph's object store),
// through librados: the files under chosen subdirectories of the store's
// directory (segments/, data/, snapshots/) are objects of one pool, every
// other path goes to a local Env.
//
// Layout (docs/FORMAT.md, STORAGE): file ROOT/D/NAME is the object
// PREFIX + "D/NAME" of the pool and namespace, holding bytes [0, S) of the
// file, where S is the stripe size (kRadosStripeBytes; RADOS limits the
// size of one object, 128 MiB by default). Bytes [k*S, (k+1)*S) are in
// the object of the same name with "@k" after it. A file of more than one
// object has xattr kRadosObjectsXattr on its first object: the count of
// objects, in decimal. Its size is (count-1)*S plus the size of the last
// object; a missing object or a short one before the last reads as zeros.
//
// Each read is one RADOS read per object it touches. Writes gather in a
// buffer of each open file and go out as one RADOS write operation per
// object (several extents in one operation, applied in order), in the
// background once write_buffer bytes are waiting, and at Sync(), at a
// read of bytes still waiting, at Truncate() and at close. A RADOS write is
// durable once acknowledged, so Sync() is that flush. Creates are atomic:
// an exclusive create of the first object with its contents in one
// operation (a larger file's other objects are written before it).
//
// Staging (RadosOptions::staging): a write is acknowledged by the cluster
// only once its flush completes, so each open file's writes that the
// cluster has not acknowledged are also appended to a staging log of its
// own (io/staging_log.h; NAME: the first object's name), sent on by the
// next Connect() with the same staging directory. A log reaching
// kStagingLimit makes its file wait for the cluster.
//
// Credentials and monitors come from Ceph's usual places: the
// configuration file (RadosOptions::conf, else CEPH_CONF, else
// /etc/ceph/ceph.conf and Ceph's other defaults), its keyring, and
// CEPH_ARGS. Thread safety: as every Env.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/env.h"
#include "io/object_store_env.h"

namespace ckptfs::io {

inline constexpr uint64_t kRadosStripeBytes = 64ull << 20;
inline constexpr char kRadosObjectsXattr[] = "ckptfs.objects";
// Where in RADOS: "rados://POOL" or "rados://POOL/NAMESPACE".
struct RadosLocation {
  std::string pool;
  std::string ns;
};
Result<RadosLocation> ParseRadosUrl(std::string_view url);

struct RadosOptions : ObjectStoreOptions {
  RadosLocation where;
  // Ceph's configuration file; "" for Ceph's own search.
  std::string conf;
  // Bytes of a file in each of its objects (S above). A store's files
  // are always read with the stripe they were written with.
  // Default: kRadosStripeBytes.
  uint64_t stripe_bytes = kRadosStripeBytes;
};

class RadosEnv : public ObjectStoreEnv {
 public:
  // Connects to the cluster and opens the pool: ENOENT names a missing
  // pool, EIO a cluster that did not answer within op_timeout_s.
  static Result<std::shared_ptr<RadosEnv>> Connect(const RadosOptions& options);

  // The object that holds the first bytes of `path`; "" for a local path.
  virtual std::string ObjectOf(const std::string& path) const = 0;
};

}  // namespace ckptfs::io
