// pool_tensor (pool_tensor.cuh).
// NOTE: never run on a GPU when written.
// clang-format off
#include "cuda_check.h"
// clang-format on

#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "pool_tensor.cuh"

namespace echo::cuda {

Tensor pool_tensor(std::vector<int64_t> shape, DType dtype, cudaStream_t stream, const std::string& levers) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    ECHO_CHECK(d >= 0, "empty: negative dimension in {}", format_shape(shape));
    numel *= d;
  }
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel) * dtype_size(dtype));
  void* p = nullptr;
  const cudaError_t status = cudaMallocAsync(&p, bytes, stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the runtime's last-error slot before raising our own
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    int device = 0;
    cudaDeviceProp prop{};
    const bool named = cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess;
    ECHO_FAIL("out of GPU memory on {}: a {} tensor {} needs {} bytes, {} of {} are free{}",
              named ? std::string(prop.name) : std::string("the GPU"), dtype, format_shape(shape), bytes, free_bytes,
              total_bytes, levers.empty() ? std::string() : " (" + levers + " needs less)");
  }
  CUDA_CHECK(status);
  return Tensor::from_blob(p, std::move(shape), dtype, Device::cuda,
                           [](void* q) { cudaFreeAsync(q, cudaStreamLegacy); });
}

}  // namespace echo::cuda
