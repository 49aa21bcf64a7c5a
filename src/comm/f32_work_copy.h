// A bf16 device tensor reduced through an f32 copy (CUDA builds only): widened exactly into a
// work tensor kept across calls, reduced there, rounded back to bf16 once. The NCCL all-reduce
// at fp32 precision (NCCL's bf16 sum rounds at every ring hop) and the cuda_ipc 16-bit transport
// (whose pipeline moves f32 device values) use it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops.cuh"

namespace echo::comm {

class F32WorkCopy {
 public:
  // reduce(float* values, size_t n) runs on the widened copy of x. NOTE: the casts run on the
  // legacy default stream, which orders with the CUDA backend's blocking stream, so `reduce` must
  // order with it too (NCCL on cudaStreamLegacy, the cuda_ipc pipeline's start and end).
  template <class Reduce>
  void reduce(Tensor& x, Reduce&& reduce) {
    if (!work_.defined() || work_.numel() < x.numel()) work_ = Tensor::empty({x.numel()}, DType::f32, Device::cuda);
    Tensor work = work_.slice(0, 0, x.numel());
    cuda::cast(work, x, cudaStreamLegacy);
    reduce(work.data<float>(), static_cast<size_t>(x.numel()));
    cuda::cast(x, work, cudaStreamLegacy);
  }

 private:
  Tensor work_;  // grown to the largest call
};

}  // namespace echo::comm
