// cuda::DeferredFaults (kernels/deferred_faults.cuh).
#include "deferred_faults.cuh"

#include <cuda_runtime.h>

#include <iterator>

#include "core/config/config.h"
#include "core/error.h"
#include "cuda_check.h"

namespace echo::cuda {

DeferredFaults::DeferredFaults() {
  CUDA_CHECK(cudaMalloc(&slot_, sizeof *slot_));
  CUDA_CHECK(cudaMemset(slot_, 0xff, sizeof *slot_));
}

DeferredFaults::~DeferredFaults() { (void)cudaFree(slot_); }  // NOTE: a destructor must not throw

unsigned long long DeferredFaults::key(uint32_t layer, uint32_t site, FaultOperand operand) {
  return (static_cast<unsigned long long>(layer & 0xffffffu) << 40) |
         (static_cast<unsigned long long>(site & 0xffu) << 32) |
         (static_cast<unsigned long long>(static_cast<uint32_t>(operand) & 3u) << 30);
}

std::string DeferredFaults::describe(unsigned long long recorded) {
  const auto layer = static_cast<uint32_t>(recorded >> 40);
  const auto site = static_cast<uint32_t>((recorded >> 32) & 0xffu);
  const auto operand = static_cast<uint32_t>((recorded >> 30) & 3u);
  const unsigned long long row = recorded & kRowMask;
  // The model's sites are its block projections, in linear.projections' order.
  const auto& names = config::LinearConfig::kProjectionNames;
  const std::string site_name = site < std::size(names) ? fmt::format("site {} ({})", site, names[site])
                                                        : fmt::format("site {}", site);
  const char* what = operand == 0 ? "the input x" : operand == 1 ? "the weight w" : "the output gradient (G')";
  return fmt::format("int8 linear of layer {}, {}: row {} of {} holds a NaN or an infinity", layer, site_name, row,
                     what);
}

void DeferredFaults::raise_if_any(cudaStream_t stream) {
  unsigned long long recorded = kNone;
  CUDA_CHECK(cudaMemcpyAsync(&recorded, slot_, sizeof recorded, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (recorded == kNone) return;
  CUDA_CHECK(cudaMemsetAsync(slot_, 0xff, sizeof *slot_, stream));
  ECHO_RUN_FAIL("{}", describe(recorded));
}

}  // namespace echo::cuda
