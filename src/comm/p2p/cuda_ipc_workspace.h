// The peer-to-peer workspace of one TP group on the GPUs of one node (docs/design.md §7,
// "Pipelined peer-to-peer transport"): every rank cudaMallocs one region (p2p_geometry.h), the
// ranks exchange CUDA IPC handles with MPI_Allgather and open the peers' regions, so every rank
// holds one fixed table of device addresses (RegionTable). At start-up every rank writes into
// every peer's region and reads back what the peers wrote into its own; any failure on any rank
// makes every rank return null, and the caller keeps the host-staged path. Ranks may share a GPU
// (IPC between processes works on one device too) or sit on distinct GPUs of the node.
// Built only with the CUDA backend.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/p2p/region_table.h"
#include "dist/communicator.h"

namespace echo::comm::p2p {

class CudaIpcWorkspace {
 public:
  // Collective over `group`, on the current CUDA device. Null (with `why` set, the same on every
  // rank) when the ranks are not on one node, the group is larger than the transport serves, or
  // allocation, IPC or the probe fails. One workspace per group and geometry, shared.
  static std::shared_ptr<CudaIpcWorkspace> for_group(const dist::Communicator& group, P2pGeometry geometry,
                                                     std::string* why = nullptr);
  ~CudaIpcWorkspace();
  CudaIpcWorkspace(const CudaIpcWorkspace&) = delete;
  CudaIpcWorkspace& operator=(const CudaIpcWorkspace&) = delete;

  // The regions (device pointers, valid in this process), flags and counters.
  RegionTable& table() { return table_; }
  const P2pGeometry& geometry() const { return table_.geometry(); }
  int rank() const { return table_.rank(); }

 private:
  CudaIpcWorkspace() = default;
  void release();

  RegionTable table_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the group's, duplicated: the peers close their mappings before the owner frees
  uint8_t* own_ = nullptr;
  std::vector<uint8_t*> opened_;  // the peers' regions, opened through IPC
};

}  // namespace echo::comm::p2p
