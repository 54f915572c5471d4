// S3Client: the S3 API over libcurl with SigV4 (io/s3_client.h).
#include "io/s3_client.h"

#include <curl/curl.h>
#include <expat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <thread>

namespace ckptfs::io {
namespace {

// Percent-encodes `s` as SigV4 wants it: every byte but A-Z a-z 0-9 - _ . ~
// (and '/' where `keep_slash`).
std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// "2026-12-02T19:20:00.000Z" in nanoseconds since the epoch; 0 when it is
// not one.
int64_t ParseIsoTime(const std::string& s) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000000000 + static_cast<int64_t>(ms) * 1000000;
}

// The parts of an S3 XML answer that the client reads: a listing's
// objects, common prefixes and continuation, or an error's code and
// message. Element names are matched by their path from the root.
struct XmlAnswer {
  S3Listing listing;
  bool truncated = false;
  std::string next_token;
  std::string error_code;
  std::string error_message;

  std::vector<std::string> path;
  std::string text;
  S3Object object;

  static void Start(void* self, const XML_Char* name, const XML_Char**) {
    auto* a = static_cast<XmlAnswer*>(self);
    a->path.emplace_back(name);
    a->text.clear();
    if (a->path.size() == 2 && a->path[1] == "Contents") a->object = S3Object();
  }
  static void Text(void* self, const XML_Char* s, int len) {
    static_cast<XmlAnswer*>(self)->text.append(s, static_cast<size_t>(len));
  }
  static void End(void* self, const XML_Char*) {
    auto* a = static_cast<XmlAnswer*>(self);
    const std::vector<std::string>& p = a->path;
    if (p.size() == 2) {
      if (p[1] == "Contents") a->listing.objects.push_back(a->object);
      if (p[1] == "IsTruncated") a->truncated = a->text == "true";
      if (p[1] == "NextContinuationToken") a->next_token = a->text;
      if (p[0] == "Error" && p[1] == "Code") a->error_code = a->text;
      if (p[0] == "Error" && p[1] == "Message") a->error_message = a->text;
    } else if (p.size() == 3 && p[1] == "Contents") {
      if (p[2] == "Key") a->object.key = a->text;
      if (p[2] == "Size") a->object.size = std::strtoull(a->text.c_str(), nullptr, 10);
      if (p[2] == "LastModified") a->object.modified_ns = ParseIsoTime(a->text);
    } else if (p.size() == 3 && p[1] == "CommonPrefixes" && p[2] == "Prefix") {
      a->listing.prefixes.push_back(a->text);
    }
    a->path.pop_back();
    a->text.clear();
  }

  bool Parse(const std::string& xml) {
    XML_Parser parser = XML_ParserCreate(nullptr);
    XML_SetUserData(parser, this);
    XML_SetElementHandler(parser, Start, End);
    XML_SetCharacterDataHandler(parser, Text);
    const bool ok = XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), 1) == XML_STATUS_OK;
    XML_ParserFree(parser);
    return ok;
  }
};

// The INI sections of an AWS credentials or config file: section → key →
// value. Empty when the file cannot be read.
std::map<std::string, std::map<std::string, std::string>> ReadIni(const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(path);
  std::string line, section;
  auto trim = [](std::string s) {
    const size_t a = s.find_first_not_of(" \t\r");
    const size_t b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    out[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

void CurlGlobalInit() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)done;
}

}  // namespace

Result<S3Location> ParseS3Url(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  const Status bad(EINVAL, "\"" + std::string(url) + "\" is not s3://BUCKET[/PREFIX]");
  if (url.substr(0, kScheme.size()) != kScheme) return bad;
  std::string_view rest = url.substr(kScheme.size());
  S3Location where;
  const size_t slash = rest.find('/');
  where.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) where.prefix = std::string(rest.substr(slash + 1));
  while (!where.prefix.empty() && where.prefix.back() == '/') where.prefix.pop_back();
  if (where.bucket.empty() || where.bucket.find_first_of("?#") != std::string::npos ||
      where.prefix.find("//") != std::string::npos || where.prefix.starts_with("/")) {
    return bad;
  }
  if (!where.prefix.empty()) where.prefix += "/";
  return where;
}

Result<S3Credentials> FindS3Credentials() {
  S3Credentials c;
  const std::string home = EnvOr("HOME", "");
  const std::string profile = EnvOr("AWS_PROFILE", "default");
  c.access_key = EnvOr("AWS_ACCESS_KEY_ID", "");
  c.secret_key = EnvOr("AWS_SECRET_ACCESS_KEY", "");
  c.session_token = EnvOr("AWS_SESSION_TOKEN", "");
  const std::string creds_file = EnvOr("AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials");
  if (c.access_key.empty() || c.secret_key.empty()) {
    auto ini = ReadIni(creds_file);
    auto& p = ini[profile];
    c.access_key = p["aws_access_key_id"];
    c.secret_key = p["aws_secret_access_key"];
    c.session_token = p["aws_session_token"];
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return Status(EACCES, "no S3 keys: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                          "profile " + profile + " in " + creds_file);
  }
  std::string region = EnvOr("AWS_REGION", EnvOr("AWS_DEFAULT_REGION", ""));
  if (region.empty()) {
    auto ini = ReadIni(EnvOr("AWS_CONFIG_FILE", home + "/.aws/config"));
    region = ini[profile == "default" ? "default" : "profile " + profile]["region"];
  }
  if (!region.empty()) c.region = region;
  return c;
}

struct S3Client::Request {
  const char* method = "GET";
  std::string key;    // "" for the bucket itself
  std::string query;  // canonical: parameters sorted, values encoded
  std::vector<std::string> headers;
  std::span<const std::string_view> body;  // PUT
  char* into = nullptr;                    // GET: the caller's buffer
  size_t into_len = 0;
  // Progress of one try.
  size_t piece = 0, piece_at = 0;
};

struct S3Client::Response {
  long status = 0;
  std::string body;  // XML answers and errors
  size_t got = 0;    // bytes into Request::into
  Request* req = nullptr;
  void* handle = nullptr;
};

size_t S3Client::OnBody(char* data, size_t size, size_t n, void* self) {
  auto* r = static_cast<Response*>(self);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(static_cast<CURL*>(r->handle), CURLINFO_RESPONSE_CODE, &status);
  auto* req = r->req;
  if (req->into != nullptr && status >= 200 && status < 300) {
    const size_t take = std::min(len, req->into_len - r->got);
    std::memcpy(req->into + r->got, data, take);
    r->got += take;
    return len;
  }
  if (r->body.size() < (1u << 24)) r->body.append(data, len);
  return len;
}

size_t S3Client::OnUpload(char* out, size_t size, size_t n, void* self) {
  auto* req = static_cast<Request*>(self);
  size_t room = size * n, done = 0;
  while (room > 0 && req->piece < req->body.size()) {
    const std::string_view p = req->body[req->piece];
    const size_t take = std::min(room, p.size() - req->piece_at);
    std::memcpy(out + done, p.data() + req->piece_at, take);
    done += take;
    room -= take;
    req->piece_at += take;
    if (req->piece_at == p.size()) {
      ++req->piece;
      req->piece_at = 0;
    }
  }
  return done;
}

namespace {

bool Retryable(CURLcode rc, long status) {
  if (rc != CURLE_OK) {
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING ||
           rc == CURLE_PARTIAL_FILE || rc == CURLE_COULDNT_RESOLVE_HOST;
  }
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

}  // namespace

S3Client::S3Client(std::string endpoint, std::string bucket, S3Credentials credentials,
                   double timeout_s)
    : endpoint_(endpoint.substr(0, endpoint.find_last_not_of('/') + 1)),
      bucket_(std::move(bucket)),
      credentials_(std::move(credentials)),
      timeout_s_(timeout_s) {
  CurlGlobalInit();
}

S3Client::~S3Client() {
  MutexLock l(&mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* S3Client::TakeHandle() {
  {
    MutexLock l(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Client::GiveBack(void* handle) {
  MutexLock l(&mu_);
  idle_.push_back(handle);
}

Status S3Client::Send(Request& req, Response* resp) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  const std::string url = endpoint_ + "/" + UriEncode(bucket_, false) +
                          (req.key.empty() ? "" : "/" + UriEncode(req.key, true)) +
                          (req.query.empty() ? "" : "?" + req.query);
  const std::string what = std::string(req.method) + " " + bucket_ + "/" + req.key;
  const std::string sigv4 = "aws:amz:" + credentials_.region + ":s3";
  const std::string userpwd = credentials_.access_key + ":" + credentials_.secret_key;
  uint64_t body_len = 0;
  for (std::string_view p : req.body) body_len += p.size();
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    CURL* h = static_cast<CURL*>(TakeHandle());
    if (h == nullptr) return Status(ENOMEM, what + ": no curl handle");
    curl_easy_reset(h);
    *resp = Response();
    resp->req = &req;
    resp->handle = h;
    req.piece = req.piece_at = 0;
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!credentials_.session_token.empty()) {
      headers = curl_slist_append(headers,
                                  ("x-amz-security-token: " + credentials_.session_token).c_str());
    }
    for (const std::string& x : req.headers) headers = curl_slist_append(headers, x.c_str());
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const long left_ms = std::max<long>(1000, static_cast<long>(left.count()));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, std::min<long>(left_ms, 5000));
    // A request that stalls (a gateway stopped mid-answer) ends after the
    // time left.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max<long>(1, left_ms / 1000));
    if (std::strcmp(req.method, "PUT") == 0) {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, OnUpload);
      curl_easy_setopt(h, CURLOPT_READDATA, &req);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_len));
    } else if (std::strcmp(req.method, "HEAD") == 0) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (std::strcmp(req.method, "GET") != 0) {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method);
    }
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      curl_easy_cleanup(h);  // its connection may be broken
    } else {
      GiveBack(h);
    }
    resp->handle = nullptr;
    if (rc == CURLE_OK && resp->status >= 200 && resp->status < 300) return Status::OK();
    if (Retryable(rc, resp->status) && Clock::now() + pause < deadline) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(1000));
      continue;
    }
    if (rc != CURLE_OK) {
      return Status(EIO, what + ": " + curl_easy_strerror(rc) + " (" + endpoint_ + ")");
    }
    XmlAnswer err;
    if (!resp->body.empty()) (void)err.Parse(resp->body);
    const std::string why = err.error_code.empty()
                                ? "HTTP " + std::to_string(resp->status)
                                : err.error_code + (err.error_message.empty() ? "" : ": " + err.error_message);
    if (resp->status == 404) return Status(ENOENT, what + ": " + why);
    if (resp->status == 507 || err.error_code == "QuotaExceeded" ||
        err.error_code == "InsufficientCapacity") {
      return Status(ENOSPC, what + ": the bucket is full (" + why + ")");
    }
    if (resp->status == 403) return Status(EACCES, what + ": " + why);
    if (resp->status == 416) return Status(ERANGE, what + ": " + why);
    if (Retryable(rc, resp->status)) {
      return Status(EIO, what + ": no answer within " + std::to_string(static_cast<int>(timeout_s_)) +
                             " s (" + why + ")");
    }
    return Status(EIO, what + ": " + why);
  }
}

Status S3Client::Put(const std::string& key, std::span<const std::string_view> body) {
  Request req;
  req.method = "PUT";
  req.key = key;
  req.body = body;
  uint64_t len = 0;
  for (std::string_view p : body) len += p.size();
  writes_.fetch_add(1, std::memory_order_relaxed);
  Response resp;
  CKPTFS_RETURN_IF_ERROR(Send(req, &resp));
  bytes_written_.fetch_add(len, std::memory_order_relaxed);
  return Status::OK();
}

Result<size_t> S3Client::Get(const std::string& key, uint64_t offset, size_t len, char* buf) {
  if (len == 0) return size_t{0};
  Request req;
  req.key = key;
  req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                        std::to_string(offset + len - 1));
  req.into = buf;
  req.into_len = len;
  reads_.fetch_add(1, std::memory_order_relaxed);
  Response resp;
  Status s = Send(req, &resp);
  if (s.code() == ERANGE) return size_t{0};  // at or past the end
  CKPTFS_RETURN_IF_ERROR(s);
  // A service that ignores Range answers 200 with the whole object.
  if (resp.status == 200 && offset > 0) {
    return Status(EIO, "GET " + bucket_ + "/" + key + ": the range was not honoured");
  }
  bytes_read_.fetch_add(resp.got, std::memory_order_relaxed);
  return resp.got;
}

Result<S3Listing> S3Client::List(const std::string& prefix, const std::string& delimiter) {
  S3Listing all;
  std::string token;
  for (;;) {
    Request req;
    // Parameters in SigV4's canonical order.
    if (!token.empty()) req.query += "continuation-token=" + UriEncode(token, false) + "&";
    if (!delimiter.empty()) req.query += "delimiter=" + UriEncode(delimiter, false) + "&";
    req.query += "list-type=2&prefix=" + UriEncode(prefix, false);
    other_.fetch_add(1, std::memory_order_relaxed);
    Response resp;
    CKPTFS_RETURN_IF_ERROR(Send(req, &resp));
    XmlAnswer a;
    if (!a.Parse(resp.body)) {
      return Status(EIO, "list " + bucket_ + "/" + prefix + ": the answer is not XML");
    }
    for (S3Object& o : a.listing.objects) all.objects.push_back(std::move(o));
    for (std::string& p : a.listing.prefixes) all.prefixes.push_back(std::move(p));
    if (!a.truncated || a.next_token.empty()) break;
    token = a.next_token;
  }
  std::sort(all.objects.begin(), all.objects.end(),
            [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  std::sort(all.prefixes.begin(), all.prefixes.end());
  return all;
}

Status S3Client::Delete(const std::string& key) {
  Request req;
  req.method = "DELETE";
  req.key = key;
  other_.fetch_add(1, std::memory_order_relaxed);
  Response resp;
  Status s = Send(req, &resp);
  return s.code() == ENOENT ? Status::OK() : s;
}

Status S3Client::HeadBucket() {
  Request req;
  req.method = "HEAD";
  other_.fetch_add(1, std::memory_order_relaxed);
  Response resp;
  Status s = Send(req, &resp);
  if (s.code() == ENOENT) return Status(ENOENT, "S3 bucket " + bucket_ + " does not exist");
  return s;
}

ObjectCounters S3Client::counters() const {
  ObjectCounters c;
  c.reads = reads_.load(std::memory_order_relaxed);
  c.writes = writes_.load(std::memory_order_relaxed);
  c.other = other_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace ckptfs::io
