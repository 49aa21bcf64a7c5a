// Device tensors from the stream-ordered memory pool (docs/design.md §2.1, "Memory"): what the CUDA
// backend's start-up reservation (Backend::reserve) parks in the pool can serve only allocations
// made from the pool; a plain cudaMalloc would need the same bytes a second time, and its
// cudaFree waits for the whole device. Plain C++ can include this header (no CUDA syntax).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace echo::cuda {

// A contiguous cuda tensor from the current device's default pool, allocated on `stream`
// (cudaMallocAsync) and freed on the legacy default stream, which orders after the earlier work
// of every blocking stream and outlives them (a tensor may be dropped after its user). Out of
// memory is an echo::Error naming the tensor, the device's free memory and, when not empty,
// `levers` (what needs less).
Tensor pool_tensor(std::vector<int64_t> shape, DType dtype, cudaStream_t stream, const std::string& levers = {});

}  // namespace echo::cuda
