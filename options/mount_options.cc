#include "options/mount_options.h"

#include <cerrno>
#include <cstdlib>
#include <variant>

#include "options/option_table.h"

namespace ckptfs::options {

using engine::Result;
using engine::Status;

namespace {

std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\r\n";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace

Status ParseMountOptions(std::string_view list, MountOptions* options) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view one = list.substr(0, comma);
    if (!one.empty()) CKPTFS_RETURN_IF_ERROR(ParseMountOption(one, options));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return Status::OK();
}

std::optional<engine::AtimeRule> AtimeRuleOf(AtimeMode mode) {
  switch (mode) {
    case AtimeMode::kRelative:
      return engine::AtimeRule::kRelative;
    case AtimeMode::kStrict:
      return engine::AtimeRule::kAlways;
    case AtimeMode::kNever:
      return std::nullopt;
  }
  return std::nullopt;
}

Status CheckPrivileges(const MountOptions& o, uid_t euid) {
  if (euid == 0) return Status::OK();
  if (o.suid) {
    return Status::Errno(EPERM,
                         "option 'suid' needs root: the kernel honours set-user-ID bits only on "
                         "FUSE mounts made by root");
  }
  if (o.dev) {
    return Status::Errno(EPERM,
                         "option 'dev' needs root: the kernel opens device nodes only on FUSE "
                         "mounts made by root");
  }
  return Status::OK();
}

nlohmann::ordered_json OptionsJson(const MountOptions& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const OptionSpec& spec : OptionTable()) {
    std::visit([&](auto v) { j[std::string(spec.name)] = v; }, spec.field.get(o));
  }
  return j;
}


std::string DefaultOptionsJson() { return OptionsJson(MountOptions()).dump(); }

Result<engine::CompactOptions> ParseCompactRequest(std::string_view value) {
  engine::CompactOptions o;
  const std::string_view ratio = value.substr(0, value.find(' '));
  const std::string ratio_text(ratio);
  char* end = nullptr;
  o.dead_ratio = std::strtod(ratio_text.c_str(), &end);
  if (ratio.empty() || end != ratio_text.c_str() + ratio_text.size() ||
      !(o.dead_ratio >= 0 && o.dead_ratio <= 1)) {
    return Status::Errno(EINVAL, "compact takes a dead ratio between 0 and 1, e.g. compact=0.3");
  }
  std::string_view rest = value.substr(ratio.size());
  while (!(rest = Trim(rest)).empty()) {
    const std::string_view flag = rest.substr(0, rest.find_first_of(" \t"));
    rest.remove_prefix(flag.size());
    if (flag == "dry_run" || flag == "dry_run=1") {
      o.dry_run = true;
    } else if (flag != "dry_run=0") {
      return Status::Errno(EINVAL,
                           "compact: unknown flag '" + std::string(flag) + "' (only dry_run)");
    }
  }
  return o;
}

}  // namespace ckptfs::options
