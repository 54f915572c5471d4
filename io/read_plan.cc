#include "io/read_plan.h"

#include <algorithm>
#include <tuple>

namespace ckptfs::io {

std::vector<BackingRead> PlanReads(std::vector<RecordRef> needed, const CoalesceSettings& c) {
  std::sort(needed.begin(), needed.end(), [](const RecordRef& a, const RecordRef& b) {
    return std::tie(a.segment_id, a.offset) < std::tie(b.segment_id, b.offset);
  });
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());

  std::vector<BackingRead> plan;
  for (const RecordRef& r : needed) {
    if (c.enabled() && !plan.empty()) {
      BackingRead& last = plan.back();
      uint64_t last_end = last.offset + last.required;
      uint64_t merged_end = std::max(last_end, r.offset + r.length);
      if (last.segment_id == r.segment_id && r.offset >= last_end &&
          r.offset - last_end <= c.gap && merged_end - last.offset <= c.max) {
        last.required = merged_end - last.offset;
        last.records.push_back(r);
        continue;
      }
    }
    plan.push_back(BackingRead{r.segment_id, r.offset, r.length, r.length, {r}});
  }
  // The extension is a prefetch: at most `max` bytes of it per plan, given to
  // the first reads in store order. A read whose records lie scattered (a
  // file overwritten in small pieces) thus never reads `max` bytes per
  // record, and the buffers one plan holds stay near what it needs.
  uint64_t budget = c.enabled() ? c.max : 0;
  for (BackingRead& b : plan) {
    const uint64_t extra = b.required < c.max ? std::min(c.max - b.required, budget) : 0;
    b.length = b.required + extra;
    budget -= extra;
  }
  return plan;
}

}  // namespace ckptfs::io
