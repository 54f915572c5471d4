#include "engine/data/reservations.h"

#include <algorithm>

#include "format/format.h"

namespace ckptfs::engine {

uint64_t Reservations::Charge(uint64_t len) {
  if (len == 0) return 0;
  return len + (len / kWriteGranule + 2) * format::kRecordHeaderSize;
}

uint64_t Reservations::LargestFitting(uint64_t bytes) {
  constexpr uint64_t G = kWriteGranule, H = format::kRecordHeaderSize;
  if (bytes < 2 * H) return 0;
  // Charge(q * G + r) = q * G + r + (q + 2) * H for r < G: the most whole
  // granules, then the rest of the bytes, less than one more granule.
  const uint64_t q = (bytes - 2 * H) / (G + H);
  return q * G + std::min(G - 1, bytes - q * G - (q + 2) * H);
}

Reservations::Range Reservations::Blocks(uint64_t start, uint64_t end) {
  if (start >= end) return {start, start};
  return {start - start % kBlockSize, end + (kBlockSize - end % kBlockSize) % kBlockSize};
}

uint64_t Reservations::Overlap(uint64_t ino, uint64_t start, uint64_t end) const {
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end() || start >= end) return 0;
  const Ranges& r = it->second;
  auto i = r.upper_bound(start);
  if (i != r.begin()) --i;
  uint64_t n = 0;
  for (; i != r.end() && i->first < end; ++i) {
    const uint64_t a = std::max(start, i->first), b = std::min(end, i->second);
    if (a < b) n += b - a;
  }
  return n;
}

uint64_t Reservations::ChargeOfAdd(uint64_t ino, uint64_t start, uint64_t end) const {
  Reservations copy;
  auto it = by_ino_.find(ino);
  if (it != by_ino_.end()) {
    auto& r = copy.by_ino_[ino];
    // Only the ranges that the new one would merge with matter.
    auto i = it->second.upper_bound(start);
    if (i != it->second.begin()) --i;
    for (; i != it->second.end() && i->first <= end; ++i) {
      if (i->second >= start) r.insert(*i);
    }
    for (const auto& [a, b] : r) copy.Account(a, b, true);
  }
  const uint64_t before = copy.charge_;
  copy.Add(ino, start, end);
  // Merging pieces can save the headers of their ends.
  return copy.charge_ > before ? copy.charge_ - before : 0;
}

void Reservations::Account(uint64_t start, uint64_t end, bool add) {
  if (add) {
    bytes_ += end - start;
    charge_ += Charge(end - start);
  } else {
    bytes_ -= end - start;
    charge_ -= Charge(end - start);
  }
}

std::pair<Reservations::Ranges::iterator, Reservations::Ranges::iterator> Reservations::Touching(
    Ranges& r, uint64_t start, uint64_t end) {
  auto first = r.upper_bound(start);
  if (first != r.begin() && std::prev(first)->second >= start) --first;
  auto last = r.upper_bound(end);  // first range starting past `end`
  return {first, last};
}

void Reservations::Add(uint64_t ino, uint64_t start, uint64_t end) {
  if (start >= end) return;
  Ranges& r = by_ino_[ino];
  auto [first, last] = Touching(r, start, end);
  uint64_t a = start, b = end;
  for (auto i = first; i != last; ++i) {
    a = std::min(a, i->first);
    b = std::max(b, i->second);
    Account(i->first, i->second, false);
  }
  r.erase(first, last);
  r.emplace(a, b);
  Account(a, b, true);
}

void Reservations::Remove(uint64_t ino, uint64_t start, uint64_t end) {
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end() || start >= end) return;
  Ranges& r = it->second;
  auto [first, last] = Touching(r, start, end);
  Ranges keep;
  for (auto i = first; i != last; ++i) {
    Account(i->first, i->second, false);
    if (i->first < start) keep.emplace(i->first, start);
    if (i->second > end) keep.emplace(end, i->second);
  }
  r.erase(first, last);
  for (const auto& [a, b] : keep) {
    r.emplace(a, b);
    Account(a, b, true);
  }
  if (r.empty()) by_ino_.erase(it);
}

void Reservations::RemoveInode(uint64_t ino) {
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return;
  for (const auto& [a, b] : it->second) Account(a, b, false);
  by_ino_.erase(it);
}

}  // namespace ckptfs::engine
