// The backend registry: run.device -> the Backend that serves it. The one place that knows
// which backends this build has (docs/design.md §2).
#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef ECHO_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace echo::backend {

Tensor Backend::zeros(std::vector<int64_t> shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.fill_zero();
  return t;
}

std::unique_ptr<Backend> make_backend(Device device, BackendPlace place) {
  switch (device) {
    case Device::cpu:
      return std::make_unique<CpuBackend>(place.ranks_on_node);
    case Device::cuda:
#ifdef ECHO_CUDA
      return make_cuda_backend(place.device_index);
#else
      ECHO_INPUT_FAIL(
          "'run.device' = cuda, but this build has no CUDA backend: rebuild with nvcc installed (-DECHO_CUDA=ON)");
#endif
  }
  ECHO_FAIL("unknown device {}", static_cast<int>(device));
}

}  // namespace echo::backend
