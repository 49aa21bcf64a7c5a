// NcclGroup: one NCCL communicator over an MPI group, for ranks that each drive their own GPU
// (docs/design.md §2.1). Rank 0's ncclUniqueId goes round by MPI_Bcast, then ncclCommInitRank on
// the current CUDA device. It serves the exact all-reduce (nccl_all_reduce.h), the device
// reductions of the TP reducer (make_all_reduce.h, make_device_tp_reduce) and the byte exchanges of Echo's two-collective QAR on the device (comm/echo/device_qar.cpp), both enqueued
// on a stream without a host wait. Built only with NCCL (ECHO_NCCL).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/tp_reducer.h"
#include "comm/two_phase_layout.h"
#include "core/dtype.h"
#include "dist/communicator.h"

namespace echo::comm {

class NcclGroup {
 public:
  // The one NcclGroup of this communicator on the current device, made at the first call
  // (collective over group) and shared while anyone holds it: the Echo sites and the exact
  // all-reduce of one TP group use one NCCL communicator, not one each.
  static std::shared_ptr<NcclGroup> for_group(const dist::Communicator& group);
  explicit NcclGroup(const dist::Communicator& group);  // collective over group
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  void* raw() const;  // the ncclComm_t
  int size() const { return size_; }
  int rank() const { return rank_; }

  // ncclAllReduce in place of n device values (f32, bf16, f64 or i32), on the stream.
  void all_reduce(void* data, size_t n, DType dtype, backend::ReduceOp op, cudaStream_t stream);
  // MPI_Alltoallv of device bytes: send[displs[j], + counts[j]) of send_layout goes to rank j,
  // which receives it at recv + recv_layout.displs[me]; one NCCL group of sends and receives.
  void all_to_all_bytes(const uint8_t* send, const ByteExchange& send_layout, uint8_t* recv,
                        const ByteExchange& recv_layout, cudaStream_t stream);
  // MPI_Allgatherv of device bytes: own (gather.counts[me] bytes) lands at recv + gather.displs[me]
  // on every rank, and every other rank's at its displacement here.
  void all_gather_bytes(const uint8_t* own, uint8_t* recv, const ByteExchange& gather, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int size_ = 1, rank_ = 0;
};

}  // namespace echo::comm
