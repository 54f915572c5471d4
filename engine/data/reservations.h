// Reservations: the space that fallocate set aside for later writes.
//
// The store appends every write to a segment, so the bytes a write needs
// are not tied to the file's range the way a block filesystem's are. A
// reservation therefore is a promise kept by the store's own space check:
// per inode, the byte ranges whose first write may draw on it, and the disk
// bytes those writes may take (their payload plus record headers). Writes
// outside the reserved ranges must leave that much free (StoreImpl's space
// check), so that the reserved writes never fail for lack of space.
//
// Reservations live in memory while the store is open; a write, a hole
// punch, a truncation or the file's deletion gives back what it covers.
//
// Thread safety: none; StoreImpl guards it with space_mu_.
#pragma once

#include <cstdint>
#include <map>

namespace ckptfs::engine {

class Reservations {
 public:
  // The disk bytes that a range of `len` reserved bytes may take when written
  // in pieces of at least kWriteGranule bytes: the payload plus one record
  // header per piece and one more for an unaligned start.
  static uint64_t Charge(uint64_t len);
  // The largest len whose Charge(len) fits in `bytes`: the most that one
  // fallocate can reserve when that much disk is free.
  static uint64_t LargestFitting(uint64_t bytes);
  static constexpr uint64_t kWriteGranule = 4096;
  // Fallocate reserves whole blocks of this size, the blocks that its range
  // touches, as a block filesystem allocates them: the kernel's page cache
  // writes a file in whole pages, which then fall within the reservation
  // and draw on it, so that stored plus reserved bytes (st_blocks) stay as
  // they were when a write fills a reserved range.
  static constexpr uint64_t kBlockSize = 4096;
  // The blocks that [start, end) touches, as a byte range.
  struct Range {
    uint64_t start;
    uint64_t end;
  };
  static Range Blocks(uint64_t start, uint64_t end);

  // Bytes of [start, end) of `ino` that are reserved.
  uint64_t Overlap(uint64_t ino, uint64_t start, uint64_t end) const;
  // The charge that Add(ino, start, end) would add; 0 when it would not
  // grow (merging pieces saves the headers of their ends).
  uint64_t ChargeOfAdd(uint64_t ino, uint64_t start, uint64_t end) const;
  // Reserves [start, end) of `ino` (merged with what it already has).
  void Add(uint64_t ino, uint64_t start, uint64_t end);
  // Gives back the reserved bytes of [start, end) of `ino`.
  void Remove(uint64_t ino, uint64_t start, uint64_t end);
  // Gives back everything `ino` has reserved.
  void RemoveInode(uint64_t ino);

  // Reserved bytes of all inodes, and the disk bytes they may take.
  uint64_t bytes() const { return bytes_; }
  uint64_t charge() const { return charge_; }

 private:
  using Ranges = std::map<uint64_t, uint64_t>;  // start -> end, disjoint, not touching
  // Ranges of `r` that overlap or touch [start, end).
  static std::pair<Ranges::iterator, Ranges::iterator> Touching(Ranges& r, uint64_t start,
                                                                 uint64_t end);
  void Account(uint64_t start, uint64_t end, bool add);

  std::map<uint64_t, Ranges> by_ino_;
  uint64_t bytes_ = 0;
  uint64_t charge_ = 0;
};

}  // namespace ckptfs::engine
