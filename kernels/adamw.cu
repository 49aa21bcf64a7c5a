// CUDA AdamW step (kernels/ops.cuh; docs/design.md §12): one thread per element (grid-stride)
// calling backend::adamw_update (src/backend/adamw_math.h), the element math the CPU optimizer
// runs, written with once-rounded intrinsics, so weights and moments get the CPU's bits.
#include "backend/adamw_math.h"
#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

__global__ void adamw_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, float decay, backend::AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float wi = w[i], mi = m[i], vi = v[i];
    backend::adamw_update(wi, g[i], mi, vi, decay, s);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const backend::AdamWScalars& s,
                cudaStream_t stream) {
  const char* op = "adamw_step";
  check_tensor(op, "w", w, {DType::f32});
  check_tensor(op, "g", g, {DType::f32});
  check_tensor(op, "m", m, {DType::f32});
  check_tensor(op, "v", v, {DType::f32});
  check_numel(op, "g", g, w.numel());
  check_numel(op, "m", m, w.numel());
  check_numel(op, "v", v, w.numel());
  const int64_t n = w.numel();
  if (n == 0) return;
  ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, adamw_kernel)
  (ptr<float>(w), ptr<float>(g), ptr<float>(m), ptr<float>(v), n, decay, s);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
