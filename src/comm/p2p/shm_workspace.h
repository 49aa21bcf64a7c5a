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

#include "comm/p2p/p2p_geometry.h"
#include "comm/p2p/region_table.h"
#include "dist/communicator.h"

namespace echo::comm::p2p {

class ShmWorkspace {
 public:
  // Collective over `group`; every rank gets the same verdict. Null when the group's ranks are not
  // on one node, the window cannot be allocated or mapped (MPI_Win_shared_query), or the probe
  // fails, with `why` set to the reason (on a rank that saw none itself: that a peer failed).
  static std::shared_ptr<ShmWorkspace> for_group(const dist::Communicator& group, P2pGeometry geometry,
                                                 std::string* why = nullptr);
  ~ShmWorkspace();
  ShmWorkspace(const ShmWorkspace&) = delete;
  ShmWorkspace& operator=(const ShmWorkspace&) = delete;

  // The regions, flags and counters (the pointers are host pointers into the shared window).
  RegionTable& table() { return table_; }
  const RegionTable& table() const { return table_; }
  const P2pGeometry& geometry() const { return table_.geometry(); }
  int rank() const { return table_.rank(); }

 private:
  ShmWorkspace() = default;

  RegionTable table_;
  MPI_Win win_ = MPI_WIN_NULL;
  bool locked_ = false;  // MPI_Win_lock_all taken: the destructor unlocks before freeing
};

}  // namespace echo::comm::p2p
