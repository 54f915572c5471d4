// The summary that `ckptfs stat` prints by default: at most kMaxSummaryLines
// aligned "label  value" lines made from a stats object (MOUNT/.ckptfs/stats,
// or the smaller object of a store that is not mounted), for people.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ckptfs::tools {

inline constexpr size_t kMaxSummaryLines = 25;

// The lines of the summary of `stats`, without newlines. A stats object with
// a "mountpoint" is a mount's and gets the mount's rows (options, rates,
// requests, passthrough); without one, only the store's rows. `defaults` is
// the "options" object of a mount with default options
// (options::DefaultOptionsJson), against which the changed options are named.
// Fields missing from `stats` show as 0 or are left out, never fail.
std::vector<std::string> SummaryLines(const nlohmann::ordered_json& stats,
                                      const nlohmann::ordered_json& defaults);

}  // namespace ckptfs::tools
