// CudaIpcBf16AllReduce (cuda_ipc_all_reduce.h).
#include "comm/p2p/cuda_ipc_all_reduce.h"

#include "core/error.h"

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
  // The pipeline orders with the legacy default stream at its start and end (cuda_ipc_reduce.h).
  work_.reduce(x, [&](float* values, size_t count) {
    check_output(ipc_.run_bf16(values, count, site), site, "exact bf16");
  });
}

}  // namespace echo::comm::p2p
