// NCCL all-reduce of device tensors (docs/design.md §2.1): the exact 16-bit and fp32 baselines
// and the data-parallel gradient sum of the CUDA backend, when every rank of the group drives
// its own GPU. Built only with the CUDA backend and NCCL (ECHO_NCCL); make_exact_all_reduce
// (make_all_reduce.h) decides when it is used.
#pragma once

#include <memory>
#include <string>

#include "comm/all_reduce.h"
#include "comm/exact_all_reduce.h"
#include "comm/f32_work_copy.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace echo::comm {

class NcclGroup;

class NcclAllReduce final : public AllReduce {
 public:
  // Collective over group: rank 0's ncclUniqueId travels by MPI_Bcast, then ncclCommInitRank on
  // the current CUDA device. bf16: the 16-bit baseline (NCCL's own bf16 sum); fp32: sums in fp32,
  // a bf16 tensor through an f32 work copy, rounded once at the end (as the host-staged fp32 sum).
  NcclAllReduce(const dist::Communicator& group, ExactPrecision precision);
  ~NcclAllReduce() override;
  NcclAllReduce(const NcclAllReduce&) = delete;
  NcclAllReduce& operator=(const NcclAllReduce&) = delete;

  // x: a contiguous f32 or bf16 tensor on the device, summed in place by ncclAllReduce on the
  // legacy default stream (which orders with the CUDA backend's blocking stream: no host wait).
  void all_reduce(Tensor& x, Site site) override;
  // Host spans are not NCCL's: an error naming the site.
  void all_reduce(std::span<float> x, Site site) override;
  std::string name() const override { return precision_ == ExactPrecision::bf16 ? "nccl (bf16)" : "nccl (fp32)"; }
  // Ring all-reduce: each rank sends 2 (P - 1) / P of the buffer.
  size_t wire_bytes_per_rank(size_t n, Site site) const override;

 private:
  std::shared_ptr<NcclGroup> group_;  // shared with the Echo sites of the same group
  ExactPrecision precision_;
  int size_;
  F32WorkCopy work_;  // a bf16 tensor is reduced through an f32 copy
};

// True when the ranks of group all use different GPUs (NCCL refuses two ranks on one device).
// Compares the PCI bus id of the current CUDA device and the host name. Collective over group.
bool ranks_have_distinct_gpus(const dist::Communicator& group);

}  // namespace echo::comm
