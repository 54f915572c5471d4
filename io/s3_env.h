// An Env that keeps a store's data files in an S3 bucket (any S3 service;
// radosgw in the tests), through io::S3Client: the files under chosen
// subdirectories of the store's directory (segments/, data/, snapshots/)
// are objects, every other path goes to a local Env.
//
// Layout (docs/OBJECT_STORAGE.md, docs/FORMAT.md "STORAGE"): S3 objects
// cannot be appended to or written at an offset, so file ROOT/D/NAME is a
// set of immutable parts, the objects KEY/SSSSSSSSSSSSSSSSdOOOOOOOOOOOOOOOO
// and KEY/SSSSSSSSSSSSSSSStLLLLLLLLLLLLLLLL (KEY: location prefix, store
// prefix, "D/NAME"; S, O, L: 16 hex digits). Part S of kind 'd' holds
// bytes written at offset O; part S of kind 't' (empty) cuts or extends the
// file to L bytes. The file is its parts applied in the order of S, bytes
// no part wrote reading as zeros. It exists while part 1 does: a create
// writes its other parts first and part 1 last, a remove deletes the parts
// from the last to part 1, so a crash leaves the whole file or none (a
// create) or an earlier state of it (a remove).
//
// Opening a file lists its parts (one LIST); each read is one ranged GET
// per part it touches. Writes gather in a buffer of each open file and go
// out as one PUT per run of contiguous bytes, in the background once
// write_buffer bytes are waiting, and at Sync(), at a read of bytes still
// waiting, at Truncate() and at close. A PUT is durable once answered, so
// Sync() is that flush; an upload cut short leaves no part (a PUT appears
// whole or not at all), so a crash leaves nothing to clean up. Writes the
// service has not answered are kept in staging logs (io/staging_log.h), as
// the RADOS Env keeps them.
//
// Keys come from the usual AWS places (io::FindS3Credentials), never from
// the store. Thread safety: as every Env.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/env.h"
#include "io/object_store_env.h"
#include "io/s3_client.h"

namespace ckptfs::io {

struct S3Options : ObjectStoreOptions {
  S3Location where;
  // "http://HOST:PORT" or "https://HOST[:PORT]".
  std::string endpoint;
};

class S3Env : public ObjectStoreEnv {
 public:
  // Finds the keys and checks that the bucket answers: ENOENT names a
  // missing bucket, EACCES keys it refuses, EIO a service that did not
  // answer within op_timeout_s.
  static Result<std::shared_ptr<S3Env>> Connect(const S3Options& options);

  // The key before the parts of `path` ("KEY", without the '/'); "" for a
  // local path.
  virtual std::string KeyOf(const std::string& path) const = 0;
};

// The name of part `seq` of kind `kind` ('d' or 't') with value `v`, and
// back (false when `name` is not one).
std::string S3PartName(uint64_t seq, char kind, uint64_t v);
bool ParseS3PartName(std::string_view name, uint64_t* seq, char* kind, uint64_t* v);

}  // namespace ckptfs::io
