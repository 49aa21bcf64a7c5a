// The peer-to-peer workspace of one TP group on CPU ranks of one node (docs/design.md §7,
// "Pipelined peer-to-peer transport"): one region per rank (p2p_geometry.h) in an MPI shared
// window, and every rank's table of the peers' region addresses. Created once per group and
// geometry and shared by every all-reduce on that group (for_group), so one call is in flight
// at a time and the flag base is one counter. At start-up every rank writes into every peer's
// region and reads back what the peers wrote into its own; any failure on any rank makes every
// rank return null, and the caller keeps the MPI path.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/p2p/p2p_geometry.h"
#include "dist/communicator.h"

namespace echo::comm::p2p {

class ShmWorkspace {
 public:
  // Collective over `group`. Null (with `why` set, the same on every rank) when the group's ranks
  // are not on one node, the window cannot be allocated or the probe fails.
  static std::shared_ptr<ShmWorkspace> for_group(const dist::Communicator& group, P2pGeometry geometry,
                                                 std::string* why = nullptr);
  ~ShmWorkspace();
  ShmWorkspace(const ShmWorkspace&) = delete;
  ShmWorkspace& operator=(const ShmWorkspace&) = delete;

  const P2pGeometry& geometry() const { return geometry_; }
  int rank() const { return rank_; }
  uint8_t* region(int rank) const { return regions_[static_cast<size_t>(rank)]; }
  uint64_t* header(int rank) const { return reinterpret_cast<uint64_t*>(region(rank)); }
  uint64_t* push_flag(int rank, int tile_slot, int sender) const {
    return flags(rank, geometry_.push_flags_offset()) + geometry_.flag_index(tile_slot, sender);
  }
  uint64_t* gather_flag(int rank, int tile_slot, int owner) const {
    return flags(rank, geometry_.gather_flags_offset()) + geometry_.flag_index(tile_slot, owner);
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
  ShmWorkspace() = default;
  uint64_t* flags(int rank, size_t offset) const { return reinterpret_cast<uint64_t*>(region(rank) + offset); }

  P2pGeometry geometry_;
  int rank_ = 0;
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<uint8_t*> regions_;
  uint64_t calls_ = 0, rounds_ = 0, maxes_ = 0;
};

}  // namespace echo::comm::p2p
