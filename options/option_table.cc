#include "options/option_table.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "base/size.h"

namespace ckptfs::options {

using engine::Result;
using engine::Status;
using engine::StoreOptions;

namespace {

template <typename T>
OptionValue ToValue(const T& v) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<uint64_t>(v);
  }
}

// REQUIRES: `v` holds the alternative of T's OptionType and fits in T (the
// table's bounds make it so).
template <typename T>
void Assign(T* field, const OptionValue& v) {
  if constexpr (std::is_same_v<T, bool>) {
    *field = std::get<bool>(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    *field = std::get<std::string>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    *field = std::get<double>(v);
  } else {
    *field = static_cast<T>(std::get<uint64_t>(v));
  }
}

// A field of engine::StoreOptions (reached through MountOptions::store).
template <auto F>
constexpr OptionField kStoreField = {
    [](const MountOptions& o) { return ToValue(o.store.*F); },
    [](MountOptions* o, const OptionValue& v) { Assign(&(o->store.*F), v); },
    [](const StoreOptions& o) { return ToValue(o.*F); },
    [](StoreOptions* o, const OptionValue& v) { Assign(&(o->*F), v); },
};

// A field of MountOptions: a setting of the mount alone.
template <auto F>
constexpr OptionField kMountField = {
    [](const MountOptions& o) { return ToValue(o.*F); },
    [](MountOptions* o, const OptionValue& v) { Assign(&(o->*F), v); },
    nullptr,
    nullptr,
};

// One of the access-time rules as a flag: on selects `M`; off (`atime`,
// `nostrictatime`, `relatime=0`) leaves noatime or strictatime for the
// kernel's default, relatime, and relatime for strictatime.
template <AtimeMode M>
constexpr OptionField kAtimeField = {
    [](const MountOptions& o) { return OptionValue(o.atime == M); },
    [](MountOptions* o, const OptionValue& v) {
      if (std::get<bool>(v)) {
        o->atime = M;
      } else if (o->atime == M) {
        o->atime = M == AtimeMode::kRelative ? AtimeMode::kStrict : AtimeMode::kRelative;
      }
    },
    nullptr,
    nullptr,
};

// FstabOptions().
constexpr std::string_view kFstabOptionNames[] = {"defaults", "auto",   "noauto", "_netdev",
                                                  "nofail",   "user",   "users",  "nouser",
                                                  "owner",    "group",  "user=",  "comment="};

// The table. Keep help texts to what a user needs to choose a value; the
// option table of docs/OPTIONS.md is generated from them (see OptionsMarkdown).
constexpr OptionSpec kOptions[] = {
    {.name = "meta",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::meta>,
     .help = "a store created by this mount keeps its index in the PostgreSQL database at "
             "this libpq URL (`postgresql://HOST/DB`; see docs/SHARED.md) instead of in "
             "STORE/index, and remembers it without its password; for a store that has one, "
             "connect with this URL instead (another name of the same server)"},
    {.name = "meta_timeout",
     .type = OptionType::kSeconds,
     .field = kStoreField<&StoreOptions::meta_timeout>,
     .help = "a store whose index is in PostgreSQL: how long a call that cannot reach the "
             "server waits for it (a restart, a failover), trying again, before it fails "
             "with EIO"},
    {.name = "data",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::data>,
     .help = "a store created by this mount keeps its segments, data files and snapshots as "
             "objects of this RADOS pool (`rados://POOL[/NAMESPACE]`) or S3 bucket "
             "(`s3://BUCKET[/PREFIX]`, with s3_endpoint; see docs/OBJECT_STORAGE.md) "
             "instead of under STORE, and remembers it; Ceph's configuration and keyring "
             "come from CEPH_CONF or /etc/ceph, S3's keys from AWS_ACCESS_KEY_ID and "
             "AWS_SECRET_ACCESS_KEY or ~/.aws/credentials",
     .placeholder = "URL"},
    {.name = "s3_endpoint",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::s3_endpoint>,
     .help = "a store created with data=s3://BUCKET: the URL of the S3 service "
             "(`http[s]://HOST[:PORT]`), which the store remembers",
     .placeholder = "URL"},
    {.name = "data_timeout",
     .type = OptionType::kSeconds,
     .field = kStoreField<&StoreOptions::data_timeout>,
     .help = "a store whose data is in an object store: how long a request the cluster does "
             "not answer (an OSD down, a monitor or S3 service unreachable) waits before "
             "the call fails with EIO; it works again once the cluster is back"},
    {.name = "host",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::host>,
     .help = "a shared store (docs/SHARED.md): the host name this mount writes as; each "
             "mount of the store needs its own (default: the machine's name)",
     .placeholder = "NAME"},
    {.name = "peers",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::peers>,
     .help = "a shared store (docs/SHARED.md, peers): the address this mount serves the "
             "other hosts on, HOST or HOST:PORT, or `off` (default: the address this machine "
             "reaches the PostgreSQL server from)",
     .placeholder = "ADDRESS"},
    {.name = "peer_cache",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::peer_cache>,
     .help = "a shared store: memory for the blocks of the files this mount serves the other "
             "hosts, so that the storage serves each once"},
    {.name = "peer_cache_dir",
     .type = OptionType::kText,
     .field = kStoreField<&StoreOptions::peer_cache_dir>,
     .help = "a shared store: a directory on a local disk that keeps those blocks instead of "
             "memory (peer_cache bytes of it, in a file that goes with the mount)",
     .placeholder = "DIR"},
    {.name = "peer_timeout",
     .type = OptionType::kSeconds,
     .field = kStoreField<&StoreOptions::peer_timeout>,
     .help = "a shared store: seconds a peer may take to connect or answer before this mount "
             "reads the storage itself"},
    {.name = "coalesce_gap",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::coalesce_gap>,
     .runtime = true,
     .help = "two reads in one segment merge when at most this many bytes lie between them; "
             "0 = coalescing off"},
    {.name = "coalesce_max",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::coalesce_max>,
     .runtime = true,
     .help = "largest merged read; a small read is extended up to this size to pull "
             "neighbouring files into the cache; 0 = off"},
    {.name = "cache_size",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::cache_size>,
     .runtime = true,
     .aliases = {"cache_bytes"},
     .help = "memory for verified, decoded records"},
    {.name = "compression",
     .type = OptionType::kCount,
     .field = kStoreField<&StoreOptions::compression>,
     .runtime = true,
     .min = 0,
     .max = engine::kCompressionMax,
     .aliases = {"compression_level"},
     .help = "zstd level for new records (0 = off); a record stays compressed only where that "
             "saves space"},
    {.name = "segment_size",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::segment_size>,
     .min = engine::kSegmentSizeMin,
     .aliases = {"segment_target_bytes"},
     .help = "a segment file is sealed at this size and a new one started"},
    {.name = "data_file_min",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::data_file_min>,
     .help = "a file that grows past this size by writes at its end moves to a data file of "
             "its own, in which byte N is the file's byte N; smaller files stay packed in "
             "segments; 0 = every file in segments"},
    {.name = "inline_max",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::inline_max>,
     .max = engine::kInlineMaxLimit,
     .aliases = {"inline_max_bytes"},
     .help = "files up to this size live in the index, not in segments"},
    {.name = "min_free",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::min_free>,
     .aliases = {"min_free_bytes"},
     .help = "writes fail with ENOSPC while the disk under the store has less free space, so "
             "the index always has room; df does not count it as available"},
    {.name = "compact_dead",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::compact_dead>,
     .aliases = {"background_compact_dead_bytes"},
     .help = "background compaction: rewrite segments with at least 30% dead bytes (the "
             "segment being written included) once this many dead bytes pile up over all "
             "segments (sooner on small stores, see compact_min); 0 = off"},
    {.name = "compact_min",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::compact_min>,
     .help = "background compaction also starts once the dead bytes exceed the live bytes "
             "and this many, so that a store stays within about twice its live data"},
    {.name = "compact_rate",
     .type = OptionType::kSize,
     .field = kStoreField<&StoreOptions::compact_rate>,
     .min = 1,
     .aliases = {"background_compact_bytes_per_sec"},
     .help = "bytes per second background compaction may copy, so that it never slows a save "
             "noticeably"},
    {.name = "free_empty",
     .type = OptionType::kFlag,
     .field = kStoreField<&StoreOptions::free_empty>,
     .aliases = {"free_empty_segments"},
     .help = "delete a segment file within seconds once nothing in it is live (its files were "
             "deleted or overwritten), so that removing an old checkpoint gives its space back "
             "without copying anything; `free_empty=0` keeps segments until a compaction"},
    {.name = "readahead",
     .type = OptionType::kSize,
     .field = kMountField<&MountOptions::readahead>,
     .help = "the kernel's read-ahead window for the mount (set through sysfs; root only); "
             "0 = the kernel's default",
     .by_store = "1M (16M with data in an object store)"},
    {.name = "threads",
     .type = OptionType::kCount,
     .field = kMountField<&MountOptions::threads>,
     .min = 1,
     .max = 1024,
     .help = "FUSE worker threads"},
    {.name = "attr_timeout",
     .type = OptionType::kSeconds,
     .field = kMountField<&MountOptions::attr_timeout>,
     .help = "seconds the kernel caches attributes (a shared store: only while no other host "
             "is mounted, a second at most)"},
    {.name = "entry_timeout",
     .type = OptionType::kSeconds,
     .field = kMountField<&MountOptions::entry_timeout>,
     .help = "seconds the kernel caches names found (a shared store: only while no other host "
             "is mounted, a second at most)"},
    {.name = "negative_timeout",
     .type = OptionType::kSeconds,
     .field = kMountField<&MountOptions::negative_timeout>,
     .help = "seconds the kernel caches names not found (a shared store: only while no other host "
             "is mounted, a second at most)"},
    {.name = "allow_other",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::allow_other>,
     .help = "let other users in (needs `user_allow_other` in /etc/fuse.conf for non-root)"},
    {.name = "ro",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::read_only>,
     .aliases = {"read_only"},
     .off_name = "rw",
     .help = "read-only store and mount; `rw` turns it off"},
    {.name = "relatime",
     .type = OptionType::kFlag,
     .field = kAtimeField<AtimeMode::kRelative>,
     .help = "a read moves the access time once after each change of the file (when it is "
             "not after the modification or change time) or when it is a day old, as on Linux; "
             "reads the kernel serves from its page cache do not reach ckptfs and move nothing"},
    {.name = "strictatime",
     .type = OptionType::kFlag,
     .field = kAtimeField<AtimeMode::kStrict>,
     .off_name = "nostrictatime",
     .help = "every read that reaches ckptfs moves the access time (reads the kernel serves "
             "from its page cache do not)"},
    {.name = "noatime",
     .type = OptionType::kFlag,
     .field = kAtimeField<AtimeMode::kNever>,
     .off_name = "atime",
     .help = "reads never move access times; `atime` turns it off (back to `relatime`, the "
             "kernel's default)"},
    {.name = "nodiratime",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::nodiratime>,
     .off_name = "diratime",
     .help = "listing a directory does not move its access time"},
    {.name = "suid",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::suid>,
     .off_name = "nosuid",
     .help = "set-user-ID and set-group-ID bits take effect on exec (root only; FUSE mounts "
             "are `nosuid` otherwise)"},
    {.name = "dev",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::dev>,
     .off_name = "nodev",
     .help = "device nodes can be opened (root only; FUSE mounts are `nodev` otherwise)"},
    {.name = "exec",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::exec>,
     .off_name = "noexec",
     .help = "programs on the mount can be run; `noexec` forbids it"},
    {.name = "sync",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::sync>,
     .off_name = "async",
     .help = "every change is durable before it returns, as if fsync followed it: the kernel "
             "sends an fsync after each write and ckptfs syncs after each change of names "
             "or attributes; slow"},
    {.name = "dirsync",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::dirsync>,
     .help = "every change of a directory (an entry created, removed or renamed) is durable "
             "before it returns"},
    {.name = "writeback_cache",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::writeback_cache>,
     .off_name = "no_writeback_cache",
     .help = "the kernel's write-back cache: writes gather in the page cache and reach the "
             "store at close, fsync or writeback, so small writes cost no request each (see "
             "docs/PERFORMANCE.md); off (`no_writeback_cache`): every write(2) is in the "
             "store before it returns, one request each"},
    {.name = "passthrough",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::passthrough>,
     .help = "read-only opens of large files (those in a data file of their own, see "
             "`data_file_min`) are passed through by the kernel: reads and mmap page faults "
             "go straight to the data file at the disk's speed, checked by `ckptfs verify` "
             "and fsck instead of on every read; turns `writeback_cache` off, costs an OPEN "
             "and a RELEASE per open, needs root and Linux 6.9+ (see docs/LARGE_FILES.md)"},
    {.name = "passthrough_writes",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::passthrough_writes>,
     .help = "`passthrough` for writers too: an empty file opened for writing (a new one) "
             "gets a data file that the kernel writes directly, at the disk's speed, checked "
             "and checksummed by the daemon at each close and fsync; a file smaller than "
             "`data_file_min` is copied into segments instead (a data file created and "
             "deleted, a copy): for stores of mostly large files"},
    {.name = "direct_io",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::direct_io>,
     .off_name = "no_direct_io",
     .help = "without `passthrough`, the daemon writes large files' data files with direct "
             "I/O (O_DIRECT where the filesystem allows), and drops the large segment records of files of a few MiB from the page cache once "
             "synced: the kernel caches those files' pages already, so the bytes are not "
             "cached twice; fewer CPU seconds per GiB, but each data-file write waits for the "
             "disk (see docs/LARGE_FILES.md); off (`no_direct_io`): through the page cache"},
    {.name = "seal_renamed",
     .type = OptionType::kText,
     .field = kMountField<&MountOptions::seal_renamed>,
     .help = "seal a directory renamed from a name that matches this pattern (fnmatch; "
             "orbax commits a step so: `*.orbax-checkpoint-tmp-*`); nothing in it may change "
             "afterwards, on any host (docs/SHARED.md, sealed trees)",
     .placeholder = "PATTERN"},
    {.name = "seal_marker",
     .type = OptionType::kText,
     .field = kMountField<&MountOptions::seal_marker>,
     .help = "seal the directory of a file that gets a name matching this pattern: renamed "
             "to it, or made and closed where closes are seen (a shared store, passthrough); "
             "torch.distributed.checkpoint writes `.metadata` last",
     .placeholder = "PATTERN"},
    {.name = "verify_reads",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::verify_reads>,
     .help = "every read checks the checksums of the bytes it returns (EIO on a mismatch); "
             "turns `passthrough` and `passthrough_writes` off"},
    {.name = "debug",
     .type = OptionType::kFlag,
     .field = kMountField<&MountOptions::debug>,
     .help = "libfuse request tracing on stderr, for a mount in the foreground (`-d` is "
             "`-f -o debug`)"},
};

// What a value of `spec` must look like, for error messages.
std::string Expected(const OptionSpec& spec) {
  const bool has_min = spec.min > 0, has_max = spec.max != UINT64_MAX;
  auto bound = [&](uint64_t v) {
    return spec.type == OptionType::kSize ? HumanSize(v) : std::to_string(v);
  };
  std::string range;
  if (has_max && (has_min || spec.type == OptionType::kCount)) {
    range = " from " + bound(spec.min) + " to " + bound(spec.max);
  } else if (has_max) {
    range = " of at most " + bound(spec.max);
  } else if (spec.min == 1) {
    range = " above 0";
  } else if (has_min) {
    range = " of at least " + bound(spec.min);
  }
  switch (spec.type) {
    case OptionType::kSize:
      return "a size" + (range.empty() ? std::string(" such as 256K, 64M or 1G") : range);
    case OptionType::kCount:
      return "a whole number" + range;
    case OptionType::kSeconds:
      return "seconds such as 1 or 0.5";
    case OptionType::kFlag:
      return "no value, or 1/0";
    case OptionType::kText:
      return "text without a comma";
  }
  return "";
}

Result<double> ParseSeconds(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) {
    return Status::Errno(EINVAL, "not a duration");
  }
  return v;
}

Result<uint64_t> ParseCount(std::string_view text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::Errno(EINVAL, "not a number");
  }
  return v;
}

// A URL's or connection string's password, where it has one, as "***".
std::string WithoutPassword(const std::string& text) {
  std::string s = text;
  // postgresql://user:password@host/...
  const size_t scheme = s.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    const size_t at = s.find('@', start);
    const size_t colon = s.find(':', start);
    const size_t slash = s.find('/', start);
    if (at != std::string::npos && colon != std::string::npos && colon < at &&
        (slash == std::string::npos || at < slash)) {
      s.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // password=... (a key of the query or of a connection string)
  for (size_t at = s.find("password="); at != std::string::npos;
       at = s.find("password=", at + 1)) {
    const size_t from = at + 9;
    size_t to = from;
    while (to < s.size() && s[to] != '&' && s[to] != ' ') ++to;
    s.replace(from, to - from, "***");
  }
  return s;
}

Result<bool> ParseFlag(std::string_view text) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return Status::Errno(EINVAL, "not a flag");
}

}  // namespace

std::span<const OptionSpec> OptionTable() { return kOptions; }

std::span<const std::string_view> FstabOptions() { return kFstabOptionNames; }

std::string_view Placeholder(OptionType type) {
  switch (type) {
    case OptionType::kSize:
      return "SIZE";
    case OptionType::kCount:
      return "N";
    case OptionType::kSeconds:
      return "SECS";
    case OptionType::kFlag:
      return "";
    case OptionType::kText:
      return "URL";
  }
  return "";
}

std::string_view Placeholder(const OptionSpec& spec) {
  return spec.placeholder.empty() ? Placeholder(spec.type) : spec.placeholder;
}


bool IsFstabOption(std::string_view key, bool has_value) {
  if (key.starts_with(kFstabPrefix)) return true;
  for (std::string_view name : kFstabOptionNames) {
    if (name.ends_with('=') ? has_value && key == name.substr(0, name.size() - 1)
                            : !has_value && key == name) {
      return true;
    }
  }
  return false;
}

const OptionSpec* FindOption(std::string_view name) {
  if (name.empty()) return nullptr;
  for (const OptionSpec& spec : kOptions) {
    if (spec.name == name || spec.off_name == name) return &spec;
    for (std::string_view alias : spec.aliases) {
      if (alias == name) return &spec;
    }
  }
  return nullptr;
}

Result<OptionValue> ParseOptionValue(const OptionSpec& spec, std::string_view key,
                                     std::optional<std::string_view> value) {
  if (spec.type == OptionType::kFlag && !value) return OptionValue(true);
  if (!value) {
    return Status::Errno(EINVAL,
                         "option '" + std::string(key) + "' needs a value: " + Expected(spec));
  }
  auto bad = [&] {
    return Status::Errno(EINVAL, "bad value '" + std::string(*value) + "' for option '" +
                                     std::string(key) + "': expected " + Expected(spec));
  };
  switch (spec.type) {
    case OptionType::kSize:
    case OptionType::kCount: {
      Result<uint64_t> v =
          spec.type == OptionType::kSize ? ParseSize(*value) : ParseCount(*value);
      if (!v.ok() || *v < spec.min || *v > spec.max) return bad();
      return OptionValue(*v);
    }
    case OptionType::kSeconds: {
      Result<double> v = ParseSeconds(*value);
      if (!v.ok()) return bad();
      return OptionValue(*v);
    }
    case OptionType::kFlag: {
      Result<bool> v = ParseFlag(*value);
      if (!v.ok()) return bad();
      return OptionValue(*v);
    }
    case OptionType::kText:
      return OptionValue(std::string(*value));
  }
  return bad();
}

std::string OptionValueText(const OptionSpec& spec, const OptionValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "1" : "0";
  if (const std::string* t = std::get_if<std::string>(&value)) return WithoutPassword(*t);
  if (const double* d = std::get_if<double>(&value)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", *d);
    return buf;
  }
  return std::to_string(std::get<uint64_t>(value));
}

std::string OptionValueHuman(const OptionSpec& spec, const OptionValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "on" : "off";
  if (const std::string* t = std::get_if<std::string>(&value)) {
    return t->empty() ? "none" : WithoutPassword(*t);
  }
  if (spec.type == OptionType::kSize) {
    const uint64_t v = std::get<uint64_t>(value);
    if (v == UINT64_MAX && !spec.by_store.empty()) return std::string(spec.by_store);
    return HumanSize(v);
  }
  return OptionValueText(spec, value);
}

std::string OptionLines(const MountOptions& options) {
  std::string out;
  for (const OptionSpec& spec : kOptions) {
    out.append(spec.name).append("=").append(OptionValueText(spec, spec.field.get(options)));
    out.push_back('\n');
  }
  return out;
}

Status ApplyRuntimeOption(engine::Store& store, std::string_view key, std::string_view value) {
  const OptionSpec* spec = FindOption(key);
  if (spec == nullptr) {
    return Status::Errno(EINVAL, "unknown setting '" + std::string(key) + "'");
  }
  if (!spec->runtime) {
    std::string runtime;
    for (const OptionSpec& s : kOptions) {
      if (s.runtime) runtime.append(runtime.empty() ? "" : ", ").append(s.name);
    }
    return Status::Errno(EINVAL, "'" + std::string(key) +
                                     "' does not change while mounted (run-time settings: " +
                                     runtime + "; compact=R runs a compaction)");
  }
  CKPTFS_ASSIGN_OR_RETURN(const OptionValue v, ParseOptionValue(*spec, key, value));
  return store.UpdateOptions([&](StoreOptions* o) { spec->field.store_set(o, v); });
}

Status ParseMountOption(std::string_view option, MountOptions* options) {
  const size_t eq = option.find('=');
  const std::string_view key = option.substr(0, eq);
  std::optional<std::string_view> value;
  if (eq != std::string_view::npos) value = option.substr(eq + 1);
  if (key.empty()) return Status::Errno(EINVAL, "empty mount option");
  if (IsFstabOption(key, value.has_value())) return Status::OK();
  const OptionSpec* spec = FindOption(key);
  if (spec == nullptr) {
    return Status::Errno(EINVAL, "unknown mount option '" + std::string(key) + "'");
  }
  if (key == spec->off_name) {
    if (value) {
      return Status::Errno(EINVAL, "bad value '" + std::string(*value) + "' for option '" +
                                       std::string(key) + "': expected no value");
    }
    spec->field.set(options, OptionValue(false));
    return Status::OK();
  }
  CKPTFS_ASSIGN_OR_RETURN(const OptionValue v, ParseOptionValue(*spec, key, value));
  spec->field.set(options, v);
  return Status::OK();
}

bool IsSizeOption(std::string_view name) {
  const OptionSpec* spec = FindOption(name);
  return spec != nullptr && spec->type == OptionType::kSize;
}

std::string HumanSize(uint64_t v) {
  static constexpr struct {
    int shift;
    char unit;
  } kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  for (const auto& u : kUnits) {
    if (v != 0 && v % (uint64_t{1} << u.shift) == 0) {
      return std::to_string(v >> u.shift) + u.unit;
    }
  }
  return std::to_string(v);
}

}  // namespace ckptfs::options
