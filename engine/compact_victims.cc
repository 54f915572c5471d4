// Which segments a compaction takes and why it keeps the others: the choice
// of victims (ChooseVictims) and the words for what it keeps.
#include <algorithm>
#include <cstdio>

#include "engine/store.h"
#include "engine/store_compact.h"

namespace ckptfs::engine {

namespace {

std::string Percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f%%", f * 100);
  return buf;
}

}  // namespace

VictimChoice ChooseVictims(const std::vector<SegmentInfo>& segments, uint64_t active,
                           uint64_t newest, double dead_ratio) {
  VictimChoice c;
  for (const SegmentInfo& seg : segments) {
    const uint64_t live = static_cast<uint64_t>(seg.live_bytes);
    const uint64_t dead = static_cast<uint64_t>(seg.dead_bytes);
    const double frac = live + dead == 0 ? 0.0 : static_cast<double>(dead) / double(live + dead);
    const bool open_end = seg.id == active || seg.id == newest;
    KeptSegment k{seg.id, KeptSegment::Reason::kBelowRatio, live, dead, frac, ""};
    if (open_end && dead == 0) {
      k.reason = KeptSegment::Reason::kNothingDead;
      c.kept.push_back(k);
    } else if (CompactionTakes(live, dead, dead_ratio)) {
      c.victims.push_back({seg.id, live, live == 0 ? 1.0 : frac, seg.file_bytes});
    } else {
      c.kept.push_back(k);
    }
  }
  std::sort(c.victims.begin(), c.victims.end(), [](const Victim& a, const Victim& b) {
    if ((a.live == 0) != (b.live == 0)) return a.live == 0;
    if (a.dead_fraction != b.dead_fraction) return a.dead_fraction > b.dead_fraction;
    return a.id < b.id;
  });
  return c;
}

const char* KeptReasonName(KeptSegment::Reason r) {
  switch (r) {
    case KeptSegment::Reason::kBelowRatio:
      return "below_ratio";
    case KeptSegment::Reason::kNothingDead:
      return "nothing_dead";
    case KeptSegment::Reason::kUnreadable:
      return "unreadable";
    case KeptSegment::Reason::kStillReferenced:
      return "still_referenced";
    case KeptSegment::Reason::kHostMounted:
      return "host_mounted";
    case KeptSegment::Reason::kSealed:
      return "sealed";
  }
  return "unknown";
}

bool CompactionTakes(uint64_t live, uint64_t dead, double dead_ratio) {
  return live == 0 || static_cast<double>(dead) / static_cast<double>(live + dead) >= dead_ratio;
}

std::string DescribeKept(const KeptSegment& k, double dead_ratio) {
  const std::string seg = "segment " + std::to_string(k.id) + ": ";
  switch (k.reason) {
    case KeptSegment::Reason::kBelowRatio:
      return seg + "dead " + Percent(k.dead_fraction) + " below the ratio " + Percent(dead_ratio);
    case KeptSegment::Reason::kNothingDead:
      return seg + "the newest segment, nothing in it is dead";
    case KeptSegment::Reason::kUnreadable:
      return seg + "holds a record that could not be read (run ckptfs fsck)";
    case KeptSegment::Reason::kStillReferenced:
      return seg + "still referenced after its data was copied";
    case KeptSegment::Reason::kHostMounted:
      return seg + "its host \"" + k.host + "\" is mounted; that mount compacts it";
    case KeptSegment::Reason::kSealed:
      return seg + "a sealed tree's snapshot points into it";
  }
  return seg + "kept";
}

}  // namespace ckptfs::engine
