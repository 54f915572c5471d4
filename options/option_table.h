// The one table of mount options: name, type, default, whether it changes
// while mounted, help and the older names still accepted. It drives `-o`
// parsing (ParseMountOption), MOUNT/.ckptfs/config (the effective settings
// it shows and the run-time ones it changes), the options in the stats file,
// `ckptfs mount --help` and the option table of docs/OPTIONS.md, which
// options/option_table_test.cc checks against OptionsMarkdown().
//
// Defaults are not written here: they are the values of a default
// MountOptions (options/mount_options.h), whose engine settings start from
// engine::MountStoreDefaults().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "base/status.h"
#include "engine/store.h"
#include "options/mount_options.h"

namespace ckptfs::options {

enum class OptionType {
  kSize,     // bytes, written "4096", "256K", "64M", "1G" (ParseSize, base/size.h)
  kCount,    // a whole number
  kSeconds,  // a non-negative number of seconds, "1" or "0.5"
  kFlag,     // "name" alone, or name=1|0|true|false|yes|no|on|off
  kText,     // any text without a comma (a URL)
};

// A setting's value: uint64_t for kSize and kCount, double for kSeconds,
// bool for kFlag, std::string for kText.
using OptionValue = std::variant<uint64_t, double, bool, std::string>;

// Where a setting lives. Engine settings live in MountOptions::store and
// have store_get/store_set for engine::StoreOptions alone (run-time changes
// go through Store::UpdateOptions); settings of the mount alone have null
// store_get/store_set.
struct OptionField {
  OptionValue (*get)(const MountOptions&);
  void (*set)(MountOptions*, const OptionValue&);
  OptionValue (*store_get)(const engine::StoreOptions&);
  void (*store_set)(engine::StoreOptions*, const OptionValue&);
};

struct OptionSpec {
  std::string_view name;  // the one canonical name, shown everywhere
  OptionType type;
  OptionField field;
  // Changes while mounted, by writing name=value to MOUNT/.ckptfs/config.
  // Only engine settings can.
  bool runtime = false;
  // Inclusive bounds of kSize and kCount values.
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
  // Older names, accepted wherever the name is (mount options and config
  // writes); "" pads.
  std::array<std::string_view, 2> aliases = {};
  // kFlag only: a name that turns the flag off and takes no value ("rw").
  std::string_view off_name = {};
  // What it does, for people (Markdown: `code` in backquotes).
  std::string_view help;
  // The value's name in help ("host=NAME"); "" for the type's (Placeholder).
  std::string_view placeholder = {};
  // kSize only: the default, for people, where the mount chooses it from
  // the store (the field holds UINT64_MAX until then); "" for the field's.
  std::string_view by_store = {};
};

// Every option, in the order people see them.
std::span<const OptionSpec> OptionTable();
// The option called `name` (its name, an alias or its off_name); nullptr
// when there is none.
const OptionSpec* FindOption(std::string_view name);

// The options of /etc/fstab and mount(8) that concern only mount(8) itself,
// accepted and ignored when they reach ckptfs. Names ending in '=' take any
// value; names starting with kFstabPrefix too (userspace tools keep them
// for themselves).
std::span<const std::string_view> FstabOptions();
inline constexpr std::string_view kFstabPrefix = "x-";
// The placeholder for the value in "name=VALUE"; "" for flags.
std::string_view Placeholder(OptionType type);
// The value's name in `spec`'s help: its own, or its type's.
std::string_view Placeholder(const OptionSpec& spec);

// Whether `key` (given with a value or not) is an option of /etc/fstab or
// mount(8) that ckptfs accepts and ignores: defaults, auto, noauto, _netdev,
// nofail, user, users, nouser, owner, group, user=NAME, comment=TEXT, x-*.
bool IsFstabOption(std::string_view key, bool has_value);

// Parses the value text of `spec`, given under the name `key`; `value` is
// nullopt when the option came without "=". EINVAL with a one-line message
// naming `key` and what was expected.
engine::Result<OptionValue> ParseOptionValue(const OptionSpec& spec, std::string_view key,
                                             std::optional<std::string_view> value);

// Exact text of a value, as .ckptfs/config shows it and ParseOptionValue
// reads it back: bytes and counts in decimal, seconds as "%g", flags 1 or 0.
std::string OptionValueText(const OptionSpec& spec, const OptionValue& value);
// A value for people: sizes with the largest unit that divides them ("256K",
// "1G"), flags "on" or "off".
std::string OptionValueHuman(const OptionSpec& spec, const OptionValue& value);

// The settings of `options` as "name=value" lines, one per option, in table
// order: the first part of MOUNT/.ckptfs/config.
std::string OptionLines(const MountOptions& options);

// Applies one run-time change "key=value" to the open store. EINVAL for an
// unknown key, one fixed while mounted, or a bad value.
engine::Status ApplyRuntimeOption(engine::Store& store, std::string_view key,
                                  std::string_view value);

// The option table of docs/OPTIONS.md (Markdown, with the older names below it).
std::string OptionsMarkdown();

}  // namespace ckptfs::options
