// A TpReducer's device half for tests on one GPU: the values go to the host, through the
// reducer's own max / sum (MPI, or a group of threads), and back, all on the given stream. It
// stands in for NCCL (which refuses two ranks on one device) so that the kernels' device-reducer
// paths (TpReducer::device) run wherever a GPU does; the order of the combination is the host
// reducer's, so results compare bit for bit with the host path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/tp_reducer.h"
#include "cuda_check.h"

namespace echo::testing {

inline backend::TpReducer with_staged_device(backend::TpReducer reducer) {
  const backend::TpReducer host = reducer;
  reducer.device = [host](void* data, int64_t n, DType dtype, backend::ReduceOp op, void* stream_ptr) {
    const auto stream = static_cast<cudaStream_t>(stream_ptr);
    const size_t count = static_cast<size_t>(n);
    std::vector<double> values(count);
    std::vector<float> floats(dtype == DType::f32 ? count : 0);
    if (dtype == DType::f64) {
      if (n > 0) CUDA_CHECK(cudaMemcpyAsync(values.data(), data, count * 8, cudaMemcpyDeviceToHost, stream));
    } else {
      ECHO_CHECK(dtype == DType::f32, "with_staged_device: f32 or f64 values, got {}", to_string(dtype));
      if (n > 0) CUDA_CHECK(cudaMemcpyAsync(floats.data(), data, count * 4, cudaMemcpyDeviceToHost, stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < floats.size(); ++i) values[i] = floats[i];
    (op == backend::ReduceOp::max ? host.max : host.sum)(values);
    for (size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(values[i]);
    if (n > 0)
      CUDA_CHECK(cudaMemcpyAsync(data, dtype == DType::f64 ? static_cast<void*>(values.data()) : floats.data(),
                                 count * dtype_size(dtype), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // NOTE: the host vectors go out of scope here
  };
  return reducer;
}

}  // namespace echo::testing
