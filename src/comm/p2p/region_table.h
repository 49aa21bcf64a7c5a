// Every rank's table of the peer-to-peer regions of its TP group (docs/design.md §7, "Pipelined
// peer-to-peer transport"): where each rank's region is mapped in this process, the pointers to
// its header and flags (p2p_geometry.h), and the call and round counters that every rank of the
// group advances in the same sequence. The shm workspace fills it from an MPI shared window, the
// cuda_ipc workspace from CUDA IPC handles; the pointers are host pointers for the one and device
// pointers for the other, and this class never dereferences them.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/p2p/p2p_geometry.h"

namespace echo::comm::p2p {

class RegionTable {
 public:
  RegionTable() = default;
  RegionTable(const P2pGeometry& geometry, int rank) : geometry_(geometry), rank_(rank) {
    regions_.assign(static_cast<size_t>(geometry.ranks), nullptr);
  }

  const P2pGeometry& geometry() const { return geometry_; }
  int rank() const { return rank_; }
  void set_region(int rank, uint8_t* base) { regions_[static_cast<size_t>(rank)] = base; }
  uint8_t* region(int rank) const { return regions_[static_cast<size_t>(rank)]; }
  uint64_t* header(int rank) const { return reinterpret_cast<uint64_t*>(region(rank)); }
  // Flag (tile slot, peer) in `rank`'s region: the peer pushed that tile to `rank` / gathered it there.
  uint64_t* push_flag(int rank, int tile_slot, int sender) const {
    return flags(rank, geometry_.push_flags_offset()) + geometry_.flag_index(tile_slot, sender);
  }
  uint64_t* gather_flag(int rank, int tile_slot, int owner) const {
    return flags(rank, geometry_.gather_flags_offset()) + geometry_.flag_index(tile_slot, owner);
  }
  uint8_t* recv_slot(int rank, int sender, int tile_slot) const {
    return region(rank) + geometry_.recv_slot_offset(sender, tile_slot);
  }
  uint8_t* gather_slot(int rank, int owner, int tile_slot) const {
    return region(rank) + geometry_.gather_slot_offset(owner, tile_slot);
  }

  // Call numbers and round bases, the same sequence on every rank of the group.
  uint64_t next_call() { return ++calls_; }
  uint64_t next_max() { return ++maxes_; }
  // The flag base of the first of `rounds` rounds; round r of the call uses it + r·kStagesPerRound.
  uint64_t reserve_rounds(int rounds) {
    const uint64_t first = rounds_ * kStagesPerRound;
    rounds_ += static_cast<uint64_t>(rounds);
    return first;
  }

 private:
  uint64_t* flags(int rank, size_t offset) const { return reinterpret_cast<uint64_t*>(region(rank) + offset); }

  P2pGeometry geometry_;
  int rank_ = 0;
  std::vector<uint8_t*> regions_;
  uint64_t calls_ = 0, rounds_ = 0, maxes_ = 0;
};

}  // namespace echo::comm::p2p
