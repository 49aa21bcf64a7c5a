// The exact 16-bit all-reduce of device tensors over the cuda_ipc pipeline (comm.transport:
// cuda_ipc, comm.allreduce: exact): the custom all-reduce baseline of the Echo paper's Table 2,
// which, unlike NCCL, works when ranks share one GPU. Bitwise ExactAllReduce (bf16) on the host:
// CudaIpcReduce::run_bf16 does Bf16Codec's arithmetic. A bf16 tensor is widened into an f32 work
// buffer and the result rounded back (exact: the result is a bf16 value already). Host tensors go
// through the host engine of `transport` as ExactAllReduce. Built only with the CUDA backend;
// make_exact_all_reduce (make_all_reduce.h) decides when it is used. Never run on a GPU yet.
#pragma once

#include <memory>
#include <string>

#include "comm/all_reduce.h"
#include "comm/exact_all_reduce.h"
#include "comm/f32_work_copy.h"
#include "comm/p2p/cuda_ipc_reduce.h"
#include "comm/p2p/cuda_ipc_workspace.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace echo::comm::p2p {

class CudaIpcBf16AllReduce final : public AllReduce {
 public:
  CudaIpcBf16AllReduce(const dist::Communicator& group, std::shared_ptr<CudaIpcWorkspace> workspace,
                       const TransportOptions& transport);

  void all_reduce(Tensor& x, Site site) override;
  void all_reduce(std::span<float> x, Site site) override { host_.all_reduce(x, site); }
  std::string name() const override { return "exact over cuda_ipc"; }
  size_t wire_bytes_per_rank(size_t n, Site site) const override { return host_.wire_bytes_per_rank(n, site); }

 private:
  ExactAllReduce host_;  // host tensors, and the wire count (the same segments and bytes)
  CudaIpcReduce ipc_;
  comm::F32WorkCopy work_;  // a bf16 tensor is reduced through an f32 copy
};

}  // namespace echo::comm::p2p
