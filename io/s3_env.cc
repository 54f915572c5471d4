// S3Env: a store's data files as parts in an S3 bucket (io/s3_env.h).
#include "io/s3_env.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <span>

#include "base/mutex.h"
#include "io/object_store_env.h"
#include "io/staging_log.h"

namespace ckptfs::io {
namespace {

// Reads of one call that run at once, each a GET of a part.
constexpr size_t kParallelGets = 8;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One part of a file, as its listing shows it.
struct Part {
  uint64_t seq = 0;
  char kind = 'd';
  uint64_t v = 0;  // 'd': the offset it was written at; 't': the size
  uint64_t bytes = 0;
  int64_t modified_ns = 0;
  std::string key;
};

// Where each run of a file's bytes is: a piece of a part.
class ExtentMap {
 public:
  struct Piece {
    std::string key;  // the part's object
    uint64_t at = 0;  // where in it
    uint64_t len = 0;
  };

  // The part `key`'s bytes [0, len) are the file's [off, off+len).
  void Write(uint64_t off, uint64_t len, const std::string& key) {
    if (len == 0) return;
    Erase(off, off + len);
    map_.emplace(off, Piece{key, 0, len});
  }
  // Nothing at or past `size`.
  void Cut(uint64_t size) { Erase(size, UINT64_MAX); }

  // The pieces that overlap [off, off+len), by the file offset where each
  // starts.
  std::vector<std::pair<uint64_t, Piece>> Find(uint64_t off, uint64_t len) const {
    std::vector<std::pair<uint64_t, Piece>> out;
    auto it = First(off);
    for (; it != map_.end() && it->first < off + len; ++it) out.emplace_back(it->first, it->second);
    return out;
  }

 private:
  std::map<uint64_t, Piece>::const_iterator First(uint64_t off) const {
    auto it = map_.lower_bound(off);
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.len > off) return prev;
    }
    return it;
  }

  void Erase(uint64_t off, uint64_t end) {
    auto it = map_.lower_bound(off);
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.len > off) it = prev;
    }
    while (it != map_.end() && it->first < end) {
      const uint64_t s = it->first;
      const Piece p = it->second;
      it = map_.erase(it);
      if (s < off) map_.emplace(s, Piece{p.key, p.at, off - s});
      if (s + p.len > end) map_.emplace(end, Piece{p.key, p.at + (end - s), s + p.len - end});
    }
  }

  std::map<uint64_t, Piece> map_;
};

// A PUT of one part on its way: `bytes` stay where they are until `done`.
struct Upload {
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  std::string key;
  std::unique_ptr<std::string> bytes;
  std::future<Status> done;
};

class S3File final : public File {
 public:
  // `parts`: the file's parts, sorted by seq. `staging`: the file's
  // staging log ("" for none).
  S3File(std::shared_ptr<S3Client> s3, std::string path, std::string key, bool writable,
         const std::vector<Part>& parts, const S3Options& o, const std::string& staging)
      : File(std::move(path)),
        s3_(std::move(s3)),
        key_(std::move(key)),
        writable_(writable),
        buffer_limit_(std::max<size_t>(1, o.write_buffer)),
        max_in_flight_(std::max(1, o.writes_in_flight)),
        pending_(buffer_limit_, buffer_limit_, static_cast<size_t>(max_in_flight_)) {
    MutexLock l(&mu_);
    ApplyLocked(parts);
    if (writable && !staging.empty()) stage_ = std::make_unique<StagingLog>(staging);
  }

  ~S3File() override {
    if (!writable_) return;
    MutexLock l(&mu_);
    // A file whose writes failed keeps its log, for the next Connect().
    if (DrainLocked().ok() && stage_ != nullptr) stage_->Remove();
  }

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
    std::vector<std::pair<uint64_t, ExtentMap::Piece>> pieces;
    {
      MutexLock l(&mu_);
      if (writable_ && UnsentOverlapsLocked(offset, len)) CKPTFS_RETURN_IF_ERROR(DrainLocked());
      if (offset >= size_) return size_t{0};
      len = static_cast<size_t>(std::min<uint64_t>(len, size_ - offset));
      pieces = map_.Find(offset, len);
    }
    std::memset(buf, 0, len);  // what no part wrote
    std::deque<std::future<Status>> gets;
    Status first_error;
    auto reap = [&] {
      Status s = gets.front().get();
      gets.pop_front();
      if (first_error.ok()) first_error = s;
    };
    for (const auto& [start, p] : pieces) {
      const uint64_t from = std::max(start, offset);
      const uint64_t to = std::min(start + p.len, offset + len);
      char* into = buf + (from - offset);
      const uint64_t at = p.at + (from - start);
      const size_t want = static_cast<size_t>(to - from);
      auto get = [s3 = s3_, key = p.key, at, want, into]() -> Status {
        CKPTFS_ASSIGN_OR_RETURN(const size_t got, s3->Get(key, at, want, into));
        if (got != want) {
          return Status::Corruption(key + " ends at " + std::to_string(at + got) +
                                    ", its file needs bytes up to " + std::to_string(at + want));
        }
        return Status::OK();
      };
      if (pieces.size() == 1) {
        CKPTFS_RETURN_IF_ERROR(get());
        continue;
      }
      if (gets.size() >= kParallelGets) reap();
      gets.push_back(std::async(std::launch::async, get));
    }
    while (!gets.empty()) reap();
    CKPTFS_RETURN_IF_ERROR(first_error);
    return len;
  }

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    if (!writable_) return Status(EBADF, path() + ": not open for writing");
    MutexLock l(&mu_);
    CKPTFS_RETURN_IF_ERROR(error_);
    if (stage_ != nullptr) CKPTFS_RETURN_IF_ERROR(stage_->Append(offset, pieces));
    size_ = std::max(size_, pending_.Add(offset, pieces));
    if (stage_ != nullptr && stage_->bytes() >= kStagingLimit) return DrainLocked();
    if (pending_.bytes() >= buffer_limit_) return SendLocked();
    return Status::OK();
  }

  Status Sync() override {
    if (!writable_) return Status::OK();
    MutexLock l(&mu_);
    Status s = DrainLocked();
    pending_.DropSpares();
    return s;
  }

  Result<uint64_t> Size() const override {
    MutexLock l(&mu_);
    return size_;
  }

  Result<int64_t> ModifiedNs() const override {
    MutexLock l(&mu_);
    return modified_ns_;
  }

  Status Truncate(uint64_t size) override {
    if (!writable_) return Status(EBADF, path() + ": not open for writing");
    MutexLock l(&mu_);
    CKPTFS_RETURN_IF_ERROR(DrainLocked());
    const uint64_t seq = next_seq_++;
    Status s = s3_->Put(key_ + "/" + S3PartName(seq, 't', size), {});
    if (!s.ok()) {
      error_ = s;
      return s;
    }
    map_.Cut(size);
    size_ = size;
    modified_ns_ = NowNs();
    return Status::OK();
  }

  // Lists the parts again: what was written since the open.
  Status Refresh() const override {
    if (writable_) return Status::OK();
    CKPTFS_ASSIGN_OR_RETURN(S3Listing listing, s3_->List(key_ + "/"));
    std::vector<Part> parts = PartsOf(key_, listing);
    MutexLock l(&mu_);
    map_ = ExtentMap();
    size_ = 0;
    ApplyLocked(parts);
    return Status::OK();
  }

  // The parts of `key` in `listing`, by seq.
  static std::vector<Part> PartsOf(const std::string& key, const S3Listing& listing) {
    std::vector<Part> parts;
    for (const S3Object& o : listing.objects) {
      if (o.key.size() <= key.size() + 1 || o.key.compare(0, key.size(), key) != 0 ||
          o.key[key.size()] != '/') {
        continue;
      }
      Part p;
      if (!ParseS3PartName(std::string_view(o.key).substr(key.size() + 1), &p.seq, &p.kind, &p.v)) {
        continue;
      }
      p.bytes = o.size;
      p.modified_ns = o.modified_ns;
      p.key = o.key;
      parts.push_back(std::move(p));
    }
    std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.seq < b.seq; });
    return parts;
  }

 private:
  void ApplyLocked(const std::vector<Part>& parts) const REQUIRES(mu_) {
    for (const Part& p : parts) {
      if (p.kind == 'd') {
        map_.Write(p.v, p.bytes, p.key);
        size_ = std::max(size_, p.v + p.bytes);
      } else {
        map_.Cut(p.v);
        size_ = p.v;
      }
      next_seq_ = std::max(next_seq_, p.seq + 1);
      modified_ns_ = std::max(modified_ns_, p.modified_ns);
    }
  }

  bool UnsentOverlapsLocked(uint64_t offset, size_t len) const REQUIRES(mu_) {
    if (pending_.Overlaps(offset, len)) return true;
    for (const Upload& u : in_flight_) {
      if (u.offset < offset + len && offset < u.offset + u.len) return true;
    }
    return false;
  }

  // Starts a PUT of each run that waits, as a part of its own.
  Status SendLocked() const REQUIRES(mu_) {
    std::vector<PendingWrites::Run> runs = pending_.Take();
    sending_ = true;  // `runs` hold writes that are neither pending nor in flight
    for (PendingWrites::Run& run : runs) {
      while (static_cast<int>(in_flight_.size()) >= max_in_flight_) WaitOldestLocked();
      Upload u;
      u.seq = next_seq_++;
      u.offset = run.offset;
      u.len = run.bytes.size();
      u.key = key_ + "/" + S3PartName(u.seq, 'd', run.offset);
      u.bytes = std::make_unique<std::string>(std::move(run.bytes));
      u.done = std::async(std::launch::async,
                          [s3 = s3_, key = u.key, v = std::string_view(*u.bytes)]() -> Status {
                            return s3->Put(key, std::span<const std::string_view>(&v, 1));
                          });
      in_flight_.push_back(std::move(u));
    }
    sending_ = false;
    return error_;
  }

  void WaitOldestLocked() const REQUIRES(mu_) {
    Upload u = std::move(in_flight_.front());
    in_flight_.pop_front();
    Status s = u.done.get();
    pending_.Recycle(std::move(*u.bytes));
    if (s.ok()) {
      map_.Write(u.offset, u.len, u.key);
      modified_ns_ = NowNs();
    } else if (error_.ok()) {
      error_ = s;
    }
    ClearStagedLocked();
  }

  // Empties the staging log once the service has every write.
  void ClearStagedLocked() const REQUIRES(mu_) {
    if (stage_ != nullptr && error_.ok() && !sending_ && pending_.empty() && in_flight_.empty()) {
      stage_->Clear();
    }
  }

  // Sends what waits and waits for every PUT. A failed one stays the
  // file's error (as a failed writeback on a local disk).
  Status DrainLocked() const REQUIRES(mu_) {
    Status sent = SendLocked();
    while (!in_flight_.empty()) WaitOldestLocked();
    CKPTFS_RETURN_IF_ERROR(error_);
    CKPTFS_RETURN_IF_ERROR(sent);
    ClearStagedLocked();
    return Status::OK();
  }

  const std::shared_ptr<S3Client> s3_;
  const std::string key_;
  const bool writable_;
  const size_t buffer_limit_;
  const int max_in_flight_;
  mutable Mutex mu_;
  mutable ExtentMap map_ GUARDED_BY(mu_);  // the parts the service has
  mutable uint64_t size_ GUARDED_BY(mu_) = 0;
  mutable uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  mutable int64_t modified_ns_ GUARDED_BY(mu_) = 0;
  mutable PendingWrites pending_ GUARDED_BY(mu_);
  mutable std::deque<Upload> in_flight_ GUARDED_BY(mu_);
  mutable Status error_ GUARDED_BY(mu_);
  mutable std::unique_ptr<StagingLog> stage_ GUARDED_BY(mu_);
  mutable bool sending_ GUARDED_BY(mu_) = false;
};

class S3EnvImpl final : public S3Env {
 public:
  S3EnvImpl(std::shared_ptr<S3Client> s3, S3Options o) : s3_(std::move(s3)), o_(std::move(o)) {
    while (o_.root.size() > 1 && o_.root.back() == '/') o_.root.pop_back();
  }

  std::string KeyOf(const std::string& path) const override {
    const std::string rel = StoreObjectName(o_.root, o_.dirs, path);
    return rel.empty() ? "" : o_.where.prefix + o_.prefix + rel;
  }

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override {
    const std::string key = KeyOf(path);
    if (key.empty()) return o_.local->Open(path, mode);
    CKPTFS_ASSIGN_OR_RETURN(const std::vector<Part> parts, Parts(key));
    if (parts.empty() || parts.front().seq != 1) {
      return Status(ENOENT, "open " + path + ": no such file");
    }
    return std::unique_ptr<File>(new S3File(s3_, path, key, mode == OpenMode::kReadWrite, parts,
                                            o_, StagingOf(key)));
  }

  Result<std::unique_ptr<File>> Create(const std::string& path,
                                       std::string_view contents) override {
    const std::string key = KeyOf(path);
    if (key.empty()) return o_.local->Create(path, contents);
    CKPTFS_ASSIGN_OR_RETURN(const std::vector<Part> old, Parts(key));
    if (!old.empty() && old.front().seq == 1) return Status(EEXIST, "create " + path + ": exists");
    // What an interrupted create left (no part 1): none of it is the file.
    for (const Part& p : old) CKPTFS_RETURN_IF_ERROR(s3_->Delete(p.key));
    // Part 1 last: the name appears with it, whole.
    std::vector<Part> parts;
    const size_t B = std::max<size_t>(1, o_.write_buffer);
    const uint64_t count = std::max<uint64_t>(1, (contents.size() + B - 1) / B);
    for (uint64_t i = count; i-- > 0;) {
      Part p;
      p.seq = i + 1;
      const std::string_view bytes = contents.substr(std::min<size_t>(i * B, contents.size()), B);
      p.kind = contents.empty() ? 't' : 'd';
      p.v = contents.empty() ? 0 : i * B;
      p.bytes = bytes.size();
      p.modified_ns = NowNs();
      p.key = key + "/" + S3PartName(p.seq, p.kind, p.v);
      CKPTFS_RETURN_IF_ERROR(s3_->Put(p.key, std::span<const std::string_view>(&bytes, 1)));
      parts.insert(parts.begin(), std::move(p));
    }
    return std::unique_ptr<File>(new S3File(s3_, path, key, true, parts, o_, StagingOf(key)));
  }

  Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) override {
    if (KeyOf(path).empty()) return o_.local->CreateUnsynced(path);
    return Create(path, "");
  }

  Status SyncDir(const std::string& dir) override {
    // A part exists once its PUT is answered.
    if (!KeyOf(dir + "/x").empty()) return Status::OK();
    return o_.local->SyncDir(dir);
  }

  Status Remove(const std::string& path) override {
    const std::string key = KeyOf(path);
    if (key.empty()) return o_.local->Remove(path);
    if (const std::string log = StagingOf(key); !log.empty()) {
      CKPTFS_RETURN_IF_ERROR(Env::Posix()->Remove(log));
    }
    CKPTFS_ASSIGN_OR_RETURN(const std::vector<Part> parts, Parts(key));
    // Part 1 last: until then the file is an earlier state of itself.
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      CKPTFS_RETURN_IF_ERROR(s3_->Delete(it->key));
    }
    return Status::OK();
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    const std::string probe = KeyOf(dir + "/x");
    if (probe.empty()) return o_.local->List(dir);
    const std::string base = probe.substr(0, probe.size() - 1);
    CKPTFS_ASSIGN_OR_RETURN(const S3Listing listing, s3_->List(base));
    std::vector<std::string> names;
    for (const S3Object& o : listing.objects) {
      const std::string_view rest = std::string_view(o.key).substr(base.size());
      const size_t slash = rest.find('/');
      if (slash == std::string_view::npos || slash == 0) continue;
      uint64_t seq = 0, v = 0;
      char kind = 0;
      if (ParseS3PartName(rest.substr(slash + 1), &seq, &kind, &v) && seq == 1) {
        names.emplace_back(rest.substr(0, slash));
      }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }

  ObjectCounters counters() const override { return s3_->counters(); }

 private:
  Result<std::vector<Part>> Parts(const std::string& key) const {
    CKPTFS_ASSIGN_OR_RETURN(const S3Listing listing, s3_->List(key + "/"));
    return S3File::PartsOf(key, listing);
  }

  Status SendStagedLog(const std::string& log, const std::string& key) override {
    CKPTFS_ASSIGN_OR_RETURN(const std::vector<Part> parts, Parts(key));
    if (parts.empty() || parts.front().seq != 1) return Status::OK();
    S3File file(s3_, key, key, true, parts, o_, "");
    CKPTFS_RETURN_IF_ERROR(ReplayStagingLog(log, [&](uint64_t offset, std::string_view data) {
      return file.WriteAt(offset, std::span<const std::string_view>(&data, 1));
    }));
    return file.Sync();
  }

  const std::shared_ptr<S3Client> s3_;
  S3Options o_;
};

}  // namespace

std::string S3PartName(uint64_t seq, char kind, uint64_t v) {
  char name[40];
  std::snprintf(name, sizeof(name), "%016" PRIx64 "%c%016" PRIx64, seq, kind, v);
  return name;
}

bool ParseS3PartName(std::string_view name, uint64_t* seq, char* kind, uint64_t* v) {
  if (name.size() != 33 || (name[16] != 'd' && name[16] != 't')) return false;
  auto hex = [](std::string_view s, uint64_t* out) {
    uint64_t x = 0;
    for (char c : s) {
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        return false;
      }
      x = x << 4 | static_cast<uint64_t>(d);
    }
    *out = x;
    return true;
  };
  *kind = name[16];
  return hex(name.substr(0, 16), seq) && hex(name.substr(17), v) && *seq > 0;
}

Result<std::shared_ptr<S3Env>> S3Env::Connect(const S3Options& options) {
  if (options.endpoint.empty()) {
    return Status(EINVAL, "an S3 store needs its endpoint (s3_endpoint=URL)");
  }
  CKPTFS_ASSIGN_OR_RETURN(S3Credentials keys, FindS3Credentials());
  auto s3 = std::make_shared<S3Client>(options.endpoint, options.where.bucket, std::move(keys),
                                       options.op_timeout_s);
  CKPTFS_RETURN_IF_ERROR(s3->HeadBucket());
  auto env = std::make_shared<S3EnvImpl>(std::move(s3), options);
  CKPTFS_RETURN_IF_ERROR(env->StartStaging(options.staging));
  return std::shared_ptr<S3Env>(std::move(env));
}

}  // namespace ckptfs::io
