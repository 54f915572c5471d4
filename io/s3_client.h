// A client of the S3 API over libcurl, signing with AWS Signature Version 4
// (libcurl's CURLOPT_AWS_SIGV4): the five requests an S3 Env needs (PUT,
// ranged GET, ListObjectsV2, DELETE, HEAD of the bucket) against one bucket
// of one endpoint, path-style (ENDPOINT/BUCKET/KEY), as any S3 service and
// radosgw answer.
//
// Failures: 404 is ENOENT, 403 EACCES, a full bucket or cluster (507,
// QuotaExceeded) ENOSPC, each with the service's own message. A request
// that cannot reach the service, or gets a 5xx or a 429, is tried again
// (with growing pauses) until `timeout_s` has passed since its first try,
// then fails with EIO: a gateway restarted meanwhile is waited for.
//
// Thread safety: any number of threads may send requests at once; each
// takes an idle connection or opens one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "io/object_store_env.h"

namespace ckptfs::io {

// Where in S3: "s3://BUCKET" or "s3://BUCKET/PREFIX" (PREFIX: without a
// leading '/'; kept with one trailing '/').
struct S3Location {
  std::string bucket;
  std::string prefix;
};
Result<S3Location> ParseS3Url(std::string_view url);

// The signing keys and region, from the usual AWS places: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION
// or AWS_DEFAULT_REGION), else the profile AWS_PROFILE (else "default") of
// AWS_SHARED_CREDENTIALS_FILE (else ~/.aws/credentials) and, for the
// region, AWS_CONFIG_FILE (else ~/.aws/config). Region default: us-east-1.
// EACCES when no keys are found.
struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region = "us-east-1";
};
Result<S3Credentials> FindS3Credentials();

// One object of a listing.
struct S3Object {
  std::string key;
  uint64_t size = 0;
  int64_t modified_ns = 0;
};

struct S3Listing {
  std::vector<S3Object> objects;     // sorted by key
  std::vector<std::string> prefixes;  // with a delimiter: the common prefixes
};

class S3Client {
 public:
  // `endpoint`: "http://HOST:PORT" or "https://HOST[:PORT]".
  S3Client(std::string endpoint, std::string bucket, S3Credentials credentials,
           double timeout_s);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Writes object `key` whole: `body`, the pieces one after the other.
  Status Put(const std::string& key, std::span<const std::string_view> body);
  // Reads up to `len` bytes of `key` at `offset` into `buf`: the count
  // (fewer only at the object's end). ENOENT for a missing object.
  Result<size_t> Get(const std::string& key, uint64_t offset, size_t len, char* buf);
  // Every object whose key starts with `prefix` (all pages); with a
  // `delimiter`, the keys that go on past one are folded into prefixes.
  Result<S3Listing> List(const std::string& prefix, const std::string& delimiter = "");
  // Deletes `key`; OK when it does not exist.
  Status Delete(const std::string& key);
  // OK when the bucket exists and the keys may use it.
  Status HeadBucket();

  // Requests sent so far: GETs as reads, PUTs as writes.
  ObjectCounters counters() const;
  const std::string& endpoint() const { return endpoint_; }
  const std::string& bucket() const { return bucket_; }

 private:
  struct Request;
  struct Response;
  Status Send(Request& req, Response* resp);
  static size_t OnBody(char* data, size_t size, size_t n, void* response);
  static size_t OnUpload(char* out, size_t size, size_t n, void* request);
  void* TakeHandle();
  void GiveBack(void* handle);

  const std::string endpoint_;
  const std::string bucket_;
  const S3Credentials credentials_;
  const double timeout_s_;
  Mutex mu_;
  std::vector<void*> idle_ GUARDED_BY(mu_);  // CURL easy handles, kept alive
  std::atomic<uint64_t> reads_{0}, writes_{0}, other_{0}, bytes_read_{0}, bytes_written_{0};
};

}  // namespace ckptfs::io
