// CUDA_CHECK: the CUDA member of the ECHO_CHECK family. A failed runtime call throws echo::Error
// carrying the file, the line, the call and the runtime's own error name and text.
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    const cudaError_t echo_cuda_status_ = (call);                                                 \
    if (echo_cuda_status_ != cudaSuccess) {                                                       \
      ::echo::throw_error(__FILE__, __LINE__, #call,                                              \
                          ::fmt::format("CUDA error {}: {}", cudaGetErrorName(echo_cuda_status_), \
                                        cudaGetErrorString(echo_cuda_status_)));                  \
    }                                                                                             \
  } while (0)
