// RadosEnv: a store's data files as RADOS objects (io/rados_env.h).
#include "io/rados_env.h"

#include <rados/librados.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <span>
#include <string>

#include "base/mutex.h"
#include "io/object_store_env.h"
#include "io/rados_write.h"
#include "io/staging_log.h"

namespace ckptfs::io {
namespace {

// Every write (removes too): on a full pool or cluster it fails with
// EDQUOT or ENOSPC at once instead of waiting for room, and a remove, which
// makes room, goes ahead.
constexpr int kWriteFlags = LIBRADOS_OPERATION_FULL_TRY;

// A RADOS return code as a Status: ENOSPC for a full pool or cluster, EIO
// for one that did not answer in time.
Status FromRados(int rc, const std::string& what) {
  const int err = -rc;
  if (err == EDQUOT || err == ENOSPC) {
    return Status(ENOSPC, what + ": the RADOS pool is full");
  }
  if (err == ETIMEDOUT) return Status(EIO, what + ": RADOS did not answer in time");
  return Status::IOError(err, what);
}

// The connection and the pool, shared by the Env and its open files.
class Pool {
 public:
  Pool(rados_t cluster, rados_ioctx_t io, uint64_t stripe)
      : cluster_(cluster), io_(io), writer_(std::make_unique<RadosWriter>(io)), stripe_(stripe) {}
  ~Pool() {
    writer_.reset();
    rados_ioctx_destroy(io_);
    rados_shutdown(cluster_);
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  rados_ioctx_t io() const { return io_; }
  // For data writes, which go out without a copy.
  RadosWriter& writer() { return *writer_; }

  // A failed request's Status. One that timed out may have been waiting
  // on an OSD at an address it no longer has (killed and started again):
  // the next request first fetches the cluster's latest map.
  Status Error(int rc, const std::string& what) {
    if (rc == -ETIMEDOUT) stale_map_.store(true, std::memory_order_relaxed);
    return FromRados(rc, what);
  }
  // Before each request: the latest map, after a request timed out.
  void Ready() {
    if (stale_map_.load(std::memory_order_relaxed) &&
        rados_wait_for_latest_osdmap(cluster_) == 0) {
      stale_map_.store(false, std::memory_order_relaxed);
    }
  }
  // Bytes of a file in each of its objects.
  uint64_t stripe() const { return stripe_; }

  // The name of object `k` of the file whose first object is `oid`.
  static std::string Stripe(const std::string& oid, uint64_t k) {
    return k == 0 ? oid : oid + "@" + std::to_string(k);
  }

  // Reads up to `len` bytes of object `oid` at `off`: the count, 0 for a
  // missing object.
  Result<size_t> Read(const std::string& oid, uint64_t off, size_t len, char* buf) {
    reads_.fetch_add(1, std::memory_order_relaxed);
    Ready();
    const int rc = rados_read(io_, oid.c_str(), buf, len, off);
    if (rc == -ENOENT) return size_t{0};
    if (rc < 0) return Error(rc, "read " + oid);
    bytes_read_.fetch_add(static_cast<uint64_t>(rc), std::memory_order_relaxed);
    return static_cast<size_t>(rc);
  }

  // An object's size and mtime, and its count of objects (1 without the
  // xattr). ENOENT when it does not exist.
  struct Head {
    uint64_t size = 0;
    time_t mtime = 0;
    uint64_t objects = 1;
  };
  Result<Head> Stat(const std::string& oid) {
    other_.fetch_add(1, std::memory_order_relaxed);
    Ready();
    Head h;
    rados_read_op_t op = rados_create_read_op();
    int stat_rc = 0, xattrs_rc = 0;
    rados_xattrs_iter_t it = nullptr;
    rados_read_op_stat(op, &h.size, &h.mtime, &stat_rc);
    rados_read_op_getxattrs(op, &it, &xattrs_rc);
    const int rc = rados_read_op_operate(op, io_, oid.c_str(), 0);
    rados_release_read_op(op);
    Status bad;
    if (rc == 0 && it != nullptr) {
      const char* name = nullptr;
      const char* val = nullptr;
      size_t len = 0;
      while (rados_getxattrs_next(it, &name, &val, &len) == 0 && name != nullptr) {
        if (std::strcmp(name, kRadosObjectsXattr) != 0) continue;
        const std::string text(val, len);
        char* end = nullptr;
        const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || n == 0 || n > (1ull << 40)) {
          bad = Status::Corruption(oid + ": xattr " + kRadosObjectsXattr + " is \"" + text +
                                   "\", not a count of objects");
        }
        h.objects = n;
      }
    }
    if (it != nullptr) rados_getxattrs_end(it);
    if (rc == -ENOENT) return Status(ENOENT, oid + ": no such object");
    if (rc < 0) return Error(rc, "stat " + oid);
    CKPTFS_RETURN_IF_ERROR(bad);
    return h;
  }

  // The size of a file of `objects` objects whose first object is `oid`
  // and holds `first_size` bytes.
  Result<uint64_t> FileSize(const std::string& oid, uint64_t objects, uint64_t first_size) {
    if (objects <= 1) return first_size;
    Result<Head> last = Stat(Stripe(oid, objects - 1));
    if (!last.ok() && last.status().code() != ENOENT) return last.status();
    return (objects - 1) * stripe_ + (last.ok() ? last->size : 0);
  }

  // Runs `op` on `oid` and releases it.
  Status Operate(rados_write_op_t op, const std::string& oid, const std::string& what) {
    other_.fetch_add(1, std::memory_order_relaxed);
    Ready();
    const int rc = rados_write_op_operate(op, io_, oid.c_str(), nullptr, kWriteFlags);
    rados_release_write_op(op);
    if (rc < 0) return Error(rc, what + " " + oid);
    return Status::OK();
  }

  Status SetObjects(const std::string& oid, uint64_t objects) {
    const std::string n = std::to_string(objects);
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_setxattr(op, kRadosObjectsXattr, n.data(), n.size());
    return Operate(op, oid, "record the objects of");
  }

  Status Remove(const std::string& oid) {
    other_.fetch_add(1, std::memory_order_relaxed);
    Ready();
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_remove(op);
    const int rc = rados_write_op_operate(op, io_, oid.c_str(), nullptr, kWriteFlags);
    rados_release_write_op(op);
    if (rc < 0 && rc != -ENOENT) return Error(rc, "remove " + oid);
    return Status::OK();
  }

  void CountWrite(uint64_t bytes) {
    writes_.fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
    Ready();
  }
  void CountOther() {
    other_.fetch_add(1, std::memory_order_relaxed);
    Ready();
  }

  ObjectCounters counters() const {
    ObjectCounters c;
    c.reads = reads_.load(std::memory_order_relaxed);
    c.writes = writes_.load(std::memory_order_relaxed);
    c.other = other_.load(std::memory_order_relaxed);
    c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    return c;
  }

 private:
  const rados_t cluster_;
  const rados_ioctx_t io_;
  std::unique_ptr<RadosWriter> writer_;
  const uint64_t stripe_;
  std::atomic<uint64_t> reads_{0}, writes_{0}, other_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<bool> stale_map_{false};
};

// One write operation on the way to one object. It sends `bytes` from
// where they are, so they stay alive, unchanged, until it completes (a
// deque's elements do not move as it grows or moves).
struct InFlight {
  std::string oid;
  std::deque<std::string> bytes;
  RadosWrite op;
};

// One open file. Writes wait in `pending_` (in arrival order) until a
// flush turns them into one write operation per object.
class RadosFile final : public File {
 public:
  // `staging`: the file's staging log ("" for none).
  RadosFile(std::shared_ptr<Pool> pool, std::string path, std::string oid, bool writable,
            uint64_t size, uint64_t objects, const RadosOptions& o, const std::string& staging)
      : File(std::move(path)),
        pool_(std::move(pool)),
        oid_(std::move(oid)),
        writable_(writable),
        buffer_limit_(o.write_buffer),
        max_in_flight_(std::max(1, o.writes_in_flight)),
        S(pool_->stripe()),
        pending_(buffer_limit_, SIZE_MAX, static_cast<size_t>(max_in_flight_)),
        size_(size),
        objects_(objects),
        recorded_objects_(objects) {
    if (writable && !staging.empty()) stage_ = std::make_unique<StagingLog>(staging);
  }

  ~RadosFile() override {
    if (!writable_) return;
    MutexLock l(&mu_);
    // A file whose writes failed keeps its log, for the next Connect().
    if (DrainLocked().ok() && stage_ != nullptr) stage_->Remove();
  }

  Result<size_t> ReadAt(uint64_t offset, size_t len, char* buf) const override {
    if (writable_) {
      MutexLock l(&mu_);
      if (PendingOverlapsLocked(offset, len)) CKPTFS_RETURN_IF_ERROR(DrainLocked());
    }
    size_t done = 0;
    while (done < len) {
      const uint64_t at = offset + done;
      const uint64_t k = at / S;
      const uint64_t in = at % S;
      const size_t want = static_cast<size_t>(std::min<uint64_t>(len - done, S - in));
      CKPTFS_ASSIGN_OR_RETURN(const size_t got,
                              pool_->Read(Pool::Stripe(oid_, k), in, want, buf + done));
      done += got;
      if (got == want) continue;
      // The object ends here: the end of the file, or a hole before a
      // later object.
      CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, Size());
      if (offset + done >= size) break;
      const size_t zeros = static_cast<size_t>(
          std::min<uint64_t>({len - done, size - (offset + done), want - got}));
      std::memset(buf + done, 0, zeros);
      done += zeros;
    }
    return done;
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
    if (writable_) {
      MutexLock l(&mu_);
      return size_;
    }
    CKPTFS_ASSIGN_OR_RETURN(const Pool::Head h, pool_->Stat(oid_));
    return pool_->FileSize(oid_, h.objects, h.size);
  }

  Result<int64_t> ModifiedNs() const override {
    CKPTFS_ASSIGN_OR_RETURN(const Pool::Head h, pool_->Stat(oid_));
    time_t mtime = h.mtime;
    if (h.objects > 1) {
      Result<Pool::Head> last = pool_->Stat(Pool::Stripe(oid_, h.objects - 1));
      if (last.ok()) mtime = std::max(mtime, last->mtime);
    }
    return static_cast<int64_t>(mtime) * 1000000000;
  }

  Status Truncate(uint64_t size) override {
    if (!writable_) return Status(EBADF, path() + ": not open for writing");
    MutexLock l(&mu_);
    CKPTFS_RETURN_IF_ERROR(DrainLocked());
    const uint64_t objects = std::max<uint64_t>(1, (size + S - 1) / S);
    const uint64_t last = objects - 1;
    if (objects < recorded_objects_) {
      // Fewer objects: the count first, so that nothing names a removed one.
      CKPTFS_RETURN_IF_ERROR(pool_->SetObjects(oid_, objects));
      for (uint64_t k = recorded_objects_; k-- > objects;) {
        CKPTFS_RETURN_IF_ERROR(pool_->Remove(Pool::Stripe(oid_, k)));
      }
      recorded_objects_ = objects;
    }
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, nullptr);
    rados_write_op_truncate(op, size - last * S);
    CKPTFS_RETURN_IF_ERROR(pool_->Operate(op, Pool::Stripe(oid_, last), "truncate"));
    if (objects > recorded_objects_) {
      CKPTFS_RETURN_IF_ERROR(pool_->SetObjects(oid_, objects));
      recorded_objects_ = objects;
    }
    objects_ = objects;
    size_ = size;
    return Status::OK();
  }

 private:
  bool PendingOverlapsLocked(uint64_t offset, size_t len) const REQUIRES(mu_) {
    if (!in_flight_.empty()) return true;  // its bytes may be the ones asked for
    return pending_.Overlaps(offset, len);
  }

  // Turns the waiting writes into write operations, one per object, sent
  // without waiting (at most max_in_flight_ at once).
  Status SendLocked() const REQUIRES(mu_) {
    CKPTFS_RETURN_IF_ERROR(error_);
    if (pending_.empty()) return Status::OK();
    // Object by object, the extents in their order of arrival.
    std::vector<std::pair<uint64_t, size_t>> order;  // (object, index in ops)
    std::vector<InFlight> ops;
    auto op_of = [&](uint64_t k) -> InFlight& {
      for (auto& [obj, i] : order) {
        if (obj == k) return ops[i];
      }
      order.emplace_back(k, ops.size());
      ops.emplace_back();
      ops.back().oid = Pool::Stripe(oid_, k);
      return ops.back();
    };
    for (PendingWrites::Run& e : pending_.Take()) {
      if (e.offset / S == (e.offset + e.bytes.size() - 1) / S) {  // in one object: moved
        const uint64_t k = e.offset / S;
        InFlight& f = op_of(k);
        f.bytes.push_back(std::move(e.bytes));
        f.op.Add(f.bytes.back(), e.offset % S);
        objects_ = std::max(objects_, k + 1);
        continue;
      }
      uint64_t at = e.offset;
      std::string_view rest = e.bytes;
      while (!rest.empty()) {
        const uint64_t k = at / S;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(rest.size(), S - at % S));
        InFlight& f = op_of(k);
        f.bytes.emplace_back(rest.substr(0, n));
        f.op.Add(f.bytes.back(), at % S);
        objects_ = std::max(objects_, k + 1);
        at += n;
        rest.remove_prefix(n);
      }
    }
    sending_ = true;  // `ops` hold writes that are neither pending nor in flight
    for (InFlight& f : ops) {
      while (static_cast<int>(in_flight_.size()) >= max_in_flight_) WaitOldestLocked();
      uint64_t bytes = 0;
      for (const std::string& b : f.bytes) bytes += b.size();
      pool_->CountWrite(bytes);
      const int rc = f.op.Send(pool_->writer(), f.oid, kWriteFlags);
      if (rc < 0) {
        if (error_.ok()) error_ = pool_->Error(rc, "write " + f.oid);
        continue;
      }
      in_flight_.push_back(std::move(f));
    }
    sending_ = false;
    return error_;
  }

  void WaitOldestLocked() const REQUIRES(mu_) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    const int rc = f.op.Wait();
    if (rc < 0 && error_.ok()) error_ = pool_->Error(rc, "write " + f.oid);
    for (std::string& b : f.bytes) pending_.Recycle(std::move(b));
    ClearStagedLocked();
  }

  // Empties the staging log once the cluster has every write.
  void ClearStagedLocked() const REQUIRES(mu_) {
    if (stage_ != nullptr && error_.ok() && !sending_ && pending_.empty() && in_flight_.empty() &&
        objects_ == recorded_objects_) {
      stage_->Clear();
    }
  }

  // Sends what waits, waits for every write in flight, then records a grown
  // count of objects: the data before the count that names it. A failed
  // write stays the file's error (as a failed writeback on a local disk).
  Status DrainLocked() const REQUIRES(mu_) {
    Status sent = SendLocked();
    while (!in_flight_.empty()) WaitOldestLocked();
    CKPTFS_RETURN_IF_ERROR(error_);
    CKPTFS_RETURN_IF_ERROR(sent);
    if (objects_ > recorded_objects_) {
      Status s = pool_->SetObjects(oid_, objects_);
      if (!s.ok()) {
        error_ = s;
        return s;
      }
      recorded_objects_ = objects_;
    }
    ClearStagedLocked();
    return Status::OK();
  }

  const std::shared_ptr<Pool> pool_;
  const std::string oid_;
  const bool writable_;
  const size_t buffer_limit_;
  const int max_in_flight_;
  const uint64_t S;  // the stripe: bytes per object
  mutable Mutex mu_;
  mutable PendingWrites pending_ GUARDED_BY(mu_);
  mutable std::deque<InFlight> in_flight_ GUARDED_BY(mu_);
  mutable Status error_ GUARDED_BY(mu_);
  uint64_t size_ GUARDED_BY(mu_);
  // Objects written (or being written), and the count the first object
  // records.
  mutable uint64_t objects_ GUARDED_BY(mu_);
  mutable uint64_t recorded_objects_ GUARDED_BY(mu_);
  mutable std::unique_ptr<StagingLog> stage_ GUARDED_BY(mu_);
  mutable bool sending_ GUARDED_BY(mu_) = false;
};

class RadosEnvImpl final : public RadosEnv {
 public:
  RadosEnvImpl(std::shared_ptr<Pool> pool, RadosOptions o) : pool_(std::move(pool)), o_(std::move(o)) {
    while (o_.root.size() > 1 && o_.root.back() == '/') o_.root.pop_back();
  }

  std::string ObjectOf(const std::string& path) const override {
    const std::string rel = StoreObjectName(o_.root, o_.dirs, path);
    return rel.empty() ? "" : o_.prefix + rel;
  }

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenMode mode) override {
    const std::string oid = ObjectOf(path);
    if (oid.empty()) return o_.local->Open(path, mode);
    Result<Pool::Head> h = pool_->Stat(oid);
    if (!h.ok()) {
      if (h.status().code() == ENOENT) return Status(ENOENT, "open " + path + ": no such file");
      return h.status();
    }
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, pool_->FileSize(oid, h->objects, h->size));
    return std::unique_ptr<File>(new RadosFile(pool_, path, oid, mode == OpenMode::kReadWrite,
                                               size, h->objects, o_, StagingOf(oid)));
  }

  Result<std::unique_ptr<File>> Create(const std::string& path,
                                       std::string_view contents) override {
    const std::string oid = ObjectOf(path);
    if (oid.empty()) return o_.local->Create(path, contents);
    // The other objects first: the name appears with the first one, whole.
    const uint64_t S = pool_->stripe();
    const uint64_t objects = std::max<uint64_t>(1, (contents.size() + S - 1) / S);
    for (uint64_t k = 1; k < objects; ++k) {
      const std::string_view part = contents.substr(k * S, S);
      rados_write_op_t op = rados_create_write_op();
      rados_write_op_write_full(op, part.data(), part.size());
      CKPTFS_RETURN_IF_ERROR(pool_->Operate(op, Pool::Stripe(oid, k), "create"));
    }
    const std::string_view first = contents.substr(0, S);
    const std::string n = std::to_string(objects);
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
    if (!first.empty()) rados_write_op_write_full(op, first.data(), first.size());
    if (objects > 1) rados_write_op_setxattr(op, kRadosObjectsXattr, n.data(), n.size());
    Status s = pool_->Operate(op, oid, "create");
    if (s.code() == EEXIST) return Status(EEXIST, "create " + path + ": exists");
    CKPTFS_RETURN_IF_ERROR(s);
    return std::unique_ptr<File>(
        new RadosFile(pool_, path, oid, true, contents.size(), objects, o_, StagingOf(oid)));
  }

  Result<std::unique_ptr<File>> CreateUnsynced(const std::string& path) override {
    const std::string oid = ObjectOf(path);
    if (oid.empty()) return o_.local->CreateUnsynced(path);
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
    Status s = pool_->Operate(op, oid, "create");
    if (s.code() == EEXIST) return Status(EEXIST, "create " + path + ": exists");
    CKPTFS_RETURN_IF_ERROR(s);
    return std::unique_ptr<File>(new RadosFile(pool_, path, oid, true, 0, 1, o_, StagingOf(oid)));
  }

  Status SyncDir(const std::string& dir) override {
    // A RADOS object exists once its create is acknowledged.
    if (!ObjectOf(dir + "/x").empty()) return Status::OK();
    return o_.local->SyncDir(dir);
  }

  Status Remove(const std::string& path) override {
    const std::string oid = ObjectOf(path);
    if (oid.empty()) return o_.local->Remove(path);
    if (const std::string log = StagingOf(oid); !log.empty()) {
      CKPTFS_RETURN_IF_ERROR(Env::Posix()->Remove(log));
    }
    Result<Pool::Head> h = pool_->Stat(oid);
    if (!h.ok()) return h.status().code() == ENOENT ? Status::OK() : h.status();
    // The first object last: until then the file is whole or its count
    // names objects that read as zeros.
    for (uint64_t k = h->objects; k-- > 1;) {
      CKPTFS_RETURN_IF_ERROR(pool_->Remove(Pool::Stripe(oid, k)));
    }
    return pool_->Remove(oid);
  }

  Result<std::vector<std::string>> List(const std::string& dir) override {
    const std::string probe = ObjectOf(dir + "/x");
    if (probe.empty()) return o_.local->List(dir);
    const std::string want = probe.substr(0, probe.size() - 1);
    pool_->CountOther();
    rados_list_ctx_t ctx = nullptr;
    int rc = rados_nobjects_list_open(pool_->io(), &ctx);
    if (rc < 0) return pool_->Error(rc, "list " + dir);
    std::vector<std::string> names;
    for (;;) {
      const char* entry = nullptr;
      rc = rados_nobjects_list_next(ctx, &entry, nullptr, nullptr);
      if (rc < 0) break;
      std::string_view name(entry);
      if (name.size() <= want.size() || name.compare(0, want.size(), want) != 0) continue;
      name.remove_prefix(want.size());
      if (name.find('/') != std::string_view::npos || name.find('@') != std::string_view::npos) {
        continue;
      }
      names.emplace_back(name);
    }
    rados_nobjects_list_close(ctx);
    if (rc != -ENOENT) return pool_->Error(rc, "list " + dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  ObjectCounters counters() const override { return pool_->counters(); }

 private:
  Status SendStagedLog(const std::string& log, const std::string& oid) override {
    Result<Pool::Head> h = pool_->Stat(oid);
    if (!h.ok() && h.status().code() == ENOENT) return Status::OK();  // removed since
    if (!h.ok()) return h.status();
    CKPTFS_ASSIGN_OR_RETURN(const uint64_t size, pool_->FileSize(oid, h->objects, h->size));
    RadosFile file(pool_, oid, oid, true, size, h->objects, o_, "");
    CKPTFS_RETURN_IF_ERROR(ReplayStagingLog(log, [&](uint64_t offset, std::string_view data) {
      return file.WriteAt(offset, std::span<const std::string_view>(&data, 1));
    }));
    return file.Sync();
  }

  const std::shared_ptr<Pool> pool_;
  RadosOptions o_;
};

}  // namespace

Result<RadosLocation> ParseRadosUrl(std::string_view url) {
  constexpr std::string_view kScheme = "rados://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status(EINVAL, "\"" + std::string(url) + "\" is not rados://POOL[/NAMESPACE]");
  }
  std::string_view rest = url.substr(kScheme.size());
  RadosLocation where;
  const size_t slash = rest.find('/');
  where.pool = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) where.ns = std::string(rest.substr(slash + 1));
  if (where.pool.empty() || where.ns.find('/') != std::string::npos ||
      (slash != std::string_view::npos && where.ns.empty())) {
    return Status(EINVAL, "\"" + std::string(url) + "\" is not rados://POOL[/NAMESPACE]");
  }
  return where;
}

Result<std::shared_ptr<RadosEnv>> RadosEnv::Connect(const RadosOptions& options) {
  if (options.stripe_bytes == 0 || options.stripe_bytes > (1ull << 32)) {
    return Status(EINVAL, "stripe_bytes must be between 1 and 4 GiB");
  }
  rados_t cluster = nullptr;
  int rc = rados_create(&cluster, nullptr);
  if (rc < 0) return FromRados(rc, "RADOS");
  auto fail = [&](int code, const std::string& what) {
    rados_shutdown(cluster);
    return FromRados(code, what);
  };
  rc = rados_conf_read_file(cluster, options.conf.empty() ? nullptr : options.conf.c_str());
  if (rc < 0) {
    return fail(rc, "read Ceph's configuration " +
                        (options.conf.empty() ? std::string("(CEPH_CONF, /etc/ceph/ceph.conf)")
                                              : options.conf));
  }
  rc = rados_conf_parse_env(cluster, nullptr);
  if (rc < 0) return fail(rc, "CEPH_ARGS");
  const std::string timeout = std::to_string(std::max(1, static_cast<int>(options.op_timeout_s)));
  for (const char* key : {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    rc = rados_conf_set(cluster, key, timeout.c_str());
    if (rc < 0) return fail(rc, std::string("set ") + key);
  }
  rc = rados_connect(cluster);
  if (rc < 0) return fail(rc, "connect to the Ceph cluster");
  rados_ioctx_t io = nullptr;
  rc = rados_ioctx_create(cluster, options.where.pool.c_str(), &io);
  if (rc == -ENOENT) {
    rados_shutdown(cluster);
    return Status(ENOENT, "RADOS pool " + options.where.pool + " does not exist");
  }
  if (rc < 0) return fail(rc, "open RADOS pool " + options.where.pool);
  rados_ioctx_set_namespace(io, options.where.ns.c_str());
  auto pool = std::make_shared<Pool>(cluster, io, options.stripe_bytes);
  auto env = std::make_shared<RadosEnvImpl>(std::move(pool), options);
  CKPTFS_RETURN_IF_ERROR(env->StartStaging(options.staging));
  return std::shared_ptr<RadosEnv>(std::move(env));
}

}  // namespace ckptfs::io
