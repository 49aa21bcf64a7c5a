// CudaIpcBf16AllReduce (cuda_ipc_all_reduce.h).
#include "comm/p2p/cuda_ipc_all_reduce.h"

#include "core/error.h"
#include "ops.cuh"

namespace echo::comm::p2p {

CudaIpcBf16AllReduce::CudaIpcBf16AllReduce(const dist::Communicator& group, std::shared_ptr<CudaIpcWorkspace> workspace,
                                           const TransportOptions& transport)
    : host_(group, ExactPrecision::bf16, transport), ipc_(group, std::move(workspace), transport.peer_timeout_s) {}

void CudaIpcBf16AllReduce::all_reduce(Tensor& x, Site site) {
  if (!x.is_cuda()) return AllReduce::all_reduce(x, site);
  ECHO_CHECK(x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
             "the cuda_ipc 16-bit all-reduce at {} needs a contiguous f32 or bf16 device tensor, got {}",
             to_string(site), x.describe());
  const size_t n = static_cast<size_t>(x.numel());
  if (!ipc_.pipelines_bf16(n)) return AllReduce::all_reduce(x, site);  // nothing to move: host path
  if (x.dtype() == DType::f32) {
    check_output(ipc_.run_bf16(x.data<float>(), n, site), site, "exact bf16");
    return;
  }
  if (!work_.defined() || work_.numel() < x.numel()) work_ = Tensor::empty({x.numel()}, DType::f32, Device::cuda);
  Tensor work = work_.slice(0, 0, x.numel());
  // NOTE: the legacy default stream, which orders with the backend's blocking stream and with the
  // pipeline's start and end (cuda_ipc_reduce.h).
  cuda::cast(work, x, cudaStreamLegacy);
  check_output(ipc_.run_bf16(work.data<float>(), n, site), site, "exact bf16");
  cuda::cast(x, work, cudaStreamLegacy);
}

}  // namespace echo::comm::p2p
