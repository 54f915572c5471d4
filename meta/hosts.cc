#include "meta/hosts.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <mutex>
#include <optional>
#include <set>

namespace ckptfs::meta {

namespace {

// The hosts this process holds, as "STORE\nNAME" (Kv::Describe names the
// store).
std::mutex held_mu;
std::set<std::string>& HeldHere() {
  static std::set<std::string>* held = new std::set<std::string>();
  return *held;
}
std::string HeldKey(Kv* kv, std::string_view name) {
  return kv->Describe() + "\n" + std::string(name);
}
bool IsHeldHere(Kv* kv, std::string_view name) {
  std::lock_guard<std::mutex> l(held_mu);
  return HeldHere().count(HeldKey(kv, name)) != 0;
}

std::string Holder(const format::HostValue& v) {
  const std::string where = "pid " + std::to_string(v.pid) + " on " + v.machine;
  return v.holder.empty() ? where : v.holder + " (" + where + ")";
}

bool HeldByUs(const format::HostValue& v) {
  return v.pid == static_cast<uint32_t>(::getpid()) && v.machine == MachineName();
}

Result<std::optional<format::HostValue>> ReadHost(Txn* t, std::string_view name) {
  CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> raw, t->Get(Space::kMeta, format::HostKey(name)));
  if (!raw.has_value()) return std::optional<format::HostValue>();
  format::HostValue v;
  Status s = format::DecodeHost(*raw, &v);
  if (!s.ok()) return s.Annotate("host \"" + std::string(name) + "\"");
  return std::optional<format::HostValue>(std::move(v));
}

Status Busy(std::string_view name, const format::HostValue& v) {
  return Status(EBUSY, "host \"" + std::string(name) + "\" of this shared store is in use by " +
                           Holder(v) + ", its lease running " +
                           std::to_string((v.lease_until_ms - WallMs() + 999) / 1000) +
                           " s more; each mount needs a host=NAME of its own")
      .WithPayload(HostHeld{std::string(name), v});
}

// Sets this process's lease on `name` to end at `until_ms`; EBUSY when
// another process holds the host.
Status SetLease(Kv* kv, std::string_view name, int64_t until_ms) {
  return RunTxn(
      kv,
      [&](Txn* t) -> Status {
        CKPTFS_ASSIGN_OR_RETURN(std::optional<format::HostValue> v, ReadHost(t, name));
        if (!v.has_value()) return Status(EBUSY, "host \"" + std::string(name) + "\" is gone");
        if (!HeldByUs(*v)) return Busy(name, *v);
        v->lease_until_ms = until_ms;
        t->Put(Space::kMeta, format::HostKey(name), format::EncodeHost(*v));
        return Status::OK();
      },
      Durability::kSynced);
}

}  // namespace

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string MachineName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool HostIsFree(Kv* kv, std::string_view name, const format::HostValue& held, int64_t now_ms) {
  if (held.lease_until_ms <= now_ms) return true;
  if (held.machine != MachineName()) return false;
  if (held.pid == static_cast<uint32_t>(::getpid())) return !IsHeldHere(kv, name);
  return ::kill(static_cast<pid_t>(held.pid), 0) != 0 && errno == ESRCH;
}

void LetGo(Kv* kv, std::string_view name) {
  std::lock_guard<std::mutex> l(held_mu);
  HeldHere().erase(HeldKey(kv, name));
}

Result<uint32_t> ClaimHost(Kv* kv, std::string_view name, std::string_view holder,
                           int64_t lease_ms) {
  if (name.empty() || name.size() > 255 || name.find('/') != std::string_view::npos) {
    return Status(EINVAL, "host name \"" + std::string(name) +
                              "\" must be 1 to 255 bytes without '/'");
  }
  uint32_t id = 0;
  CKPTFS_RETURN_IF_ERROR(RunTxn(
      kv,
      [&](Txn* t) -> Status {
        CKPTFS_ASSIGN_OR_RETURN(std::optional<format::HostValue> v, ReadHost(t, name));
        const int64_t now = WallMs();
        if (v.has_value() && !HostIsFree(kv, name, *v, now)) return Busy(name, *v);
        format::HostValue mine;
        if (v.has_value()) {
          mine.id = v->id;
        } else {
          CKPTFS_ASSIGN_OR_RETURN(std::optional<std::string> next,
                                  t->Get(Space::kMeta, format::kMetaNextHostId));
          mine.id = 1;
          if (next.has_value()) {
            if (next->size() != 4) return Status::Corruption("next_host_id is not 4 bytes");
            mine.id = format::GetLE32(next->data());
          }
          if (mine.id == 0 || mine.id > format::kMaxHostId) {
            return Status(ENOSPC, "the store has handed out every host id");
          }
          std::string after;
          format::PutLE32(&after, mine.id + 1);
          t->Put(Space::kMeta, format::kMetaNextHostId, after);
        }
        mine.lease_until_ms = now + lease_ms;
        mine.pid = static_cast<uint32_t>(::getpid());
        mine.machine = MachineName();
        mine.holder = holder;
        t->Put(Space::kMeta, format::HostKey(name), format::EncodeHost(mine));
        id = mine.id;
        return Status::OK();
      },
      Durability::kSynced));
  std::lock_guard<std::mutex> l(held_mu);
  HeldHere().insert(HeldKey(kv, name));
  return id;
}

Status RenewHost(Kv* kv, std::string_view name, int64_t lease_ms) {
  return SetLease(kv, name, WallMs() + lease_ms);
}

Status ReleaseHost(Kv* kv, std::string_view name) { return SetLease(kv, name, 0); }

Result<std::vector<std::pair<std::string, format::HostValue>>> ListHosts(Kv* kv) {
  std::vector<std::pair<std::string, format::HostValue>> out;
  const std::string begin(format::kMetaHostPrefix);
  std::string end = begin;
  end.back()++;
  Status bad;
  CKPTFS_RETURN_IF_ERROR(RunReads(kv, [&](ReadTxn* t) -> Status {
    out.clear();
    return t->Scan(Space::kMeta, begin, end, [&](std::string_view k, std::string_view v) {
      format::HostValue h;
      bad = format::DecodeHost(v, &h);
      if (!bad.ok()) return false;
      out.emplace_back(std::string(k.substr(begin.size())), std::move(h));
      return true;
    });
  }));
  CKPTFS_RETURN_IF_ERROR(bad);
  return out;
}

Status CheckNoLiveHost(Kv* kv) {
  CKPTFS_ASSIGN_OR_RETURN(auto hosts, ListHosts(kv));
  const int64_t now = WallMs();
  for (const auto& [name, v] : hosts) {
    if (!HostIsFree(kv, name, v, now)) return Busy(name, v);
  }
  return Status::OK();
}

}  // namespace ckptfs::meta
