// The mount's settings (options/mount_options.h), by their fs/ names.
#pragma once

#include "options/mount_options.h"

namespace ckptfs::fs {

using options::AtimeMode;
using options::AtimeRuleOf;
using options::CheckPrivileges;
using options::HumanSize;
using options::IsSizeOption;
using options::MountOptions;
using options::MountOptionsHelp;
using options::ParseMountOption;
using options::ParseMountOptions;

}  // namespace ckptfs::fs
