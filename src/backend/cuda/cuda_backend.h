// The CUDA backend (docs/design.md §2): the kernels of kernels/ behind backend::Backend, on one
// device and one stream, bf16 activations and weight copies, fp32 master weights, gradients and
// optimizer state. Built only with the CUDA backend (ECHO_CUDA).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace echo::backend {

// The backend on CUDA device `device_index` (cudaSetDevice for this process).
std::unique_ptr<Backend> make_cuda_backend(int device_index);

}  // namespace echo::backend
